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
from collections.abc import Callable
from typing import Any

import numpy as np

from lychee_ray.schemas import Conversation

log = logging.getLogger(__name__)

# Conversations in these states carry no work for later stages, only rows for the writer.
PASS_THROUGH = frozenset({"error", "empty", "duplicate"})


class Stage:
    name = "stage"

    def setup(self) -> None:
        """Load heavy resources; called once per worker before the first batch."""

    def process(self, conv: Conversation) -> None:
        raise NotImplementedError

    def process_batch(self, convs: list[Conversation]) -> list[Conversation]:
        for conv in convs:
            if conv.status in PASS_THROUGH:
                continue
            with stage_timer(conv, self.name):
                try:
                    self.process(conv)
                except Exception as exc:  # one conversation's failure must not sink the batch
                    mark_failed(conv, self.name, exc)
        return convs


class AsyncStage(Stage):
    """A stage whose work is awaiting a remote service (the LLM); many conversations in flight."""

    max_in_flight = 32

    async def process_async(self, conv: Conversation) -> None:
        raise NotImplementedError

    def work_estimate(self, conv: Conversation) -> float:
        """Relative length of a conversation's sequential chain (e.g. its segments)."""
        return 0.0

    async def process_batch_async(self, convs: list[Conversation]) -> list[Conversation]:
        gate = asyncio.Semaphore(self.max_in_flight)

        async def one(conv: Conversation):
            if conv.status in PASS_THROUGH:
                return
            async with gate:
                start = time.perf_counter()
                try:
                    await self.process_async(conv)
                except Exception as exc:
                    mark_failed(conv, self.name, exc)
                finally:
                    add_seconds(conv, self.name, time.perf_counter() - start)

        # Longest chain first: when more conversations wait than may be in flight, a long chain
        # started last would run alone at the end (the semaphore admits waiters in FIFO order).
        ordered = sorted(convs, key=self.work_estimate, reverse=True)
        await asyncio.gather(*(one(c) for c in ordered))
        return convs  # the batch keeps its input order

    def process_batch(self, convs: list[Conversation]) -> list[Conversation]:
        return asyncio.run(self.process_batch_async(convs))


def mark_failed(conv: Conversation, stage: str, exc: BaseException) -> None:
    conv.status = "error"
    conv.error = f"{stage}: {type(exc).__name__}: {exc}"
    log.error("conversation %s failed in %s: %s", conv.conversation_id, stage, conv.error, exc_info=exc)


def add_seconds(conv: Conversation, stage: str, seconds: float) -> None:
    key = f"{stage}_s"
    conv.stats[key] = conv.stats.get(key, 0.0) + seconds


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
def pack(convs: list[Conversation]) -> dict[str, np.ndarray]:
    return {
        "conversation_id": np.array([c.conversation_id for c in convs], dtype=object),
        "state": np.array([pickle.dumps(c, protocol=5) for c in convs], dtype=object),
    }


def unpack(batch: dict[str, Any]) -> list[Conversation]:
    return [pickle.loads(b) for b in batch["state"]]


class StageUDF:
    """Callable class for `map_batches`: builds the stage once per actor, runs it per batch."""

    def __init__(self, factory: Callable[[], Stage]):
        self.stage = factory()
        self.stage.setup()

    def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        return pack(self.stage.process_batch(unpack(batch)))


class AsyncStageUDF:
    """The async twin: Ray Data drives `__call__` on the actor's event loop, so one actor keeps
    `max_in_flight` conversations waiting on the LLM at once."""

    def __init__(self, factory: Callable[[], AsyncStage]):
        self.stage = factory()
        self.stage.setup()

    async def __call__(self, batch: dict[str, Any]) -> dict[str, np.ndarray]:
        return pack(await self.stage.process_batch_async(unpack(batch)))


def apply_stage(
    ds,
    factory: Callable[[], Stage],
    *,
    batch_size: int,
    num_actors: int | None = None,
    num_cpus: float = 1.0,
    num_gpus: float = 0.0,
    is_async: bool = False,
):
    """Add one stage to a Ray Dataset: an actor pool when the stage holds state (a model, a
    client), plain tasks otherwise."""
    import ray

    if num_actors is None:
        return ds.map_batches(
            _run_stateless, fn_args=(factory,), batch_size=batch_size, batch_format="numpy", num_cpus=num_cpus
        )
    udf = AsyncStageUDF if is_async else StageUDF
    return ds.map_batches(
        udf,
        fn_constructor_args=(factory,),
        batch_size=batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=num_actors),
        num_cpus=num_cpus,
        num_gpus=num_gpus,
    )


def _run_stateless(batch: dict[str, Any], factory: Callable[[], Stage]) -> dict[str, np.ndarray]:
    stage = factory()
    stage.setup()
    return pack(stage.process_batch(unpack(batch)))
