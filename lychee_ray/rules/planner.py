"""`RulesPlanner`: a question -> a one-route `QueryPlan` with no LLM.

The `rules` planner, the fallback when the LLM planner fails, and the planner of `lychee-ray
query`. A capitalized word counts as a new entity only when the conversation's known names are not
given; with them, entities are the known names the question mentions (aliases included).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Sequence

from lychee_ray.dates import as_date

from lychee_ray.rules.entities import (
    AND_SPLIT_RE,
    CAP_SPAN_RE,
    QUOTED_RE,
    EntityIndex,
    clean_entity,
)
from lychee_ray.rules.lexicon import (
    ENTITY_STOP,
    FILLERS,
    MONTH_WEEKDAY,
    QUESTION_STARTERS,
    STOPWORDS,
)
from lychee_ray.rules.text import WORD_RE, norm_token, normalize_text, topics_for
from lychee_ray.rules.time_patterns import AFTER_MOD_RE, BEFORE_MOD_RE
from lychee_ray.rules.timeparse import find_hits, find_time_expressions
from lychee_ray.schemas import QueryPlan, Route, TimeWindow


class RulesPlanner:
    """Question -> a one-route `QueryPlan`: the question as goal, its content words and
    phrases as search terms, its named entities, topic names its words may match, and parsed
    time window."""

    def plan(self, question: str, question_date=None, known_entities: Sequence[str] = ()) -> QueryPlan:
        q = normalize_text(question).strip()
        times = find_time_expressions(q, question_date)
        in_time = [te.span for te in times]
        index = EntityIndex(participants=list(known_entities))
        for e in known_entities:
            index.add(e)
        entities = self._entities(q, index, bool(known_entities))
        phrases = [m.group(1).strip() for m in QUOTED_RE.finditer(q)]
        phrases += [e for e in entities if " " in e]
        raw = [m.group(0) for m in WORD_RE.finditer(q) if not any(s <= m.start() < e for s, e in in_time)]
        words = [norm_token(t) for t in raw]
        terms = [w for w in words if w not in STOPWORDS and w not in FILLERS and w not in MONTH_WEEKDAY and (len(w) > 1 or w.isdigit())]
        search_terms = list(dict.fromkeys(phrases + entities + [t for t in terms if t not in {e.lower() for e in entities}]))
        window = resolve_question_window(q, question_date)
        return QueryPlan(
            routes=[
                Route(
                    goal=q,
                    search_terms=search_terms,
                    entities=entities,
                    topics=topics_for(raw, names=entities),
                    time_window=TimeWindow(start=window[0], end=window[1]) if window else None,
                )
            ]
        )

    @staticmethod
    def _entities(q: str, index: EntityIndex, have_known: bool) -> list[str]:
        out: list[str] = []
        for m in CAP_SPAN_RE.finditer(q):
            words = m.group(0).split()
            if m.start() == 0 and words and words[0].lower() in QUESTION_STARTERS:
                words = words[1:]
            for cand in _candidate_names(words):
                hit = index.lookup(cand)
                if hit is None and not have_known and cand.lower() not in ENTITY_STOP:
                    hit = cand
                if hit and hit not in out:
                    out.append(hit)
        for tok in WORD_RE.findall(q):  # known names in lower case
            hit = index.canonical.get(norm_token(tok))
            if hit and hit not in out:
                out.append(hit)
        return out


def _candidate_names(words: list[str]) -> list[str]:
    """The whole capitalized span, or failing a match, its single words."""
    out = []
    for part in AND_SPLIT_RE.split(" ".join(words)):  # "Ana and Boris" is two names
        ws = [w for w in (clean_entity(x) for x in part.split()) if w and w.lower() not in ENTITY_STOP]
        if ws:
            out.append(" ".join(ws))
            if len(ws) > 1:
                out.extend(ws)
    return out


def resolve_question_window(question: str, question_date: date | datetime | str | None) -> tuple[str | None, str | None] | None:
    """The time window a question asks about, as ISO (start, end), or None when it names no
    time. "before X" / "until X" open the start (None), "after X" opens the end; "since X"
    runs to the question date. Several expressions give their union."""
    a = as_date(question_date)
    hits = find_hits(question or "", a)
    if not hits:
        return None
    starts: list[date | None] = []
    ends: list[date | None] = []
    for h in hits:
        s, e = h.s, h.e
        if BEFORE_MOD_RE.search(question, max(0, h.start - 12), h.start):
            s, e = None, h.s - timedelta(days=1)
        elif h.label.startswith("since"):
            e = a if a is not None and a >= h.s else None
        elif AFTER_MOD_RE.search(question, max(0, h.start - 8), h.start):
            s, e = h.e + timedelta(days=1), None
        starts.append(s)
        ends.append(e)
    start = None if any(s is None for s in starts) else min(starts)
    end = None if any(e is None for e in ends) else max(ends)
    return (start.isoformat() if start else None, end.isoformat() if end else None)
