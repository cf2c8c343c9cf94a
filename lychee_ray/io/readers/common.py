"""What every reader shares: input errors, turn validation, and finishing a conversation.

Each format maps its items onto raw-turn dicts; `validated_turns` then checks their fields, splits
turns over `read.max_turn_tokens` at sentence boundaries and makes turn ids unique, so every source
ends in the same `Turn` list. `finish` and `error_conversation` put the collected `ErrorEntry`s on a
conversation, which is how bad input reaches the `errors` table instead of stopping the read.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from dataclasses import dataclass

from lychee_ray.config import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.schemas import Conversation, Turn
from lychee_ray.tokens import count_tokens, o200k

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


# --------------------------------------------------------------------------------------------
# Shared validation
# --------------------------------------------------------------------------------------------
def conversation_id(raw, path: str, where: int) -> str:
    if raw is None or str(raw).strip() == "" or str(raw) == "None":
        # No id in the source: derive a stable one from the location so reruns agree.
        return "anon-" + hashlib.sha1(f"{os.path.basename(path)}:{where}".encode()).hexdigest()[:12]
    return str(raw).strip()


def validated_turns(raw_turns: list[dict], cid: str, path: str, where: int, errors: list[ErrorEntry], cfg: ReadConfig) -> list[Turn]:
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


def finish(conv: Conversation, errors: list[ErrorEntry]) -> Conversation:
    for e in errors:
        e.conversation_id = conv.conversation_id
    conv.errors.extend(e.as_row() for e in errors)
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
    conv.errors = [entry.as_row()]
    log.warning("%s", entry.message)
    return conv
