"""Reader for LoCoMo JSON: {sample_id, conversation: {speaker_a, speaker_b, session_<N>,
session_<N>_date_time, ...}, qa}.

Sessions in numeric order, each turn stamped with its session's date; image captions are appended
as "[image: ...]" when `read.include_image_captions` is on. The qa list becomes questions dated at
the last session, with LoCoMo's malformed evidence ids repaired (`normalize_evidence`).
"""

from __future__ import annotations

import re

from lychee_ray.config import ReadConfig
from lychee_ray.dates import parse_source_datetime
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import (
    ErrorEntry,
    conversation_id,
    finish,
    validated_turns,
)
from lychee_ray.schemas import LOCOMO_CATEGORIES, Conversation, Question

_DIA_ID = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


# --------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------
def read_locomo(obj: dict, path: str, where: int, cfg: ReadConfig) -> Conversation:
    cid = conversation_id(obj.get("sample_id"), path, where)
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
    conv.turns = validated_turns(raw_turns, cid, path, where, errors, cfg)
    last_stamp = next((t.timestamp for t in reversed(conv.turns) if t.timestamp), None)
    conv.questions = [_locomo_question(cid, i, qa, last_stamp) for i, qa in enumerate(obj.get("qa") or [])]
    conv.exchanges = group_exchanges(conv.turns, "pair" if cfg.locomo_exchange == "pair" else "turn")
    return finish(conv, errors)


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
