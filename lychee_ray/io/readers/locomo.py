"""Reader for LoCoMo JSON: {sample_id, conversation: {speaker_a, speaker_b, session_<N>,
session_<N>_date_time, ...}, qa}.

Sessions in numeric order, each turn stamped with its session's date; image captions are appended
as "[image: ...]" when `read.include_image_captions` is on. The qa list becomes questions dated at
the last session, with LoCoMo's malformed evidence ids repaired (`normalize_evidence`).

A bad part costs only itself: a session that is not a list, a turn or qa item that is not an
object, a missing or unparseable session date are each an `errors` row, and every valid turn and
question of the conversation is kept.
"""

from __future__ import annotations

import re
from datetime import datetime

from lychee_ray.config_sections import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    ErrorEntry,
    Recorder,
    Source,
    a_type,
    as_list,
    checked_conversation_id,
    finish,
    scalar_text,
    short,
    validated_turns,
)
from lychee_ray.schemas import LOCOMO_CATEGORIES, Conversation
from lychee_ray.tables import Question

_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")


# --------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------
def read_locomo(obj: dict, src: Source, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    cid = checked_conversation_id(obj, "sample_id", src, errors)
    rec = Recorder(src.path, src.where, cid, errors)
    conv = Conversation(conversation_id=cid, source="locomo", source_file=src.path)
    body = obj["conversation"]
    raw_turns, dates = [], {}
    for n in sorted(int(m.group(1)) for k in body if (m := _SESSION_KEY.fullmatch(k))):
        dates[n] = _session_date(body, n, rec)
        session = as_list(body[f"session_{n}"], f"conversation.session_{n}", rec)
        raw_turns += [_locomo_turn(t, n, k, dates[n], body, cfg) for k, t in enumerate(session, start=1)]
    conv.turns = validated_turns(raw_turns, cid, src.path, src.where, errors, cfg)
    qa = as_list(obj.get("qa"), "qa", rec)
    question_date = _question_date(conv.turns, dates, len(qa), rec)
    conv.questions = [q for i, item in enumerate(qa) if (q := _locomo_question(cid, i, item, question_date, rec))]
    conv.exchanges = group_exchanges(conv.turns, "pair" if cfg.locomo_exchange == "pair" else "turn")
    return finish(conv, errors)


def _session_date(body: dict, n: int, rec: Recorder) -> datetime | None:
    """The session's date; a missing or unparseable one is recorded, and its turns have no time."""
    field = f"conversation.session_{n}_date_time"
    raw = body.get(f"session_{n}_date_time")
    if raw is None or raw == "":
        rec.record(field, "missing_session_date", f"session_{n} has no session_{n}_date_time; its turns have no time")
        return None
    stamp = parse_source_datetime(raw)
    if stamp is None:
        rec.record(field, "bad_timestamp", f"{field} {short(raw)} is not a date; the session's turns have no time")
    return stamp


def _locomo_turn(t, n: int, k: int, stamp: datetime | None, body: dict, cfg: ReadConfig) -> dict:
    field_prefix = f"conversation.session_{n}[{k - 1}]"
    if not isinstance(t, dict):
        return dict(field_prefix=field_prefix, bad=True, bad_type=type(t).__name__)
    text = t.get("text")
    caption = scalar_text(t.get("blip_caption"))
    if cfg.include_image_captions and caption and (text is None or isinstance(text, str)):
        text = f"{text or ''} [image: {caption}]".strip()
    return dict(
        turn_id=scalar_text(t.get("dia_id")) or f"D{n}:{k}",
        session_id=f"session_{n}",
        speaker=t.get("speaker"),
        role=_locomo_role(t.get("speaker"), body),
        text=text,
        timestamp=stamp.isoformat() if stamp else None,
        field_prefix=field_prefix,
    )


def _locomo_role(speaker, body) -> str:
    name = scalar_text(speaker)
    if name is not None and name == scalar_text(body.get("speaker_a")):
        return "speaker_a"
    if name is not None and name == scalar_text(body.get("speaker_b")):
        return "speaker_b"
    return "speaker"


def _question_date(turns, dates: dict[int, datetime | None], n_questions: int, rec: Recorder) -> str | None:
    """LoCoMo questions are asked after the last session: its date, or None (recorded) when that
    session has none, never an earlier session's date."""
    if not turns:
        return None
    last = max(int(t.session_id.removeprefix("session_")) for t in turns)
    stamp = dates.get(last)
    if stamp is None and n_questions:
        rec.record("qa", "unknown_question_date", f"the last session (session_{last}) has no date, so its {n_questions} questions have no date")
    return stamp.isoformat() if stamp else None


def normalize_evidence(ids) -> list[str]:
    """LoCoMo evidence lists hold a few malformed entries ("D8:6; D9:17", "D:11:26"); a bare
    string is one entry, never a list of characters."""
    if isinstance(ids, str):
        ids = [ids]
    if not isinstance(ids, list):
        return []
    return [f"D{m.group(1)}:{m.group(2)}" for item in ids for m in _DIA_ID.finditer(scalar_text(item) or "")]


def _locomo_question(cid: str, idx: int, qa, question_date: str | None, rec: Recorder) -> Question | None:
    if not isinstance(qa, dict):
        rec.record(f"qa[{idx}]", "bad_question", f"qa[{idx}] is {a_type(qa)}, not an object; question skipped")
        return None
    answer = qa.get("answer", qa.get("adversarial_answer", ""))
    return Question(
        conversation_id=cid,
        question_id=f"{cid}:q{idx:04d}",
        question=scalar_text(qa.get("question")) or "",
        answer="" if answer is None else str(answer),
        category=_category(qa.get("category"), idx, rec),
        evidence_turn_ids=normalize_evidence(qa.get("evidence")),
        # LoCoMo questions are asked after the last session.
        question_date=question_date,
    )


def _category(raw, idx: int, rec: Recorder) -> str:
    try:
        number = int(raw or 0)
    except (TypeError, ValueError):
        rec.record(f"qa[{idx}].category", "bad_field", f"qa[{idx}].category {short(raw)} is not a category number; kept as 'unknown'")
        return "unknown"
    return LOCOMO_CATEGORIES.get(number, f"category_{raw}")
