"""The retrieval engine's validity unit (`retrieval.validity`): what the record links change in a
question's evidence. It runs after fusion (and rerank) and after selection; with no links in a
conversation it changes nothing.

- Current first: a record that does not hold for the question ranks lower (its fused score is
  multiplied by `retrieval.superseded_weight`). "Holds": nothing superseded it, or, when the plan
  has a time window ("where did she live in March?"), its validity interval meets that window
  (validity.py).
- Successors and partners come along: a candidate that does not hold brings the record of its
  chain that does (the current value; for a window, the one that held then) in at its own score,
  and a candidate in a contradiction brings the records it conflicts with (at the same share of
  its score); under a window filter (time_routes=filter) only those the window lets in, as for
  every channel.
- Marked: a superseded record's line reads `[was: <it> until <day>; now: <its successor>]`, and
  each side of a contradiction says what it conflicts with and when that was said (the prompt's
  `ValidityNote`); the budget charges exactly the marked line.
- Shown together: after selection, a selected superseded record gets its successor and a selected
  conflicting record its partners, evicting the lowest-ranked unpaired items when the budget
  needs room.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lychee_ray.llm.prompts import ValidityNote, conflict_text
from lychee_ray.query.evidence import CandidatePool, Evidence
from lychee_ray.query.validity import Validity
from lychee_ray.schemas import QueryPlan

def plan_window(plan: QueryPlan) -> tuple[str | None, str | None] | None:
    """The span of the plan's time windows (ISO days), or None when no route has one."""
    bounds = [(r.time_window.start, r.time_window.end) for r in plan.routes if r.time_window and (r.time_window.start or r.time_window.end)]
    if not bounds:
        return None
    starts, ends = [s for s, _ in bounds], [e for _, e in bounds]
    return (None if None in starts else min(starts)[:10]), (None if None in ends else max(ends)[:10])


class ValidityUnit:
    def __init__(self, count_tokens: Callable[[str], int], not_holding_weight: float):
        self.count_tokens = count_tokens
        self.not_holding_weight = not_holding_weight  # the share of its fused score a record keeps when it does not hold

    # ---- after fusion ----------------------------------------------------------------------
    def adjust(self, fused: list[tuple[str, float]], pool: CandidatePool, plan: QueryPlan,
               allowed: np.ndarray | None = None) -> list[tuple[str, float]]:
        """Fused (key, score), re-ranked by what holds, with successors and partners added (only
        records `allowed` lets in, when given); the pool's records marked."""
        conv = pool.conv
        validity = conv.validity
        if not validity or not fused:
            return fused
        window = plan_window(plan) or (None, None)
        pos = {rid: i for i, rid in enumerate(conv.records.ids)}
        scores: dict[str, float] = {}
        for key, score in fused:
            i = pos.get(key)
            if i is None or validity.holds(i, *window):
                scores[key] = max(scores.get(key, 0.0), score)
                continue
            scores[key] = max(scores.get(key, 0.0), score * self.not_holding_weight)
            for j in self._holding(validity, i, window):
                if allowed is not None and not allowed[j]:
                    continue
                (other,) = pool.add_records([j])
                scores[other] = max(scores.get(other, 0.0), score)
        for key, score in list(scores.items()):
            i = pos.get(key)
            for j in validity.conflicts.get(i, []) if i is not None else []:
                if allowed is not None and not allowed[j]:
                    continue
                (other,) = pool.add_records([j])
                scores[other] = max(scores.get(other, 0.0), score * self.not_holding_weight)
        for key in scores:
            if key in pos:
                self._mark(pool[key], pos[key], validity, conv)
        order = {key: n for n, (key, _) in enumerate(fused)}
        return sorted(scores.items(), key=lambda kv: (-kv[1], order.get(kv[0], len(order))))

    @staticmethod
    def _holding(validity: Validity, i: int, window: tuple[str | None, str | None]) -> list[int]:
        """The records of i's chain that hold for the question: its current value, or (a window)
        those that held then."""
        if window == (None, None):
            return [validity.current(i)]
        return [j for j in validity.chain(i) if j != i and validity.holds(j, *window)]

    def _mark(self, e: Evidence, i: int, validity: Validity, conv) -> None:
        now = until = None
        if i in validity.superseded_by:
            j = validity.current(i)
            now, until = conv.records.cols["text"][j], validity.valid_until.get(i)
        conflicts = tuple(conflict_text(validity.valid_from[j], conv.records.cols["text"][j]) for j in validity.conflicts.get(i, []))
        note = ValidityNote(until, now, conflicts) if now is not None or conflicts else None
        if note != e.note:
            e.note = note
            e.tokens = conv.token_memo(self.count_tokens).get(e.memo_key, 0)

    # ---- after selection ---------------------------------------------------------------------
    def complete(self, selected: list[Evidence], pool: CandidatePool, budget: int,
                 allowed: np.ndarray | None = None) -> list[Evidence]:
        """The selection with each superseded record's successor and each conflicting record's
        partners (those `allowed` lets in, when given), within `budget` (unpaired items are
        evicted from the lowest rank up)."""
        conv = pool.conv
        validity = conv.validity
        if not validity or not selected:
            return selected
        pos = {rid: i for i, rid in enumerate(conv.records.ids)}
        chosen = list(selected)
        keys = {c.key for c in chosen}
        protected: set[str] = set()
        for e in list(chosen):
            i = pos.get(e.key)
            if i is None or e.key not in keys:
                continue
            mates = ([validity.current(i)] if i in validity.superseded_by else []) + validity.conflicts.get(i, [])
            for j in mates:
                if allowed is not None and not allowed[j]:
                    continue
                (key,) = pool.add_records([j])
                protected.update((e.key, key))
                if key in keys:
                    continue
                mate = pool[key]
                self._mark(mate, j, validity, conv)
                if not mate.tokens:
                    mate.tokens = self.count_tokens(mate.render())
                if self._make_room(chosen, keys, protected, mate.tokens, budget):
                    chosen.append(mate)
                    keys.add(key)
        return chosen

    @staticmethod
    def _make_room(chosen: list[Evidence], keys: set[str], protected: set[str], need: int, budget: int) -> bool:
        used = sum(c.tokens for c in chosen)
        while used + need > budget:
            at = next((n for n in range(len(chosen) - 1, -1, -1) if chosen[n].key not in protected), None)
            if at is None:
                return False
            victim = chosen.pop(at)
            keys.discard(victim.key)
            used -= victim.tokens
        return True
