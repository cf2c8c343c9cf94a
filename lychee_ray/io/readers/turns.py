"""Reader for turn-level input: one turn per row with a conversation_id (JSONL lines, items of a
JSON document, or Parquet rows).

A read task does not make conversations of turn rows: it passes each row on as a `TurnRow`, and
the rows of one conversation_id are brought together from every file and byte range of the input
(the ingest job groups them with Ray Data; `files.iter_conversations` in memory), so a
conversation whose turns are spread over several files (one file per day) is one conversation.
Rows with no conversation_id (null, blank, a list) cannot be matched across files: those of one
file are one anonymous conversation, and each such row is an errors row (its turn is kept). `conversation_from_turn_rows` then orders a conversation's rows by
timestamp, then `turn_idx`, then place (file in listing order, line) and maps them through the
chat reader's fields.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.chat import chat_turn, has_roles
from lychee_ray.io.readers.common import (
    ErrorEntry,
    Source,
    conversation_id,
    error_conversation,
    finish,
    id_problem,
    parsed_stamp,
    scalar_text,
    short,
    validated_turns,
)
from lychee_ray.io.readers.plan import FilePart, Place
from lychee_ray.schemas import Conversation

log = logging.getLogger(__name__)


@dataclass
class TurnRow:
    """One turn-level row as a read task found it, on its way to the rows of its conversation."""

    cid: str | None  # its conversation_id as text; None: the row names none
    obj: dict
    place: Place
    notes: list[ErrorEntry] = field(default_factory=list)  # problems of its line (bad UTF-8)

    @property
    def group(self) -> str:
        """The rows of one id form one conversation across files; rows with none, one per file."""
        return json.dumps([self.cid, None if self.cid is not None else self.place.key])


def turn_row(obj: dict, place: Place) -> TurnRow:
    cid = scalar_text(obj.get("conversation_id"))
    return TurnRow(None if cid in (None, "None") else cid, obj, place)


def turn_conversations(rows: Iterable[TurnRow], cfg: ReadConfig) -> Iterator[tuple[Conversation, Place]]:
    """Each group of rows as one conversation with its place (its first row's), in that order."""
    groups: dict[str, list[TurnRow]] = {}
    for row in rows:
        groups.setdefault(row.group, []).append(row)
    for group in sorted(groups.values(), key=lambda g: min(r.place for r in g)):
        yield group_conversation(group, cfg), min(r.place for r in group)


def group_conversation(rows: list[TurnRow], cfg: ReadConfig) -> Conversation:
    """`conversation_from_turn_rows`, where a bug or an unforeseen shape costs only this
    conversation: one error row at its first row, never the read."""
    try:
        return conversation_from_turn_rows(rows, cfg)
    except Exception as exc:
        first = min(r.place for r in rows)
        log.exception("turn rows of %s failed", first)
        return error_conversation(ErrorEntry(first.path, first.line, None, "reader_error", f"{first}: turn rows: {type(exc).__name__}: {short(str(exc))}"), first.key)


def conversation_from_turn_rows(rows: list[TurnRow], cfg: ReadConfig) -> Conversation:
    """The rows of one conversation, from any files and in any order. Rows with no id are one
    anonymous conversation, whose id hashes its first row's file and line and the rows."""
    rows = sorted(rows, key=lambda r: r.place)
    first = rows[0].place
    src = Source(first.path, first.key, first.where)
    conv = Conversation(conversation_id=conversation_id(rows[0].cid, src, [r.obj for r in rows]), source="turns", source_file=first.path)
    errors = [note for r in rows for note in r.notes]
    errors += [_no_id(r, conv.conversation_id) for r in rows if r.cid is None]
    raw = [dict(chat_turn(r.obj, i, f"line {r.place.where}"), line=r.place.where, path=r.place.path) for i, r in enumerate(in_turn_order(rows))]
    conv.turns = validated_turns(raw, conv.conversation_id, first.path, first.where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def _no_id(row: TurnRow, cid: str) -> ErrorEntry:
    """The row names no conversation (null, blank, a list): kept, in its file's conversation of
    such rows, since its turn is whole and only the grouping key is lost; the row says so."""
    raw = row.obj.get("conversation_id")
    problem = id_problem(raw)
    kind, problem = ("missing_field", "is null") if problem is None else ("bad_field", problem)
    return ErrorEntry(row.place.path, row.place.line, "conversation_id", kind, f"{row.place}: conversation_id {problem}; the row is read into {cid}, its file's conversation of rows without an id", cid)


def in_turn_order(rows: list[TurnRow]) -> list[TurnRow]:
    """By timestamp, then `turn_idx`, then place. A key orders only when every row has it: one
    row without a time must not jump to an end of a conversation whose other rows have one."""
    stamps = [_utc(parsed_stamp(r.obj.get("timestamp"))) for r in rows]
    idxs = [r.obj.get("turn_idx") for r in rows]
    idxs = [i if isinstance(i, int) and not isinstance(i, bool) else None for i in idxs]
    by_time, by_idx = None not in stamps, None not in idxs
    keys = [(stamps[k] if by_time else 0, idxs[k] if by_idx else 0, rows[k].place) for k in range(len(rows))]
    return [rows[k] for k in sorted(range(len(rows)), key=keys.__getitem__)]


def _utc(stamp: datetime | None) -> datetime | None:
    # aware and naive times cannot be compared: an offset is turned into UTC, a naive time is taken as UTC
    return stamp.astimezone(timezone.utc).replace(tzinfo=None) if stamp is not None and stamp.tzinfo else stamp


def parquet_turn_rows(part: FilePart, source) -> Iterator[TurnRow | Conversation]:
    """Turn-level Parquet from `source` (the open file, or a buffer when it came compressed): a
    `TurnRow` per row (its 1-based row number stands in for a line), or one error conversation."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(source)
    except Exception as exc:
        yield error_conversation(ErrorEntry(part.path, None, None, "bad_parquet", f"{part.path} is not a readable Parquet file: {exc}"), part.key)
        return
    if "conversation_id" not in table.column_names:
        yield error_conversation(ErrorEntry(part.path, None, "conversation_id", "missing_field", f"{part.path}: turn-level Parquet needs a conversation_id column"), part.key)
        return
    for i, row in enumerate(table.to_pylist(), start=1):
        yield turn_row(row, Place(part.index, i, part.path, part.key))
