"""Stage 7, evaluate: batch QA over a memory store, as Ray Data over the questions table.

Per question: plan (1 LLM call) -> retrieve (4 channels, RRF, MMR under the context budget)
-> answer (1 LLM call) -> judge (LLM judge when there is an LLM, plus token F1, BLEU-1 and
evidence recall@budget). Two retrieval baselines run on the same store at the same budget:
naive RAG (top raw turns by vector) and BM25 over raw turns.

Each stage is a small class (stages.py adapts it to `map_batches`). Answers are committed in
Parquet parts, so a killed evaluation resumes without re-asking anything already answered. The
output (answers/, report.md, PNGs) goes through pyarrow.fs like the store: `--out` may be a path
or a URI such as ``s3://bucket/eval``.
Query tokens per question = planner + answer, prompt + completion (the judge is reported
apart: it is the benchmark's cost, not the memory system's).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .answer import Answerer, Planner
from .config import LycheeConfig
from .metrics import bleu1, evidence_recall, locomo_f1, token_f1
from .schemas import JudgeOutput
from .stages import AsyncStage, Stage, apply_stage, pack, unpack
from .store import delete_quietly, is_part_name, is_temp_name, join_path, list_files, open_store, resolve_uri, write_atomic

log = logging.getLogger("lychee_ray.evaluate")

LOCOMO_NAMES = ("multi_hop", "temporal", "open_domain", "single_hop", "adversarial")
ANSWERS = "answers"  # the folder of answer parts under --out


@dataclass
class QAItem:
    """One question as it flows through the evaluation stages."""

    conversation_id: str
    question_id: str
    question: str
    gold: str
    category: str
    evidence_turn_ids: list[str]
    question_date: str | None
    benchmark: str = "generic"
    status: str = "ok"
    error: str | None = None
    stats: dict = field(default_factory=dict)
    plan_json: str | None = None
    plan: object = None
    evidence: list[tuple[str | None, str]] = field(default_factory=list)
    retrieved_record_ids: list[str] = field(default_factory=list)
    retrieved_turn_ids: list[str] = field(default_factory=list)
    context_tokens: int = 0
    recall_curve: list[float | None] = field(default_factory=list)
    baselines: dict = field(default_factory=dict)  # name -> {"recall_curve", "turn_ids", "prediction"}
    prediction: str = ""
    judge_label: str | None = None
    f1: float | None = None
    bleu1: float | None = None
    evidence_recall: float | None = None
    usage: dict = field(default_factory=lambda: {k: 0 for k in ("plan_prompt", "plan_completion", "answer_prompt", "answer_completion", "judge_prompt", "judge_completion", "llm_calls")})
    llm_errors: list[str] = field(default_factory=list)


def _client(cfg: LycheeConfig):
    if cfg.llm.backend != "openai":
        return None
    from .llm import LLMClient

    return LLMClient(cfg.llm)


def _tag(item: QAItem) -> str:
    return f"{item.conversation_id}/{item.question_id}"


# --------------------------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------------------------
class PlanStage(AsyncStage):
    name = "plan"

    def __init__(self, cfg: LycheeConfig, store_dir: str):
        self.cfg, self.store_dir = cfg, store_dir
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        self.store = open_store(self.store_dir, self.cfg)
        self.planner = Planner(self.cfg, _client(self.cfg))
        self._entities: dict[str, list[str]] = {}

    def known_entities(self, cid: str) -> list[str]:
        from .retrieve import entity_names

        if cid not in self._entities:
            self._entities[cid] = entity_names(self.store, cid)[:200]
        return self._entities[cid]

    def process_batch(self, items):
        from .llm import run_closing

        return run_closing(self.process_batch_async(items), self.planner.client)

    async def process_async(self, item: QAItem):
        out = await self.planner.plan(item.question, item.question_date, self.known_entities(item.conversation_id), _tag(item))
        item.plan = out.value
        item.plan_json = out.value.model_dump_json()
        item.usage["plan_prompt"] += out.usage.prompt_tokens
        item.usage["plan_completion"] += out.usage.completion_tokens
        item.usage["llm_calls"] += out.usage.calls
        if out.error:
            item.llm_errors.append(f"plan: {out.error}")


class RetrieveStage(Stage):
    name = "retrieve"

    def __init__(self, cfg: LycheeConfig, store_dir: str, embedder=None):
        self.cfg, self.store_dir = cfg, store_dir
        self.embedder = embedder  # share one loaded model when run in-process (ablation grid)

    def setup(self):
        from .embed import Embedder
        from .retrieve import Retriever

        self.store = open_store(self.store_dir, self.cfg)
        self.embedder = self.embedder or Embedder(self.cfg.embedding)
        reranker = None
        if self.cfg.retrieval.rerank.enabled:
            from .retrieve import CrossEncoderReranker

            reranker = CrossEncoderReranker(self.cfg.retrieval.rerank)
        self.retriever = Retriever(self.store, self.cfg.retrieval, self.embedder.encode, reranker)
        counts = self.store.con.execute("select conversation_id, count(*) from records group by 1").fetchall()
        self.record_counts = dict(counts)

    def process(self, item: QAItem):
        from .retrieve import baseline_turns

        if not self.record_counts.get(item.conversation_id):
            raise LookupError(f"the store has no records for conversation {item.conversation_id!r}")
        budgets = self.cfg.evaluate.recall_budgets
        result = self.retriever.retrieve(item.conversation_id, item.plan, item.question)
        item.evidence = [(e.time, e.text if e.kind == "turn" else e.text) for e in result.selected]
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
                sel = baseline_turns(self.store, name, item.conversation_id, item.question, qv, b)
                curve.append(evidence_recall(item.evidence_turn_ids, [e.source_turn_ids[0] for e in sel]))
            main = baseline_turns(self.store, name, item.conversation_id, item.question, qv, self.cfg.retrieval.context_token_budget)
            item.baselines[name] = {
                "recall_curve": curve,
                "recall": evidence_recall(item.evidence_turn_ids, [e.source_turn_ids[0] for e in main]),
                "evidence": [(e.time, e.text) for e in main],
            }

    def process_batch(self, items):
        for item in items:
            if item.status == "ok" and item.conversation_id not in self.record_counts and not self._known(item.conversation_id):
                item.status, item.error = "error", f"conversation {item.conversation_id!r} is not in the store"
        return super().process_batch(items)

    def _known(self, cid: str) -> bool:
        return bool(self.store.con.execute("select 1 from conversations where conversation_id = ? limit 1", [cid]).fetchall())


class AnswerStage(AsyncStage):
    name = "answer"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        self.answerer = Answerer(self.cfg, _client(self.cfg))

    def process_batch(self, items):
        from .llm import run_closing

        return run_closing(self.process_batch_async(items), self.answerer.client)

    async def process_async(self, item: QAItem):
        out = await self.answerer.answer(item.benchmark, item.question, item.question_date, item.evidence, _tag(item))
        item.prediction = str(out.value or "")
        item.usage["answer_prompt"] += out.usage.prompt_tokens
        item.usage["answer_completion"] += out.usage.completion_tokens
        item.usage["llm_calls"] += out.usage.calls
        if out.error:
            item.llm_errors.append(f"answer: {out.error}")
        if self.answerer.client is None:
            # Baselines answered the same way (extractive), free under rules.
            from .rules import extractive_answer

            for b in item.baselines.values():
                b["prediction"] = extractive_answer(item.question, [t for _, t in b["evidence"]])


class JudgeStage(AsyncStage):
    name = "judge"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.max_in_flight = cfg.llm.max_in_flight

    def setup(self):
        self.client = _client(self.cfg) if self.cfg.evaluate.judge else None

    def process_batch(self, items):
        from .llm import run_closing

        return run_closing(self.process_batch_async(items), self.client)

    async def process_async(self, item: QAItem):
        item.f1 = score_f1(item.prediction, item.gold, item.category, item.benchmark)
        item.bleu1 = bleu1(item.prediction, item.gold)
        for b in item.baselines.values():
            if "prediction" in b:
                b["f1"] = score_f1(b["prediction"], item.gold, item.category, item.benchmark)
        if self.client is None:
            return
        from .judge import locomo_judge_messages, longmemeval_judge_messages
        from .llm import json_schema_for

        if item.benchmark == "longmemeval":
            qtype = item.category.removesuffix("_abs")
            messages = longmemeval_judge_messages(qtype, item.question, item.gold, item.prediction, item.question_id.endswith("_abs"))
        else:
            messages = locomo_judge_messages(item.question, item.gold, item.prediction)
        result = await self.client.structured(messages, JudgeOutput, schema=json_schema_for(JudgeOutput, self.cfg.llm.schema_dialect), max_tokens=16, tag=_tag(item))
        item.usage["judge_prompt"] += result.usage.prompt_tokens
        item.usage["judge_completion"] += result.usage.completion_tokens
        if result.parsed is not None:
            item.judge_label = result.parsed.label
        else:
            item.llm_errors.append(f"judge: {result.error}")


def score_f1(prediction: str, gold: str, category: str, benchmark: str) -> float:
    if benchmark == "locomo":
        return locomo_f1(prediction, gold, category)
    return token_f1(prediction, gold)


# --------------------------------------------------------------------------------------------
# Answers table
# --------------------------------------------------------------------------------------------
ANSWERS_SCHEMA = pa.schema(
    [
        ("question_id", pa.string()),
        ("conversation_id", pa.string()),
        ("benchmark", pa.string()),
        ("category", pa.string()),
        ("question", pa.string()),
        ("gold", pa.string()),
        ("prediction", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("llm_errors", pa.list_(pa.string())),
        ("retrieved_record_ids", pa.list_(pa.string())),
        ("retrieved_turn_ids", pa.list_(pa.string())),
        ("evidence_turn_ids", pa.list_(pa.string())),
        ("context_tokens", pa.int64()),
        ("plan", pa.string()),
        ("judge_label", pa.string()),
        ("f1", pa.float64()),
        ("bleu1", pa.float64()),
        ("evidence_recall", pa.float64()),
        ("recall_curve", pa.list_(pa.float64())),
        ("naive_rag_recall", pa.float64()),
        ("naive_rag_curve", pa.list_(pa.float64())),
        ("naive_rag_f1", pa.float64()),
        ("bm25_recall", pa.float64()),
        ("bm25_curve", pa.list_(pa.float64())),
        ("bm25_f1", pa.float64()),
        ("prompt_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("plan_prompt_tokens", pa.int64()),
        ("answer_prompt_tokens", pa.int64()),
        ("judge_prompt_tokens", pa.int64()),
        ("judge_completion_tokens", pa.int64()),
        ("llm_calls", pa.int64()),
    ]
)


def answer_row(item: QAItem) -> dict:
    u = item.usage
    row = {
        "question_id": item.question_id,
        "conversation_id": item.conversation_id,
        "benchmark": item.benchmark,
        "category": item.category,
        "question": item.question,
        "gold": item.gold,
        "prediction": item.prediction,
        "status": item.status,
        "error": item.error,
        "llm_errors": item.llm_errors,
        "retrieved_record_ids": item.retrieved_record_ids,
        "retrieved_turn_ids": item.retrieved_turn_ids,
        "evidence_turn_ids": item.evidence_turn_ids,
        "context_tokens": item.context_tokens,
        "plan": item.plan_json,
        "judge_label": item.judge_label,
        "f1": item.f1,
        "bleu1": item.bleu1,
        "evidence_recall": item.evidence_recall,
        "recall_curve": item.recall_curve,
        "prompt_tokens": u["plan_prompt"] + u["answer_prompt"],
        "completion_tokens": u["plan_completion"] + u["answer_completion"],
        "plan_prompt_tokens": u["plan_prompt"],
        "answer_prompt_tokens": u["answer_prompt"],
        "judge_prompt_tokens": u["judge_prompt"],
        "judge_completion_tokens": u["judge_completion"],
        "llm_calls": u["llm_calls"],
    }
    for name in ("naive_rag", "bm25"):
        b = item.baselines.get(name, {})
        row[f"{name}_recall"] = b.get("recall")
        row[f"{name}_curve"] = b.get("recall_curve")
        row[f"{name}_f1"] = b.get("f1")
    return row


def write_answers(batch, out_dir: str):
    """Commit one batch of answers as answers/part-<hash>.parquet under `out_dir` (a path or any
    pyarrow.fs URI): temp file then rename, so a kill never leaves half a part."""
    items: list[QAItem] = unpack(batch)
    table = pa.Table.from_pylist([answer_row(i) for i in items], schema=ANSWERS_SCHEMA)
    part = hashlib.sha1("|".join(sorted(i.question_id for i in items)).encode()).hexdigest()[:16]
    fs, base = resolve_uri(out_dir)
    folder = join_path(base, ANSWERS)
    fs.create_dir(folder, recursive=True)
    write_atomic(fs, join_path(folder, f"part-{part}.parquet"), lambda sink: pq.write_table(table, sink))
    return {"question_id": np.array([i.question_id for i in items], dtype=object), "status": np.array([i.status for i in items], dtype=object)}


def answered_ids(out_dir: str) -> set[str]:
    """Question ids in the committed answer parts; deletes the temp files of a killed run."""
    fs, base = resolve_uri(out_dir)
    ids: set[str] = set()
    for info in list_files(fs, join_path(base, ANSWERS)):
        if is_temp_name(info.base_name):
            delete_quietly(fs, info.path)
        elif is_part_name(info.base_name):
            ids.update(pq.read_table(info.path, columns=["question_id"], filesystem=fs).column("question_id").to_pylist())
    return ids


# --------------------------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------------------------
def load_questions(store, cfg: LycheeConfig, questions_path: str | None) -> list[QAItem]:
    """Questions from the store (default) or a JSONL/Parquet file with the questions columns."""
    sources = dict(store.con.execute("select conversation_id, source from conversations").fetchall())
    if questions_path:
        rows = _read_question_file(questions_path)
    else:
        rows = [dict(zip(("conversation_id", "question_id", "question", "answer", "category", "evidence_turn_ids", "question_date"), r)) for r in store.con.execute(
            "select conversation_id, question_id, question, answer, category, evidence_turn_ids, cast(question_date as varchar) from questions order by conversation_id, question_id"
        ).fetchall()]
    items = []
    for r in rows:
        cat = str(r.get("category") or "unknown")
        if cat in LOCOMO_NAMES and cat not in cfg.evaluate.categories:
            continue
        source = sources.get(str(r.get("conversation_id")), "generic")
        items.append(
            QAItem(
                conversation_id=str(r.get("conversation_id")),
                question_id=str(r.get("question_id")),
                question=str(r.get("question") or ""),
                gold=str(r.get("answer") if r.get("answer") is not None else ""),
                category=cat,
                evidence_turn_ids=list(r.get("evidence_turn_ids") or []),
                question_date=r.get("question_date"),
                benchmark=source if source in ("locomo", "longmemeval") else "generic",
            )
        )
    if cfg.evaluate.max_questions:
        items = items[: cfg.evaluate.max_questions]
    mark_unanswerable(store, items, questions_path or "the store's questions table")
    return items


def mark_unanswerable(store, items: list[QAItem], where: str) -> None:
    """Questions that cannot be answered become error rows (one log line each) before any stage
    runs, so the rest of the batch is evaluated: an empty question, a conversation the store
    does not hold, a conversation without records."""
    n_records = dict(store.con.execute("select conversation_id, count(*) from records group by 1").fetchall())
    known = set(store.conversation_ids())
    for it in items:
        if not it.question.strip():
            it.error = f"question {it.question_id} is empty"
        elif it.conversation_id not in known:
            it.error = f"question {it.question_id} names conversation {it.conversation_id!r}, which is not in the store"
        elif not n_records.get(it.conversation_id):
            it.error = f"question {it.question_id}: the store has no records for conversation {it.conversation_id!r}"
        else:
            continue
        it.status = "error"
        log.warning("%s: %s; recorded as an error row, the other questions go on", where, it.error)


def _read_question_file(path: str) -> list[dict]:
    if path.endswith(".parquet"):
        return pq.read_table(path).to_pylist()
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    log.error("%s:%d: not valid JSON (%s); question skipped", path, lineno, exc.msg)
    return rows


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
@dataclass
class EvaluateResult:
    out_dir: str
    asked: int
    skipped: int
    report_path: str
    headline: str

    def render(self) -> str:
        return f"evaluate -> {self.out_dir}\n  questions asked now: {self.asked}; already answered: {self.skipped}\n{self.headline}\n  report: {self.report_path}"


def evaluate_in_process(cfg: LycheeConfig, store_dir: str, items: list[QAItem], embedder=None) -> list[QAItem]:
    """The same four stages without Ray: for the ablation grid, which shares one loaded model
    across many small evaluations, and for tests."""
    for stage in (PlanStage(cfg, store_dir), RetrieveStage(cfg, store_dir, embedder), AnswerStage(cfg), JudgeStage(cfg)):
        stage.setup()
        items = stage.process_batch(items)
    return items


def run_evaluate(cfg: LycheeConfig, store_dir: str, out_dir: str, questions_path: str | None = None) -> EvaluateResult:
    import ray

    from .pipeline import init_ray
    from .report_eval import write_eval_report

    store = open_store(store_dir, cfg)
    items = load_questions(store, cfg, questions_path)
    done = answered_ids(out_dir)
    todo = [i for i in items if i.question_id not in done]
    if todo:
        init_ray(cfg.ray)
        per = cfg.evaluate.questions_per_batch
        blocks = [pack(todo[i : i + per]) for i in range(0, len(todo), per)]
        ds = ray.data.from_items([{"conversation_id": c, "state": s} for b in blocks for c, s in zip(b["conversation_id"], b["state"])])
        ds = apply_stage(ds, partial(PlanStage, cfg, store_dir), batch_size=per, num_actors=1, num_cpus=0.25, is_async=True)
        ds = apply_stage(ds, partial(RetrieveStage, cfg, store_dir), batch_size=per, num_actors=1, num_cpus=1)
        ds = apply_stage(ds, partial(AnswerStage, cfg), batch_size=per, num_actors=1, num_cpus=0.25, is_async=True)
        ds = apply_stage(ds, partial(JudgeStage, cfg), batch_size=per, num_actors=1, num_cpus=0.25, is_async=True)
        ds = ds.map_batches(write_answers, fn_args=(out_dir,), batch_size=per, batch_format="numpy", num_cpus=0.25)
        for _ in ds.iter_rows():
            pass
    report_path, headline = write_eval_report(cfg, store, out_dir)
    return EvaluateResult(out_dir, len(todo), len(items) - len(todo), report_path, headline)
