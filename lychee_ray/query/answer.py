"""Stage 6b, plan and answer: the two LLM calls per question (the judge is in `lychee_ray.evaluate.stages`).

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

from lychee_ray.config import LycheeConfig
from lychee_ray.dates import parse_iso_date, parse_source_datetime
from lychee_ray.llm.client import Usage
from lychee_ray.llm.prompts import (
    EvidenceItem,
    answer_messages,
    format_evidence,
    plan_messages,
)
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.rules.answerer import extractive_answer
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import AnswerOutput, QueryPlan

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    value: object
    usage: Usage = field(default_factory=Usage)
    error: str | None = None  # set when the LLM failed and the rules fallback was used


def _iso_day(value: str | None, end: bool) -> str | None:
    d = parse_iso_date(value, end=end) if value else None
    return d.isoformat() if d else None


def drop_bad_windows(plan: QueryPlan, tag: str) -> QueryPlan:
    """A time-window bound that is not an ISO date cannot filter anything (and would fail the
    SQL cast): it becomes null, and the route keeps its other constraints."""
    for route in plan.routes:
        tw = route.time_window
        if tw is None:
            continue
        start, end = _iso_day(tw.start, end=False), _iso_day(tw.end, end=True)
        if (start, end) != (tw.start, tw.end):
            log.warning("%s: planner time window %r..%r is not ISO dates; unusable bounds dropped", tag, tw.start, tw.end)
        route.time_window = None if start is None and end is None else tw.model_copy(update={"start": start, "end": end})
    return plan


class Planner:
    def __init__(self, cfg: LycheeConfig, client=None):
        self.cfg, self.client, self.rules = cfg, client, RulesPlanner()

    def rules_plan(self, question: str, question_date: str | None, known_entities: list[str]) -> QueryPlan:
        return self.rules.plan(question, parse_source_datetime(question_date), known_entities)

    async def plan(self, question: str, question_date: str | None, known_entities: list[str], tag: str) -> Outcome:
        if self.client is None:
            return Outcome(self.rules_plan(question, question_date, known_entities))

        ev = self.cfg.query
        n = ev.plan_max_items
        schema = json_schema_for(
            QueryPlan,
            self.cfg.llm.schema_dialect,
            max_items={"routes": 3, "search_terms": n, "entities": n, "topics": min(4, n)},
            max_length={"goal": ev.plan_goal_chars, "*": ev.plan_field_chars},
        )
        result = await self.client.structured(
            plan_messages(question, question_date, known_entities), QueryPlan, schema=schema, max_tokens=self.cfg.query.max_plan_tokens, tag=tag
        )
        out = Outcome(drop_bad_windows(result.parsed, tag) if result.parsed else None, error=result.error)
        out.usage.add(result.usage)
        if result.parsed is None or not result.parsed.routes:
            out.value = self.rules_plan(question, question_date, known_entities)
            out.error = result.error or "planner returned no routes"
        return out


class Answerer:
    def __init__(self, cfg: LycheeConfig, client=None):
        self.cfg, self.client = cfg, client

    async def answer(self, benchmark: str, question: str, question_date: str | None, evidence: list[EvidenceItem], tag: str) -> Outcome:
        if self.client is None:
            return Outcome(extractive_answer(question, [e.text for e in evidence]))

        messages = answer_messages(benchmark, question, question_date, format_evidence(evidence))
        schema = json_schema_for(AnswerOutput, self.cfg.llm.schema_dialect, max_length={"answer": self.cfg.query.max_answer_chars})
        result = await self.client.structured(messages, AnswerOutput, schema=schema, max_tokens=self.cfg.query.max_answer_tokens, tag=tag)
        out = Outcome(result.parsed.answer if result.parsed else None, error=result.error)
        out.usage.add(result.usage)
        if result.parsed is None:
            out.value = extractive_answer(question, [e.text for e in evidence])
        return out
