"""Questions the query tests ask of the generated store, built from the generator's labels
(tests/support/generated.py), never copied from a generated file: a change of the generator
changes the question and its evidence together."""

from __future__ import annotations

import calendar
import datetime as dt
import json
from dataclasses import dataclass

from tests.support.generated import GeneratedArchive


@dataclass(frozen=True)
class MonthQuestion:
    """A labelled "When did <person> <event>?" with " in <Month>" added: a question the planner
    routes through a time window (that month), whose one evidence turn was said in it."""

    conversation_id: str
    question: str
    subject: str  # the person the fact is about
    evidence_turn_id: str
    start: str  # the month's first and last day, ISO
    end: str
    speakers: tuple[str, ...]  # the conversation's two speakers (the planner's known entities)

    @property
    def bare(self) -> str:
        """The labelled question, without the month."""
        return self.question.removesuffix(f" in {month_name(self.start)}?") + "?"


def month_name(iso_day: str) -> str:
    return calendar.month_name[dt.date.fromisoformat(iso_day).month]


def chitchat_ids(archive: GeneratedArchive) -> list[str]:
    """The conversations between two friends (speaker names, short turns), in id order."""
    return sorted(c["conversation_id"] for c in archive.labels["conversations"] if c["style"] == "chitchat")


def speakers_of(archive: GeneratedArchive, conversation_id: str) -> tuple[str, ...]:
    """The two speakers of a conversation of a LoCoMo-format archive, as its file names them."""
    (path,) = archive.files
    sample = next(s for s in json.loads(path.read_text()) if s["sample_id"] == conversation_id)
    return sample["conversation"]["speaker_a"], sample["conversation"]["speaker_b"]


def month_question(archive: GeneratedArchive, conversation_id: str) -> MonthQuestion:
    """The first temporal question of `conversation_id` asking when one dated event happened,
    where the event and the turn that tells it fall in the same month."""
    facts = {f["fact_id"]: f for f in archive.facts(conversation_id)}
    for q in archive.asked("temporal", conversation_id):
        if len(q["fact_ids"]) != 1 or not q["question"].startswith("When did "):
            continue
        fact = facts[q["fact_ids"][0]]
        if fact["kind"] != "event" or fact["date"][:7] != fact["session_date"][:7]:
            continue
        day = dt.date.fromisoformat(fact["date"])
        last = calendar.monthrange(day.year, day.month)[1]
        return MonthQuestion(
            conversation_id, f"{q['question'].removesuffix('?')} in {month_name(fact['date'])}?", fact["subject"],
            fact["turn_id"], f"{fact['date'][:7]}-01", f"{fact['date'][:7]}-{last:02d}", speakers_of(archive, conversation_id))
    raise AssertionError(f"the generator planted no dated event question in {conversation_id}")
