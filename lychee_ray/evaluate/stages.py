"""The evaluation's per-question stages: plan, retrieve, answer, judge.

Retrieve also measures evidence recall at every budget and runs the baselines; judge scores every
answer lexically and, with an LLM, asks the benchmark's judge. As `runtime.stage` stages they run
as Ray Data actors in the job and in-process in the ablation grid (sharing one loaded model).
Each stage declares its actors, CPUs, batch size and in-flight limit from `evaluate.stages`.
"""

from __future__ import annotations

import asyncio
import logging

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.beam_scoring import event_order_score, rubric_score
from lychee_ray.evaluate.metrics import bleu1, evidence_recall, locomo_f1, token_f1
from lychee_ray.evaluate.questions import QAItem
from lychee_ray.llm.client import LLMClient, llm_client, run_closing
from lychee_ray.llm.prompts import locomo_judge_messages, longmemeval_judge_messages, rubric_judge_messages
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.query.answer import Answerer
from lychee_ray.query.engine import QueryEngine
from lychee_ray.query.evidence import Evidence
from lychee_ray.query.fusion import budget_topk
from lychee_ray.query.retrieve import baseline_turns
from lychee_ray.rules.answerer import extractive_answer
from lychee_ray.runtime.stage import AsyncStage, Resources, Stage
from lychee_ray.schemas import JudgeOutput, QueryPlan, RubricGrade
from lychee_ray.store.reader import open_store

log = logging.getLogger(__name__)


def _tag(item: QAItem) -> str:
    return f"{item.conversation_id}/{item.question_id}"


def _resources(cfg: LycheeConfig, stage: str) -> Resources:
    """A stage's Ray Data resources from `evaluate.stages`. Plan and retrieve take each block
    whole (batch_size None): the job makes one block per conversation group, so a retrieve
    actor gets whole conversations in a row (see `evaluate.questions.conversation_groups`)."""
    scale = getattr(cfg.evaluate.stages, stage)
    batch = None if stage in ("plan", "retrieve") else cfg.evaluate.batch_size(stage)
    return Resources(num_cpus=scale.num_cpus, num_actors=scale.num_actors, batch_size=batch)


def _in_flight(cfg: LycheeConfig, stage: str) -> int:
    return getattr(cfg.evaluate.stages, stage).in_flight or cfg.llm.max_in_flight


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
class PlanStage(AsyncStage[QAItem]):
    name = "plan"

    def __init__(self, cfg: LycheeConfig, store_dir: str):
        self.cfg, self.store_dir = cfg, store_dir
        self.resources = _resources(cfg, self.name)
        self.max_in_flight = _in_flight(cfg, self.name)

    def setup(self):
        self.store = open_store(self.store_dir, self.cfg)
        self.engine = QueryEngine(self.cfg, self.store)
        self.planner = self.engine.planner(self.engine.new_client())

    def teardown(self):
        self.store.close()

    def process_batch(self, items):
        return run_closing(self.process_batch_async(items), self.planner.client)

    async def process_async(self, item: QAItem):
        out = await self.planner.plan(item.question, item.question_date, self.engine.known_entities(item.conversation_id), _tag(item))
        item.plan = out.value
        item.plan_json = out.value.model_dump_json()
        item.plan_usage.add(out.usage)
        if out.error:
            item.llm_errors.append(f"plan: {out.error}")


class RetrieveStage(Stage[QAItem]):
    name = "retrieve"

    def __init__(self, cfg: LycheeConfig, store_dir: str, embedder=None):
        self.cfg, self.store_dir = cfg, store_dir
        self.resources = _resources(cfg, self.name)  # keeps the embedder and the store open
        self.embedder = embedder  # share one loaded model when run in-process (ablation grid)
        self.vectors: dict[str, np.ndarray] = {}  # this batch's query texts, embedded together

    def setup(self):
        self.store = open_store(self.store_dir, self.cfg)
        self.engine = QueryEngine(self.cfg, self.store, self.embedder, embed_fn=self.embed)
        self.engine.embedder  # the model loads here, once per actor, not at the first question
        self.retriever = self.engine.retriever
        self.count = self.engine.count_tokens
        counts = self.store.con.execute("select conversation_id, count(*) from records group by 1").fetchall()
        self.record_counts = dict(counts)

    def process(self, item: QAItem):
        if not self.record_counts.get(item.conversation_id):
            raise LookupError(f"the store has no records for conversation {item.conversation_id!r}")
        budgets = self.cfg.evaluate.recall_budgets
        result = self.retriever.retrieve(item.conversation_id, item.plan, item.question)
        item.evidence = [e.prompt_item() for e in result.selected]
        item.retrieved_record_ids = [e.key for e in result.selected if e.kind == "record"]
        item.retrieved_turn_ids = result.source_turn_ids
        item.context_tokens = result.context_tokens
        item.evidence_recall = evidence_recall(item.evidence_turn_ids, item.retrieved_turn_ids)
        qv = self.embed([item.question])[0]
        item.recall_curve = []
        for b in budgets:  # the context retrieve would make at each budget
            sel = self.retriever.at_budget(result, b)
            item.recall_curve.append(evidence_recall(item.evidence_turn_ids, list(dict.fromkeys(t for e in sel for t in e.source_turn_ids))))
        for name in self.cfg.evaluate.baselines:
            # One search per baseline: every hit with its token count, then each budget's cut.
            ranked = baseline_turns(self.store, name, item.conversation_id, item.question, qv, UNBOUNDED, count=self.count,
                                    show_sources=self.cfg.retrieval.evidence_sources)
            curve = [evidence_recall(item.evidence_turn_ids, _turn_ids(cut_to_budget(ranked, b))) for b in budgets]
            main = cut_to_budget(ranked, self.cfg.retrieval.context_token_budget)
            item.baselines[name] = {
                "recall_curve": curve,
                "recall": evidence_recall(item.evidence_turn_ids, _turn_ids(main)),
                "evidence": [e.prompt_item() for e in main],
            }

    def process_batch(self, items):
        for item in items:
            if item.status == "ok" and item.conversation_id not in self.record_counts and not self._known(item.conversation_id):
                item.status, item.error = "error", f"conversation {item.conversation_id!r} is not in the store"
        texts = sorted({t for item in items if item.status == "ok" for t in self.query_texts(item)})
        try:
            self.vectors = dict(zip(texts, self.engine.embedder.encode(texts))) if texts else {}
        except Exception as exc:  # e.g. an embedding endpoint down: each question then fails alone
            log.warning("retrieve: embedding the batch's %d query texts failed (%s); embedding per question", len(texts), exc)
        try:
            return super().process_batch(items)
        finally:
            self.vectors = {}

    def embed(self, texts: list[str]) -> np.ndarray:
        """Query vectors from the batch's one encode call (a forward pass over many short texts
        costs about a tenth per text of one call each); a text not foreseen is encoded alone.
        A text's vector depends on the batch it was encoded in (padding: ~1e-7), and the job
        and `evaluate_in_process` cut the same conversation groups, so runs agree exactly."""
        missing = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if missing:
            self.vectors.update(zip(missing, self.engine.embedder.encode(missing)))
        return np.stack([self.vectors[t] for t in texts])

    def query_texts(self, item: QAItem) -> list[str]:
        """What retrieve embeds for a question: its routes' vector texts
        (`Retriever.query_texts`) and the question itself (recall curve and baselines)."""
        plan = item.plan if item.plan is not None else QueryPlan(routes=[])
        return [*self.retriever.query_texts(item.conversation_id, plan, item.question), item.question]

    def teardown(self):
        self.store.close()

    def _known(self, cid: str) -> bool:
        return bool(self.store.con.execute("select 1 from conversations where conversation_id = ? limit 1", [cid]).fetchall())


class AnswerStage(AsyncStage[QAItem]):
    name = "answer"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.resources = _resources(cfg, self.name)
        self.max_in_flight = _in_flight(cfg, self.name)

    def setup(self):
        self.answerer = Answerer(self.cfg, llm_client(self.cfg.llm))

    def process_batch(self, items):
        return run_closing(self.process_batch_async(items), self.answerer.client)

    async def process_async(self, item: QAItem):
        out = await self.answerer.answer(item.benchmark, item.question, item.question_date, item.evidence, _tag(item))
        item.prediction = str(out.value or "")
        item.answer_usage.add(out.usage)
        if out.error:
            item.llm_errors.append(f"answer: {out.error}")
            item.answer_fallback = self.answerer.client is not None  # scored as wrong in the report
        if self.answerer.client is None:
            # Baselines answered the same way (extractive), free under rules.

            for b in item.baselines.values():
                b["prediction"] = extractive_answer(item.question, [e.text for e in b["evidence"]])


class JudgeStage(AsyncStage[QAItem]):
    name = "judge"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.resources = _resources(cfg, self.name)
        self.max_in_flight = _in_flight(cfg, self.name)

    def setup(self):
        # the judge's own endpoint and model (`judge:`), not the answering model's
        self.judge_llm = self.cfg.judge_llm()
        self.client = LLMClient(self.judge_llm) if self.cfg.asks_judge else None
        self._embedder = None  # event ordering aligns items by MiniLM vectors: loaded when first needed

    def embed(self, texts: list[str]):
        if self._embedder is None:
            self._embedder = Embedder(self.cfg.embedding)
        return self._embedder.encode(texts)

    def process_batch(self, items):
        return run_closing(self.process_batch_async(items), self.client)

    async def process_async(self, item: QAItem):
        item.f1 = score_f1(item.prediction, item.gold, item.category, item.benchmark)
        item.bleu1 = bleu1(item.prediction, item.gold)
        for b in item.baselines.values():
            if "prediction" in b:
                b["f1"] = score_f1(b["prediction"], item.gold, item.category, item.benchmark)
        if item.benchmark == "beam" and item.category == "event_ordering" and item.rubric:
            item.order_tau = event_order_score(item.rubric, item.prediction, self.embed)
        if self.client is None:
            return
        if item.benchmark == "beam" and item.rubric:
            await self._grade_rubric(item)
            return

        if item.benchmark == "longmemeval":
            qtype = item.category.removesuffix("_abs")
            messages = longmemeval_judge_messages(qtype, item.question, item.gold, item.prediction, item.question_id.endswith("_abs"))
        else:
            messages = locomo_judge_messages(item.question, item.gold, item.prediction)
        schema = json_schema_for(JudgeOutput, self.judge_llm.schema_dialect)
        result = await self.client.structured(messages, JudgeOutput, schema=schema, max_tokens=16, tag=_tag(item))
        item.judge_usage.add(result.usage)
        if result.parsed is not None:
            item.judge_label = result.parsed.label
        else:
            item.llm_errors.append(f"judge: {result.error}")


    async def _grade_rubric(self, item: QAItem) -> None:
        """One judge call per rubric nugget (the BEAM authors' protocol); the label says whether
        every nugget was fully met, the score is their mean (a failed call counts 0)."""
        schema = json_schema_for(RubricGrade, self.judge_llm.schema_dialect)

        async def grade(criterion: str) -> float | None:
            result = await self.client.structured(rubric_judge_messages(item.question, criterion, item.prediction), RubricGrade,
                                                  schema=schema, max_tokens=16, tag=_tag(item))
            item.judge_usage.add(result.usage)
            if result.parsed is None:
                item.llm_errors.append(f"judge: {result.error}")
                return None
            return float(result.parsed.score)

        item.rubric_grades = list(await asyncio.gather(*(grade(c) for c in item.rubric)))
        item.rubric_score = rubric_score(item.rubric_grades)
        if all(g is not None for g in item.rubric_grades):
            item.judge_label = "CORRECT" if all(g == 1.0 for g in item.rubric_grades) else "WRONG"


# --------------------------------------------------------------------------------------------
# Baseline budgets
# --------------------------------------------------------------------------------------------
# A budget no baseline search can fill (k hits of a few hundred tokens each): `baseline_turns`
# then returns every hit, in rank order, each with its token count.
UNBOUNDED = 2**62


def cut_to_budget(ranked: list[Evidence], budget: int) -> list[Evidence]:
    """What `baseline_turns` selects at `budget`, from its unbounded answer: the same greedy
    `budget_topk` over the same ranked hits and counts. Cut from the full ranking, not from the
    largest budget's selection: a hit that does not fit is skipped and later, cheaper ones are
    still taken, so a smaller budget may keep hits a larger one dropped (costs [90, 30, 30]:
    budget 60 takes the two 30s, budget 100 only the 90)."""
    chosen = budget_topk(range(len(ranked)), [e.tokens for e in ranked], budget)
    return [ranked[i] for i in chosen]


def _turn_ids(selected: list[Evidence]) -> list[str]:
    return [e.source_turn_ids[0] for e in selected]


def score_f1(prediction: str, gold: str, category: str, benchmark: str) -> float:
    if benchmark == "locomo":
        return locomo_f1(prediction, gold, category)
    return token_f1(prediction, gold)
