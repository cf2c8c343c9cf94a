"""What an earlier run stored of a conversation: the state incremental ingest resumes from.

Two reads, both from committed rows only:
- `stored_digests` (driver, once per run): per conversation its turn count and `turns_digest`,
  so a read task can tell an unchanged conversation (skip), a grown one (same digest over the
  stored prefix: extend) and an edited one (anything else);
- `load_stored_state` (the resume stage, per grown conversation): the turn vectors, segments with
  the encoder context after each, records with their vectors, their links, node vectors,
  LLM-failure rows and build cost, so later stages redo only what the new turns change.
Rows are read back by column name into the tables' own row types (`lychee_ray.tables`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lychee_ray.table_model import vector_matrix
from lychee_ray.tables import BuildStats, ErrorRow, Record, RecordLink, SegmentRow

# statuses whose stored rows a grown conversation may build on: anything else is redone whole
EXTENDABLE = ("ok", "degraded")


@dataclass
class StoredConversation:
    """The driver's view of one stored conversation: enough to classify an incoming copy."""

    n_turns: int
    digest: str
    status: str


@dataclass
class StoredSegment:
    segment_id: str
    turn_ids: list[str]
    context_json: str | None
    records: list[Record] = field(default_factory=list)
    failure_rows: list[dict] = field(default_factory=list)  # its `llm_failure` errors rows


@dataclass
class StoredState:
    """One conversation as an earlier run stored it."""

    n_turns: int
    turn_embeddings: np.ndarray  # [n_turns, d], in turn order
    segments: list[StoredSegment]
    record_embeddings: dict[str, np.ndarray]  # record_id -> vector
    node_embeddings: dict[str, np.ndarray]  # node_id -> vector (only nodes that have one)
    stats: dict  # its build_stats row: the cost already paid
    links: list[RecordLink] = field(default_factory=list)  # its record_links rows (encode keeps those of reused records)


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


def load_stored_state(store, conversation_id: str) -> StoredState:
    turn_vecs = _turn_vectors(store, conversation_id)
    segments = [
        StoredSegment(s.segment_id, list(s.turn_ids or []), s.context_json)
        for s in SegmentRow.from_arrow(store.conversation_arrow("segments", conversation_id, order_by=["segment_idx"]))
    ]
    by_segment = {s.segment_id: s for s in segments}
    records = _records(store, conversation_id)
    for rec in records:
        if rec.segment_id in by_segment:
            by_segment[rec.segment_id].records.append(rec)
    for row in _failure_rows(store, conversation_id):
        if row["field"] in by_segment:
            by_segment[row["field"]].failure_rows.append(row)
    node_ids, node_vecs = store.embeddings("nodes", conversation_id)
    stats = BuildStats.from_arrow(store.conversation_arrow("build_stats", conversation_id))
    return StoredState(
        n_turns=len(turn_vecs),
        turn_embeddings=turn_vecs,
        segments=segments,
        record_embeddings={r.record_id: r.embedding for r in records if r.embedding is not None},
        node_embeddings=dict(zip(node_ids, node_vecs)),
        stats=stats[0].as_dict() if stats else {},
        links=RecordLink.from_arrow(store.conversation_arrow("record_links", conversation_id)),
    )


def _turn_vectors(store, cid: str) -> np.ndarray:
    table = store.conversation_arrow("turns", cid, ["embedding"], order_by=["turn_idx"])
    return vector_matrix(table.column("embedding").combine_chunks(), store.dim)


def _records(store, cid: str) -> list[Record]:
    """Records as the encoder made them, in their original order (the id hashes the position,
    so the order the rows were written keeps each segment's order), with their vectors."""
    return Record.from_arrow(store.conversation_arrow("records", cid, in_stored_order=True))


def _failure_rows(store, cid: str) -> list[dict]:
    rows = ErrorRow.from_arrow(store.conversation_arrow("errors", cid))
    return [r.as_dict() for r in rows if r.kind == "llm_failure"]
