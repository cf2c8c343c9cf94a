"""Conversation -> rows: the pure mapping from one processed `Conversation` to its rows in every
table, and from rows to Arrow tables with exactly the store's schemas.

No I/O, so it is tested without writing files. A timestamp or date that does not parse becomes
NULL plus an `errors` row; embeddings go into Arrow in one bulk copy of a flat float32 buffer.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime

import numpy as np
import pyarrow as pa

from lychee_ray.dates import parse_iso_date, parse_iso_timestamp
from lychee_ray.io.readers.common import SKIP_KINDS, split_parts
from lychee_ray.schemas import Conversation, turn_content_hash, turns_digest
from lychee_ray.tables import (
    TABLES,
    BuildStats,
    ConversationRow,
    ErrorRow,
    Node,
    Passage,
    RecordNode,
    SegmentRow,
)


# --------------------------------------------------------------------------------------------
# Rows: Conversation -> one list of rows per table (pure)
# --------------------------------------------------------------------------------------------
def _error_row(conv: Conversation, field_name: str, kind: str, message: str) -> dict:
    return ErrorRow(conversation_id=conv.conversation_id, source_file=conv.source_file, field=field_name, kind=kind, message=message).as_dict()


def _parse_timestamp(value, conv: Conversation, field_name: str, problems: list[dict]):
    """ISO 8601 -> naive UTC datetime (schema: timestamp[s]); unparsable -> None + an errors row."""
    if value is None or value == "":
        return None
    ts = parse_iso_timestamp(value)
    if ts is None:
        problems.append(_error_row(conv, field_name, "bad_timestamp", f"not ISO 8601: {value!r}"))
    return ts


def _parse_date(value, conv: Conversation, field_name: str, problems: list[dict], end: bool):
    """ISO date -> date. 'YYYY-MM' / 'YYYY' widen to the first (start) or last (end) day."""
    if value is None or value == "":
        return None
    d = parse_iso_date(value, end=end)
    if d is None:
        problems.append(_error_row(conv, field_name, "bad_date", f"not an ISO date: {value!r}"))
    return d


def _embedding_matrix(value, n_rows: int, dim: int, what: str, cid: str) -> np.ndarray | None:
    if value is None:
        return None
    mat = np.asarray(value, dtype=np.float32)
    if mat.ndim != 2 or mat.shape != (n_rows, dim):
        raise ValueError(
            f"conversation {cid!r}: {what} has shape {mat.shape}, expected ({n_rows}, {dim})"
        )
    return mat


def _vec(mat: np.ndarray | None, i: int):
    return None if mat is None else mat[i]  # a view: the table builder copies once, in bulk


def _turn_rows(conv: Conversation, dim: int, problems: list[dict]) -> list[dict]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.turn_embeddings, len(conv.turns), dim, "turn_embeddings", cid)
    exchange_of = {t: x for x, idxs in enumerate(conv.exchanges) for t in idxs}
    segment_of = {t: s.segment_id for s in conv.segments for t in s.turn_idxs}
    return [
        {
            **turn.as_dict(),
            "conversation_id": cid,
            "exchange_idx": exchange_of.get(pos),
            "timestamp": _parse_timestamp(turn.timestamp, conv, f"turns[{pos}].timestamp", problems),
            "segment_id": segment_of.get(pos),
            "content_hash": turn_content_hash(turn),
            "embedding": _vec(emb, pos),
        }
        for pos, turn in enumerate(conv.turns)
    ]


def _passage_rows(conv: Conversation, dim: int) -> list[Passage]:
    emb = _embedding_matrix(conv.passage_embeddings, len(conv.passages), dim, "passage_embeddings", conv.conversation_id)
    return [dataclasses.replace(p, conversation_id=conv.conversation_id, embedding=_vec(emb, i)) for i, p in enumerate(conv.passages)]


def _segment_rows(conv: Conversation) -> list[SegmentRow]:
    rows = []
    for seg in conv.segments:
        idxs = list(seg.turn_idxs)
        rows.append(
            SegmentRow(
                conversation_id=conv.conversation_id,
                segment_id=seg.segment_id,
                segment_idx=seg.segment_idx,
                turn_ids=[conv.turns[i].turn_id for i in idxs],
                start_idx=idxs[0] if idxs else None,
                end_idx=idxs[-1] if idxs else None,
                n_exchanges=len(seg.exchange_idxs),
                n_tokens=seg.n_tokens,
                boundary_p=seg.boundary_p,
                boundary_reason=seg.boundary_reason,
                context_json=seg.context_json,
            )
        )
    return rows


def _record_rows(conv: Conversation, dim: int, problems: list[dict]) -> list[dict]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.record_embeddings, len(conv.records), dim, "record_embeddings", cid)
    said = _turn_days(conv)
    rows = []
    for i, rec in enumerate(conv.records):
        where = f"records[{i}]"
        rows.append(
            {
                **rec.as_dict(),
                "conversation_id": cid,
                "time_start": _parse_date(rec.time_start, conv, f"{where}.time_start", problems, end=False),
                "time_end": _parse_date(rec.time_end, conv, f"{where}.time_end", problems, end=True),
                "stated_at": max((said[t] for t in rec.source_turn_ids if said.get(t)), default=None),
                "degraded": bool(rec.degraded),
                "embedding": _vec(emb, i),
            }
        )
    return rows


def _link_rows(conv: Conversation, records: list[dict]) -> list[dict]:
    """The links with their conversation and the day the later record was said (its stated_at):
    when the earlier record stopped being current."""
    said = {r["record_id"]: r["stated_at"] for r in records}
    return [
        {**link.as_dict(), "conversation_id": conv.conversation_id, "stated_at": said.get(link.record_id)}
        for link in conv.links
    ]


def _turn_days(conv: Conversation) -> dict:
    """turn id -> the date it was said. A record's `stated_at` is what an answer prompt shows
    when the record states no event time, so "the most recent memory" can still be told."""
    days = {}
    for t in conv.turns:
        ts = parse_iso_timestamp(t.timestamp) if t.timestamp else None
        if ts is not None:
            days[t.turn_id] = ts.date()
    return days


def _node_rows(conv: Conversation, dim: int) -> list[Node]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.node_embeddings, len(conv.nodes), dim, "node_embeddings", cid)
    # organize gives time and event-frame nodes a NaN row: no vector, stored as a NULL embedding
    unembedded = np.zeros(len(conv.nodes), bool) if emb is None else np.isnan(emb).all(axis=1)
    return [
        dataclasses.replace(node, conversation_id=cid, embedding=None if unembedded[i] else _vec(emb, i))
        for i, node in enumerate(conv.nodes)
    ]


def _stats_row(conv: Conversation) -> BuildStats:
    """The encoder's counts, with the id and each stage's seconds (`Conversation.seconds`)."""
    seconds = {f"{stage}_s": float(conv.seconds.get(stage) or 0.0) for stage in BuildStats.STAGE_SECONDS}
    return dataclasses.replace(conv.stats, conversation_id=conv.conversation_id, **seconds)


def _question_rows(conv: Conversation, problems: list[dict]) -> list[dict]:
    return [
        {
            **q.as_dict(),
            # the conversation's id, not the question's copy: rows must sort with their conversation
            "conversation_id": conv.conversation_id,
            "answer": None if q.answer is None else str(q.answer),
            "question_date": _parse_timestamp(q.question_date, conv, f"questions[{i}].question_date", problems),
        }
        for i, q in enumerate(conv.questions)
    ]


def _errors_rows(conv: Conversation, problems: list[dict]) -> list[dict]:
    defaults = {"conversation_id": conv.conversation_id, "source_file": conv.source_file}
    return [{name: err[name] if name in err else defaults.get(name) for name in ERROR_COLUMNS} for err in list(conv.errors) + problems]


ERROR_COLUMNS = ErrorRow.column_names()


def conversation_rows(conv: Conversation, dim: int) -> dict[str, list[dict]]:
    """All rows one conversation contributes, per table, as column dicts with the values in their
    stored form (`Row.to_arrow` takes them). Embedding cells are numpy row views.

    A timestamp or date that does not parse becomes NULL plus an `errors` row (kind bad_timestamp /
    bad_date), so the conversation is still stored and the problem is not lost.
    """
    problems: list[dict] = []
    turns = _turn_rows(conv, dim, problems)
    records = _record_rows(conv, dim, problems)
    questions = _question_rows(conv, problems)
    sessions = {t.session_id for t in conv.turns}
    rows = {
        "conversations": [
            ConversationRow(
                conversation_id=conv.conversation_id,
                source=conv.source,
                source_file=conv.source_file,
                # a duplicate's turns are not ingested; its row still says how many it held
                n_turns=conv.n_input_turns if conv.n_input_turns is not None else len(conv.turns),
                n_sessions=len(sessions),
                n_exchanges=len(conv.exchanges),
                n_segments=len(conv.segments),
                n_records=len(conv.records),
                status=conv.status,
                error=conv.error,
                turns_digest=turns_digest([turn_content_hash(t) for t in conv.turns]),
                extended_at=datetime.fromisoformat(conv.extended_at) if conv.extended_at else None,
            )
        ],
        "turns": turns,
        "passages": _passage_rows(conv, dim),
        "segments": _segment_rows(conv),
        "records": records,
        "nodes": _node_rows(conv, dim),
        "record_nodes": [RecordNode(conversation_id=conv.conversation_id, record_id=r, node_id=n) for r, n in conv.record_nodes],
        "record_links": _link_rows(conv, records),
        "build_stats": [_stats_row(conv)],
        "questions": questions,
        "errors": _errors_rows(conv, problems),
    }
    rows = {table: [r if isinstance(r, dict) else r.as_dict() for r in table_rows] for table, table_rows in rows.items()}
    return _withheld(conv, rows) if is_withheld(conv) else rows


def is_withheld(conv: Conversation) -> bool:
    """A `pending` conversation (the LLM endpoint failed while it was encoded) commits no work."""
    return conv.status == "pending"


def _withheld(conv: Conversation, rows: dict[str, list]) -> dict[str, list]:
    """What a pending conversation commits: its `conversations` row (0 segments, 0 records) and
    the reader's `errors` rows, nothing partial. Its turns are not stored either, only counted
    in that row's n_turns: stored turns without records would be searched as a conversation, and
    a stored prefix would look to the next run like a conversation to extend, when it must be
    encoded whole. Its llm_failure rows go too: they describe segments that were not kept."""
    (row,) = rows["conversations"]
    kept: dict[str, list] = {table: [] for table in rows}
    kept["conversations"] = [{**row, "n_segments": 0, "n_records": 0, "turns_digest": None}]
    kept["errors"] = [e for e in _errors_rows(conv, []) if e["kind"] != "llm_failure"]
    return kept


# --------------------------------------------------------------------------------------------
# Turn accounting (the conservation line of the ingest summary)
# --------------------------------------------------------------------------------------------
# `errors` kinds that each stand for one turn a reader saw and did not keep (plus missing_field
# on a turn's `.text`: a turn with no text); kinds that stand for rows whose turns were counted
# but withheld (n_turns of that conversations row).
DROPPED_TURN_KINDS = ("bad_turn", *SKIP_KINDS)
DROPPED_TURN_SQL = "(kind IN ({}) OR (kind = 'missing_field' AND field LIKE '%.text'))".format(", ".join(f"'{k}'" for k in DROPPED_TURN_KINDS))
WITHHOLDING_KINDS = {
    "duplicate_id": "in duplicate rows",
    "changed_history": "in changed-history rows",
    "extend_failed": "in rows of failed extensions",
}


def is_dropped_turn(row: dict) -> bool:
    """Python twin of DROPPED_TURN_SQL, for rows not yet written."""
    return row["kind"] in DROPPED_TURN_KINDS or (row["kind"] == "missing_field" and (row.get("field") or "").endswith(".text"))


def turn_rows_in(conv: Conversation) -> int:
    """The turn rows the read stage made of this conversation: those it passed on (or, in a copy
    whose turns are withheld, `n_input_turns`) plus the turns it dropped one by one. A turn split
    into k parts (kind turn_split) is k rows here as in the turns table."""
    kept = conv.n_input_turns if conv.n_input_turns is not None else len(conv.turns)
    return kept + sum(1 for e in conv.errors if is_dropped_turn(e))


def split_turns(conv: Conversation) -> tuple[int, int]:
    """(input turns split into parts, the parts they became), from the turn_split rows."""
    parts = [split_parts(e) for e in conv.errors if e["kind"] == "turn_split"]
    return len(parts), sum(parts)


def turns_in(conv: Conversation) -> int:
    """The input turns the read stage saw in this conversation: a turn split into k parts counts
    once here (`turn_rows_in` counts its k rows)."""
    n_split, n_parts = split_turns(conv)
    return turn_rows_in(conv) - n_parts + n_split


def rows_to_table(table: str, rows: list, dim: int) -> pa.Table:
    """Rows -> Arrow table with exactly the declared schema of `table`."""
    return TABLES[table].to_arrow(rows, dim)
