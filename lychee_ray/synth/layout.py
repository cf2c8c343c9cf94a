"""`Board`: which positions of a conversation are taken, and where a plot's turns can go.

A plot asks for steps: runs of consecutive turns, each starting with a given speaker (speakers
alternate, so the speaker fixes the parity of the position). Steps are placed in conversation
order; a `spread` plot puts each step in a later session than the one before, which is how facts
end up across session boundaries. Filler takes whatever is left.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from lychee_ray.synth.model import TurnRef


class NoRoom(Exception):
    """The board has no place for the plot's steps: the plot is dropped."""


@dataclass(frozen=True)
class Step:
    length: int  # consecutive turns
    first_speaker: int  # 0: the speaker of odd positions (first speaker, user); 1: the other


class Board:
    def __init__(self, sessions: int, turns_per_session: int, reserved_per_session: int = 0):
        self.sessions, self.turns = sessions, turns_per_session
        self.reserved = reserved_per_session  # the first positions of each session (greetings)
        self.taken: set[TurnRef] = set()

    @staticmethod
    def speaker_of(position: int) -> int:
        return (position - 1) % 2

    def starts(self, session: int, step: Step, after: int = 0) -> list[int]:
        """Positions in `session` (after `after`) where `step` fits on free positions."""
        first = max(self.reserved, after) + 1
        return [
            p
            for p in range(first, self.turns - step.length + 2)
            if self.speaker_of(p) == step.first_speaker
            and all(TurnRef(session, q) not in self.taken for q in range(p, p + step.length))
        ]

    def place(self, steps: list[Step], rng: random.Random, spread: bool) -> list[TurnRef]:
        """The first position of each step, in conversation order; marks them taken."""
        refs = self._spread(steps, rng) if spread else self._in_order(steps, rng)
        for ref, step in zip(refs, steps):
            self.taken.update(TurnRef(ref.session, q) for q in range(ref.position, ref.position + step.length))
        return refs

    def _spread(self, steps: list[Step], rng: random.Random) -> list[TurnRef]:
        if len(steps) > self.sessions:
            raise NoRoom(f"{len(steps)} steps need as many sessions")
        for _ in range(40):
            chosen = sorted(rng.sample(range(1, self.sessions + 1), len(steps)))
            options = [self.starts(s, step) for s, step in zip(chosen, steps)]
            if all(options):
                return [TurnRef(s, rng.choice(o)) for s, o in zip(chosen, options)]
        raise NoRoom("no sessions with room for every step")

    def _in_order(self, steps: list[Step], rng: random.Random) -> list[TurnRef]:
        refs: list[TurnRef] = []
        at = TurnRef(1, 0)  # the last position used so far
        for step in steps:
            options = [
                TurnRef(s, p)
                for s in range(at.session, self.sessions + 1)
                for p in self.starts(s, step, after=at.position if s == at.session else 0)
            ]
            if not options:
                raise NoRoom("no room for the next step")
            # near the front, so the later steps still find room
            ref = rng.choice(options[: max(1, len(options) // max(1, len(steps) - len(refs)))])
            refs.append(ref)
            at = TurnRef(ref.session, ref.position + step.length - 1)
        return refs

    def free(self) -> list[TurnRef]:
        return [
            TurnRef(s, p)
            for s in range(1, self.sessions + 1)
            for p in range(1, self.turns + 1)
            if TurnRef(s, p) not in self.taken
        ]

    def used_fraction(self) -> float:
        return len(self.taken) / (self.sessions * (self.turns - self.reserved))
