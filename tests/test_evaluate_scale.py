"""Evaluate at scale: per-stage actors, batches and in-flight limits from config; questions
grouped by conversation all the way to the retrieve actors; baselines searched once per question
and cut per budget (equal to the old per-budget search on the generated store); the driver's
progress bar. The generated store (tests/support/generated.py), real MiniLM, real local Ray."""

from __future__ import annotations

import io
import json
import re
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from lychee_ray.config import load_config
from lychee_ray.config_sections import ConfigError
from lychee_ray.evaluate.answers import answer_row
from lychee_ray.evaluate.job import (
    Progress,
    check_cpus,
    evaluate_in_process,
    question_dataset,
    run_evaluate,
)
from lychee_ray.evaluate.questions import (
    QAItem,
    by_conversation,
    conversation_groups,
    load_questions,
)
from lychee_ray.evaluate.stages import (
    UNBOUNDED,
    AnswerStage,
    JudgeStage,
    PlanStage,
    RetrieveStage,
    cut_to_budget,
)
from lychee_ray.query.evidence import Evidence
from lychee_ray.query.retrieve import baseline_turns
from lychee_ray.tables import Turn
from lychee_ray.runtime.stage import apply_stage, unpack
from lychee_ray.store.reader import open_store

from .conftest import REPO
from .support.generated import LOCAL_CONFIG, local_config


# Two actors per stage inside the test session's 2-CPU Ray: fractions of a CPU each, so every
# pool starts at full size (2x(0.1 + 0.5 + 0.1 + 0.1) + the writer's 0.25 = 1.85).
TWO_ACTORS = [f"evaluate.stages.{s}.num_actors=2" for s in ("plan", "retrieve", "answer", "judge")]
SMALL_CPUS = ["evaluate.stages.plan.num_cpus=0.1", "evaluate.stages.retrieve.num_cpus=0.5",
              "evaluate.stages.answer.num_cpus=0.1", "evaluate.stages.judge.num_cpus=0.1"]


def qa(cid: str, qid: str) -> QAItem:
    return QAItem(cid, qid, f"question {qid}?", "gold", "single_hop", [], None)


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------
def test_stage_scale_defaults_and_cluster_values():
    cfg = load_config(LOCAL_CONFIG)
    stages = cfg.evaluate.stages
    assert [getattr(stages, s).num_actors for s in ("plan", "retrieve", "answer", "judge")] == [1, 1, 1, 1]
    assert stages.retrieve.num_cpus == 1.0 and stages.plan.num_cpus == 0.25
    # without its own batch_size a stage takes questions_per_batch; plan takes retrieve's groups
    assert cfg.evaluate.batch_size("answer") == cfg.evaluate.questions_per_batch == 16
    over = load_config(LOCAL_CONFIG, ["evaluate.stages.retrieve.batch_size=40", "evaluate.stages.judge.batch_size=8"])
    assert over.evaluate.batch_size("plan") == over.evaluate.batch_size("retrieve") == 40
    assert over.evaluate.batch_size("judge") == 8 and over.evaluate.batch_size("answer") == 16

    cluster = load_config(REPO / "configs" / "cluster.yaml").evaluate.stages
    assert cluster.retrieve.num_actors > 1 and cluster.plan.num_actors > 1 and cluster.answer.num_actors > 1
    assert cluster.retrieve.batch_size and cluster.plan.in_flight and cluster.answer.in_flight


@pytest.mark.parametrize(
    "override, message",
    [
        ("evaluate.stages.retrieve.in_flight=8", "evaluate.stages.retrieve.in_flight: retrieve asks no LLM"),
        ("evaluate.stages.plan.batch_size=8", "set evaluate.stages.retrieve.batch_size"),
        ("evaluate.stages.answer.num_actors=0", "evaluate.stages.answer.num_actors"),
        ("evaluate.stages.judge.in_flight=0", "evaluate.stages.judge.in_flight"),
        ("evaluate.stages.retrieve.num_cpus=0", "evaluate.stages.retrieve.num_cpus"),
        ("evaluate.stages.rerank.num_actors=2", "evaluate.stages.rerank"),
        ("evaluate.questions_per_batch=0", "evaluate.questions_per_batch"),
    ],
)
def test_bad_stage_settings_are_one_config_error_naming_the_field(override, message):
    with pytest.raises(ConfigError) as err:
        load_config(LOCAL_CONFIG, [override])
    assert message in str(err.value) and str(LOCAL_CONFIG) in str(err.value)


def test_stages_declare_their_resources_from_config():
    cfg = load_config(LOCAL_CONFIG, [*TWO_ACTORS, *SMALL_CPUS, "evaluate.stages.retrieve.batch_size=48",
                                     "evaluate.stages.answer.batch_size=12", "evaluate.stages.answer.in_flight=5",
                                     "llm.max_in_flight=7"])
    plan, retrieve, answer, judge = PlanStage(cfg, "s"), RetrieveStage(cfg, "s"), AnswerStage(cfg), JudgeStage(cfg)
    assert [s.resources.num_actors for s in (plan, retrieve, answer, judge)] == [2, 2, 2, 2]
    assert [s.resources.num_cpus for s in (plan, retrieve, answer, judge)] == [0.1, 0.5, 0.1, 0.1]
    # plan and retrieve take whole blocks (the conversation groups); the others rebatch
    assert plan.resources.batch_size is None and retrieve.resources.batch_size is None
    assert answer.resources.batch_size == 12 and judge.resources.batch_size == 16
    assert (plan.max_in_flight, answer.max_in_flight, judge.max_in_flight) == (7, 5, 7)


def test_actors_beyond_the_local_cpus_are_refused_before_they_hang(ray_local):
    # Ray starts every pool at full size: 3 retrieve actors of 1 CPU can never all start on 2 CPUs.
    check_cpus(local_config(*SMALL_CPUS))  # 1.05 of 2: fine
    with pytest.raises(ConfigError) as err:
        check_cpus(local_config("evaluate.stages.retrieve.num_actors=3"))
    assert "evaluate.stages ask for 4 logical CPUs" in str(err.value) and "retrieve 3x1" in str(err.value)
    assert "Ray has 2" in str(err.value)


# --------------------------------------------------------------------------------------------
# Grouping by conversation
# --------------------------------------------------------------------------------------------
def test_questions_are_grouped_by_conversation_in_order():
    # a questions file may interleave conversations
    items = [qa(c, f"{c}-{i}") for i in range(5) for c in ("b", "a", "c")] + [qa("d", "d-0")]
    ordered = by_conversation(items)
    assert [i.conversation_id for i in ordered] == ["b"] * 5 + ["a"] * 5 + ["c"] * 5 + ["d"]
    assert [i.question_id for i in ordered if i.conversation_id == "a"] == [f"a-{i}" for i in range(5)]

    groups = conversation_groups(items, 7)
    assert [i for g in groups for i in g] == ordered  # every question once, in grouped order
    assert [[i.question_id for i in g] for g in groups] == [
        [f"b-{i}" for i in range(5)],
        [f"a-{i}" for i in range(5)],
        [f"c-{i}" for i in range(5)] + ["d-0"],  # whole conversations share a batch while they fit
    ]
    # a conversation longer than the batch is cut into consecutive pieces, each alone
    long = [qa("x", f"x-{i}") for i in range(9)] + [qa("y", "y-0")]
    assert [[i.question_id for i in g] for g in conversation_groups(long, 4)] == [
        ["x-0", "x-1", "x-2", "x-3"], ["x-4", "x-5", "x-6", "x-7"], ["x-8"], ["y-0"]]
    for size in (1, 2, 3, 5, 16):
        for g in conversation_groups(items, size):
            assert len(g) <= size
            convs = [i.conversation_id for i in g]
            # a batch is whole conversations, or a piece of one
            assert len(set(convs)) == 1 or all(sum(i.conversation_id == c for i in items) == convs.count(c) for c in convs)


def test_retrieve_actors_get_whole_conversation_groups(synth_store_dir, ray_local):
    """Through plan (2 actors) and retrieve (2 actors), every block retrieve emits is exactly one
    of the groups the job made: Ray Data never mixed or split them on the way."""
    cfg = local_config(*TWO_ACTORS, *SMALL_CPUS, "evaluate.baselines=[]")
    items = interleaved_items(synth_store_dir, cfg, per_conversation=9)
    groups = conversation_groups(items, 7)
    ds = question_dataset(items, 7)
    for factory in (partial(PlanStage, cfg, str(synth_store_dir)), partial(RetrieveStage, cfg, str(synth_store_dir))):
        ds = apply_stage(ds, factory)
    out = [frozenset(i.question_id for i in unpack(b)) for b in ds.iter_batches(batch_size=None, batch_format="numpy")]
    assert sorted(out, key=sorted) == sorted((frozenset(i.question_id for i in g) for g in groups), key=sorted)
    assert len(groups) >= 6  # 3 conversations x 9 questions in pieces of 7: several groups to spread


# --------------------------------------------------------------------------------------------
# Two actors per stage = one
# --------------------------------------------------------------------------------------------
def interleaved_items(store_dir: Path, cfg, per_conversation: int) -> list[QAItem]:
    """`per_conversation` questions of each stored conversation, interleaved round-robin."""
    items = load_questions(open_store(str(store_dir), cfg), cfg, None)
    by_conv: dict[str, list[QAItem]] = {}
    for it in items:
        by_conv.setdefault(it.conversation_id, []).append(it)
    picked = [qs[:per_conversation] for qs in by_conv.values()]
    assert len(picked) == 3 and all(len(p) == per_conversation for p in picked)
    return [q for row in zip(*picked) for q in row]


def write_questions(items: list[QAItem], path: Path) -> Path:
    path.write_text("".join(json.dumps({"conversation_id": i.conversation_id, "question_id": i.question_id, "question": i.question,
                                        "answer": i.gold, "category": i.category, "evidence_turn_ids": i.evidence_turn_ids,
                                        "question_date": i.question_date}) + "\n" for i in items))
    return path


def rows_by_id(out: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in pq.read_table(out / "answers").to_pylist()}


def test_two_actors_per_stage_give_the_same_answers_as_one(synth_store_dir, ray_local, tmp_path, capsys):
    one = local_config(*SMALL_CPUS, "evaluate.questions_per_batch=5")
    two = local_config(*TWO_ACTORS, *SMALL_CPUS, "evaluate.questions_per_batch=5")
    items = interleaved_items(synth_store_dir, one, per_conversation=8)
    qfile = write_questions(items, tmp_path / "questions.jsonl")
    n = len(items)

    capsys.readouterr()
    assert run_evaluate(one, str(synth_store_dir), str(tmp_path / "one"), str(qfile)).asked == n
    # the driver counted every committed answer (pytest's stderr is no terminal: whole lines)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evaluate: ")]
    assert lines[-1] == f"evaluate: {n}/{n} questions done (100%)"
    assert all(re.fullmatch(rf"evaluate: \d+/{n} questions done \(\d+%\)", line) for line in lines)
    assert run_evaluate(two, str(synth_store_dir), str(tmp_path / "two"), str(qfile)).asked == n

    a, b = rows_by_id(tmp_path / "one"), rows_by_id(tmp_path / "two")
    assert set(a) == {i.question_id for i in items} and a == b
    assert all(r["status"] == "ok" and r["naive_rag_curve"] and r["bm25_curve"] for r in a.values())

    # ... and the in-process path (the ablation grid's) gives the same rows, in the given order
    again = interleaved_items(synth_store_dir, one, per_conversation=8)
    done = evaluate_in_process(one, str(synth_store_dir), again)
    assert [i.question_id for i in done] == [i.question_id for i in items]
    assert {i.question_id: answer_row(i) for i in done} == a


# --------------------------------------------------------------------------------------------
# Baselines: one search per question, cut per budget
# --------------------------------------------------------------------------------------------
def ev(key: str, tokens: int) -> Evidence:
    return Evidence(key, Turn(turn_id=key, turn_idx=0, session_id="s", speaker="a", role="a", text=key), tokens=tokens)


def test_smaller_budgets_are_cut_from_the_ranking_not_from_the_largest_selection():
    ranked = [ev("a", 90), ev("b", 30), ev("c", 30), ev("d", 5)]
    assert [e.key for e in cut_to_budget(ranked, 100)] == ["a", "d"]
    # budget_topk skips what does not fit and takes later, cheaper hits: not prefix-stable
    assert [e.key for e in cut_to_budget(ranked, 60)] == ["b", "c"]
    assert [e.key for e in cut_to_budget(ranked, 0)] == [] and cut_to_budget([], 50) == []
    assert [e.key for e in cut_to_budget(ranked, UNBOUNDED)] == ["a", "b", "c", "d"]


def test_baseline_cut_equals_the_per_budget_search_on_the_generated_store(synth_store_dir, generated_locomo, ray_local):
    from lychee_ray.embedding import Embedder
    from lychee_ray.tokens import token_counter

    cfg = local_config()
    store = open_store(str(synth_store_dir), cfg)
    items = [i for i in load_questions(store, cfg, None) if i.status == "ok"]
    # every question but the abstentions, which LoCoMo's numbering files as adversarial (5, not evaluated)
    assert len(items) == sum(q["category"] != "abstention" for q in generated_locomo.questions) > 0
    qvecs = Embedder(cfg.embedding).encode([i.question for i in items])
    count = token_counter(cfg.tokenizer_spec).count
    budgets = sorted({*cfg.evaluate.recall_budgets, cfg.retrieval.context_token_budget, 1, 37, 5000})
    differs = 0
    for item, qv in zip(items, qvecs):
        for kind in ("naive_rag", "bm25"):
            ranked = baseline_turns(store, kind, item.conversation_id, item.question, qv, UNBOUNDED, count=count)
            assert ranked, (kind, item.question_id)
            for b in budgets:
                old = baseline_turns(store, kind, item.conversation_id, item.question, qv, b, count=count)
                new = cut_to_budget(ranked, b)
                assert [(e.key, e.tokens) for e in new] == [(e.key, e.tokens) for e in old], (kind, item.question_id, b)
                # how often a smaller budget keeps a hit the largest one dropped (not a prefix)
                differs += not {e.key for e in new} <= {e.key for e in cut_to_budget(ranked, budgets[-1])}
    store.close()
    print(f"selections that are no subset of the largest budget's: {differs}")


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------
class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_a_tqdm_bar_with_the_total():
    term = FakeTerminal()
    with Progress(40, "evaluate", "question", stream=term) as bar:
        for _ in range(10):
            bar.update(4)
    text = term.getvalue()
    assert "\r" in text and "40/40" in text and "evaluate" in text


def test_progress_off_a_terminal_writes_whole_lines():
    log = io.StringIO()
    with Progress(7, "ablate", "grid point", stream=log) as bar:
        bar.phase("reading")
        for i, name in enumerate(["full", "eager", "window", "vector_only", "delta_0.30", "full_context", "naive_rag"]):
            bar.start(name)
            bar.phase("build")
            bar.update()
    lines = log.getvalue().splitlines()
    assert "\r" not in log.getvalue()
    assert lines[0] == "ablate: reading"
    assert "ablate: eager [2/7, 5 after it]" in lines and "ablate: eager: build" in lines
    assert "ablate: naive_rag [7/7, 0 after it]" in lines
    assert lines[-1] == "ablate: 7/7 grid points done (100%)"
    # a line per tenth: with 1000 items, 11 lines, not 1000
    log = io.StringIO()
    with Progress(1000, "evaluate", "question", stream=log) as bar:
        for _ in range(1000):
            bar.update()
    assert len(log.getvalue().splitlines()) == 11
