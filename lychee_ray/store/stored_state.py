"""What an earlier run stored of a conversation: the state incremental ingest resumes from.

Two reads, both from committed rows only:
- `stored_digests` (driver, once per run): per conversation its turn count and `turns_digest`,
  so a read task can tell an unchanged conversation (skip), a grown one (same digest over the
  stored prefix: extend) and an edited one (anything else);
- `load_stored_state` (the resume stage, per grown conversation): the turn vectors, the passages
  of long turns with theirs, segments with the encoder context after each, records with their
  vectors, their links, node vectors, LLM-failure rows and build cost, so later stages redo only
  what the new turns change.
Rows are read back by column name into the tables' own row types (`lychee_ray.tables`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lychee_ray.table_model import vector_matrix
from lychee_ray.tables import BuildStats, ErrorRow, Passage, Record, RecordLink, SegmentRow

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
    passages: list[Passage]  # of its long turns, in turn order, without their vectors
    passage_embeddings: np.ndarray  # [n_passages, d]
    segments: list[StoredSegment]
    record_embeddings: dict[str, np.ndarray]  # record_id -> vector
    node_embeddings: dict[str, np.ndarray]  # node_id -> vector (only nodes that have one)
    stats: dict  # its build_stats row: the cost already paid
    links: list[RecordLink] = field(default_factory=list)  # its record_links rows (encode keeps those of reused records)


class StoredIndex(Mapping[str, StoredConversation]):
    """conversation id -> StoredConversation over Arrow columns sorted by id.

    Every read task of a run gets the whole index. As a dict of Python objects it costs each
    task a full unpickling (O(stored conversations) per task: a nightly run over a large store
    pays stored x input parts); as Arrow buffers Ray's object store hands each task a view
    without copying, and a lookup bisects the sorted ids (O(log n))."""

    def __init__(self, table: pa.Table):
        self.table = table.sort_by("conversation_id").combine_chunks()
        self._ids = self.table.column("conversation_id").chunk(0) if self.table.num_rows else pa.array([], pa.string())

    def _find(self, cid: str) -> int | None:
        lo, hi = 0, len(self._ids)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._ids[mid].as_py() < cid:
                lo = mid + 1
            else:
                hi = mid
        return lo if lo < len(self._ids) and self._ids[lo].as_py() == cid else None

    def __getitem__(self, cid: str) -> StoredConversation:
        i = self._find(cid) if isinstance(cid, str) else None
        if i is None:
            raise KeyError(cid)
        row = {c: self.table.column(c)[i].as_py() for c in ("n_turns", "turns_digest", "status")}
        return StoredConversation(int(row["n_turns"] or 0), row["turns_digest"] or "", row["status"])

    def __contains__(self, cid) -> bool:
        return isinstance(cid, str) and self._find(cid) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids.to_pylist())

    def __len__(self) -> int:
        return len(self._ids)

    @classmethod
    def empty(cls) -> "StoredIndex":
        return cls(pa.table({"conversation_id": pa.array([], pa.string()), "n_turns": pa.array([], pa.int64()),
                             "turns_digest": pa.array([], pa.string()), "status": pa.array([], pa.string())}))

    def any_turns(self) -> bool:
        """Whether any stored conversation has turns (then a grown one may need its state)."""
        return bool(len(self) and pc.max(self.table.column("n_turns")).as_py())


def stored_digests(store, skip_statuses: set[str] | frozenset = frozenset()) -> StoredIndex:
    """conversation id -> StoredConversation, for every committed conversation whose status is
    not in `skip_statuses` (those are redone whole, as if new)."""
    table = store.con.sql("SELECT conversation_id, n_turns, turns_digest, status FROM conversations").to_arrow_table()
    if skip_statuses:
        table = table.filter(pc.invert(pc.is_in(table.column("status"), pa.array(sorted(skip_statuses), pa.string()))))
    return StoredIndex(table)


def load_stored_state(store, conversation_id: str) -> StoredState:
    turn_vecs = _turn_vectors(store, conversation_id)
    passages, passage_vecs = _passages(store, conversation_id)
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
        passages=passages,
        passage_embeddings=passage_vecs,
        segments=segments,
        record_embeddings={r.record_id: r.embedding for r in records if r.embedding is not None},
        node_embeddings=dict(zip(node_ids, node_vecs)),
        stats=stats[0].as_dict() if stats else {},
        links=RecordLink.from_arrow(store.conversation_arrow("record_links", conversation_id)),
    )


def _turn_vectors(store, cid: str) -> np.ndarray:
    table = store.conversation_arrow("turns", cid, ["embedding"], order_by=["turn_idx"])
    return vector_matrix(table.column("embedding").combine_chunks(), store.dim)


def _passages(store, cid: str) -> tuple[list[Passage], np.ndarray]:
    """The stored passages in the order they were made (turn order, then position in the turn;
    the turns table's order gives the first), without vectors, and their vectors."""
    table = store.conversation_arrow("passages", cid, in_stored_order=True)
    vecs = vector_matrix(table.column("embedding").combine_chunks(), store.dim)
    return Passage.from_arrow(table.drop_columns(["embedding"])), vecs


def _records(store, cid: str) -> list[Record]:
    """Records as the encoder made them, in their original order (the id hashes the position,
    so the order the rows were written keeps each segment's order), with their vectors."""
    return Record.from_arrow(store.conversation_arrow("records", cid, in_stored_order=True))


def _failure_rows(store, cid: str) -> list[dict]:
    rows = ErrorRow.from_arrow(store.conversation_arrow("errors", cid))
    return [r.as_dict() for r in rows if r.kind == "llm_failure"]
