"""The evaluation's per-question stages: plan, retrieve, answer, judge.

Retrieve also measures evidence recall at every budget and runs the baselines; judge scores every
answer lexically and, with an LLM, asks the benchmark's judge. As `runtime.stage` stages they run
as Ray Data actors in the job and in-process in the ablation grid (sharing one loaded model).
"""

from __future__ import annotations

from lychee_ray.config import LycheeConfig
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.metrics import bleu1, evidence_recall, locomo_f1, token_f1
from lychee_ray.evaluate.questions import QAItem
from lychee_ray.llm.client import LLMClient, run_closing
from lychee_ray.llm.prompts import locomo_judge_messages, longmemeval_judge_messages
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.query.answer import Answerer, Planner
from lychee_ray.query.rerank import CrossEncoderReranker
from lychee_ray.query.retrieve import Retriever, baseline_turns, entity_names
from lychee_ray.rules.answerer import extractive_answer
from lychee_ray.runtime.stage import AsyncStage, Resources, Stage
from lychee_ray.schemas import JudgeOutput
from lychee_ray.store.reader import open_store
from lychee_ray.tokens import token_counter


def _client(cfg: LycheeConfig):
    if cfg.llm.backend != "openai":
        return None

    return LLMClient(cfg.llm)


def _tag(item: QAItem) -> str:
    return f"{item.conversation_id}/{item.question_id}"


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
class PlanStage(AsyncStage[QAItem]):
    name = "plan"
    resources = Resources(num_cpus=0.25, num_actors=1)  # waits on the LLM

    def __init__(self, cfg: LycheeConfig, store_dir: str):
        self.cfg, self.store_dir = cfg, store_dir
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        self.store = open_store(self.store_dir, self.cfg)
        self.planner = Planner(self.cfg, _client(self.cfg))
        self._entities: dict[str, list[str]] = {}

    def teardown(self):
        self.store.close()

    def known_entities(self, cid: str) -> list[str]:
        if cid not in self._entities:
            self._entities[cid] = entity_names(self.store, cid)[:200]
        return self._entities[cid]

    def process_batch(self, items):
        return run_closing(self.process_batch_async(items), self.planner.client)

    async def process_async(self, item: QAItem):
        out = await self.planner.plan(item.question, item.question_date, self.known_entities(item.conversation_id), _tag(item))
        item.plan = out.value
        item.plan_json = out.value.model_dump_json()
        item.plan_usage.add(out.usage)
        if out.error:
            item.llm_errors.append(f"plan: {out.error}")


class RetrieveStage(Stage[QAItem]):
    name = "retrieve"
    resources = Resources(num_cpus=1, num_actors=1)  # keeps the embedder and the store open

    def __init__(self, cfg: LycheeConfig, store_dir: str, embedder=None):
        self.cfg, self.store_dir = cfg, store_dir
        self.embedder = embedder  # share one loaded model when run in-process (ablation grid)

    def setup(self):
        self.store = open_store(self.store_dir, self.cfg)
        self.embedder = self.embedder or Embedder(self.cfg.embedding)
        reranker = None
        if self.cfg.retrieval.rerank.enabled:
            reranker = CrossEncoderReranker(self.cfg.retrieval.rerank)
        self.count = token_counter(self.cfg.tokenizer_spec).count  # budgets in the served model's tokens
        self.retriever = Retriever(self.store, self.cfg.retrieval, self.embedder.encode, reranker, self.count)
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
        qv = self.embedder.encode([item.question])[0]
        item.recall_curve = []
        for b in budgets:
            sel = self.retriever.select(result.fused, result.candidates, qv, b)
            item.recall_curve.append(evidence_recall(item.evidence_turn_ids, list(dict.fromkeys(t for e in sel for t in e.source_turn_ids))))
        for name in self.cfg.evaluate.baselines:
            curve, main = [], None
            for b in budgets:
                sel = baseline_turns(self.store, name, item.conversation_id, item.question, qv, b, count=self.count)
                curve.append(evidence_recall(item.evidence_turn_ids, [e.source_turn_ids[0] for e in sel]))
            main = baseline_turns(self.store, name, item.conversation_id, item.question, qv, self.cfg.retrieval.context_token_budget, count=self.count)
            item.baselines[name] = {
                "recall_curve": curve,
                "recall": evidence_recall(item.evidence_turn_ids, [e.source_turn_ids[0] for e in main]),
                "evidence": [e.prompt_item() for e in main],
            }

    def process_batch(self, items):
        for item in items:
            if item.status == "ok" and item.conversation_id not in self.record_counts and not self._known(item.conversation_id):
                item.status, item.error = "error", f"conversation {item.conversation_id!r} is not in the store"
        return super().process_batch(items)

    def teardown(self):
        self.store.close()

    def _known(self, cid: str) -> bool:
        return bool(self.store.con.execute("select 1 from conversations where conversation_id = ? limit 1", [cid]).fetchall())


class AnswerStage(AsyncStage[QAItem]):
    name = "answer"
    resources = Resources(num_cpus=0.25, num_actors=1)

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        self.answerer = Answerer(self.cfg, _client(self.cfg))

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
    resources = Resources(num_cpus=0.25, num_actors=1)

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        # the judge's own endpoint and model (`judge:`), not the answering model's
        self.judge_llm = self.cfg.judge_llm()
        self.client = LLMClient(self.judge_llm) if self.cfg.asks_judge else None

    def process_batch(self, items):
        return run_closing(self.process_batch_async(items), self.client)

    async def process_async(self, item: QAItem):
        item.f1 = score_f1(item.prediction, item.gold, item.category, item.benchmark)
        item.bleu1 = bleu1(item.prediction, item.gold)
        for b in item.baselines.values():
            if "prediction" in b:
                b["f1"] = score_f1(b["prediction"], item.gold, item.category, item.benchmark)
        if self.client is None:
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


def score_f1(prediction: str, gold: str, category: str, benchmark: str) -> float:
    if benchmark == "locomo":
        return locomo_f1(prediction, gold, category)
    return token_f1(prediction, gold)
