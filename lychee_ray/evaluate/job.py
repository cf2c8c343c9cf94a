"""Stage 7, evaluate: batch QA over a memory store, as Ray Data over the questions table.

Per question: plan (1 LLM call) -> retrieve (4 channels, RRF, MMR under the context budget)
-> answer (1 LLM call) -> judge (LLM judge when there is an LLM, plus token F1, BLEU-1 and
evidence recall@budget). Two retrieval baselines run on the same store at the same budget:
naive RAG (top raw turns by vector) and BM25 over raw turns.

Each stage is a small class (`lychee_ray.runtime.stage` adapts it to `map_batches`). Answers are committed in
Parquet parts, so a killed evaluation resumes without re-asking anything already answered. The
output (answers/, report.md, PNGs) goes through pyarrow.fs like the store: `--out` may be a path
or a URI such as ``s3://bucket/eval``.
Query tokens per question = planner + answer, prompt + completion (the judge is reported
apart: it is the benchmark's cost, not the memory system's).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import partial

from lychee_ray.config import LycheeConfig
from lychee_ray.evaluate.answers import answered_ids, write_answers
from lychee_ray.evaluate.questions import QAItem, load_questions
from lychee_ray.evaluate.report import write_eval_report
from lychee_ray.evaluate.stages import AnswerStage, JudgeStage, PlanStage, RetrieveStage
from lychee_ray.runtime.ray import init_ray
from lychee_ray.runtime.stage import apply_stage, pack
from lychee_ray.store.reader import open_store

log = logging.getLogger(__name__)


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


    store = open_store(store_dir, cfg)
    items = load_questions(store, cfg, questions_path)
    done = answered_ids(out_dir)
    todo = [i for i in items if i.question_id not in done]
    if todo:
        init_ray(cfg.ray)
        per = cfg.evaluate.questions_per_batch
        blocks = [pack(todo[i : i + per]) for i in range(0, len(todo), per)]
        ds = ray.data.from_items([{"conversation_id": c, "state": s} for b in blocks for c, s in zip(b["conversation_id"], b["state"])])
        for stage in (partial(PlanStage, cfg, store_dir), partial(RetrieveStage, cfg, store_dir), partial(AnswerStage, cfg), partial(JudgeStage, cfg)):
            ds = apply_stage(ds, stage, batch_size=per)
        ds = ds.map_batches(write_answers, fn_args=(out_dir,), batch_size=per, batch_format="numpy", num_cpus=0.25)
        for _ in ds.iter_rows():
            pass
    report_path, headline = write_eval_report(cfg, store, out_dir)
    return EvaluateResult(out_dir, len(todo), len(items) - len(todo), report_path, headline)
