"""Stage 1, read: turn conversation archives into `Conversation` objects, one per conversation.

Sources (detected from the content, not the file name):
- LoCoMo JSON (a list of {sample_id, conversation: {speaker_a, session_<N>, ...}, qa});
- LongMemEval JSON (a list of {question_id, haystack_sessions, haystack_dates, ...});
- generic chat JSONL/JSON ({conversation_id, turns: [{role|speaker, content|text, timestamp?}]});
- turn-level JSONL or Parquet (one turn per row with a conversation_id), grouped per file.

Bad input never stops the read. Every problem becomes an entry in `Conversation.stats["errors"]`
(file, line, field, message), which ends up in the `errors` table; a problem that has no
conversation of its own (a broken JSONL line, a file that is not JSON) becomes a conversation
row with status `error` so it is visible in `conversations` too.

Exchanges. The segmenter works on exchanges x_t, not raw turns:
- LongMemEval / chat with roles: a user message plus the assistant replies that follow it.
- LoCoMo (two humans, no roles): with `read.locomo_exchange: pair` (default) a run of turns by one
  speaker plus the reply run of the other speaker, which is the closest analogue of a
  user/assistant exchange and halves the number of units the segmenter scores; with `turn` each
  turn is an exchange. An exchange never crosses a session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .config import ReadConfig
from .schemas import Conversation, Question, Turn
from .timeparse import parse_source_datetime
from .tokens import count_tokens

log = logging.getLogger("lychee_ray.read")

INPUT_SUFFIXES = (".json", ".jsonl", ".ndjson", ".parquet")
LOCOMO_CATEGORIES = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}
_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
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
        yield from _read_turn_parquet(path, cfg)
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
            conv.stats.setdefault("errors", []).extend(e.as_row() for e in utf8_errors)
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
        yield _conversation_from_turn_rows(cid, rows, path, "turns", cfg)


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
        yield _conversation_from_turn_rows(cid, rows, path, "turns", cfg)


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


# --------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------
def read_locomo(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = _conversation_id(obj.get("sample_id"), path, where)
    conv = Conversation(conversation_id=cid, source="locomo", source_file=path)
    body = obj["conversation"]
    errors: list[ErrorEntry] = []
    session_nums = sorted(int(m.group(1)) for k in body if (m := re.fullmatch(r"session_(\d+)", k)))
    raw_turns = []
    for n in session_nums:
        stamp_raw = body.get(f"session_{n}_date_time")
        stamp = parse_source_datetime(stamp_raw) if stamp_raw else None
        if stamp_raw and stamp is None:
            errors.append(ErrorEntry(path, where, f"session_{n}_date_time", "bad_timestamp", f"{cid}: session_{n}_date_time {stamp_raw!r} is not a date"))
        for k, t in enumerate(body.get(f"session_{n}") or [], start=1):
            text = t.get("text")
            if cfg.include_image_captions and t.get("blip_caption"):
                text = f"{text or ''} [image: {t['blip_caption']}]".strip()
            raw_turns.append(
                dict(
                    turn_id=t.get("dia_id") or f"D{n}:{k}",
                    session_id=f"session_{n}",
                    speaker=t.get("speaker"),
                    role=_locomo_role(t.get("speaker"), body),
                    text=text,
                    timestamp=stamp.isoformat() if stamp else None,
                    field_prefix=f"conversation.session_{n}[{k - 1}]",
                )
            )
    conv.turns = _validated_turns(raw_turns, cid, path, where, errors, cfg)
    last_stamp = next((t.timestamp for t in reversed(conv.turns) if t.timestamp), None)
    conv.questions = [_locomo_question(cid, i, qa, last_stamp) for i, qa in enumerate(obj.get("qa") or [])]
    conv.exchanges = group_exchanges(conv.turns, "pair" if cfg.locomo_exchange == "pair" else "turn")
    return _finish(conv, errors)


def _locomo_role(speaker, body) -> str:
    if speaker == body.get("speaker_a"):
        return "speaker_a"
    if speaker == body.get("speaker_b"):
        return "speaker_b"
    return "speaker"


def normalize_evidence(ids) -> list[str]:
    """LoCoMo evidence lists hold a few malformed entries ("D8:6; D9:17", "D:11:26")."""
    out = []
    for item in ids or []:
        for m in _DIA_ID.finditer(str(item)):
            out.append(f"D{m.group(1)}:{m.group(2)}")
    return out


def _locomo_question(cid: str, idx: int, qa: dict, question_date: str | None) -> Question:
    category = LOCOMO_CATEGORIES.get(int(qa.get("category", 0) or 0), f"category_{qa.get('category')}")
    answer = qa.get("answer", qa.get("adversarial_answer", ""))
    return Question(
        conversation_id=cid,
        question_id=f"{cid}:q{idx:04d}",
        question=str(qa.get("question") or ""),
        answer="" if answer is None else str(answer),
        category=category,
        evidence_turn_ids=normalize_evidence(qa.get("evidence")),
        # LoCoMo questions are asked after the last session.
        question_date=question_date,
    )


# --------------------------------------------------------------------------------------------
# LongMemEval
# --------------------------------------------------------------------------------------------
def read_longmemeval(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = _conversation_id(obj.get("question_id"), path, where)
    conv = Conversation(conversation_id=cid, source="longmemeval", source_file=path)
    errors: list[ErrorEntry] = []
    session_ids = obj.get("haystack_session_ids") or []
    dates = obj.get("haystack_dates") or []
    raw_turns = []
    for s_idx, session in enumerate(obj.get("haystack_sessions") or []):
        sid = str(session_ids[s_idx]) if s_idx < len(session_ids) else f"session_{s_idx + 1}"
        stamp = parse_source_datetime(dates[s_idx]) if s_idx < len(dates) else None
        for k, t in enumerate(session or [], start=1):
            raw_turns.append(
                dict(
                    turn_id=f"{sid}:{k}",
                    session_id=sid,
                    speaker=t.get("role"),
                    role=t.get("role"),
                    text=t.get("content"),
                    timestamp=stamp.isoformat() if stamp else None,
                    has_answer=t.get("has_answer"),
                    field_prefix=f"haystack_sessions[{s_idx}][{k - 1}]",
                )
            )
    conv.turns = _validated_turns(raw_turns, cid, path, where, errors, cfg)
    qdate = parse_source_datetime(obj.get("question_date") or "")
    conv.questions = [
        Question(
            conversation_id=cid,
            question_id=str(obj.get("question_id")),
            question=str(obj.get("question") or ""),
            answer=str(obj.get("answer") or ""),
            category=str(obj.get("question_type") or "unknown") + ("_abs" if str(obj.get("question_id", "")).endswith("_abs") else ""),
            evidence_turn_ids=[t.turn_id for t in conv.turns if t.has_answer],
            question_date=qdate.isoformat() if qdate else None,
        )
    ]
    conv.exchanges = group_exchanges(conv.turns, "role")
    return _finish(conv, errors)


# --------------------------------------------------------------------------------------------
# Generic chat JSON(L) and turn-level rows
# --------------------------------------------------------------------------------------------
def read_chat(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = _conversation_id(obj.get("conversation_id", obj.get("id")), path, where)
    conv = Conversation(conversation_id=cid, source="chat", source_file=path)
    errors: list[ErrorEntry] = []
    turns_in = obj.get("turns", obj.get("messages")) or []
    if not isinstance(turns_in, list):
        errors.append(ErrorEntry(path, where, "turns", "bad_field", f"{path}:{where}: {cid}: field 'turns' is not a list"))
        turns_in = []
    raw = [_chat_turn(t, i, f"turns[{i}]") for i, t in enumerate(turns_in)]
    conv.turns = _validated_turns(raw, cid, path, where, errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if _has_roles(conv.turns) else "pair")
    return _finish(conv, errors)


def _chat_turn(t, i: int, field_prefix: str) -> dict:
    if not isinstance(t, dict):
        return dict(turn_id=None, speaker=None, role=None, text=None, field_prefix=field_prefix, bad=True)
    return dict(
        turn_id=t.get("turn_id", t.get("id")),
        session_id=str(t.get("session_id", "session_1")),
        speaker=t.get("speaker", t.get("role")),
        role=t.get("role", t.get("speaker")),
        text=t.get("content", t.get("text")),
        timestamp=t.get("timestamp"),
        field_prefix=field_prefix,
    )


def _conversation_from_turn_rows(cid: str, rows: list[tuple[int, dict]], path: str, source: str, cfg: ReadConfig) -> Conversation:
    conv = Conversation(conversation_id=_conversation_id(cid, path, rows[0][0]), source=source, source_file=path)
    errors: list[ErrorEntry] = []
    rows = sorted(rows, key=lambda r: (r[1].get("turn_idx", r[0]) if isinstance(r[1].get("turn_idx"), int) else r[0]))
    raw = [dict(_chat_turn(obj, i, f"line {lineno}"), line=lineno) for i, (lineno, obj) in enumerate(rows)]
    conv.turns = _validated_turns(raw, conv.conversation_id, path, rows[0][0], errors, cfg)
    conv.exchanges = group_exchanges(conv.turns, "role" if _has_roles(conv.turns) else "pair")
    return _finish(conv, errors)


def _read_turn_parquet(path: str, cfg: ReadConfig) -> Iterator[Conversation]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:
        yield error_conversation(ErrorEntry(path, None, None, "bad_parquet", f"{path} is not a readable Parquet file: {exc}"))
        return
    if "conversation_id" not in table.column_names:
        yield error_conversation(ErrorEntry(path, None, "conversation_id", "missing_field", f"{path}: turn-level Parquet needs a conversation_id column"))
        return
    grouped: dict[str, list[tuple[int, dict]]] = {}
    for i, row in enumerate(table.to_pylist(), start=1):
        grouped.setdefault(str(row["conversation_id"]), []).append((i, row))
    for cid, rows in grouped.items():
        yield _conversation_from_turn_rows(cid, rows, path, "turns", cfg)


def _has_roles(turns: list[Turn]) -> bool:
    return any(t.role in ("user", "assistant") for t in turns)


# --------------------------------------------------------------------------------------------
# Shared validation
# --------------------------------------------------------------------------------------------
def _conversation_id(raw, path: str, where: int) -> str:
    if raw is None or str(raw).strip() == "" or str(raw) == "None":
        # No id in the source: derive a stable one from the location so reruns agree.
        return "anon-" + hashlib.sha1(f"{os.path.basename(path)}:{where}".encode()).hexdigest()[:12]
    return str(raw).strip()


def _validated_turns(raw_turns: list[dict], cid: str, path: str, where: int, errors: list[ErrorEntry], cfg: ReadConfig) -> list[Turn]:
    """Check each turn's fields, split oversized ones, and make turn ids unique. Keeps every turn
    that has text; a turn with no text is recorded in `errors` (there is nothing to keep)."""
    turns: list[Turn] = []
    seen_ids: set[str] = set()
    for k, rt in enumerate(raw_turns):
        line = rt.get("line", where)
        fld = rt.get("field_prefix", f"turns[{k}]")
        text = rt.get("text")
        if rt.get("bad"):
            errors.append(ErrorEntry(path, line, fld, "bad_turn", f"{cid}: {fld} is not an object", cid))
            continue
        if text is None or not isinstance(text, str) or not text.strip():
            what = "missing" if text is None else "empty"
            errors.append(ErrorEntry(path, line, f"{fld}.text", "missing_field", f"{cid}: {fld} has {what} text; turn skipped", cid))
            continue
        speaker = rt.get("speaker")
        if speaker is None or not str(speaker).strip():
            errors.append(ErrorEntry(path, line, f"{fld}.speaker", "missing_field", f"{cid}: {fld} has no speaker; kept as 'unknown'", cid))
            speaker = "unknown"
        turn_id = str(rt.get("turn_id") or f"{rt.get('session_id', 'session_1')}:{k + 1}")
        if turn_id in seen_ids:
            new_id = f"{turn_id}#{k}"
            errors.append(ErrorEntry(path, line, f"{fld}.turn_id", "duplicate_turn_id", f"{cid}: turn id {turn_id} repeats; renamed {new_id}", cid))
            turn_id = new_id
        seen_ids.add(turn_id)
        for part_no, part in enumerate(_split_oversized(text, cfg.max_turn_tokens)):
            pid = turn_id if part_no == 0 else f"{turn_id}#p{part_no + 1}"
            if part_no == 1:
                errors.append(ErrorEntry(path, line, f"{fld}.text", "turn_split", f"{cid}: turn {turn_id} exceeds {cfg.max_turn_tokens} tokens; split into parts {turn_id}, {turn_id}#p2, ...", cid))
            turns.append(
                Turn(
                    turn_id=pid,
                    turn_idx=len(turns),
                    session_id=str(rt.get("session_id") or "session_1"),
                    speaker=str(speaker),
                    role=str(rt.get("role") or speaker),
                    text=part,
                    timestamp=_iso_or_none(rt.get("timestamp")),
                    has_answer=rt.get("has_answer") if isinstance(rt.get("has_answer"), bool) else None,
                )
            )
    return turns


def _iso_or_none(value) -> str | None:
    if value is None or value == "":
        return None
    parsed = parse_source_datetime(str(value))
    return parsed.isoformat() if parsed else None


def _split_oversized(text: str, max_tokens: int) -> list[str]:
    """Split a too-long turn at sentence boundaries (hard-cut sentences that are longer still)."""
    if count_tokens(text) <= max_tokens:
        return [text]
    from .tokens import o200k

    enc = o200k()
    parts, current = [], []
    current_tokens = 0
    for sentence in _SENTENCE_END.split(text):
        ids = enc.encode_ordinary(sentence)
        while len(ids) > max_tokens:  # a single sentence above the cap
            if current:
                parts.append(" ".join(current))
                current, current_tokens = [], 0
            parts.append(enc.decode(ids[:max_tokens]))
            ids = ids[max_tokens:]
            sentence = enc.decode(ids)
        if current_tokens + len(ids) > max_tokens and current:
            parts.append(" ".join(current))
            current, current_tokens = [], 0
        current.append(sentence)
        current_tokens += len(ids) + 1
    if current:
        parts.append(" ".join(current))
    return [p for p in parts if p.strip()]


def _finish(conv: Conversation, errors: list[ErrorEntry]) -> Conversation:
    for e in errors:
        e.conversation_id = conv.conversation_id
    conv.stats.setdefault("errors", []).extend(e.as_row() for e in errors)
    if not conv.turns:
        conv.status = "empty"
        conv.error = "conversation has no turns with text"
    return conv


def error_conversation(entry: ErrorEntry) -> Conversation:
    """A placeholder conversation that carries an input error into the output tables."""
    key = f"{entry.source_file}:{entry.line}:{entry.kind}"
    cid = "error-" + hashlib.sha1(key.encode()).hexdigest()[:12]
    entry.conversation_id = cid
    conv = Conversation(conversation_id=cid, source="error", source_file=entry.source_file, status="error", error=entry.message)
    conv.stats["errors"] = [entry.as_row()]
    log.warning("%s", entry.message)
    return conv


# --------------------------------------------------------------------------------------------
# Exchanges
# --------------------------------------------------------------------------------------------
def group_exchanges(turns: list[Turn], rule: str) -> list[list[int]]:
    """Group turn indexes into exchanges; see the module docstring for the rules."""
    exchanges: list[list[int]] = []
    current: list[int] = []

    def close():
        nonlocal current
        if current:
            exchanges.append(current)
            current = []

    for i, t in enumerate(turns):
        if current and turns[current[-1]].session_id != t.session_id:
            close()
        if rule == "turn":
            close()
        elif rule == "role":
            # a new user message opens a new exchange; assistant replies join the open one
            if current and t.role == "user" and turns[current[-1]].role != "user":
                close()
        else:  # pair: one speaker's run, then the other speaker's run
            if current:
                speakers = []
                for j in current:
                    if not speakers or speakers[-1] != turns[j].speaker:
                        speakers.append(turns[j].speaker)
                if len(speakers) == 2 and t.speaker != speakers[-1]:
                    close()
        current.append(i)
    close()
    return exchanges


def iter_conversations(paths: Iterable[str], cfg: ReadConfig) -> Iterator[Conversation]:
    """All conversations of all files, in order (the local, non-Ray path and tests)."""
    for path in paths:
        yield from read_file(path, cfg)
