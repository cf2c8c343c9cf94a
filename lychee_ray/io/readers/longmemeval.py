"""Reader for LongMemEval JSON: each item {question_id, haystack_sessions, haystack_dates, ...}
is one conversation holding one question.

Sessions are read in date order and renamed `s1`, `s2`, ... in that order: LongMemEval's own
session ids say which sessions hold the answer (`answer_<hash>_<n>` against `sharegpt_...`), and
turn ids built from them would put that in every prompt. The original id is kept in
`source_session_id`, which nothing downstream reads. Each session's date stamps all of its turns;
the gold evidence is the turns marked `has_answer`,
and abstention questions (ids ending in `_abs`) get the category suffix `_abs`. Exchanges are
grouped by role.

A bad part costs only itself: a session that is not a list, a turn that is not an object, a
missing or unparseable date are each an `errors` row, and every valid turn and the question are
kept.
"""

from __future__ import annotations

from datetime import datetime

from lychee_ray.config_sections import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    ErrorEntry,
    Recorder,
    Source,
    as_list,
    checked_conversation_id,
    finish,
    scalar_text,
    short,
    validated_turns,
)
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Question


# --------------------------------------------------------------------------------------------
# LongMemEval
# --------------------------------------------------------------------------------------------
def read_longmemeval(obj: dict, src: Source, cfg: ReadConfig) -> Conversation:
    errors: list[ErrorEntry] = []
    cid = checked_conversation_id(obj, "question_id", src, errors)
    rec = Recorder(src.path, src.where, cid, errors)
    conv = Conversation(conversation_id=cid, source="longmemeval", source_file=src.path)
    session_ids = as_list(obj.get("haystack_session_ids"), "haystack_session_ids", rec)
    dates = as_list(obj.get("haystack_dates"), "haystack_dates", rec)
    sessions = as_list(obj.get("haystack_sessions"), "haystack_sessions", rec)
    stamps = [_session_date(dates, s_idx, rec) for s_idx in range(len(sessions))]
    raw_turns = []
    for rank, s_idx in enumerate(date_order(stamps), start=1):
        source_sid = scalar_text(session_ids[s_idx]) if s_idx < len(session_ids) else None
        turns = as_list(sessions[s_idx], f"haystack_sessions[{s_idx}]", rec)
        raw_turns += [_lme_turn(t, f"s{rank}", source_sid, s_idx, k, stamps[s_idx]) for k, t in enumerate(turns, start=1)]
    conv.turns = validated_turns(raw_turns, cid, src.path, src.where, errors, cfg)
    question_id = scalar_text(obj.get("question_id")) or cid
    conv.questions = [
        Question(
            conversation_id=cid,
            question_id=question_id,
            question=scalar_text(obj.get("question")) or "",
            answer="" if obj.get("answer") is None else str(obj.get("answer")),
            category=(scalar_text(obj.get("question_type")) or "unknown") + ("_abs" if question_id.endswith("_abs") else ""),
            evidence_turn_ids=[t.turn_id for t in conv.turns if t.has_answer],
            question_date=_question_date(obj.get("question_date"), rec),
        )
    ]
    conv.exchanges = group_exchanges(conv.turns, "role")
    return finish(conv, errors)


def date_order(stamps: list[datetime | None]) -> list[int]:
    """Session indices in date order (a haystack is not stored chronologically); sessions with no
    date keep their file order after the dated ones."""
    return sorted(range(len(stamps)), key=lambda i: (stamps[i] is None, stamps[i] or datetime.min, i))


def _session_date(dates: list, s_idx: int, rec: Recorder) -> datetime | None:
    """haystack_dates[s_idx]; a missing or unparseable one is recorded, and the session's turns
    have no time."""
    raw = dates[s_idx] if s_idx < len(dates) else None
    if raw is None or raw == "":
        rec.record(f"haystack_dates[{s_idx}]", "missing_session_date", f"haystack_sessions[{s_idx}] has no date in haystack_dates; its turns have no time")
        return None
    stamp = parse_source_datetime(raw)
    if stamp is None:
        rec.record(f"haystack_dates[{s_idx}]", "bad_timestamp", f"haystack_dates[{s_idx}] {short(raw)} is not a date; the session's turns have no time")
    return stamp


def _lme_turn(t, sid: str, source_sid: str | None, s_idx: int, k: int, stamp: datetime | None) -> dict:
    field_prefix = f"haystack_sessions[{s_idx}][{k - 1}]"
    if not isinstance(t, dict):
        return dict(field_prefix=field_prefix, bad=True, bad_type=type(t).__name__)
    return dict(
        turn_id=f"{sid}:{k}",
        session_id=sid,
        source_session_id=source_sid,
        speaker=t.get("role"),
        role=t.get("role"),
        text=t.get("content"),
        timestamp=stamp.isoformat() if stamp else None,
        has_answer=t.get("has_answer"),
        field_prefix=field_prefix,
    )


def _question_date(raw, rec: Recorder) -> str | None:
    if raw is None or raw == "":
        rec.record("question_date", "unknown_question_date", "the item has no question_date, so its question has no date")
        return None
    stamp = parse_source_datetime(raw)
    if stamp is None:
        rec.record("question_date", "bad_timestamp", f"question_date {short(raw)} is not a date; the question has no date")
    return stamp.isoformat() if stamp else None
