"""Reader for LongMemEval JSON: each item {question_id, haystack_sessions, haystack_dates, ...}
is one conversation holding one question.

Each session's date stamps all of its turns; the gold evidence is the turns marked `has_answer`,
and abstention questions (ids ending in `_abs`) get the category suffix `_abs`. Exchanges are
grouped by role.
"""

from __future__ import annotations

from lychee_ray.config import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    ErrorEntry,
    conversation_id,
    finish,
    validated_turns,
)
from lychee_ray.schemas import Conversation, Question


# --------------------------------------------------------------------------------------------
# LongMemEval
# --------------------------------------------------------------------------------------------
def read_longmemeval(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = conversation_id(obj.get("question_id"), path, where)
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
    conv.turns = validated_turns(raw_turns, cid, path, where, errors, cfg)
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
    return finish(conv, errors)
