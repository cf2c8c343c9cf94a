"""Stage base classes and the one adapter that turns a stage into a Ray Data `map_batches` call.

A stage is plain Python: `setup()` once per worker (load a model, open a client), then
`process_batch(conversations)`. It never calls Ray, so the same object runs in a unit test and
in a Ray actor. Failures are per conversation: an exception marks that conversation `error`
with the stage's name and the message, and the batch goes on. Later stages pass such
conversations through untouched so the writer still records them.

Between stages a conversation travels as one pickled `Conversation` in a binary column, next to
its id. The nested, variable-shaped state (turns, segments, records, arrays) is internal; the
typed Arrow schemas apply where it matters, at the Parquet tables.
"""

from __future__ import annotations

import asyncio
import logging
import pickle
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from lychee_ray.schemas import Conversation

log = logging.getLogger(__name__)

# Items in these states carry no work for later stages, only rows for the writer. `pending`
# (a transient failure) is retried by the next run, not by a later stage of this one.
PASS_THROUGH = frozenset({"error", "empty", "duplicate", "pending"})

Item = TypeVar("Item")  # what a stage processes: a Conversation (ingest) or a QAItem (evaluate)


@dataclass(frozen=True)
class Resources:
    """What one worker of a stage needs. The Ray adapter turns it into `map_batches` arguments;
    a stage declares it (from its config), call sites do not."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    num_actors: int | None = None  # None: stateless tasks; N: a pool of N actors keeping setup() state
    batch_size: int | None = 8  # None: the whole block (Ray Data's meaning)


class TransientError(RuntimeError):
    """A failure that may pass by itself (endpoint down, rate limit, timeout): the item is
    recorded `pending` and redone by the next run. Any other exception is permanent: `error`."""


class Stage(Generic[Item]):
    """One step of a pipeline: plain Python, never calls Ray (`apply_stage` adapts it), so the
    same object runs in a unit test and in a Ray actor. Items are processed one by one; the
    failure of one item marks it and the batch goes on."""

    name = "stage"
    resources = Resources()

    def setup(self) -> None:
        """Load heavy resources; called once per worker before the first batch."""

    def teardown(self) -> None:
        """Close what setup() opened (stores, clients); called once when the worker is done."""

    def stat_update(self, key: str, value: int | float = 1) -> None:
        """Count something this stage did (items, errors, calls, tokens); logged at teardown.
        The counter is made on first use, so subclasses need not call a base __init__."""
        self.__dict__.setdefault("stats", Counter())[key] += value

    def process(self, item: Item) -> None:
        raise NotImplementedError

    def process_batch(self, items: list[Item]) -> list[Item]:
        for item in items:
            if item.status in PASS_THROUGH:
                continue
            with stage_timer(item, self.name):
                try:
                    self.process(item)
                    self.stat_update("items")
                except Exception as exc:  # one item's failure must not sink the batch
                    self.record_failure(item, exc)
        return items

    def record_failure(self, item, exc: BaseException) -> None:
        self.stat_update("transient" if isinstance(exc, TransientError) else "errors")
        mark_failed(item, self.name, exc)

    def log_stats(self) -> None:
        if stats := self.__dict__.get("stats"):
            log.info("stage %s: %s", self.name, ", ".join(f"{k}={v}" for k, v in sorted(stats.items())))

    def close(self) -> None:
        """teardown(), then the stage's counters to the log: the end of a worker's life."""
        try:
            self.teardown()
        finally:
            self.log_stats()


class AsyncStage(Stage[Item]):
    """A stage whose work is awaiting a remote service (the LLM); many items in flight."""

    max_in_flight = 32

    async def process_async(self, item: Item) -> None:
        raise NotImplementedError

    def work_estimate(self, item: Item) -> float:
        """Relative length of an item's sequential chain (e.g. its segments)."""
        return 0.0

    def _gate(self) -> asyncio.Semaphore:
        """`max_in_flight` items at once on this worker: one semaphore for every batch that
        runs concurrently on the actor's event loop (a new one for a new loop, in process)."""
        loop = asyncio.get_running_loop()
        if self.__dict__.get("_gate_loop") is not loop:
            self._gate_loop, self._gate_sem = loop, asyncio.Semaphore(self.max_in_flight)
        return self._gate_sem

    async def process_batch_async(self, items: list[Item]) -> list[Item]:
        gate = self._gate()

        async def one(item):
            if item.status in PASS_THROUGH:
                return
            async with gate:
                start = time.perf_counter()
                try:
                    await self.process_async(item)
                    self.stat_update("items")
                except Exception as exc:
                    self.record_failure(item, exc)
                finally:
                    add_seconds(item, self.name, time.perf_counter() - start)

        # Longest chain first: when more items wait than may be in flight, a long chain started
        # last would run alone at the end (the semaphore admits waiters in FIFO order).
        ordered = sorted(items, key=self.work_estimate, reverse=True)
        await asyncio.gather(*(one(c) for c in ordered))
        return items  # the batch keeps its input order

    def process_batch(self, items: list[Item]) -> list[Item]:
        return asyncio.run(self.process_batch_async(items))


def mark_failed(conv, stage: str, exc: BaseException) -> None:
    transient = isinstance(exc, TransientError)
    conv.status = "pending" if transient else "error"
    conv.error = f"{stage}: {type(exc).__name__}: {exc}"
    if transient:  # expected in an outage, for every conversation in flight: one line, no traceback
        log.warning("conversation %s is pending after %s: %s", conv.conversation_id, stage, conv.error)
    else:
        log.error("conversation %s failed in %s: %s", conv.conversation_id, stage, conv.error, exc_info=exc)


def add_seconds(item, stage: str, seconds: float) -> None:
    """Add to the `seconds` of the stage on a Conversation or a QAItem."""
    item.seconds[stage] = item.seconds.get(stage, 0.0) + seconds


class stage_timer:
    def __init__(self, conv: Conversation, stage: str):
        self.conv, self.stage = conv, stage

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        add_seconds(self.conv, self.stage, time.perf_counter() - self.start)
        return False


# --------------------------------------------------------------------------------------------
# Ray Data adapter
# --------------------------------------------------------------------------------------------
# A row holds one item, or a batch of them (`pack_batches`: a work-sized batch that every stage
# takes whole, see runtime/pipeline.py `WorkBatches`): its `state` then unpickles to a list, whose
# elements are items or, straight after batching, the items' own pickles (never unpickled there).
def work_of(item) -> int:
    """An item's share of a batch: a conversation's turns (each embedded, segmented, encoded
    and written), 1 for anything else (a question, a conversation with no turns)."""
    turns = getattr(item, "turns", None)
    return max(1, len(turns)) if turns is not None else 1


def pack(convs: list[Conversation]) -> dict[str, np.ndarray]:
    return {
        "conversation_id": np.array([c.conversation_id for c in convs], dtype=object),
        "state": np.array([pickle.dumps(c, protocol=5) for c in convs], dtype=object),
        "work": np.array([work_of(c) for c in convs], dtype=np.int64),
    }


def pack_batches(groups: list[list]) -> dict[str, np.ndarray]:
    """One row per group of items (a group of one is stored as its item, as `pack` does)."""
    groups = [g for g in groups if g]
    return {
        "conversation_id": np.array([g[0].conversation_id for g in groups], dtype=object),
        "state": np.array([pickle.dumps(g[0] if len(g) == 1 else list(g), protocol=5) for g in groups], dtype=object),
        "work": np.array([sum(work_of(i) for i in g) for g in groups], dtype=np.int64),
    }


def unpack_batches(batch: dict[str, Any]) -> list[list]:
    """The items of each row, as a list per row (one item for a row that `pack` made)."""
    out = []
    for blob in batch["state"]:
        obj = pickle.loads(blob)
        out.append([pickle.loads(x) if isinstance(x, bytes) else x for x in obj] if isinstance(obj, list) else [obj])
    return out


def unpack(batch: dict[str, Any]) -> list[Conversation]:
    return [item for group in unpack_batches(batch) for item in group]


def _process_rows(batch: dict[str, Any], process: Callable[[list], list]) -> dict[str, np.ndarray]:
    """`process` over every item of the batch's rows at once, the rows' grouping kept (a stage
    returns its items in order; one that returned another count gets a row per item)."""
    groups = unpack_batches(batch)
    items = [i for g in groups for i in g]
    out = process(items)
    if len(out) != len(items):
        return pack(out)
    bounds = np.cumsum([0] + [len(g) for g in groups])
    return pack_batches([out[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


class StageUDF:
    """Callable class for `map_batches`: builds the stage once per actor, runs it per batch."""

    def __init__(self, factory: Callable[[], Stage]):
        self.stage = factory()
        self.stage.setup()

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        return _process_rows(batch, self.stage.process_batch)

    def __del__(self):  # Ray Data drops the UDF when the actor pool shuts down
        self.stage.close()


class AsyncStageUDF(StageUDF):
    """The async twin: Ray Data drives `__call__` on the actor's event loop, so one actor keeps
    `max_in_flight` items waiting on the LLM at once."""

    async def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        groups = unpack_batches(batch)
        items = [i for g in groups for i in g]
        out = await self.stage.process_batch_async(items)
        bounds = np.cumsum([0] + [len(g) for g in groups])
        return pack_batches([out[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


def named(cls_or_fn, stage_name: str):
    """The UDF under the stage's name, so Ray Data calls its operator `MapBatches(<stage>)`
    (progress bars, and the sentence that names a stage that stopped moving)."""
    if isinstance(cls_or_fn, type):
        return type(stage_name, (cls_or_fn,), {"__module__": __name__})

    def run(batch, factory):
        return cls_or_fn(batch, factory)

    run.__name__ = run.__qualname__ = stage_name
    return run


def apply_stage(ds, factory: Callable[[], Stage], *, batch_size: int | None = None, cpu_scale: float = 1.0, whole_rows: bool = False):
    """Add one stage to a Ray Dataset with the resources the stage declares: an actor pool when
    it keeps state (a model, a client), plain tasks otherwise. `batch_size` overrides the
    declared one (evaluate sizes batches by the question count). `cpu_scale` shrinks an actor
    pool's CPU request (`fit_pools`: the pools leave CPUs free for the task stages).
    `whole_rows`: each row is already a work-sized batch (`pack_batches`): one row per call, and
    an async stage runs up to `max_in_flight` such rows at once on each actor."""
    import ray  # the stage layer stays importable (and testable) without starting Ray

    stage = factory()  # cheap: constructors keep config; setup() does the heavy work on a worker
    res = stage.resources
    batch_size = 1 if whole_rows else batch_size or res.batch_size
    if res.num_actors is None:
        return ds.map_batches(
            named(_run_stateless, stage.name), fn_args=(factory,), batch_size=batch_size, batch_format="numpy",
            num_cpus=res.num_cpus, num_gpus=res.num_gpus,
        )
    is_async = isinstance(stage, AsyncStage)
    udf = AsyncStageUDF if is_async else StageUDF
    calls = stage.max_in_flight if is_async and whole_rows else None
    return ds.map_batches(
        named(udf, stage.name),
        fn_constructor_args=(factory,),
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=res.num_actors, max_concurrent_calls_per_actor=calls),
        num_cpus=res.num_cpus * cpu_scale,
        num_gpus=res.num_gpus,
    )


def _run_stateless(batch: dict[str, Any], factory: Callable[[], Stage]) -> dict[str, np.ndarray]:
    stage = factory()
    stage.setup()
    try:
        return _process_rows(batch, stage.process_batch)
    finally:
        stage.close()
