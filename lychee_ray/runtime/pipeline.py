"""A pipeline: stages in order, then a sink, run on Ray Data or in this process.

The same `Pipeline` object is what the ingest job runs on a cluster (`on_ray`: each stage becomes
a `map_batches` with the resources it declares, the sink a task stage whose rows come back to the
driver) and what the ablation grid and the tests run in one process (`in_process`: each stage's
`process_batch` over batches of its declared size, the sink last). A stage is given as a factory
(a class or `functools.partial`) so each Ray worker builds its own; in process one instance per
stage is built, set up once, and closed at the end.

A sink consumes items and returns plain rows (dicts of scalars): on Ray only those travel back
to the driver, never the items and their arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic

import numpy as np

from lychee_ray.runtime.stage import Item, Resources, Stage, apply_stage, unpack

SinkRow = dict[str, Any]


class SinkStage(Generic[Item]):
    """The last step: consumes a batch of items, returns one plain row per item (or more)."""

    name = "sink"
    resources = Resources(num_cpus=0.5, batch_size=64)
    row_keys: tuple[str, ...] = ()  # the keys of every row it returns (the Ray output columns)

    def consume(self, items: list[Item]) -> list[SinkRow]:
        raise NotImplementedError


@dataclass
class Pipeline:
    stages: list[Callable[[], Stage]]
    sink: Callable[[], SinkStage] | None = None
    names: list[str] = field(init=False)

    def __post_init__(self):
        self.names = [getattr(f, "func", f).name for f in self.stages]

    def on_ray(self, ds):
        """The stages and the sink added to a Ray Dataset of packed items; the result's rows
        are the sink's rows (or the packed items when there is no sink)."""
        for factory in self.stages:
            ds = apply_stage(ds, factory)
        if self.sink is None:
            return ds
        sink = self.sink()
        res = sink.resources
        return ds.map_batches(_run_sink, fn_args=(self.sink,), batch_size=res.batch_size, batch_format="numpy",
                              num_cpus=res.num_cpus, num_gpus=res.num_gpus)

    def in_process(self, items: list, prepared: dict[str, Stage] | None = None) -> list[SinkRow] | list:
        """Run every stage over `items` here, batch by batch as declared, then the sink (its rows
        returned; the items when there is no sink). `prepared`: stage name -> an instance already
        set up (e.g. sharing a loaded model), used instead of building one."""
        for factory in self.stages:
            stage = (prepared or {}).get(getattr(factory, "func", factory).name)
            own = stage is None
            if own:
                stage = factory()
                stage.setup()
            try:
                items = [out for batch in _batches(items, stage.resources.batch_size) for out in stage.process_batch(batch)]
            finally:
                if own:
                    stage.close()
        if self.sink is None:
            return items
        sink = self.sink()
        return [row for batch in _batches(items, sink.resources.batch_size) for row in sink.consume(batch)]


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
