"""Files -> conversations: which input files there are, and every conversation of one file.

A file is decoded leniently (bad UTF-8 is recorded per line), parsed as one JSON document or as
JSONL, and each object's format is detected from its keys and dispatched to its reader; a reader
that raises costs only that object. `read_file` is what the ingest job's read tasks run per file;
`iter_conversations` is the local, non-Ray path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from lychee_ray.config import ReadConfig
from lychee_ray.io.readers.chat import read_chat
from lychee_ray.io.readers.common import ErrorEntry, InputError, error_conversation
from lychee_ray.io.readers.locomo import read_locomo
from lychee_ray.io.readers.longmemeval import read_longmemeval
from lychee_ray.io.readers.turns import conversation_from_turn_rows, read_turn_parquet
from lychee_ray.schemas import Conversation

log = logging.getLogger(__name__)


INPUT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")


# --------------------------------------------------------------------------------------------
# Planning: which files
# --------------------------------------------------------------------------------------------
def list_input_files(path: str) -> list[str]:
    """The input files under `path` (a file or a directory, searched recursively), sorted."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"input {path} does not exist")
    if p.is_file():
        return [str(p)]
    files = sorted(str(f) for f in p.rglob("*") if f.is_file() and f.suffix.lower() in INPUT_SUFFIXES)
    if not files:
        raise InputError(f"input directory {path} holds no {'/'.join(INPUT_SUFFIXES)} files")
    return files


# --------------------------------------------------------------------------------------------
# Execution: one file -> conversations
# --------------------------------------------------------------------------------------------
def read_file(path: str, cfg: ReadConfig) -> Iterator[Conversation]:
    """Yield every conversation of one file, plus error conversations for what cannot be read."""
    if path.lower().endswith(".parquet"):
        yield from read_turn_parquet(path, cfg)
        return
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        yield error_conversation(ErrorEntry(path, None, None, "unreadable", f"cannot read {path}: {exc}"))
        return
    text, utf8_errors = _decode(raw, path)
    stripped = text.lstrip()
    if not stripped:
        yield error_conversation(ErrorEntry(path, None, None, "empty_file", f"{path} is empty"))
        return
    if path.lower().endswith((".jsonl", ".ndjson")) or not _parses_as_one_document(stripped):
        convs = _read_jsonl(path, text, cfg)
    else:
        convs = _read_json_document(path, json.loads(text, strict=False), cfg)
    first = True
    for conv in convs:
        if first and utf8_errors:
            # Attach decode problems to the first conversation so they land in `errors`.
            conv.errors.extend(e.as_row() for e in utf8_errors)
            first = False
        yield conv
    if first and utf8_errors:
        yield error_conversation(utf8_errors[0])


def _decode(raw: bytes, path: str) -> tuple[str, list[ErrorEntry]]:
    """UTF-8 decode that keeps going: bad bytes become U+FFFD and each bad line is recorded."""
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    errors = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.append(
                ErrorEntry(path, lineno, None, "bad_utf8", f"{path}:{lineno}: invalid UTF-8 at byte {exc.start} of the line; replaced with U+FFFD")
            )
    return raw.decode("utf-8", errors="replace"), errors


def _parses_as_one_document(text: str) -> bool:
    try:
        json.loads(text, strict=False)
        return True
    except json.JSONDecodeError:
        return False


def _read_jsonl(path: str, text: str, cfg: ReadConfig) -> Iterator[Conversation]:
    turn_rows: dict[str, list[tuple[int, dict]]] = {}
    any_line = False
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        any_line = True
        try:
            obj = json.loads(line, strict=False)
        except json.JSONDecodeError as exc:
            yield error_conversation(ErrorEntry(path, lineno, None, "bad_json", f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"))
            continue
        if not isinstance(obj, dict):
            yield error_conversation(ErrorEntry(path, lineno, None, "bad_record", f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"))
            continue
        kind = _detect_object(obj)
        if kind == "turn":
            cid = str(obj.get("conversation_id"))
            turn_rows.setdefault(cid, []).append((lineno, obj))
        elif kind is None:
            yield error_conversation(ErrorEntry(path, lineno, None, "unknown_format", f"{path}:{lineno}: object with keys {sorted(obj)[:8]} is not a known conversation or turn format"))
        else:
            yield from _read_object(kind, obj, path, lineno, cfg)
    if not any_line:
        yield error_conversation(ErrorEntry(path, None, None, "empty_file", f"{path} holds no lines"))
    for cid, rows in turn_rows.items():
        yield conversation_from_turn_rows(cid, rows, path, "turns", cfg)


def _read_json_document(path: str, doc, cfg: ReadConfig) -> Iterator[Conversation]:
    items = doc if isinstance(doc, list) else [doc]
    turn_rows: dict[str, list[tuple[int, dict]]] = {}
    for idx, obj in enumerate(items):
        where = idx + 1  # 1-based item index stands in for a line number in JSON arrays
        kind = _detect_object(obj) if isinstance(obj, dict) else None
        if kind == "turn":
            turn_rows.setdefault(str(obj.get("conversation_id")), []).append((where, obj))
        elif kind is None:
            keys = sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__
            yield error_conversation(ErrorEntry(path, where, None, "unknown_format", f"{path}: item {where} ({keys}) is not a known conversation format"))
        else:
            yield from _read_object(kind, obj, path, where, cfg)
    for cid, rows in turn_rows.items():
        yield conversation_from_turn_rows(cid, rows, path, "turns", cfg)


def _detect_object(obj: dict) -> str | None:
    if isinstance(obj.get("conversation"), dict) and "speaker_a" in obj["conversation"]:
        return "locomo"
    if "haystack_sessions" in obj:
        return "longmemeval"
    if "turns" in obj or "messages" in obj:
        return "chat"
    if "conversation_id" in obj and any(k in obj for k in ("text", "content", "speaker", "role")):
        return "turn"
    return None


def _read_object(kind: str, obj: dict, path: str, where: int, cfg: ReadConfig) -> Iterator[Conversation]:
    reader = {"locomo": read_locomo, "longmemeval": read_longmemeval, "chat": read_chat}[kind]
    try:
        yield reader(obj, path, where, cfg)
    except Exception as exc:  # a reader bug or a shape we did not foresee: record, go on
        log.exception("reading %s item %s failed", path, where)
        yield error_conversation(ErrorEntry(path, where, None, "reader_error", f"{path}:{where}: {type(exc).__name__}: {exc}"))


def iter_conversations(paths: Iterable[str], cfg: ReadConfig) -> Iterator[Conversation]:
    """All conversations of all files, in order (the local, non-Ray path and tests)."""
    for path in paths:
        yield from read_file(path, cfg)
