"""`ValuePool`: the values one conversation uses, each drawn once.

Labels are exact only if a value names one thing: an answer must not turn up in another turn by
accident ("15.4" inside the version "0.15.4", a pet called Juniper beside a place called
Juniperford). So every value a conversation's turns carry (names, places, numbers, versions,
commands) is drawn here, and a candidate that contains a value already drawn, or is contained in
one, is passed over.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence


class Exhausted(Exception):
    """No candidate is left that clashes with nothing drawn: the plot asking is dropped."""


class ValuePool:
    def __init__(self, rng: random.Random, reserved: Sequence[str] = ()):
        self.rng = rng
        self._used: list[str] = []  # lower case, in draw order
        self._reserved = [r.lower() for r in reserved]  # terms no turn may contain (abstention)

    def clashes(self, value: str) -> bool:
        low = value.lower()
        return any(low in u or u in low for u in self._used) or any(r in low for r in self._reserved)

    def claim(self, value: str) -> str:
        """Mark `value` as used (it must not clash); returns it."""
        if self.clashes(value):
            raise Exhausted(f"{value!r} clashes with a value already used")
        self._used.append(value.lower())
        return value

    def draw(self, candidates: Sequence[str]) -> str:
        """A random candidate that clashes with nothing drawn so far."""
        free = [c for c in candidates if not self.clashes(c)]
        if not free:
            raise Exhausted(f"no free value among {len(candidates)} candidates")
        return self.claim(self.rng.choice(free))

    def draw_made(self, make: Callable[[random.Random], str], tries: int = 40) -> str:
        """A value built by `make` (a number, a version) that clashes with nothing drawn."""
        for _ in range(tries):
            value = make(self.rng)
            if not self.clashes(value):
                return self.claim(value)
        raise Exhausted("no free value after many tries")
