"""What every reader shares: input errors, turn validation, and finishing a conversation.

Each format maps its items onto raw-turn dicts; `validated_turns` then checks their fields, splits
turns over `read.max_turn_tokens` at sentence boundaries and makes turn ids unique, so every source
ends in the same `Turn` list. `finish` and `error_conversation` put the collected `ErrorEntry`s on a
conversation, which is how bad input reaches the `errors` table instead of stopping the read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
import re
import reprlib
from dataclasses import dataclass
from datetime import date, datetime

from lychee_ray.config_sections import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.fs import comparable_path
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Turn
from lychee_ray.tokens import TokenCounter, token_counter

log = logging.getLogger(__name__)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class InputError(ValueError):
    """An input path that cannot be read at all (missing, empty directory)."""


@dataclass
class ErrorEntry:
    source_file: str
    line: int | None
    field: str | None
    kind: str
    message: str
    conversation_id: str | None = None

    def as_row(self) -> dict:
        return {
            "conversation_id": self.conversation_id,
            "source_file": self.source_file,
            "line": self.line,
            "field": self.field,
            "kind": self.kind,
            "message": self.message,
        }


@dataclass(frozen=True)
class Source:
    """Where one parsed object comes from, which every reader receives: the file as named
    (messages, `source_file`), its key (`source_key`: the path relative to the input root, which
    ids are built from) and its line (JSON Lines) or 1-based item (a JSON document)."""

    path: str
    key: str
    where: int


# Roles that are no turn of the conversation: instructions and tool traffic. ShareGPT and the
# ChatGPT export skip them always; the generic chat reader only when they hold no text (an empty
# system prompt, an assistant tool call). Each skip is an errors row naming the turn, so the
# input's turns still add up: stored turns + skipped rows.
SKIPPED_ROLES = {
    "system": "skipped_system",
    "developer": "skipped_system",
    "tool": "skipped_tool",
    "function": "skipped_tool",
    "function_call": "skipped_tool",
    "function_response": "skipped_tool",
    "observation": "skipped_tool",
    "ipython": "skipped_tool",
}
# `bad_text` (text that is a number or an object) is no skip by role, but it too stands for one
# input turn not kept, so it counts where the skips count (`store.rows.DROPPED_TURN_KINDS`).
SKIP_KINDS = ("skipped_system", "skipped_tool", "skipped_no_text", "off_branch", "bad_text")


@dataclass
class Recorder:
    """Where a reader is (file, item, conversation) and the list its problems go to, so each
    problem is one call that names the file, the line or item, the conversation and the field."""

    path: str
    where: int
    cid: str
    errors: list[ErrorEntry]

    def record(self, field: str, kind: str, problem: str) -> None:
        self.errors.append(ErrorEntry(self.path, self.where, field, kind, f"{self.path}:{self.where}: {self.cid}: {problem}", self.cid))


# --------------------------------------------------------------------------------------------
# Shared validation
# --------------------------------------------------------------------------------------------
def conversation_id(raw, src: Source, content) -> str:
    """`raw` as the id; without one, `anon_id(src, content)`."""
    text = scalar_text(raw)  # a list or dict is no name (and str() of a deeply nested one can fail)
    if text is None or text == "None":
        return anon_id(src, content)
    return text


def anon_id(src: Source, content) -> str:
    """The id of a conversation the source names no id for: a hash of the file's key (its path
    relative to the input root: `day1/chat.jsonl` and `day2/chat.jsonl` differ), the line or item,
    and the content (canonical JSON). Reruns agree; an edited conversation gets a new id, so a
    store that skips ids it holds never mistakes it for the old one."""
    try:
        canonical = json.dumps(content, sort_keys=True, default=str)  # ASCII: lone surrogates escaped
    except (RecursionError, ValueError, TypeError):  # nested near the parser's limit: place only
        canonical = ""
    digest = hashlib.sha1(canonical.encode()).hexdigest()
    # 16 hex digits (64 bits): a fine-tuning set can hold millions of anonymous conversations
    return "anon-" + hashlib.sha1(f"{src.key}:{src.where}:{digest}".encode("utf-8", "surrogatepass")).hexdigest()[:16]


def checked_conversation_id(obj: dict, field: str, src: Source, errors: list[ErrorEntry]) -> str:
    """The id in `obj[field]` (`conversation_id`, anonymous from `src` and `obj` when absent),
    recording an id that had to be replaced: of the wrong type (a list, a dict) or blank."""
    raw = obj.get(field)
    cid = conversation_id(raw, src, obj)
    if (problem := id_problem(raw)) is not None:
        errors.append(ErrorEntry(src.path, src.where, field, "bad_field", f"{src.path}:{src.where}: field '{field}' {problem}; the conversation is read as {cid}"))
    return cid


def id_problem(raw) -> str | None:
    """Why a given id value names no conversation ("is blank", "is a list, not a string"), or
    None when it does or is absent (null)."""
    text = scalar_text(raw)
    if raw is None or (text is not None and text != "None"):
        return None
    if text == "None":  # a null written out as text by some exporter
        return f"is {short(raw)}, which names no conversation"
    if isinstance(raw, str):
        return f"is blank ({short(raw)})"
    return f"is {a_type(raw)}, not a string"


def a_type(value) -> str:
    """The type of a parsed value as English: "an int", "a dict", "null"."""
    return type_phrase(type(value).__name__)


def type_phrase(name: str) -> str:
    """A type name with its article ("an int", "a str"); NoneType is "null", as JSON says it."""
    if name == "NoneType":
        return "null"
    return with_article(name)


def with_article(word: str) -> str:
    """`word` after "a" or "an", by its first letter ("an observation", "a tool", "a user")."""
    bare = word.lstrip("'\"").lower()  # a quoted name: "an 'observation' turn"
    vowel = bare[:1] in ("a", "e", "i", "o") or (bare[:1] == "u" and not bare.startswith(("us", "uni")))
    return f"{'an' if vowel else 'a'} {word}"


def as_list(value, field: str, rec: Recorder) -> list:
    """`value` when it is a list, [] when absent; any other type is recorded and read as []."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    rec.record(field, "bad_field", f"field '{field}' is {a_type(value)}, not a list; its content is not read")
    return []


def short(value) -> str:
    """A value for an error message: reprlib keeps a 200K-character text or a deep list short."""
    return reprlib.repr(value)


def source_key(path: str, root: str | None = None) -> str:
    """The file's path relative to the input root ('/'-separated), which error ids are built from,
    so the same file gives the same ids whether the input was named by a relative or an absolute
    path, and whether the archive was read from a folder or from a bucket (`path` and `root` may
    be any filesystem URI). The root itself (an input that is one file) is its base name. Without
    a root (callers that know none), the resolved absolute path, which is as stable."""
    real = comparable_path(path)
    if root is None:
        return real
    base = comparable_path(root)
    if real == base:
        return posixpath.basename(real)
    return posixpath.relpath(real, base)


def validated_turns(raw_turns: list[dict], cid: str, src_path: str, where: int, errors: list[ErrorEntry], cfg: ReadConfig) -> list[Turn]:
    """Check each turn's fields, split oversized ones, and make turn ids unique. Keeps every turn
    that has text; a turn with no text is recorded in `errors` (there is nothing to keep). A raw
    turn may carry markers: `bad` (not an object), `skip` (an errors kind from SKIP_KINDS, with
    `why`: the turn is no turn of the conversation) and `dropped` (the types of its non-text parts);
    `line` and `path` place a turn that comes from a row of its own (turn-level input, whose rows
    may lie in several files)."""
    turns: list[Turn] = []
    seen_ids: set[str] = set()
    for k, rt in enumerate(raw_turns):
        line = rt.get("line", where)
        path = rt.get("path", src_path)
        fld = rt.get("field_prefix", f"turns[{k}]")
        text = rt.get("text")
        if rt.get("bad"):
            errors.append(ErrorEntry(path, line, fld, "bad_turn", f"{path}:{line}: {cid}: {fld} is {type_phrase(rt.get('bad_type', 'value'))}, not an object; turn skipped", cid))
            continue
        if rt.get("skip"):  # a system prompt, tool traffic, a node with no text: no turn, but counted
            errors.append(ErrorEntry(path, line, fld, rt["skip"], f"{path}:{line}: {cid}: {fld} {rt.get('why', 'is no turn')}; skipped", cid))
            continue
        dropped = rt.get("dropped") or []  # non-text parts (images, audio) of the message
        if text is not None and not isinstance(text, str):
            errors.append(ErrorEntry(path, line, f"{fld}.text", "bad_text", f"{path}:{line}: {cid}: {fld} has text that is {a_type(text)}, not a string; turn skipped", cid))
            continue
        if text is None or not text.strip():
            problem = f"no text, only non-text parts ({short(sorted(set(dropped)))})" if dropped and text is None else ("no text" if text is None else "empty text")
            errors.append(ErrorEntry(path, line, f"{fld}.text", "missing_field", f"{path}:{line}: {cid}: {fld} has {problem}; turn skipped", cid))
            continue
        if dropped:
            errors.append(ErrorEntry(path, line, f"{fld}.content", "non_text_content", f"{path}:{line}: {cid}: {fld} holds {len(dropped)} non-text part(s) ({short(sorted(set(dropped)))}); only its text is read", cid))
        speaker = scalar_text(rt.get("speaker"))
        if not speaker:
            errors.append(ErrorEntry(path, line, f"{fld}.speaker", "missing_field", f"{path}:{line}: {cid}: {fld} has no speaker; kept as 'unknown'", cid))
            speaker = "unknown"
        session_id = scalar_text(rt.get("session_id")) or "session_1"
        turn_id = _unique_turn_id(scalar_text(rt.get("turn_id")) or f"{session_id}:{k + 1}", k, seen_ids, fld, cid, path, line, errors)
        timestamp = _checked_timestamp(rt.get("timestamp"), f"{fld}.timestamp", cid, path, line, errors)
        parts = _split_oversized(text, cfg.max_turn_tokens, token_counter(cfg.tokenizer))
        if len(parts) > 1:
            errors.append(ErrorEntry(path, line, f"{fld}.text", "turn_split", split_message(cid, turn_id, cfg.max_turn_tokens, len(parts)), cid))
        for part_no, part in enumerate(parts):
            pid = part_turn_id(turn_id, part_no)
            turns.append(
                Turn(
                    turn_id=pid,
                    turn_idx=len(turns),
                    session_id=session_id,
                    speaker=speaker,
                    role=scalar_text(rt.get("role")) or speaker,
                    text=part,
                    timestamp=timestamp,
                    has_answer=rt.get("has_answer") if isinstance(rt.get("has_answer"), bool) else None,
                    source_session_id=rt.get("source_session_id"),
                )
            )
    return turns


def part_turn_id(turn_id: str, part_no: int) -> str:
    """The id of part `part_no` (0-based) of a split turn: the turn's own id, then X#p2, X#p3..."""
    return turn_id if part_no == 0 else f"{turn_id}#p{part_no + 1}"


_PART_SUFFIX = re.compile(r"#p\d+$")


def whole_turn_id(turn_id: str) -> str:
    """The id of the input turn a stored turn is (a part of): what evidence labels name."""
    return _PART_SUFFIX.sub("", turn_id)


_SPLIT_PARTS = re.compile(r"; split into (\d+) parts ")


def split_message(cid: str, turn_id: str, max_tokens: int, n_parts: int) -> str:
    """The message of a turn_split row; `split_parts` reads the part count back from it."""
    return f"{cid}: turn {turn_id} exceeds {max_tokens} tokens; split into {n_parts} parts {turn_id}, {turn_id}#p2, ..."


def split_parts(row: dict) -> int:
    """How many turn rows one input turn became, from its turn_split row (1 for a row that
    does not say: written by hand or by an older reader)."""
    m = _SPLIT_PARTS.search(row.get("message") or "")
    return int(m.group(1)) if m else 1


def scalar_text(value) -> str | None:
    """A string or number as stripped text; None for anything else (a list, a dict, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    return str(value).strip() or None


def _unique_turn_id(turn_id: str, k: int, seen_ids: set[str], fld: str, cid: str, path: str, line, errors: list[ErrorEntry]) -> str:
    new_id = turn_id
    while new_id in seen_ids:  # a loop: the renamed id may itself be taken ("t1" twice beside "t1#1")
        new_id = f"{new_id}#{k}"
    if new_id != turn_id:
        errors.append(ErrorEntry(path, line, f"{fld}.turn_id", "duplicate_turn_id", f"{path}:{line}: {cid}: {fld}: turn id {turn_id} repeats an earlier turn's; renamed {new_id}", cid))
    seen_ids.add(new_id)
    return new_id


def _checked_timestamp(value, field: str, cid: str, path: str, line, errors: list[ErrorEntry]) -> str | None:
    """The turn's time as ISO, or None; a stamp that does not parse, an empty one included, is
    recorded (the turn stays). Only an absent stamp (null) is no problem."""
    if value is None:
        return None
    parsed = parsed_stamp(value)
    if parsed is None:
        problem = "is empty" if isinstance(value, str) and not value.strip() else "is not a date"
        errors.append(ErrorEntry(path, line, field, "bad_timestamp", f"{path}:{line}: {cid}: {field} {short(value)} {problem}; the turn is kept without a time", cid))
        return None
    return parsed.isoformat()


def parsed_stamp(value) -> datetime | None:
    """A source timestamp of any type (text, a number, Parquet's date or datetime) as a datetime,
    or None when it does not parse."""
    return parse_source_datetime(_stamp_text(value))


def _stamp_text(value) -> str | datetime | None:
    """What the date parser can take: a string or datetime as is; Parquet's date objects and
    numbers as text; a list, dict or bool never parses."""
    if isinstance(value, (str, datetime)):
        return value
    if isinstance(value, (int, float, date)) and not isinstance(value, bool):
        return str(value)
    return None


def _split_oversized(text: str, max_tokens: int, counter: TokenCounter) -> list[str]:
    """Split a too-long turn at sentence boundaries (hard-cut sentences that are longer still),
    counting with the tokenizer the segmenter's cap counts with."""
    if counter.count(text) <= max_tokens:
        return [text]
    parts, current = [], []
    current_tokens = 0
    for sentence in _SENTENCE_END.split(text):
        *heads, sentence = _hard_cut(sentence, max_tokens, counter)
        if heads and current:
            parts.append(" ".join(current))
            current, current_tokens = [], 0
        parts.extend(heads)
        n = counter.count(sentence)
        if current_tokens + n > max_tokens and current:
            parts.append(" ".join(current))
            current, current_tokens = [], 0
        current.append(sentence)
        current_tokens += n + 1  # the joining space
    if current:
        parts.append(" ".join(current))
    return [p for p in parts if p.strip()]


def _hard_cut(sentence: str, max_tokens: int, counter: TokenCounter) -> list[str]:
    """A sentence over the cap as pieces of at most `max_tokens`, the rest last. Pieces are
    prefixes of the text itself: a decoded token prefix can end inside a multi-byte character,
    so only what it shares with the original is taken (at least one character: always moves)."""
    pieces = []
    while counter.count(sentence) > max_tokens:
        head = counter.truncate(sentence, max_tokens)
        k = len(os.path.commonprefix([head, sentence])) or 1
        pieces.append(sentence[:k])
        sentence = sentence[k:]
    return [*pieces, sentence]


def finish(conv: Conversation, errors: list[ErrorEntry]) -> Conversation:
    for e in errors:
        e.conversation_id = conv.conversation_id
    conv.errors.extend(e.as_row() for e in errors)
    if not conv.turns:
        conv.status = "empty"
        conv.error = "conversation has no turns with text"
    return conv


def error_conversation(entry: ErrorEntry, file_key: str | None = None) -> Conversation:
    """A placeholder conversation that carries an input error into the output tables. Its id
    hashes the file's key (`source_key`: the path relative to the input root) with the line and
    kind, so a rerun finds the same row however the input path was spelled."""
    key = f"{file_key or source_key(entry.source_file)}:{entry.line}:{entry.kind}"
    cid = "error-" + hashlib.sha1(key.encode()).hexdigest()[:12]
    entry.conversation_id = cid
    conv = Conversation(conversation_id=cid, source="error", source_file=entry.source_file, status="error", error=entry.message)
    conv.errors = [entry.as_row()]
    log.warning("%s", entry.message)
    return conv
