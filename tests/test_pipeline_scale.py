"""Ingest at scale (issue 31), on the runtime alone: batches sized by work (a few long
conversations spread over as many blocks, many short ones packed into few), pools that leave
the write a CPU on a 2-CPU Ray (it commits while a slow stage still works), and a run where
nothing moves stopping with a sentence that names the stage."""

from __future__ import annotations

import json
import pickle
import random
import time
from functools import partial

import pyarrow as pa
import pytest
import ray

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.job import stalled_sentence
from lychee_ray.ingest.summary import IngestSummary
from lychee_ray.runtime.pipeline import Pipeline, PipelineStalled, WorkBatches, fit_pools, iter_rows, stalled_stages
from lychee_ray.runtime.stage import Resources, pack, unpack
from lychee_ray.store.stored_state import StoredConversation, StoredIndex

from .support.slow_stages import CommitSink, Greedy, Hang, conversation


def test_batches_hold_about_the_work_asked_and_a_long_conversation_alone():
    batching = WorkBatches(work=100, max_items=4)
    works = [30, 30, 30, 30, 500, 10, 10, 10, 10, 10, 10]
    spans = batching.bounds(works)
    assert spans == [(0, 3), (3, 4), (4, 5), (5, 9), (9, 11)]  # <= 100 turns, <= 4 conversations, 500 alone
    convs = [conversation(f"c{i}", w) for i, w in enumerate(works)]
    assert [[c.conversation_id for c in g] for g in batching.group(convs)] == [[f"c{i}" for i in range(a, b)] for a, b in spans]


def test_pools_leave_the_reserve_to_tasks_on_a_small_cluster_only():
    pools = [Resources(num_cpus=1, num_actors=1), Resources(num_cpus=0.5, num_actors=1), Resources(num_cpus=1, num_actors=1),
             Resources(num_cpus=0.5)]  # a task stage: not a pool
    assert fit_pools(pools, cluster_cpus=2, reserve_cpus=1) == pytest.approx(1 / 2.5)
    assert fit_pools(pools, cluster_cpus=200, reserve_cpus=1) == 1.0
    assert fit_pools(pools, cluster_cpus=0, reserve_cpus=1) == 1.0  # a head with no CPUs yet: the autoscaler adds them


def test_a_few_long_conversations_spread_and_many_short_ones_pack(ray_local):
    long = [conversation(f"long{i}", 600) for i in range(6)]
    one_block = ray.data.from_items([{"x": 0}]).map_batches(lambda _: pack(long), batch_format="numpy")  # as one file's read gives them
    spread = WorkBatches(work=1024, max_items=64).on_ray(one_block).materialize()
    assert spread.num_blocks() == 6
    assert sorted(c.conversation_id for c in unpack(spread.take_batch(100, batch_format="numpy"))) == sorted(c.conversation_id for c in long)

    short = [conversation(f"s{i}", 12) for i in range(3000)]
    many = ray.data.from_items([{"x": 0}]).map_batches(lambda _: pack(short), batch_format="numpy")
    packed = WorkBatches(work=1024, max_items=64).on_ray(many).materialize()
    assert 3000 * 12 / 1024 <= packed.num_blocks() <= 3000 / 64 + 2  # 12-turn chats: 64 a batch (768 turns)
    rows = packed.take_all()
    assert sum(len(unpack({"state": [r["state"]]})) for r in rows) == 3000


def test_the_write_commits_while_a_slow_stage_still_runs(ray_local, tmp_path):
    """The greedy stage's actor asks for both CPUs; fitted, it leaves one to the batching and
    the sink tasks, so commits land while it still works (unfitted, nothing can run beside it)."""
    assert ray.cluster_resources()["CPU"] == 2
    convs = [conversation(f"c{i}", 5) for i in range(6)]
    pipe = Pipeline([partial(Greedy, str(tmp_path), 1.0)], partial(CommitSink, str(tmp_path)), batching=WorkBatches(work=1, max_items=1))
    ds = pipe.on_ray(ray.data.from_items([{"x": 0}]).map_batches(lambda _: pack(convs), batch_format="numpy"), reserve_cpus=1.0)
    rows = list(iter_rows(ds, no_progress_timeout_s=120))
    assert sorted(r["conversation_id"] for r in rows) == sorted(c.conversation_id for c in convs)
    commits = sorted(json.loads(p.read_text()) for p in tmp_path.glob("commit-*.json"))
    stage_done = sorted(json.loads(p.read_text()) for p in tmp_path.glob("stage-*.json"))
    assert len(commits) == len(stage_done) == 6
    assert commits[0] < stage_done[-1], "no commit before the slow stage had finished every batch"


def test_a_run_where_nothing_moves_stops_naming_the_stage(ray_local, tmp_path):
    convs = [conversation("stuck", 3)]
    pipe = Pipeline([partial(Hang, 120.0)], partial(CommitSink, str(tmp_path)), batching=WorkBatches(work=1, max_items=1))
    ds = pipe.on_ray(ray.data.from_items([{"x": 0}]).map_batches(lambda _: pack(convs), batch_format="numpy"), reserve_cpus=1.0)
    start = time.monotonic()
    with pytest.raises(PipelineStalled) as err:
        list(iter_rows(ds, no_progress_timeout_s=8))
    assert time.monotonic() - start < 90
    assert err.value.stages == ["hang"]
    assert str(err.value) == "no stage made progress for 8 s; stages holding work: hang"


def test_ray_datas_no_progress_report_is_read_by_stage():
    report = ("Dataset execution made no progress for at least 8s of scheduling time (timeout: 8s). ...\nOperators still running:\n"
              "  - MapBatches(batch_by_work): 0 active task(s), 1 finished, 1 outputs taken\n"
              "  - MapBatches(encode): 2 active task(s), 0 finished, 0 outputs taken\n"
              "  - MapBatches(write): 0 active task(s), 0 finished, 0 outputs taken\nIf this is expected, ...")
    assert stalled_stages(report) == ["encode"]


def test_a_stalled_ingest_fails_with_one_sentence_naming_the_stage():
    summary = IngestSummary(out_dir="store")
    summary.by_status["ok"] = 12
    summary.stopped = stalled_sentence(PipelineStalled(1800, ["encode"]), summary)
    assert summary.stopped == ("the run stopped: no stage made progress for 1800 s (ray.no_progress_timeout_s), with work held by "
                               "stage encode; the 12 conversations written before are committed, and running the same command "
                               "again resumes after them.")
    assert summary.assess(LycheeConfig())[0] == summary.stopped


def test_the_stored_index_answers_as_the_dict_did_and_travels_as_arrow():
    rng = random.Random(0)
    ids = [f"conv-{rng.randrange(10**9):09d}-é" for _ in range(2000)]
    rows = {cid: (rng.randrange(1, 50), f"d{k}", rng.choice(["ok", "degraded", "error"])) for k, cid in enumerate(ids)}
    index = StoredIndex(pa.table({"conversation_id": list(rows), "n_turns": [r[0] for r in rows.values()],
                                  "turns_digest": [r[1] for r in rows.values()], "status": [r[2] for r in rows.values()]}))
    again = pickle.loads(pickle.dumps(index, protocol=5))
    for cid, (n, digest, status) in list(rows.items())[:300]:
        assert again[cid] == StoredConversation(n, digest, status) and cid in again
    for missing in ("", "conv-", "zzz", ids[0] + "x", 7):
        assert missing not in again and again.get(missing) is None
    assert len(again) == len(rows) and sorted(again) == sorted(rows) and again.any_turns()
    assert not StoredIndex.empty().any_turns() and len(StoredIndex.empty()) == 0
