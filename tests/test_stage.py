"""The stage base: declared resources reach Ray Data, failures are permanent or transient,
counters are kept per stage, teardown runs."""

from __future__ import annotations

import json
from functools import partial

import pytest

from lychee_ray.ingest.summary import IngestSummary
from lychee_ray.runtime.stage import (
    AsyncStage,
    AsyncStageUDF,
    Resources,
    Stage,
    StageUDF,
    TransientError,
    apply_stage,
)
from lychee_ray.schemas import Conversation


class Boom(Stage[Conversation]):
    name = "boom"
    resources = Resources(num_cpus=0.5, batch_size=3)

    def __init__(self):
        self.closed = False

    def process(self, conv):
        if conv.conversation_id == "down":
            raise TransientError("endpoint refused the connection")
        if conv.conversation_id == "bad":
            raise ValueError("no turns")

    def teardown(self):
        self.closed = True


class Waiter(AsyncStage[Conversation]):
    name = "wait"

    def __init__(self, actors: int):
        self.resources = Resources(num_cpus=0.25, num_gpus=0.5, num_actors=actors, batch_size=7)

    async def process_async(self, conv):
        if conv.conversation_id == "down":
            raise TransientError("429")


def convs(*ids):
    return [Conversation(conversation_id=i, source="chat_jsonl", source_file="x.jsonl") for i in ids]


def test_failures_are_permanent_or_transient_and_counted():
    stage = Boom()
    out = stage.process_batch(convs("ok", "bad", "down"))
    assert [c.status for c in out] == ["ok", "error", "pending"]
    assert "ValueError: no turns" in out[1].error and "TransientError" in out[2].error
    assert stage.stats == {"items": 1, "errors": 1, "transient": 1}
    assert set(out[0].seconds) == {"boom"}
    stage.close()
    assert stage.closed


def test_async_stage_marks_pending_and_skips_finished_items():
    stage = Waiter(actors=2)
    items = convs("a", "down")
    items[0].status = "error"  # an earlier stage failed it: passed through untouched
    out = stage.process_batch(items)
    assert [c.status for c in out] == ["error", "pending"]
    assert stage.stats == {"transient": 1}


class RecordingDataset:
    def __init__(self):
        self.calls = []

    def map_batches(self, fn, **kwargs):
        self.calls.append((fn, kwargs))
        return self


def test_apply_stage_uses_the_declared_resources():
    ds = RecordingDataset()
    apply_stage(ds, Boom)
    apply_stage(ds, partial(Waiter, 3))
    apply_stage(ds, partial(Waiter, 1), batch_size=50)
    (fn0, kw0), (fn1, kw1), (_, kw2) = ds.calls
    # the operator is named after the stage (Ray Data's progress bars, a stalled run's sentence)
    assert fn0.__name__ == "boom" and kw0["num_cpus"] == 0.5 and kw0["batch_size"] == 3 and "compute" not in kw0
    assert issubclass(fn1, AsyncStageUDF) and fn1.__name__ == "wait" and kw1["compute"].max_size == 3
    assert (kw1["num_cpus"], kw1["num_gpus"], kw1["batch_size"]) == (0.25, 0.5, 7)
    assert kw2["batch_size"] == 50


def test_udf_closes_its_stage():
    udf = StageUDF(Boom)
    stage = udf.stage
    del udf
    assert stage.closed


@pytest.mark.parametrize("status", ["error", "empty", "duplicate", "pending"])
def test_finished_states_pass_through(status):
    (c,) = convs("bad")
    c.status = status
    Boom().process_batch([c])
    assert c.status == status and c.error is None


def test_ingest_summary_sums_and_prints_stage_seconds():
    summary = IngestSummary(out_dir="store")
    for status, seconds in (("ok", {"embed": 1.0, "encode": 2.0}), ("error", {"embed": 0.5})):
        summary.add({"conversation_id": "c", "status": status, "n_turns": 2, "n_segments": 1, "n_records": 1,
                     "llm_calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "stage_seconds": json.dumps(seconds)})
    assert summary.stage_seconds == {"embed": 1.5, "encode": 2.0}
    assert "embed 1.5, encode 2.0" in summary.render()
