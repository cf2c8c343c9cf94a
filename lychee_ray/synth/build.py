"""`Builder`: one conversation under construction, which plots write their turns, facts,
changes and questions into.

A plot reserves positions on the board, writes its turns and labels, and either succeeds as a
whole or leaves no trace (`attempt` rolls back a plot that finds no room or runs out of values).
Every label is checked as it is made: a fact's value must be in the text of the turn that
states it, so a template that loses its value fails at generation, not in an evaluation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date

from lychee_ray.synth.layout import Board, NoRoom, Step
from lychee_ray.synth.model import Change, Fact, Question, Session, Turn, TurnRef
from lychee_ray.synth.pool import Exhausted, ValuePool


class LabelError(AssertionError):
    """A label that does not match its turn: a bug in a template, never bad luck."""


def contains(text: str, value: str) -> bool:
    """`value` occurs in `text` as whole words (case-insensitive)."""
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def a(noun: str) -> str:
    """`noun` with its indefinite article: "an ochre", "a teal"."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


@dataclass
class Mention:
    """A filler line that names an entity without its fact; `speaker` 0/1 who may say it."""

    speaker: int | None
    text: str


@dataclass
class Builder:
    conversation_id: str
    style: str
    speakers: tuple[str, str]  # who says odd positions, who says even ones
    sessions: list[Session]
    board: Board
    pool: ValuePool
    rng: random.Random
    facts: list[Fact] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    mentions: list[Mention] = field(default_factory=list)
    lines: dict[TurnRef, Turn] = field(default_factory=dict)
    claims: set[tuple[str, str]] = field(default_factory=set)

    # ---- a plot, all or nothing -------------------------------------------------------------
    def attempt(self, plot: Callable[["Builder"], None], tries: int = 3) -> bool:
        """Run `plot`; one that finds no room or no free value is rolled back and tried again
        (it draws anew), `tries` times in all."""
        for _ in range(tries):
            saved = (set(self.board.taken), dict(self.lines), set(self.claims), len(self.facts), len(self.changes), len(self.questions), len(self.mentions))
            try:
                plot(self)
                return True
            except (NoRoom, Exhausted):
                taken, lines, claims, n_facts, n_changes, n_questions, n_mentions = saved
                self.board.taken, self.lines, self.claims = taken, lines, claims
                del self.facts[n_facts:], self.changes[n_changes:], self.questions[n_questions:], self.mentions[n_mentions:]
        return False

    def claim(self, subject: str, attribute: str) -> None:
        """One plot per subject and attribute: two would give a question two answers."""
        if (subject, attribute) in self.claims:
            raise Exhausted(f"{subject} {attribute} is planted already")
        self.claims.add((subject, attribute))

    def free_owner(self, attribute: str) -> int:
        """A speaker (0 or 1) whose `attribute` is not planted yet; claims it."""
        for who in self.rng.sample([0, 1], 2):
            if (self.speakers[who], attribute) not in self.claims:
                self.claim(self.speakers[who], attribute)
                return who
        raise Exhausted(f"both speakers have a {attribute}")

    # ---- turns ------------------------------------------------------------------------------
    def place(self, *steps: tuple[int, int], spread: bool = False) -> list[TurnRef]:
        """Reserve runs of turns: each (length, first speaker); their first positions."""
        return self.board.place([Step(n, who) for n, who in steps], self.rng, spread)

    def say(self, ref: TurnRef, text: str, followup: bool = False) -> TurnRef:
        who = self.speakers[Board.speaker_of(ref.position)]
        self.lines[ref] = Turn(ref, who, text, followup)
        return ref

    def session_day(self, ref: TurnRef) -> date:
        return self.sessions[ref.session - 1].start.date()

    # ---- labels -----------------------------------------------------------------------------
    def fact(self, ref: TurnRef, subject: str, attribute: str, value: str, kind: str = "attribute",
             expression: str | None = None, day: date | None = None) -> Fact:
        text = self.lines[ref].text
        shown = expression if kind == "event" else value
        if not shown or not contains(text, shown):
            raise LabelError(f"{self.conversation_id}: turn {ref} does not state {shown!r}: {text!r}")
        if expression and expression.startswith("on "):
            self.pool.claim(expression.removeprefix("on "))  # a written date, like any value, names one thing
        fact = Fact(f"{self.conversation_id}:f{len(self.facts):03d}", subject, attribute, value, ref, kind, expression, day)
        self.facts.append(fact)
        return fact

    def change(self, kind: str, old: Fact, new: Fact) -> Change:
        if not old.ref < new.ref:
            raise LabelError(f"{self.conversation_id}: a change must go forward in the conversation: {old.ref} -> {new.ref}")
        change = Change(old.subject, old.attribute, kind, old, new)
        self.changes.append(change)
        return change

    def ask(self, question: str, answer: str, category: str, facts: list[Fact], roles: list[str] | None = None, **extra) -> Question:
        q = Question(question, answer, category, list(facts), roles or [""] * len(facts), **extra)
        self.questions.append(q)
        return q

    def mention(self, speaker: int | None, text: str) -> None:
        self.mentions.append(Mention(speaker, text))
