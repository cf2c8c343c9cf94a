"""`lychee-ray ablate`: the paper's ablations and two reference systems, run as one grid.

A grid spec (YAML, `configs/ablations/locomo.yaml`) names a base config and a list of variants,
each a small overlay of `section.key: value` overrides on it, plus the references (full
context, naive RAG). The grid runs in ONE process so that work is shared instead of repeated:

- conversations are read and their turns embedded once, by one loaded model, for every variant;
- a segmentation is computed once per distinct (mode, segmenter settings);
- an encode + organize + store build is done once per distinct build (the config's build hash
  plus the segmentation), so retrieval-only variants and delta=0.50 reuse the full store;
- an evaluation is done once per distinct (build, retrieval/answer settings).

The counts of what was actually done, against the naive sum of independent runs, go into the
report. Metrics, table and plots are written by `lychee_ray.ablate.report`. A grid takes tens of
minutes, so stderr shows which grid point runs, its phase, and how many points are left.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lychee_ray.ablate.grid import Grid, ReferenceSpec, VariantSpec
from lychee_ray.ablate.report import write_report
from lychee_ray.config import LycheeConfig
from lychee_ray.config_sections import ConfigError
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.answers import write_answer_part
from lychee_ray.evaluate.job import Progress, evaluate_in_process
from lychee_ray.evaluate.metrics import evidence_recall
from lychee_ray.evaluate.questions import load_questions
from lychee_ray.evaluate.stages import AnswerStage, JudgeStage
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.pipeline import ingest_pipeline
from lychee_ray.ingest.segment import Boundary, SegmentStage, capped_exchange_tokens, segments_from_bounds
from lychee_ray.io.readers.files import iter_conversations, list_input_files
from lychee_ray.llm.prompts import EvidenceItem, answer_messages, format_evidence, plan_messages
from lychee_ray.query.engine import QueryEngine
from lychee_ray.query.evidence import CandidatePool, Evidence
from lychee_ray.query.retrieve import baseline_turns
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import finalize_manifest, prepare_output
from lychee_ray.tokens import count_tokens, token_counter

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Shared work
# --------------------------------------------------------------------------------------------
class CountingEmbedder:
    """Wraps one loaded `Embedder` and counts its calls and texts per phase, so the report (and
    the tests) can show that turn embeddings were computed once for the whole grid."""

    def __init__(self, inner):
        self.inner = inner
        self.dim = inner.dim
        self.phase = "turns"
        self.calls: Counter = Counter()
        self.texts: Counter = Counter()

    def encode(self, texts: list[str]) -> np.ndarray:
        self.calls[self.phase] += 1
        self.texts[self.phase] += len(texts)
        return self.inner.encode(texts)

    # The Embedder's own slicing, run over this wrapper's counting encode().
    encode_groups = Embedder.encode_groups

    @property
    def passage_tokens(self) -> int | None:
        return self.inner.passage_tokens

    def count_tokens(self, texts: list[str]) -> list[int]:
        return self.inner.count_tokens(texts)


@dataclass
class Work:
    """What the grid did, against what independent runs would have done."""

    embedding_passes: int = 0
    segmentations: int = 0
    builds: int = 0
    evaluations: int = 0
    naive_embedding_passes: int = 0
    naive_segmentations: int = 0
    naive_builds: int = 0
    naive_evaluations: int = 0
    embedder_loads: int = 0
    embed_calls: dict = field(default_factory=dict)
    embed_texts: dict = field(default_factory=dict)


@dataclass
class Segmentation:
    key: str
    convs: list[Conversation]
    seconds: float


@dataclass
class Build:
    key: str
    store_dir: str
    seconds: float
    first_variant: str


@dataclass
class Evaluation:
    key: str
    answers_path: str
    items: list
    seconds: float
    first_variant: str


@dataclass
class VariantRun:
    name: str
    cfg: LycheeConfig
    spec: VariantSpec | ReferenceSpec
    kind: str  # variant | reference
    segmentation: Segmentation | None
    build: Build | None
    evaluation: Evaluation
    marginal_s: float  # seconds this row added to the grid (0 for what it reused)
    standalone_s: float  # seconds an independent run of this row would have taken
    extra: dict = field(default_factory=dict)


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def read_conversations(cfg: LycheeConfig, input_path: str, limit: int | None) -> tuple[list[Conversation], list[str]]:
    """All usable conversations of the input, and one line per conversation that is not."""

    usable, problems = [], []
    for conv in iter_conversations(list_input_files(input_path), cfg.read_settings, root=input_path):
        if conv.status != "ok" or not conv.exchanges:
            problems.append(f"{conv.conversation_id} ({conv.source_file}): {conv.status}: {conv.error}")
            continue
        usable.append(conv)
        if limit and len(usable) >= limit:
            break
    return usable, problems


def embed_turns(convs: list[Conversation], embedder: CountingEmbedder, cfg: LycheeConfig) -> None:
    embedder.phase = "turns"
    EmbedTurnsStage(cfg, embedder).process_batch(convs)  # every conversation in one call: one pass for the grid


def balanced_windows(n_exchanges: int, n_windows: int):
    """Content-blind windows: `n_windows` runs of consecutive exchanges whose sizes differ by at
    most one (N = n_exchanges / n_windows per call, rounded per window)."""

    n_windows = max(1, min(n_windows, n_exchanges))
    edges = np.linspace(0, n_exchanges, n_windows + 1).round().astype(int)
    return [Boundary(int(a), int(b), 1.0, "window") for a, b in zip(edges[:-1], edges[1:])]


def segmentation_key(cfg: LycheeConfig, matched: Segmentation | None) -> str:
    enc = cfg.encoder
    if matched is not None:
        return _hash("window_matched", matched.key)
    if enc.mode == "segment":
        return _hash("segment", cfg.segmenter.model_dump(mode="json"))
    return _hash(enc.mode, enc.window_exchanges if enc.mode == "window" else None)


def segment_all(convs: list[Conversation], cfg: LycheeConfig, matched: Segmentation | None, key: str) -> Segmentation:
    start = time.perf_counter()
    out = copy.deepcopy(convs)
    if matched is None:
        SegmentStage(cfg).process_batch(out)
    else:
        calls = {c.conversation_id: len(c.segments) for c in matched.convs}
        for conv in out:
            ex_tokens = capped_exchange_tokens(conv, cfg.segmenter.token_cap, token_counter(cfg.tokenizer_spec))
            bounds = balanced_windows(len(conv.exchanges), calls[conv.conversation_id])
            conv.segments = segments_from_bounds(conv.exchanges, ex_tokens, bounds)
    return Segmentation(key, out, time.perf_counter() - start)


def build_store(seg: Segmentation, cfg: LycheeConfig, store_dir: Path, embedder: CountingEmbedder, key: str, variant: str) -> Build:
    """Encode + organize + write one store: the ingest pipeline from its encode stage on, run in
    this process with the grid's one loaded model."""

    start = time.perf_counter()
    if store_dir.exists():
        shutil.rmtree(store_dir)  # a grid run rebuilds; a stale store of another build must not mix in
    prepare_output(str(store_dir), cfg)
    embedder.phase = "records_nodes"
    ingest_pipeline(cfg, str(store_dir), start="encode", embedder=embedder).in_process(copy.deepcopy(seg.convs))
    finalize_manifest(str(store_dir))
    return Build(key, str(store_dir), time.perf_counter() - start, variant)


def first_per_conversation(items: list, limit: int | None) -> list:
    if not limit:
        return items
    seen: Counter = Counter()
    kept = []
    for item in items:
        seen[item.conversation_id] += 1
        if seen[item.conversation_id] <= limit:
            kept.append(item)
    return kept


def evaluate_store(build: Build, cfg: LycheeConfig, embedder: CountingEmbedder, out_dir: Path, key: str, variant: str, per_conv: int | None = None) -> Evaluation:
    start = time.perf_counter()
    store = open_store(build.store_dir, cfg)
    items = first_per_conversation(load_questions(store, cfg, None), per_conv)
    embedder.phase = "queries"
    items = evaluate_in_process(cfg, build.store_dir, items, embedder)
    if cfg.llm.backend == "rules":
        estimate_query_tokens(items, QueryEngine(cfg, store, embedder), with_plan=True)
    store.close()
    path = write_answer_part(items, str(out_dir / "evals" / variant))
    return Evaluation(key, str(path), items, time.perf_counter() - start, variant)


# --------------------------------------------------------------------------------------------
# References: full context and naive RAG, answered and judged like the variants
# --------------------------------------------------------------------------------------------
def evaluate_reference(ref: ReferenceSpec, build: Build, cfg: LycheeConfig, embedder: CountingEmbedder, out_dir: Path, per_conv: int | None = None) -> Evaluation:
    start = time.perf_counter()
    store = open_store(build.store_dir, cfg)
    engine = QueryEngine(cfg, store, embedder)
    items = first_per_conversation([i for i in load_questions(store, cfg, None) if i.status == "ok"], per_conv)
    embedder.phase = "queries"
    if ref.name == "naive_rag":
        fill_naive_rag(items, engine, embedder)
    else:
        fill_full_context(items, engine, ref.context_tokens or cfg.serve.max_model_len)
    for item in items:
        item.evidence_recall = evidence_recall(item.evidence_turn_ids, item.retrieved_turn_ids)
    for stage in (AnswerStage(cfg), JudgeStage(cfg)):
        stage.setup()
        items = stage.process_batch(items)
    if cfg.llm.backend == "rules":
        estimate_query_tokens(items, engine, with_plan=False)
    store.close()
    path = write_answer_part(items, str(out_dir / "evals" / ref.name))
    return Evaluation(_hash(ref.name, build.key), str(path), items, time.perf_counter() - start, ref.name)


def fill_naive_rag(items: list, engine: QueryEngine, embedder: CountingEmbedder) -> None:
    """Top raw turns by vector, cut to the same context budget as the variants."""

    budget = engine.cfg.retrieval.context_token_budget
    qvecs = embedder.encode([i.question for i in items])
    for item, qv in zip(items, qvecs):
        sel = baseline_turns(engine.store, "naive_rag", item.conversation_id, item.question, qv, budget, count=engine.count_tokens,
                             show_sources=engine.cfg.retrieval.evidence_sources)
        item.evidence = [e.prompt_item() for e in sel]
        item.retrieved_turn_ids = [e.source_turn_ids[0] for e in sel]
        item.context_tokens = sum(e.tokens for e in sel)


def fill_full_context(items: list, engine: QueryEngine, context_tokens: int) -> None:
    """The whole conversation as evidence, in order; when it does not fit the model's context
    (minus the prompt and the answer), the oldest turns are dropped and the cut is counted."""

    count = engine.count_tokens  # the model's context is in its own tokens
    by_conv: dict[str, tuple[list[EvidenceItem], list[str], list[int]]] = {}
    for item in items:
        cid = item.conversation_id
        if cid not in by_conv:
            turns = whole_conversation(engine, cid)
            evidence = [e.prompt_item() for e in turns]
            costs = [count(e.line()) for e in evidence]
            by_conv[cid] = (evidence, [e.row.turn_id for e in turns], costs)
        evidence, turn_ids, costs = by_conv[cid]
        frame = sum(count(m["content"]) for m in answer_messages(item.benchmark, item.question, item.question_date, ""))
        room = context_tokens - frame - engine.cfg.query.max_answer_tokens
        keep = len(costs)
        used = 0
        for i in range(len(costs) - 1, -1, -1):  # newest first
            if used + costs[i] > room:
                keep = len(costs) - 1 - i
                break
            used += costs[i]
        first = len(costs) - keep
        item.evidence = evidence[first:]
        item.retrieved_turn_ids = turn_ids[first:]
        item.context_tokens = used
        item.dropped_turns = first
        item.dropped_tokens = sum(costs[:first])


def whole_conversation(engine: QueryEngine, conversation_id: str) -> list[Evidence]:
    """Every turn of the conversation as raw-turn evidence, in order."""
    pool = CandidatePool(engine.retriever.conversation(conversation_id), engine.cfg.retrieval.evidence_sources)
    return [pool[key] for key in pool.add_turns(list(range(pool.conv.turns.n)))]


def estimate_query_tokens(items: list, engine: QueryEngine, with_plan: bool) -> None:
    """Under the rules backend no LLM is asked; count (o200k) the planner and answer prompts and
    replies an LLM would get, as build_stats does for the encoder (est_* columns)."""

    for item in items:
        if item.status != "ok":
            continue
        prompt = sum(count_tokens(m["content"]) for m in answer_messages(item.benchmark, item.question, item.question_date, format_evidence(item.evidence)))
        completion = count_tokens(json.dumps({"answer": item.prediction}))
        if with_plan:
            known = engine.known_entities(item.conversation_id)
            prompt += sum(count_tokens(m["content"]) for m in plan_messages(item.question, item.question_date, known))
            completion += count_tokens(item.plan_json or "")
        item.est_prompt_tokens = prompt
        item.est_completion_tokens = completion


# --------------------------------------------------------------------------------------------
# The grid
# --------------------------------------------------------------------------------------------
@dataclass
class GridResult:
    out_dir: str
    table_path: str
    report_path: str
    work: Work
    rows: list[dict]
    problems: list[str]
    wall_s: float

    def render(self) -> str:
        w = self.work
        lines = [
            f"ablate -> {self.out_dir} ({self.wall_s:.1f} s)",
            f"  table: {self.table_path}; report: {self.report_path}",
            f"  work done / naive sum: embedding passes {w.embedding_passes}/{w.naive_embedding_passes}, segmentations {w.segmentations}/{w.naive_segmentations}, "
            f"builds {w.builds}/{w.naive_builds}, evaluations {w.evaluations}/{w.naive_evaluations}",
        ]
        for r in self.rows:
            lines.append(f"  {r['variant']:<16} build tokens/conv {r['build_total_tokens']:>10.0f}  recall {r['recall'] or 0:.3f}  F1 {r['f1'] or 0:.3f}")
        if self.problems:
            lines.append("  not usable: " + "; ".join(self.problems[:10]))
        return "\n".join(lines)


class GridRunner:
    """Runs the variants of a grid, computing each distinct piece of work once."""

    def __init__(self, grid: Grid, input_path: str, out_dir: str, embedder=None):
        self.grid, self.input_path, self.out = grid, input_path, Path(out_dir)
        self.work = Work()
        self._embedder = embedder
        self.segmentations: dict[str, Segmentation] = {}
        self.builds: dict[str, Build] = {}
        self.evaluations: dict[str, Evaluation] = {}
        self.by_variant_seg: dict[str, Segmentation] = {}

    def embedder(self) -> CountingEmbedder:
        if self._embedder is None:
            self._embedder = Embedder(self.grid.base.embedding)
            self.work.embedder_loads += 1
        if not isinstance(self._embedder, CountingEmbedder):
            self._embedder = CountingEmbedder(self._embedder)
        return self._embedder

    def run(self) -> list[VariantRun]:
        self.progress = Progress(len(self.grid.variants) + len(self.grid.references), "ablate", "grid point")
        try:
            return self._run()
        finally:
            self.progress.close()

    def _run(self) -> list[VariantRun]:
        grid = self.grid
        self.out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        self.progress.phase("reading and embedding the conversations once for every grid point")
        convs, self.problems = read_conversations(grid.base, self.input_path, grid.spec.max_conversations)
        if not convs:
            raise ConfigError(f"input {self.input_path} holds no usable conversation: " + "; ".join(self.problems[:5]))
        embedder = self.embedder()
        embed_turns(convs, embedder, grid.base)
        self.convs = convs
        self.shared_s = time.perf_counter() - start  # read + model load + turn embeddings
        self.work.embedding_passes = 1
        n_rows = len(grid.variants) + len(grid.references)
        self.work.naive_embedding_passes = n_rows
        self.work.naive_segmentations = self.work.naive_builds = len(grid.variants)
        self.work.naive_evaluations = n_rows
        # Targets of window_matches first: their segment counts size the windows.
        targets = {v.window_matches for v in grid.variants if v.window_matches}
        ordered = sorted(grid.variants, key=lambda v: (v.window_matches is not None, v.name not in targets))
        runs = {}
        for v in ordered:
            self.progress.start(v.name)
            runs[v.name] = self.run_variant(v)
            self.progress.update()
        out = [runs[v.name] for v in grid.variants]
        for ref in grid.references:
            self.progress.start(ref.name)
            out.append(self.run_reference(ref, runs[grid.spec.reference_build]))
            self.progress.update()
        self.work.embed_calls = dict(embedder.calls)
        self.work.embed_texts = dict(embedder.texts)
        return out

    def run_variant(self, v: VariantSpec) -> VariantRun:
        cfg = self.grid.configs[v.name]
        marginal = 0.0
        matched = self.by_variant_seg[v.window_matches] if v.window_matches else None
        skey = segmentation_key(cfg, matched)
        if skey not in self.segmentations:
            self.progress.phase("segment")
            self.segmentations[skey] = segment_all(self.convs, cfg, matched, skey)
            self.work.segmentations += 1
            marginal += self.segmentations[skey].seconds
        seg = self.segmentations[skey]
        self.by_variant_seg[v.name] = seg
        bkey = _hash(cfg.build_hash(), skey)
        if bkey not in self.builds:
            log.info("ablate: building %s (%s)", v.name, bkey)
            self.progress.phase("build the store (encode, organize, write)")
            self.builds[bkey] = build_store(seg, cfg, self.out / "builds" / v.name, self.embedder(), bkey, v.name)
            self.work.builds += 1
            marginal += self.builds[bkey].seconds
        build = self.builds[bkey]
        ekey = _hash(bkey, cfg.retrieval.model_dump(mode="json"), cfg.evaluate.model_dump(mode="json"), cfg.llm.model_dump(mode="json"))
        if ekey not in self.evaluations:
            log.info("ablate: evaluating %s", v.name)
            self.progress.phase("evaluate")
            self.evaluations[ekey] = evaluate_store(build, cfg, self.embedder(), self.out, ekey, v.name, self.grid.spec.questions_per_conversation)
            self.work.evaluations += 1
            marginal += self.evaluations[ekey].seconds
        ev = self.evaluations[ekey]
        standalone = self.shared_s + seg.seconds + build.seconds + ev.seconds
        return VariantRun(v.name, cfg, v, "variant", seg, build, ev, marginal, standalone)

    def run_reference(self, ref: ReferenceSpec, base_run: VariantRun) -> VariantRun:
        cfg = base_run.cfg
        log.info("ablate: reference %s", ref.name)
        self.progress.phase("evaluate")
        ev = evaluate_reference(ref, base_run.build, cfg, self.embedder(), self.out, self.grid.spec.questions_per_conversation)
        self.work.evaluations += 1
        # An independent reference run needs the turns embedded and stored, not encoded.
        return VariantRun(ref.name, cfg, ref, "reference", None, None, ev, ev.seconds, self.shared_s + ev.seconds)


def run_ablation(grid: Grid, input_path: str, out_dir: str, embedder=None) -> GridResult:
    start = time.perf_counter()
    runner = GridRunner(grid, input_path, out_dir, embedder)
    runs = runner.run()
    save_state(Path(out_dir), grid, runner, runs)
    rows = write_report(grid, runner, runs, Path(out_dir), time.perf_counter() - start)
    wall = time.perf_counter() - start
    return GridResult(out_dir, str(Path(out_dir) / "ablation.parquet"), str(Path(out_dir) / "ablation.md"), runner.work, rows, runner.problems, wall)


@dataclass
class SavedRunner:
    """What the report needs of a finished runner, without the loaded model."""

    work: Work
    problems: list[str]
    convs: list


def save_state(out: Path, grid: Grid, runner: GridRunner, runs: list[VariantRun]) -> Path:
    """Pickle the finished runs (answers included, conversations left out) so the report can be
    redone with `rewrite_report` without rerunning the grid."""
    import pickle

    light = [copy.copy(r) for r in runs]
    for r in light:
        r.segmentation = None
    saved = SavedRunner(runner.work, runner.problems, [c.conversation_id for c in runner.convs])
    path = out / "grid_state.pkl"
    path.write_bytes(pickle.dumps((grid, saved, light)))
    return path


def rewrite_report(out_dir: str, wall_s: float = float("nan")) -> list[dict]:
    import pickle


    grid, saved, runs = pickle.loads((Path(out_dir) / "grid_state.pkl").read_bytes())
    return write_report(grid, saved, runs, Path(out_dir), wall_s)
