"""The generated conversations and their labels, before any format names them.

A turn is addressed by `TurnRef` (session number, position in the session, both 1-based); each
writer names it the way the project's reader of its format will (`labels.IdScheme`), so the
labels can be rendered for any format from one generated archive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta


@dataclass(frozen=True, order=True)
class TurnRef:
    session: int  # 1-based
    position: int  # 1-based, within the session


@dataclass
class Turn:
    ref: TurnRef
    speaker: str  # a chit-chat speaker's name, or "user" / "assistant"
    text: str
    followup: bool = False  # a work user turn that follows up on the reply before it (BEAM)


@dataclass
class Session:
    number: int  # 1-based
    start: datetime
    turns: list[Turn] = field(default_factory=list)

    def turn_time(self, position: int) -> datetime:
        """When turn `position` was said: a minute and a half apart, so turn order is time order."""
        return self.start + timedelta(seconds=90 * (position - 1))


@dataclass
class Fact:
    """One planted statement and the turn that states it: `value` is a substring of that turn."""

    fact_id: str
    subject: str
    attribute: str
    value: str
    ref: TurnRef
    kind: str  # attribute, event, mention, relation, statement, preference, instruction, proposal, decision, topic
    expression: str | None = None  # the date expression in the turn ("last Saturday", "on 14 March")
    date: date | None = None  # the date it resolves to (event facts)


@dataclass
class Change:
    """A planted link between two statements of one subject and attribute."""

    subject: str
    attribute: str
    kind: str  # "supersedes" (the new value replaces the old) or "contradicts"
    old: Fact
    new: Fact


@dataclass
class Question:
    question: str
    answer: str
    category: str
    facts: list[Fact]  # the evidence, each with its role
    roles: list[str]
    never_said: str | None = None  # abstention: the term no turn of the conversation contains
    rubric: list[str] = field(default_factory=list)  # BEAM nuggets; the answer when empty
    difficulty: str = "easy"
    question_id: str = ""  # set when the conversation is finished

    def evidence(self) -> list[tuple[TurnRef, str]]:
        """(turn, role) in conversation order, one entry per turn."""
        seen: dict[TurnRef, str] = {}
        for fact, role in zip(self.facts, self.roles):
            seen.setdefault(fact.ref, role)
        return sorted(seen.items())


@dataclass
class Conversation:
    conversation_id: str
    style: str  # "chitchat" or "work"
    speaker_a: str  # chit-chat: first speaker; work: the user's name
    speaker_b: str  # chit-chat: second speaker; work: "Assistant"
    title: str
    sessions: list[Session]
    facts: list[Fact] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    question_date: datetime | None = None

    def turns(self) -> list[Turn]:
        return [t for s in self.sessions for t in s.turns]

    def session_date(self, ref: TurnRef) -> date:
        return self.sessions[ref.session - 1].start.date()
