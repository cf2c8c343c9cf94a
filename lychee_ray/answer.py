"""Stage 6b, plan and answer: the two LLM calls per question (the judge is in evaluate.py).

- Planner: one call returns a QueryPlan (routes with a goal, search terms, entity/topic
  constraints and a time window resolved against the question date). `rules`: the question
  itself, its entities and its parsed dates.
- Answerer: one call over the selected evidence, with the benchmark's answer conventions.
  `rules`: extractive, the best sentence of the selected evidence.

Both return (output, usage); an LLM failure never raises: the planner falls back to the rules
plan and the answerer to the extractive answer, and the failure is recorded on the question.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime

from .config import LycheeConfig
from .judge import answer_messages, format_evidence, plan_messages
from .schemas import AnswerOutput, QueryPlan

log = logging.getLogger("lychee_ray.answer")


@dataclass
class CallUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0

    def absorb(self, usage) -> None:
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_tokens += usage.cached_tokens
        self.calls += usage.calls


@dataclass
class Outcome:
    value: object
    usage: CallUsage = field(default_factory=CallUsage)
    error: str | None = None  # set when the LLM failed and the rules fallback was used


def _parse_date(s: str | None) -> datetime | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(str(s))
    except ValueError:
        return None


def _iso_date_or_none(value: str | None) -> str | None:
    try:
        return date.fromisoformat(value).isoformat() if value else None
    except ValueError:
        return None


def drop_bad_windows(plan: QueryPlan, tag: str) -> QueryPlan:
    """A time-window bound that is not an ISO date cannot filter anything (and would fail the
    SQL cast): it becomes null, and the route keeps its other constraints."""
    for route in plan.routes:
        tw = route.time_window
        if tw is None:
            continue
        start, end = _iso_date_or_none(tw.start), _iso_date_or_none(tw.end)
        if (start, end) != (tw.start, tw.end):
            log.warning("%s: planner time window %r..%r is not ISO dates; unusable bounds dropped", tag, tw.start, tw.end)
        route.time_window = None if start is None and end is None else tw.model_copy(update={"start": start, "end": end})
    return plan


class Planner:
    def __init__(self, cfg: LycheeConfig, client=None):
        from .rules import RulesPlanner

        self.cfg, self.client, self.rules = cfg, client, RulesPlanner()

    def rules_plan(self, question: str, question_date: str | None, known_entities: list[str]) -> QueryPlan:
        return self.rules.plan(question, _parse_date(question_date), known_entities)

    async def plan(self, question: str, question_date: str | None, known_entities: list[str], tag: str) -> Outcome:
        if self.client is None:
            return Outcome(self.rules_plan(question, question_date, known_entities))
        from .llm import json_schema_for

        ev = self.cfg.evaluate
        n = ev.plan_max_items
        schema = json_schema_for(
            QueryPlan,
            self.cfg.llm.schema_dialect,
            max_items={"routes": 3, "search_terms": n, "entities": n, "topics": min(4, n)},
            max_length={"goal": ev.plan_goal_chars, "*": ev.plan_field_chars},
        )
        result = await self.client.structured(
            plan_messages(question, question_date, known_entities), QueryPlan, schema=schema, max_tokens=self.cfg.evaluate.max_plan_tokens, tag=tag
        )
        out = Outcome(drop_bad_windows(result.parsed, tag) if result.parsed else None, error=result.error)
        out.usage.absorb(result.usage)
        if result.parsed is None or not result.parsed.routes:
            out.value = self.rules_plan(question, question_date, known_entities)
            out.error = result.error or "planner returned no routes"
        return out


class Answerer:
    def __init__(self, cfg: LycheeConfig, client=None):
        self.cfg, self.client = cfg, client

    async def answer(self, benchmark: str, question: str, question_date: str | None, evidence: list[tuple[str | None, str]], tag: str) -> Outcome:
        from .rules import extractive_answer

        if self.client is None:
            return Outcome(extractive_answer(question, [text for _, text in evidence]))
        from .llm import json_schema_for

        messages = answer_messages(benchmark, question, question_date, format_evidence(evidence))
        schema = json_schema_for(AnswerOutput, self.cfg.llm.schema_dialect, max_length={"answer": self.cfg.evaluate.max_answer_chars})
        result = await self.client.structured(messages, AnswerOutput, schema=schema, max_tokens=self.cfg.evaluate.max_answer_tokens, tag=tag)
        out = Outcome(result.parsed.answer if result.parsed else None, error=result.error)
        out.usage.absorb(result.usage)
        if result.parsed is None:
            out.value = extractive_answer(question, [text for _, text in evidence])
        return out
