"""Stage 7, evaluate: batch QA over a memory store, as Ray Data over the questions table.

Per question: plan (1 LLM call) -> retrieve (4 channels, RRF, MMR under the context budget)
-> answer (1 LLM call) -> judge (LLM judge when there is an LLM, plus token F1, BLEU-1 and
evidence recall@budget). Two retrieval baselines run on the same store at the same budget:
naive RAG (top raw turns by vector) and BM25 over raw turns.

Each stage is a small class (`lychee_ray.runtime.stage` adapts it to `map_batches`) with its own
actors, CPUs, batch size and in-flight limit (`evaluate.stages`). The questions enter Ray Data
as one block per conversation group (`conversation_groups`), which plan and retrieve take whole,
so a retrieve actor works through whole conversations with a warm cache. Answers are committed in
Parquet parts, so a killed evaluation resumes without re-asking anything already answered. The
output (answers/, report.md, PNGs) goes through pyarrow.fs like the store: `--out` may be a path
or a URI such as ``s3://bucket/eval``. The driver counts finished questions on a progress bar.
Query tokens per question = planner + answer, prompt + completion (the judge is reported
apart: it is the benchmark's cost, not the memory system's).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass
from functools import partial

import pyarrow as pa
from tqdm import tqdm

from lychee_ray.config import LycheeConfig
from lychee_ray.config_sections import ConfigError
from lychee_ray.evaluate.answers import answered_ids, write_answers
from lychee_ray.evaluate.questions import QAItem, conversation_groups, load_questions
from lychee_ray.evaluate.report import write_eval_report
from lychee_ray.evaluate.stages import AnswerStage, JudgeStage, PlanStage, RetrieveStage
from lychee_ray.runtime.ray import init_ray
from lychee_ray.runtime.stage import apply_stage, pack
from lychee_ray.store.reader import open_store

log = logging.getLogger(__name__)

STAGES = ("plan", "retrieve", "answer", "judge")
WRITER_CPUS = 0.25  # the answers writer's tasks


# --------------------------------------------------------------------------------------------
# Progress on the driver
# --------------------------------------------------------------------------------------------
class Progress:
    """Finished work counted on the driver (questions, grid points). On a terminal a tqdm bar;
    elsewhere (CI, Ray job logs) whole lines, at each tenth of the total and when an item
    starts, since a bar's carriage returns make a log file unreadable."""

    def __init__(self, total: int, what: str, unit: str, stream=None):
        self.total, self.what, self.unit, self.done = total, what, unit, 0
        self.stream = stream or sys.stderr  # looked up now, so a redirected stderr is honoured
        self.bar = tqdm(total=total, desc=what, unit=unit, file=self.stream, dynamic_ncols=True) if _is_tty(self.stream) else None
        self.label: str | None = None
        self._next_line = 0  # lines mode: done count of the next progress line

    def start(self, label: str) -> None:
        """The item now running (the one after the finished ones) and how many come after it."""
        self.label = label
        where = f"{label} [{self.done + 1}/{self.total}, {self.total - self.done - 1} after it]"
        if self.bar is not None:
            self.bar.set_description(f"{self.what} {where}")
            self.bar.set_postfix_str("")
        else:
            self._line(where)

    def phase(self, text: str) -> None:
        """What the running item (or the run, before any item) is doing now."""
        if self.bar is not None:
            self.bar.set_postfix_str(text)
        else:
            self._line(f"{self.label}: {text}" if self.label else text)

    def update(self, n: int = 1) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.done >= self._next_line or self.done == self.total:
            self._line(f"{self.done}/{self.total} {self.unit}s done ({100 * self.done // max(self.total, 1)}%)")
            while self._next_line <= self.done:
                self._next_line += max(1, self.total // 10)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _line(self, text: str) -> None:
        print(f"{self.what}: {text}", file=self.stream, flush=True)


def _is_tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


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
    across many small evaluations, and for tests. Retrieve takes the job's batches, the same
    conversation groups (a warm cache, and the same query vectors: see `RetrieveStage.embed`);
    the LLM stages take every question at once, for the most requests in flight. The list
    comes back in its given order."""
    groups = conversation_groups(items, cfg.evaluate.batch_size("retrieve"))
    everything = [item for group in groups for item in group]
    for factory in stage_factories(cfg, store_dir, embedder):
        stage = factory()
        stage.setup()
        try:
            for batch in groups if stage.name == "retrieve" else [everything]:
                stage.process_batch(batch)  # stages fill the items in place
        finally:
            stage.close()
    return items


def question_dataset(items: list[QAItem], group_size: int):
    """A Ray Dataset of the questions with one block per conversation group, which plan and
    retrieve take whole (`batch_size=None` maps over whole blocks, and a block in is one block
    out), so the grouping reaches the retrieve actors intact."""
    import ray

    blocks = []
    for group in conversation_groups(items, group_size):
        packed = pack(group)
        blocks.append(pa.table({"conversation_id": pa.array(list(packed["conversation_id"]), pa.string()),
                                "state": pa.array(list(packed["state"]), pa.large_binary())}))
    return ray.data.from_arrow(blocks)


def stage_factories(cfg: LycheeConfig, store_dir: str, embedder=None) -> list[partial]:
    """The four stages, in order, as the job and `evaluate_in_process` both run them."""
    return [partial(PlanStage, cfg, store_dir), partial(RetrieveStage, cfg, store_dir, embedder), partial(AnswerStage, cfg), partial(JudgeStage, cfg)]


def check_cpus(cfg: LycheeConfig) -> None:
    """Every actor pool is started at its full size, so actors asking for more logical CPUs than
    Ray has would wait forever: say so in one sentence instead (a warning on a cluster, which
    may still scale up)."""
    import ray

    scales = {name: getattr(cfg.evaluate.stages, name) for name in STAGES}
    need = sum(s.num_actors * s.num_cpus for s in scales.values()) + WRITER_CPUS
    have = ray.cluster_resources().get("CPU", 0.0)
    if need <= have:
        return
    parts = ", ".join(f"{n} {s.num_actors}x{s.num_cpus:g}" for n, s in scales.items())
    msg = (f"evaluate.stages ask for {need:g} logical CPUs ({parts}, writer {WRITER_CPUS:g}) but Ray has {have:g}: "
           "lower evaluate.stages.<stage>.num_actors or num_cpus")
    if cfg.ray.address or os.environ.get("RAY_ADDRESS"):
        log.warning("%s (or let the cluster scale up)", msg)
        return
    raise ConfigError(msg)


def run_evaluate(cfg: LycheeConfig, store_dir: str, out_dir: str, questions_path: str | None = None,
                 data_note: str | None = None) -> EvaluateResult:
    """Evaluate every question of the store (or of `questions_path`) not yet answered in `out_dir`,
    then write the report (`data_note`: what the data is, said under its header)."""
    cfg.resolve()  # once, here: the workers get the resolved values with the config
    store = open_store(store_dir, cfg)
    items = load_questions(store, cfg, questions_path)
    done = answered_ids(out_dir)
    todo = [i for i in items if i.question_id not in done]
    if todo:
        init_ray(cfg.ray)
        check_cpus(cfg)
        ds = question_dataset(todo, cfg.evaluate.batch_size("retrieve"))
        for factory in stage_factories(cfg, store_dir):
            ds = apply_stage(ds, factory)
        ds = ds.map_batches(write_answers, fn_args=(out_dir,), batch_size=cfg.evaluate.batch_size("judge"),
                            batch_format="numpy", num_cpus=WRITER_CPUS)
        drain(ds, len(todo), show=not cfg.ray.progress_bars)
    report_path, headline = write_eval_report(cfg, store, out_dir, data_note)
    return EvaluateResult(out_dir, len(todo), len(items) - len(todo), report_path, headline)


def drain(ds, total: int, show: bool) -> None:
    """Run the pipeline to its end, counting committed answers on the driver's bar (unless Ray
    Data shows its own per-operator bars, whose last one counts the same rows)."""
    if not show:
        for _ in ds.iter_batches(batch_size=None):
            pass
        return
    with Progress(total, "evaluate", "question") as bar:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            bar.update(len(batch["question_id"]))
