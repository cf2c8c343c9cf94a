"""What an earlier run stored of a conversation, for incremental ingest.

Two reads, both from committed rows only:
- `stored_digests` (driver, once per run): per conversation its turn count and `turns_digest`,
  so a read task can tell an unchanged conversation (skip), a grown one (same digest over the
  stored prefix: extend) and an edited one (anything else);
- `load_prior` (the resume stage, per grown conversation): the turn vectors, segments with the
  encoder context after each, records with their vectors, node vectors, LLM-failure rows and
  build cost, so later stages redo only what the new turns change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from lychee_ray.schemas import MemoryRecord

# statuses whose stored rows a grown conversation may build on: anything else is redone whole
EXTENDABLE = ("ok", "degraded")


@dataclass
class StoredConversation:
    """The driver's view of one stored conversation: enough to classify an incoming copy."""

    n_turns: int
    digest: str
    status: str


@dataclass
class PriorSegment:
    segment_id: str
    turn_ids: list[str]
    context_json: str | None
    records: list[MemoryRecord] = field(default_factory=list)
    failure_rows: list[dict] = field(default_factory=list)  # its `llm_failure` errors rows


@dataclass
class PriorState:
    """One conversation as an earlier run stored it."""

    n_turns: int
    turn_embeddings: np.ndarray  # [n_turns, d], in turn order
    segments: list[PriorSegment]
    record_embeddings: dict[str, np.ndarray]  # record_id -> vector
    node_embeddings: dict[str, np.ndarray]  # node_id -> vector (only nodes that have one)
    stats: dict  # its build_stats row: the cost already paid


def stored_digests(store, skip_statuses: set[str] | frozenset = frozenset()) -> dict[str, StoredConversation]:
    """conversation id -> StoredConversation, for every committed conversation whose status is
    not in `skip_statuses` (those are redone whole, as if new)."""
    rows = store.con.execute(
        "SELECT conversation_id, n_turns, turns_digest, status FROM conversations"
    ).fetchall()
    return {
        cid: StoredConversation(int(n or 0), digest or "", status)
        for cid, n, digest, status in rows
        if status not in skip_statuses
    }


def load_prior(store, conversation_id: str) -> PriorState:
    turn_ids, turn_vecs = _turn_vectors(store, conversation_id)
    segments = _segments(store, conversation_id)
    by_segment = {s.segment_id: s for s in segments}
    rec_ids, rec_vecs = store.embeddings("records", conversation_id)
    for rec in _records(store, conversation_id):
        if rec.segment_id in by_segment:
            by_segment[rec.segment_id].records.append(rec)
    for row in _failure_rows(store, conversation_id):
        if row["field"] in by_segment:
            by_segment[row["field"]].failure_rows.append(row)
    node_ids, node_vecs = store.embeddings("nodes", conversation_id)
    return PriorState(
        n_turns=len(turn_ids),
        turn_embeddings=turn_vecs,
        segments=segments,
        record_embeddings=dict(zip(rec_ids, rec_vecs)),
        node_embeddings=dict(zip(node_ids, node_vecs)),
        stats=_stats(store, conversation_id),
    )


def _arrow(store, query: str, cid: str):
    return store.con.execute(query, [cid]).to_arrow_table()


def _turn_vectors(store, cid: str) -> tuple[list[str], np.ndarray]:
    table = _arrow(store, "SELECT turn_id, embedding FROM turns WHERE conversation_id = ? ORDER BY turn_idx", cid)
    emb = table.column("embedding").combine_chunks()
    flat = emb.values.to_numpy(zero_copy_only=False) if len(emb) else np.zeros(0, np.float32)
    return table.column("turn_id").to_pylist(), flat.astype(np.float32, copy=False).reshape(len(emb), store.dim)


def _segments(store, cid: str) -> list[PriorSegment]:
    rows = store.con.execute(
        "SELECT segment_id, turn_ids, context_json FROM segments WHERE conversation_id = ? ORDER BY segment_idx", [cid]
    ).fetchall()
    return [PriorSegment(sid, list(tids or []), ctx) for sid, tids, ctx in rows]


def _records(store, cid: str) -> list[MemoryRecord]:
    """Records as the encoder made them, in their original order (the id hashes the position,
    so sorting by segment and then the order the rows were written keeps each segment's order)."""
    rows = store.con.execute(
        "SELECT record_id, segment_id, type, text, entities, topics, CAST(time_start AS VARCHAR), "
        "CAST(time_end AS VARCHAR), time_granularity, time_expression, source_turn_ids, backend, degraded "
        "FROM (SELECT *, row_number() OVER () AS pos FROM records WHERE conversation_id = ?) ORDER BY pos",
        [cid],
    ).fetchall()
    return [
        MemoryRecord(
            record_id=r[0], segment_id=r[1], type=r[2], text=r[3], entities=list(r[4] or []), topics=list(r[5] or []),
            time_start=r[6], time_end=r[7], time_granularity=r[8], time_expression=r[9],
            source_turn_ids=list(r[10] or []), backend=r[11], degraded=bool(r[12]),
        )
        for r in rows
    ]


def _failure_rows(store, cid: str) -> list[dict]:
    cols = ("conversation_id", "source_file", "line", "field", "kind", "message")
    rows = store.con.execute(
        f"SELECT {', '.join(cols)} FROM errors WHERE conversation_id = ? AND kind = 'llm_failure'", [cid]
    ).fetchall()
    return [dict(zip(cols, r)) for r in rows]


def _stats(store, cid: str) -> dict:
    cur = store.con.execute("SELECT * FROM build_stats WHERE conversation_id = ?", [cid])
    row = cur.fetchone()
    return dict(zip([d[0] for d in cur.description], row)) if row else {}


def context_state(context_json: str | None) -> dict:
    """The parsed context of a stored segment ({} when none was stored)."""
    return json.loads(context_json) if context_json else {}
