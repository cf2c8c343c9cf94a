"""Files -> conversations: every conversation of each part of the input.

The input is a path or any pyarrow filesystem URI (``s3://bucket/archive?endpoint_override=...``,
``gs://``, ``file://``): the driver lists it (`listing.list_input_files`, re-exported here) and
plans the read (`plan.plan_parts`: one part per file, byte ranges for a large JSON Lines file,
one part per BEAM conversation folder), and each part is read by `read_part`, in a Ray task of
the ingest job or in this process (`iter_conversations`).

The content decides how a file is read, not its name: gzip and zstd are unpacked (found by their
magic bytes), Parquet is found by its magic, and text is parsed as one JSON document or as JSON
Lines. A file that is none of these is an `unsupported_format` error row, so every file under an
input folder is either read or named; only a lychee-ray store inside the folder (an output written
there) is never read as input. A BEAM folder is read by `beam.read_beam_folder`, its files never
one by one; a BEAM batch met in a plain file is an error row that says to give its folder.

Nothing in a file stops the read. Text is decoded leniently (bad UTF-8 is recorded at its line);
values nested too deeply for the parser are cut to null and recorded; each object's format is
detected from its keys and dispatched to its reader, and a reader that raises costs only that
object. Turn-level rows leave a part as `turns.TurnRow`s and become conversations only once the
rows of every file are together. A conversation id read twice keeps its first copy in listing
order (`plan.FirstCopies`); `duplicate_copy` makes the row that replaces a later one.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import pyarrow as pa

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.fs import open_input
from lychee_ray.io.readers.beam import CHAT_FILES, QUESTIONS_FILE, is_beam_batch, read_beam_folder
from lychee_ray.io.readers.chat import read_chat
from lychee_ray.io.readers.chatgpt import is_chatgpt_export, read_chatgpt
from lychee_ray.io.readers.common import ErrorEntry, Source, error_conversation, short
from lychee_ray.io.readers.decode import (
    BOM,
    MAX_DEPTH,
    bytes_unless_parquet,
    count_newlines,
    decode_line,
    decode_utf8,
    inner_suffix,
    iter_range_lines,
    json_layout,
    loads_any_depth,
    sniff_format,
    split_lines,
    unpacked,
    unsupported_message,
)
from lychee_ray.io.readers.listing import list_input_files  # noqa: F401  (callers list and read through this module)
from lychee_ray.io.readers.locomo import read_locomo
from lychee_ray.io.readers.longmemeval import read_longmemeval
from lychee_ray.io.readers.plan import FilePart, FirstCopies, Place, number_parts, parts_to_count, plan_parts
from lychee_ray.io.readers.sharegpt import is_sharegpt, read_sharegpt
from lychee_ray.io.readers.turns import TurnRow, parquet_turn_rows, turn_conversations, turn_row
from lychee_ray.schemas import Conversation

log = logging.getLogger(__name__)
# `_detect_object`'s kinds; every reader takes (the object, its `Source`, the read config)
READERS = {"chatgpt": read_chatgpt, "locomo": read_locomo, "longmemeval": read_longmemeval, "chat": read_chat, "sharegpt": read_sharegpt}


class Found(NamedTuple):
    """A conversation a part gave, and where it was read: None for an error row, which is no
    copy of anything and so never a duplicate."""

    conv: Conversation
    place: Place | None


# --------------------------------------------------------------------------------------------
# Execution in this process (the ingest job runs `read_part` in Ray tasks instead)
# --------------------------------------------------------------------------------------------
def read_file(path: str, cfg: ReadConfig, root: str | None = None) -> Iterator[Conversation]:
    """Every conversation of one file, plus error conversations for what cannot be read.
    `root` is the input path the file was listed under: ids are built from the file's path
    relative to it, so a rerun spelling the input differently finds the same rows."""
    return iter_conversations([path], cfg, root)


def iter_conversations(paths: Iterable[str], cfg: ReadConfig, root: str | None = None) -> Iterator[Conversation]:
    """All conversations of all files (the local, non-Ray path and tests), read by the plan the
    ingest job's tasks follow, one part after another: conversation objects in listing order,
    then the conversations of turn rows, each gathered from every file."""
    parts = plan_parts(paths, root, cfg.split_bytes)
    parts = number_parts(parts, [count_newlines(p.uri, p.start, p.end) for p in parts_to_count(parts)])
    firsts, rows = FirstCopies(), []
    for part in parts:
        for item in read_part(part, cfg):
            if isinstance(item, TurnRow):
                rows.append(item)
            else:
                yield keep_first(firsts.claim, *item)
    for conv, place in turn_conversations(rows, cfg):
        yield keep_first(firsts.group_firsts, conv, place)


def keep_first(ask, conv: Conversation, place: Place | None) -> Conversation:
    """`conv`, or the row that replaces it when `ask` (a `FirstCopies` method) says an earlier
    copy of its id is kept."""
    if place is None or conv.source == "error":
        return conv
    (first,) = ask([conv.conversation_id], [place])
    return conv if first is None else duplicate_copy(conv, place, first)


def duplicate_copy(conv: Conversation, place: Place, first: Place) -> Conversation:
    """The row for a later copy of a conversation id (two copies would sink the writer's batch):
    it keeps its row, under an id derived from its place and with status `duplicate`, whether
    the first copy is in the same file or another (one fact, one status). Its `duplicate_id`
    errors row names both places; its turns are counted (n_input_turns), not ingested twice, and
    its own error rows stay with it."""
    n_turns, original = len(conv.turns), conv.conversation_id
    # derived from the place, so a resumed run (or a read from another mount) finds the same row
    conv.conversation_id = f"{original}#dup-{hashlib.sha1(f'{original}|{place.key}:{place.where}'.encode()).hexdigest()[:8]}"
    conv.status = "duplicate"
    if first.key == place.key:  # as a read of that one file alone says it
        conv.error = (
            f"{place}: conversation id {short(original)} already appeared at {first.unit} {first.where} of this file; "
            f"this copy ({n_turns} turns, {len(conv.questions)} questions) is not read"
        )
    else:
        conv.error = f"duplicate conversation id {original!r}: first seen in {first}; this copy in {place} ({n_turns} turns) was not ingested"
    conv.errors = [dict(row, conversation_id=conv.conversation_id) for row in conv.errors]
    conv.errors.append(ErrorEntry(place.path, place.line, "conversation_id", "duplicate_id", conv.error, conv.conversation_id).as_row())
    conv.n_input_turns = n_turns
    conv.turns, conv.questions, conv.exchanges = [], [], []
    log.warning("%s", conv.error)
    return conv


def read_part(part: FilePart, cfg: ReadConfig) -> Iterator[Found | TurnRow]:
    """Everything one part of the plan gives: conversations with their places, and turn rows."""
    if part.folder == "beam":
        return _beam_folder(part, cfg)
    return _FileReader(part, cfg).items()


def _beam_folder(part: FilePart, cfg: ReadConfig) -> Iterator[Found]:
    """A BEAM folder's one conversation; a bug or an unforeseen shape costs one error row."""
    try:
        conv = read_beam_folder(part.uri, Source(part.path, part.key, 0), cfg)
    except Exception as exc:
        log.exception("reading the BEAM folder %s failed", part.path)
        yield Found(error_conversation(ErrorEntry(part.path, None, None, "reader_error", f"{part.path}: BEAM folder: {type(exc).__name__}: {short(str(exc))}"), part.key), None)
        return
    yield Found(conv, Place(part.index, 0, part.path, part.key))


def _unique_id(conv: Conversation, seen: set[str]) -> Conversation:
    # Duplicates of real ids are `FirstCopies`' business; this only guards error rows, whose ids
    # could meet if one line ever gave two problems of one kind.
    cid, n = conv.conversation_id, 1
    while conv.conversation_id in seen:
        n += 1
        conv.conversation_id = f"{cid}-{n}"
    for row in conv.errors:
        if row["conversation_id"] == cid:
            row["conversation_id"] = conv.conversation_id
    seen.add(conv.conversation_id)
    return conv


def _attach(item: Found | TurnRow, notes: list[ErrorEntry]) -> None:
    """Problems of a line or a file that have no conversation of their own ride on one that does."""
    if isinstance(item, TurnRow):
        item.notes.extend(notes)
        return
    for note in notes:
        note.conversation_id = item.conv.conversation_id
        item.conv.errors.append(note.as_row())


class _FileReader:
    """One part's read (a whole file, or a byte range of a JSON Lines file): its bytes to
    conversations and turn rows, recording every problem on the way."""

    def __init__(self, part: FilePart, cfg: ReadConfig):
        self.part, self.cfg = part, cfg
        self.path, self.key = part.path, part.key  # the file as shown, and as ids hash it
        self.unit = "line"  # "item" in a JSON document: what the number in a message counts
        self.file_notes: list[ErrorEntry] = []  # problems of a JSON document as a whole (bad UTF-8)
        # a problem of a range as a whole sits at its first line: two ranges, two rows
        self.part_line = part.first_line if part.start else None

    def items(self) -> Iterator[Found | TurnRow]:
        seen: set[str] = set()
        for item in self._noted():
            if isinstance(item, Found) and item.place is None:
                _unique_id(item.conv, seen)
            yield item

    def _noted(self) -> Iterator[Found | TurnRow]:
        """`_read`, with the file's notes on its first item, and a last net: a bug or an
        unforeseen shape ends this part with one error row, never the run."""
        attached = False
        try:
            for item in self._read():
                if self.file_notes and not attached:
                    _attach(item, self.file_notes)
                    attached = True
                yield item
        except Exception as exc:
            log.exception("reading %s failed", self.path)
            yield self.error(self.part_line, None, "reader_error", f"{self.path}: reading stopped early: {type(exc).__name__}: {short(str(exc))}")
        if self.file_notes and not attached:
            conv = error_conversation(self.file_notes[0], self.key)
            _attach(Found(conv, None), self.file_notes[1:])
            yield Found(conv, None)

    def error(self, where: int | None, field: str | None, kind: str, message: str) -> Found:
        return Found(error_conversation(ErrorEntry(self.path, where, field, kind, message), self.key), None)

    def place(self, where: int) -> Place:
        return Place(self.part.index, where, self.path, self.key, self.unit)

    # ---- bytes -------------------------------------------------------------------------------
    def _read(self) -> Iterator[Found | TurnRow]:
        if self.part.is_range:  # JSON Lines for sure (`plan`): streamed, never held whole
            yield from self._read_lines(iter_range_lines(self.part.uri, self.part.start, self.part.end), self.part.first_line)
            return
        try:
            raw = bytes_unless_parquet(self.part.uri)
        except OSError as exc:
            yield self.error(None, None, "unreadable", f"cannot read {self.path}: {exc.strerror or exc}")
            return
        if raw is None:
            with open_input(self.part.uri) as fh:
                yield from self._parquet(fh)
            return
        raw, codecs, problem = unpacked(raw)
        if problem:
            yield self.error(None, None, "bad_compression", f"{self.path}: its {codecs[-1]} data {problem}; what came before that is read")
        if not raw or raw.isspace():  # isspace stops at the first other byte: no copy of a big file
            yield self.error(None, None, "empty_file", f"{self.path} is empty" + (f" after {'+'.join(codecs)} decompression" if codecs else ""))
            return
        kind = sniff_format(raw, inner_suffix(self.path))
        if kind == "parquet":
            yield from self._parquet(pa.BufferReader(raw))
        elif kind == "unsupported":
            yield self.error(None, None, "unsupported_format", unsupported_message(self.path, codecs))
        else:
            yield from self._read_text(raw)

    def _parquet(self, source) -> Iterator[Found | TurnRow]:
        for item in parquet_turn_rows(self.part, source):
            yield item if isinstance(item, TurnRow) else Found(item, None)

    def _read_text(self, raw: bytes) -> Iterator[Found | TurnRow]:
        text, notes = decode_utf8(raw, self.path)
        text = text.removeprefix("\ufeff")  # a byte-order mark is no JSON
        layout, value = json_layout(text, inner_suffix(self.path))
        if layout == "lines":  # line by line from the bytes, exactly as a range task reads them
            del text
            yield from self._read_lines(split_lines(raw), 1)
            return
        self.file_notes = notes
        if layout == "document":
            doc, cuts = value
            self.unit = "item" if isinstance(doc, list) else "line"
            yield from self._too_deep(text, cuts)
            if doc == []:  # nothing to read, but the file must still be named
                yield self.error(None, None, "empty_file", f"{self.path} holds an empty JSON list: no conversations")
                return
            for idx, obj in enumerate(doc if isinstance(doc, list) else [doc]):
                yield from self._read_item(obj, idx + 1)  # 1-based item index stands in for a line
        elif isinstance(value, json.JSONDecodeError):
            yield self.error(value.lineno, None, "bad_json", f"{self.path}:{value.lineno}: not valid JSON ({value.msg} at column {value.colno}); the file is one broken document and is not read")
        else:
            yield self.error(None, None, "too_deep", f"{self.path}: nested too deeply to parse; the file is not read")

    # ---- JSON ---------------------------------------------------------------------------------
    def _read_lines(self, lines: Iterable[bytes], first_line: int) -> Iterator[Found | TurnRow]:
        """JSON Lines, numbered from `first_line`. Lines are cut at b"\\n" only (JSON allows raw
        U+2028 and friends inside strings), and bad UTF-8 is named at its line, on the first
        thing that line gave: a range and a whole file give the same rows."""
        for lineno, raw in enumerate(lines, start=first_line):
            if lineno == 1:
                raw = raw.removeprefix(BOM)
            line, note = decode_line(raw, self.path, lineno)
            if not line.strip():
                continue
            items = list(self._line_items(line, lineno))
            if note is not None:
                _attach(items[0], [note])
            yield from items

    def _line_items(self, line: str, lineno: int) -> Iterator[Found | TurnRow]:
        try:
            obj, cuts = loads_any_depth(line)
        except json.JSONDecodeError as exc:
            yield self.error(lineno, None, "bad_json", f"{self.path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})")
            return
        except RecursionError:
            yield self.error(lineno, None, "too_deep", f"{self.path}:{lineno}: nested too deeply to parse; line skipped")
            return
        yield from self._too_deep(line, cuts, lineno)
        yield from self._read_item(obj, lineno)

    def _read_item(self, obj, where: int) -> Iterator[Found | TurnRow]:
        """One parsed line or document item; whatever goes wrong costs only this item."""
        shown = f"{self.path}:{where}" if self.unit == "line" else f"{self.path} item {where}"
        try:
            if not isinstance(obj, dict):
                yield self.error(where, None, "bad_record", f"{shown}: expected a JSON object, got {type(obj).__name__}")
                return
            kind = _detect_object(obj)
            if kind == "turn":
                yield turn_row(obj, self.place(where))
            elif kind is None:
                yield self.error(where, None, "unknown_format", f"{shown}: object with keys {short(sorted(obj)[:8])} is not a known conversation or turn format")
            elif kind == "beam_batch":
                yield self.error(where, None, "unknown_format", f"{shown}: a BEAM batch outside its folder; BEAM is read from a conversation folder ({' or '.join(CHAT_FILES)} beside {QUESTIONS_FILE}): give that folder as input")
            else:
                yield Found(READERS[kind](obj, Source(self.path, self.key, where), self.cfg), self.place(where))
        except Exception as exc:  # a reader bug or a shape we did not foresee: record, go on
            log.exception("reading %s failed", shown)
            yield self.error(where, None, "reader_error", f"{shown}: {type(exc).__name__}: {short(str(exc))}")

    def _too_deep(self, text: str, cuts: list[int], lineno: int | None = None) -> Iterator[Found]:
        """One error row per line where values were cut to null (the rest of the value is read)."""
        lines: dict[int, int] = {}
        for offset in cuts:
            line = lineno if lineno is not None else text.count("\n", 0, offset) + 1
            lines[line] = lines.get(line, 0) + 1
        for line, n in lines.items():
            yield self.error(line, None, "too_deep", f"{self.path}:{line}: {n} value(s) nested more than {MAX_DEPTH} levels deep were read as null")


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
    if is_beam_batch(obj):  # before "chat": a batch holds `turns` too
        return "beam_batch"
    if "turns" in obj or "messages" in obj:
        return "chat"
    if is_sharegpt(obj):
        return "sharegpt"
    if "conversation_id" in obj and any(k in obj for k in ("text", "content", "speaker", "role")):
        return "turn"
    return None
