"""Files -> conversations: which input files there are, and every conversation of one file.

The content decides how a file is read, not its name: gzip and zstd are unpacked (found by their
magic bytes), Parquet is found by its magic, and text is parsed as one JSON document or as JSON
Lines. A file that is none of these is an `unsupported_format` error row, so every file under an
input folder is either read or named; only a lychee-ray store inside the folder (an output written
there) is never read as input.

Nothing in a file stops the read. Text is decoded leniently (bad UTF-8 is recorded per line);
values nested too deeply for the parser are cut to null and recorded; each object's format is
detected from its keys and dispatched to its reader, and a reader that raises costs only that
object; a conversation id seen twice in one file keeps its first copy and the later one becomes a
`duplicate_id` error row. `read_file` is what the ingest job's read tasks run per file;
`iter_conversations` is the local, non-Ray path.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from lychee_ray.config import ReadConfig
from lychee_ray.io.readers.chat import read_chat
from lychee_ray.io.readers.chatgpt import is_chatgpt_export, read_chatgpt
from lychee_ray.io.readers.common import (
    ErrorEntry,
    InputError,
    Source,
    error_conversation,
    scalar_text,
    short,
    source_key,
)
from lychee_ray.io.readers.decode import (
    MAX_DEPTH,
    bytes_unless_parquet,
    decode_utf8,
    inner_suffix,
    json_layout,
    loads_any_depth,
    sniff_format,
    unpacked,
    unsupported_message,
)
from lychee_ray.io.readers.locomo import read_locomo
from lychee_ray.io.readers.longmemeval import read_longmemeval
from lychee_ray.io.readers.sharegpt import is_sharegpt, read_sharegpt
from lychee_ray.io.readers.turns import conversation_from_turn_rows, read_turn_parquet
from lychee_ray.schemas import MANIFEST, STORE_FORMAT, Conversation

log = logging.getLogger(__name__)
# `_detect_object`'s kinds; every reader takes (the object, its `Source`, the read config)
READERS = {"chatgpt": read_chatgpt, "locomo": read_locomo, "longmemeval": read_longmemeval, "chat": read_chat, "sharegpt": read_sharegpt}


# --------------------------------------------------------------------------------------------
# Planning: which files
# --------------------------------------------------------------------------------------------
def list_input_files(path: str, exclude: str | None = None) -> list[str]:
    """Every file under `path` (a file or a directory, searched recursively), sorted. A folder
    holding a lychee-ray store, and `exclude` (the run's output), are never input: a rerun with
    the output inside the input must not read its own manifest and Parquet parts."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"input {path} does not exist")
    if p.is_file():
        return [str(p)]
    files = sorted(_walk(path, exclude))
    if not files:
        raise InputError(f"input directory {path} holds no files (a lychee-ray store in it is not input)")
    return files


def _walk(root: str, exclude: str | None) -> Iterator[str]:
    skip = os.path.realpath(exclude) if exclude else None
    for folder, subfolders, names in os.walk(root):
        if os.path.realpath(folder) == skip or is_store(folder):
            log.info("not reading %s as input: it is a lychee-ray store", folder)
            subfolders.clear()
            continue
        yield from (os.path.join(folder, name) for name in names)


def is_store(folder: str) -> bool:
    """Whether `folder` holds a lychee-ray store: a manifest.json with the store's format tag."""
    try:
        with open(os.path.join(folder, MANIFEST), "rb") as fh:
            manifest = json.loads(fh.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == STORE_FORMAT


# --------------------------------------------------------------------------------------------
# Execution: one file -> conversations
# --------------------------------------------------------------------------------------------
def read_file(path: str, cfg: ReadConfig, root: str | None = None) -> Iterator[Conversation]:
    """Yield every conversation of one file, plus error conversations for what cannot be read.
    `root` is the input path the file was listed under: error ids are built from the file's path
    relative to it, so a rerun spelling the input differently finds the same rows."""
    reader = _FileReader(path, source_key(path, root), cfg)
    seen: set[str] = set()
    for conv in reader.conversations():
        yield _unique_id(conv, seen)


def iter_conversations(paths: Iterable[str], cfg: ReadConfig, root: str | None = None) -> Iterator[Conversation]:
    """All conversations of all files, in order (the local, non-Ray path and tests)."""
    for path in paths:
        yield from read_file(path, cfg, root)


def _unique_id(conv: Conversation, seen: set[str]) -> Conversation:
    # Real duplicates are caught with their line by `_FileReader.claim`; this only guards error
    # rows, whose ids could meet if one line ever gave two problems of one kind.
    cid, n = conv.conversation_id, 1
    while conv.conversation_id in seen:
        n += 1
        conv.conversation_id = f"{cid}-{n}"
    for row in conv.errors:
        if row["conversation_id"] == cid:
            row["conversation_id"] = conv.conversation_id
    seen.add(conv.conversation_id)
    return conv


class _FileReader:
    """One file's read: its bytes to conversations, recording every problem on the way."""

    def __init__(self, path: str, key: str, cfg: ReadConfig):
        self.path, self.key, self.cfg = path, key, cfg
        self.unit = "line"  # "item" in a JSON document: what the number in a message counts
        self.first_seen: dict[str, int] = {}  # conversation id -> line or item of its first copy
        self.file_notes: list[ErrorEntry] = []  # problems of the file as a whole (bad UTF-8)

    def conversations(self) -> Iterator[Conversation]:
        """`_read`, with the file's notes on the first conversation after they are known, and a
        last net: a bug or an unforeseen shape ends this file with one error row, never the run."""
        attached = False
        try:
            for conv in self._read():
                if self.file_notes and not attached:
                    self._attach_notes(conv)
                    attached = True
                yield conv
        except Exception as exc:
            log.exception("reading %s failed", self.path)
            yield self.error(None, None, "reader_error", f"{self.path}: reading stopped early: {type(exc).__name__}: {short(str(exc))}")
        if self.file_notes and not attached:
            conv = error_conversation(self.file_notes[0], self.key)
            self._attach_notes(conv, skip=1)
            yield conv

    def _attach_notes(self, conv: Conversation, skip: int = 0) -> None:
        for note in self.file_notes[skip:]:
            note.conversation_id = conv.conversation_id
            conv.errors.append(note.as_row())

    def error(self, where: int | None, field: str | None, kind: str, message: str) -> Conversation:
        return error_conversation(ErrorEntry(self.path, where, field, kind, message), self.key)

    def place(self, where: int) -> str:
        return f"{self.path}:{where}" if self.unit == "line" else f"{self.path} item {where}"

    # ---- bytes -------------------------------------------------------------------------------
    def _read(self) -> Iterator[Conversation]:
        try:
            raw = bytes_unless_parquet(self.path)
        except OSError as exc:
            yield self.error(None, None, "unreadable", f"cannot read {self.path}: {exc.strerror or exc}")
            return
        if raw is None:
            yield from read_turn_parquet(self.path, self.cfg, self.key)
            return
        raw, codecs, problem = unpacked(raw)
        if problem:
            yield self.error(None, None, "bad_compression", f"{self.path}: its {codecs[-1]} data {problem}; what came before that is read")
        if not raw or raw.isspace():  # isspace stops at the first other byte: no copy of a big file
            yield self.error(None, None, "empty_file", f"{self.path} is empty" + (f" after {'+'.join(codecs)} decompression" if codecs else ""))
            return
        kind = sniff_format(raw, inner_suffix(self.path))
        if kind == "parquet":
            import pyarrow as pa

            yield from read_turn_parquet(self.path, self.cfg, self.key, source=pa.BufferReader(raw))
        elif kind == "unsupported":
            yield self.error(None, None, "unsupported_format", unsupported_message(self.path, codecs))
        else:
            yield from self._read_text(raw)

    def _read_text(self, raw: bytes) -> Iterator[Conversation]:
        text, self.file_notes = decode_utf8(raw, self.path)
        text = text.removeprefix("\ufeff")  # a byte-order mark is no JSON
        layout, value = json_layout(text, inner_suffix(self.path))
        if layout == "document":
            doc, cuts = value
            self.unit = "item" if isinstance(doc, list) else "line"
            yield from self._too_deep(text, cuts)
            if doc == []:  # nothing to read, but the file must still be named
                yield self.error(None, None, "empty_file", f"{self.path} holds an empty JSON list: no conversations")
                return
            yield from self._read_items(doc if isinstance(doc, list) else [doc])
        elif layout == "lines":
            yield from self._read_lines(text)
        elif isinstance(value, json.JSONDecodeError):
            yield self.error(value.lineno, None, "bad_json", f"{self.path}:{value.lineno}: not valid JSON ({value.msg} at column {value.colno}); the file is one broken document and is not read")
        else:
            yield self.error(None, None, "too_deep", f"{self.path}: nested too deeply to parse; the file is not read")

    # ---- JSON ---------------------------------------------------------------------------------
    def _read_lines(self, text: str) -> Iterator[Conversation]:
        turn_rows: dict[str, list[tuple[int, dict]]] = {}
        # split on "\n" only: str.splitlines also splits at U+2028 and friends, which JSON allows
        # raw inside strings, and the line numbers must agree with `decode_utf8`'s
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                obj, cuts = loads_any_depth(line)
            except json.JSONDecodeError as exc:
                yield self.error(lineno, None, "bad_json", f"{self.path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})")
                continue
            except RecursionError:
                yield self.error(lineno, None, "too_deep", f"{self.path}:{lineno}: nested too deeply to parse; line skipped")
                continue
            yield from self._too_deep(line, cuts, lineno)
            yield from self._read_item(obj, lineno, turn_rows)
        yield from self._turn_conversations(turn_rows)

    def _read_items(self, items: list) -> Iterator[Conversation]:
        turn_rows: dict[str, list[tuple[int, dict]]] = {}
        for idx, obj in enumerate(items):
            yield from self._read_item(obj, idx + 1, turn_rows)  # 1-based item index stands in for a line
        yield from self._turn_conversations(turn_rows)

    def _read_item(self, obj, where: int, turn_rows: dict) -> Iterator[Conversation]:
        """One parsed line or document item; whatever goes wrong costs only this item."""
        try:
            if not isinstance(obj, dict):
                yield self.error(where, None, "bad_record", f"{self.place(where)}: expected a JSON object, got {type(obj).__name__}")
                return
            kind = _detect_object(obj)
            if kind == "turn":
                turn_rows.setdefault(scalar_text(obj.get("conversation_id")) or "None", []).append((where, obj))
            elif kind is None:
                yield self.error(where, None, "unknown_format", f"{self.place(where)}: object with keys {short(sorted(obj)[:8])} is not a known conversation or turn format")
            else:
                yield self.claim(READERS[kind](obj, Source(self.path, self.key, where), self.cfg), where)
        except Exception as exc:  # a reader bug or a shape we did not foresee: record, go on
            log.exception("reading %s failed", self.place(where))
            yield self.error(where, None, "reader_error", f"{self.place(where)}: {type(exc).__name__}: {short(str(exc))}")

    def _turn_conversations(self, turn_rows: dict) -> Iterator[Conversation]:
        for cid, rows in turn_rows.items():
            yield self.claim(conversation_from_turn_rows(cid, rows, Source(self.path, self.key, rows[0][0]), self.cfg), rows[0][0])

    def _too_deep(self, text: str, cuts: list[int], lineno: int | None = None) -> Iterator[Conversation]:
        """One error row per line where values were cut to null (the rest of the value is read)."""
        lines: dict[int, int] = {}
        for offset in cuts:
            line = lineno if lineno is not None else text.count("\n", 0, offset) + 1
            lines[line] = lines.get(line, 0) + 1
        for line, n in lines.items():
            yield self.error(line, None, "too_deep", f"{self.path}:{line}: {n} value(s) nested more than {MAX_DEPTH} levels deep were read as null")

    def claim(self, conv: Conversation, where: int) -> Conversation:
        """The first copy of a conversation id in this file wins; a later copy becomes a
        `duplicate_id` error row naming both places (two copies would sink the writer's batch)."""
        first = self.first_seen.setdefault(conv.conversation_id, where)
        if first == where:
            return conv
        dup = self.error(
            where,
            "conversation_id",
            "duplicate_id",
            f"{self.place(where)}: conversation id {short(conv.conversation_id)} already appeared at {self.unit} {first} of this file; "
            f"this copy ({len(conv.turns)} turns, {len(conv.questions)} questions) is not read",
        )
        dup.n_input_turns = len(conv.turns)
        return dup


def _detect_object(obj: dict) -> str | None:
    """The format of one object, from its keys; the order matters: a ChatGPT export item holds
    a `conversation_id` (a turn row's key) beside its `mapping`, and ShareGPT's `conversations`
    is a list where LoCoMo's `conversation` is an object."""
    if is_chatgpt_export(obj):
        return "chatgpt"
    if isinstance(obj.get("conversation"), dict) and "speaker_a" in obj["conversation"]:
        return "locomo"
    if "haystack_sessions" in obj:
        return "longmemeval"
    if "turns" in obj or "messages" in obj:
        return "chat"
    if is_sharegpt(obj):
        return "sharegpt"
    if "conversation_id" in obj and any(k in obj for k in ("text", "content", "speaker", "role")):
        return "turn"
    return None
