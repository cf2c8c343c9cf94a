"""Reader for turn-level input: one turn per row with a conversation_id (JSONL lines or Parquet).

Rows are grouped per file by conversation_id and ordered by `turn_idx` where given (else by
position); each group becomes one conversation through the chat reader's field mapping. Parquet
files are read here; JSONL turn rows are collected by `files`, which detects them line by line.
"""

from __future__ import annotations

from collections.abc import Iterator

from lychee_ray.config import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.chat import chat_turn, has_roles
from lychee_ray.io.readers.common import (
    ErrorEntry,
    Source,
    conversation_id,
    error_conversation,
    finish,
    source_key,
    validated_turns,
)
from lychee_ray.schemas import Conversation


def conversation_from_turn_rows(cid: str, rows: list[tuple[int, dict]], src: Source, cfg: ReadConfig) -> Conversation:
    """The rows of one conversation id (`src.where`: the first row's line); rows with no id at
    all are one anonymous conversation, whose id hashes the file, that line and the rows."""
    conv = Conversation(conversation_id=conversation_id(cid, src, [obj for _, obj in rows]), source="turns", source_file=src.path)
    errors: list[ErrorEntry] = []
    rows = sorted(rows, key=lambda r: (r[1].get("turn_idx", r[0]) if isinstance(r[1].get("turn_idx"), int) else r[0]))
    raw = [dict(chat_turn(obj, i, f"line {lineno}"), line=lineno) for i, (lineno, obj) in enumerate(rows)]
    conv.turns = validated_turns(raw, conv.conversation_id, src.path, src.where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if has_roles(conv.turns) else "pair")
    return finish(conv, errors)


def read_turn_parquet(path: str, cfg: ReadConfig, file_key: str | None = None, source=None) -> Iterator[Conversation]:
    """Turn-level Parquet from `path`, or from `source` (a buffer: the file came compressed)."""
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path if source is None else source)
    except Exception as exc:
        yield error_conversation(ErrorEntry(path, None, None, "bad_parquet", f"{path} is not a readable Parquet file: {exc}"), file_key)
        return
    if "conversation_id" not in table.column_names:
        yield error_conversation(ErrorEntry(path, None, "conversation_id", "missing_field", f"{path}: turn-level Parquet needs a conversation_id column"), file_key)
        return
    grouped: dict[str, list[tuple[int, dict]]] = {}
    for i, row in enumerate(table.to_pylist(), start=1):
        grouped.setdefault(str(row["conversation_id"]), []).append((i, row))
    key = file_key or source_key(path)
    for cid, rows in grouped.items():
        yield conversation_from_turn_rows(cid, rows, Source(path, key, rows[0][0]), cfg)
