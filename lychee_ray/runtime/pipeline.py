"""A pipeline: stages in order, then a sink, run on Ray Data or in this process.

The same `Pipeline` object is what the ingest job runs on a cluster (`on_ray`: each stage becomes
a `map_batches` with the resources it declares, the sink a task stage whose rows come back to the
driver) and what the ablation grid and the tests run in one process (`in_process`: each stage's
`process_batch` over batches of its declared size, the sink last). A stage is given as a factory
(a class or `functools.partial`) so each Ray worker builds its own; in process one instance per
stage is built, set up once, and closed at the end.

A sink consumes items and returns plain rows (dicts of scalars): on Ray only those travel back
to the driver, never the items and their arrays.

Batches sized by work (`WorkBatches`): items of very different sizes (a 12-turn chat, a
conversation of thousands of turns) are grouped into batches of about the same work, each one
row of the dataset and one block, which every stage and the sink take whole. A few long
conversations so become as many blocks (every actor gets one), and a million short ones a few
thousand batches, not a million tiny blocks; a stage never waits for a batch to fill up.

Resources that cannot deadlock (`fit_pools`): actor pools hold their CPUs for the whole run, so
on a small cluster they are shrunk to leave `reserve_cpus` free for the task stages (segment,
the sink): on 2 cores as on 200 the write always has a CPU beside the pools. A run in which no
stage moves for Ray Data's no-progress timeout stops with `PipelineStalled`, naming the stages
that held work.
"""

from __future__ import annotations

import logging
import pickle
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic

import numpy as np

from lychee_ray.runtime.stage import Item, Resources, Stage, apply_stage, named, unpack, work_of

log = logging.getLogger(__name__)

SinkRow = dict[str, Any]


class SinkStage(Generic[Item]):
    """The last step: consumes a batch of items, returns one plain row per item (or more)."""

    name = "sink"
    resources = Resources(num_cpus=0.5, batch_size=64)
    row_keys: tuple[str, ...] = ()  # the keys of every row it returns (the Ray output columns)

    def consume(self, items: list[Item]) -> list[SinkRow]:
        raise NotImplementedError


@dataclass(frozen=True)
class WorkBatches:
    """Items grouped in order into batches of about `work` units (`work_of`: a conversation's
    turns) and at most `max_items` items; an item larger than `work` is a batch of its own."""

    work: int
    max_items: int
    scan_rows: int = 4096  # rows one grouping task sees at once (tiny blocks are merged up to it)

    def bounds(self, works: Iterable[int]) -> list[tuple[int, int]]:
        """(start, end) of each batch over items of these works, in order."""
        out, start, total, n = [], 0, 0, 0
        for i, w in enumerate(works):
            if i > start and (total + w > self.work or i - start >= self.max_items):
                out.append((start, i))
                start, total = i, 0
            total += w
            n = i + 1
        if n > start:
            out.append((start, n))
        return out

    def group(self, items: list) -> list[list]:
        return [items[a:b] for a, b in self.bounds(work_of(i) for i in items)]

    def on_ray(self, ds):
        """Rows of single items -> one row per batch, one row per block (a block is what one
        task of a stage takes: one batch each, so batches spread over every actor)."""
        ds = ds.map_batches(named(_batch_rows, "batch_by_work"), fn_args=(self,), batch_size=self.scan_rows,
                            batch_format="numpy", num_cpus=GROUPING_CPUS)
        return _one_row_blocks(ds)


# What the grouping task asks. Ray's public repartition() gives its task a whole CPU, which on a
# cluster whose actor pools hold fractions of every node no node may ever have free: the ingest
# then waited forever on a two-node cluster. With the same request as the grouping map, Ray
# Data fuses the two into one task (MapBatches -> StreamingRepartition fusion).
GROUPING_CPUS = 0.25


def _one_row_blocks(ds):
    """`ds.repartition(target_num_rows_per_block=1)`, its task asking GROUPING_CPUS."""
    out = ds.repartition(target_num_rows_per_block=1)
    op = out._logical_plan.dag  # the StreamingRepartition just added (no public way to set its resources)
    object.__setattr__(op, "ray_remote_args", {"num_cpus": GROUPING_CPUS})
    return out


def _batch_rows(batch: dict[str, Any], batching: WorkBatches) -> dict[str, np.ndarray]:
    """Groups a batch of single-item rows by work without unpickling them: a batch row holds
    the items' own pickles (`stage.unpack_batches` opens them)."""
    spans = batching.bounds(int(w) for w in batch["work"])
    return {
        "conversation_id": np.array([batch["conversation_id"][a] for a, _ in spans], dtype=object),
        "state": np.array([pickle.dumps(list(batch["state"][a:b]), protocol=5) for a, b in spans], dtype=object),
        "work": np.array([int(batch["work"][a:b].sum()) for a, b in spans], dtype=np.int64),
    }


class PipelineStalled(RuntimeError):
    """No stage moved for Ray Data's no-progress timeout; `stages` held work when it stopped."""

    def __init__(self, timeout_s: float, stages: list[str]):
        self.timeout_s, self.stages = timeout_s, stages
        held = ", ".join(stages) or "none (waiting for CPUs)"
        super().__init__(f"no stage made progress for {timeout_s:.0f} s; stages holding work: {held}")


_RUNNING_OP = re.compile(r"^\s*- (?:MapBatches\()?([^):]+)\)?: (\d+) active task")


def stalled_stages(message: str) -> list[str]:
    """The operators with active tasks in Ray Data's no-progress error, by stage name."""
    return [m.group(1) for line in message.splitlines() if (m := _RUNNING_OP.match(line)) and int(m.group(2)) > 0]


def iter_rows(ds, no_progress_timeout_s: float | None = None) -> Iterator[dict]:
    """The dataset's rows; a run in which nothing moves for `no_progress_timeout_s` (None: Ray
    Data's default) stops with `PipelineStalled` instead of Ray's error and traceback."""
    from ray.data.exceptions import ExecutionTimeoutError

    if no_progress_timeout_s is not None:
        ds.context.execution_no_progress_timeout_s = no_progress_timeout_s
    timeout = ds.context.execution_no_progress_timeout_s
    try:
        yield from ds.iter_rows()
    except ExecutionTimeoutError as exc:
        raise PipelineStalled(timeout, stalled_stages(str(exc))) from None


def fit_pools(resources: list[Resources], cluster_cpus: float, reserve_cpus: float) -> float:
    """The factor (at most 1) by which the actor pools' CPU requests are shrunk so that, held
    all together, they leave `reserve_cpus` of the cluster's CPUs to task stages. 1 when they
    fit, or when the cluster has no more than the reserve yet (an autoscaler adds nodes later)."""
    pools = sum(r.num_cpus * r.num_actors for r in resources if r.num_actors)
    room = cluster_cpus - reserve_cpus
    if pools <= 0 or room <= 0 or pools <= room:
        return 1.0
    return room / pools


@dataclass
class Pipeline:
    stages: list[Callable[[], Stage]]
    sink: Callable[[], SinkStage] | None = None
    # batches sized by work (every stage and the sink take one whole); None: each stage's own batch_size
    batching: WorkBatches | None = None
    names: list[str] = field(init=False)

    def __post_init__(self):
        self.names = [getattr(f, "func", f).name for f in self.stages]

    def on_ray(self, ds, *, reserve_cpus: float = 1.0):
        """The stages and the sink added to a Ray Dataset of packed items; the result's rows
        are the sink's rows (or the packed items when there is no sink). `reserve_cpus`: what
        the actor pools leave free for task stages (`fit_pools`)."""
        import ray

        scale = fit_pools([f().resources for f in self.stages], ray.cluster_resources().get("CPU", 0.0), reserve_cpus)
        if scale < 1.0:
            log.info("actor pools asked for more CPUs than the cluster has beside %.2g for tasks: their requests are scaled by %.2f",
                     reserve_cpus, scale)
        whole = self.batching is not None
        if whole:
            ds = self.batching.on_ray(ds)
        for factory in self.stages:
            ds = apply_stage(ds, factory, cpu_scale=scale, whole_rows=whole)
        if self.sink is None:
            return ds
        sink = self.sink()
        res = sink.resources
        return ds.map_batches(named(_run_sink, sink.name), fn_args=(self.sink,), batch_size=1 if whole else res.batch_size,
                              batch_format="numpy", num_cpus=min(res.num_cpus, reserve_cpus) if reserve_cpus > 0 else res.num_cpus,
                              num_gpus=res.num_gpus)

    def in_process(self, items: list, prepared: dict[str, Stage] | None = None) -> list[SinkRow] | list:
        """Run every stage over `items` here, batch by batch (work-sized when `batching` is
        set, else as each stage declares), then the sink (its rows returned; the items when
        there is no sink). `prepared`: stage name -> an instance already set up (e.g. sharing
        a loaded model), used instead of building one."""
        for factory in self.stages:
            stage = (prepared or {}).get(getattr(factory, "func", factory).name)
            own = stage is None
            if own:
                stage = factory()
                stage.setup()
            try:
                items = [out for batch in self._batches(items, stage.resources.batch_size) for out in stage.process_batch(batch)]
            finally:
                if own:
                    stage.close()
        if self.sink is None:
            return items
        sink = self.sink()
        return [row for batch in self._batches(items, sink.resources.batch_size) for row in sink.consume(batch)]

    def _batches(self, items: list, size: int | None) -> Iterable[list]:
        return self.batching.group(items) if self.batching is not None else _batches(items, size)


def _batches(items: list, size: int | None) -> Iterable[list]:
    if not items:
        return []
    size = size or len(items)
    return (items[i : i + size] for i in range(0, len(items), size))


def _run_sink(batch: dict[str, Any], factory: Callable[[], SinkStage]) -> dict[str, np.ndarray]:
    sink = factory()
    rows = sink.consume(unpack(batch))
    keys = sink.row_keys or (tuple(rows[0]) if rows else ())
    return {k: np.array([r.get(k) for r in rows], dtype=object) for k in keys}
