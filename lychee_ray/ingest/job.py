"""The ingest job: plan on the driver, then read -> the ingest pipeline -> write, on Ray Data.

Planning is cheap and happens on the driver: list the input files (any pyarrow filesystem URI),
open the output (which removes debris of a killed run), read what the store holds of each
conversation (turn count and digest), and resolve the config once. Execution streams: the read
stage (read.py) yields small blocks of conversations, the pipeline's stages (pipeline.py) run as
actor pools or tasks with the resources each declares, and the write sink commits Parquet files
batch by batch. The driver only adds up the sink's summary rows (summary.py), so its memory does
not grow with the archive.
"""

from __future__ import annotations

import logging
import time

from lychee_ray.config import LycheeConfig
from lychee_ray.config_sections import ConfigError
from lychee_ray.ingest.pipeline import ingest_pipeline
from lychee_ray.ingest.read import read_dataset, registry_actor
from lychee_ray.ingest.summary import IngestSummary
from lychee_ray.io.readers.files import list_input_files
from lychee_ray.runtime.pipeline import PipelineStalled, iter_rows
from lychee_ray.runtime.ray import init_ray
from lychee_ray.schemas import REDO_STATUSES
from lychee_ray.store.reader import open_store
from lychee_ray.store.stored_state import StoredIndex, stored_digests
from lychee_ray.store.writer import finalize_manifest, prepare_output, turn_accounts
from lychee_ray.tokens import token_counter

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
def check_redo(redo) -> tuple[str, ...]:
    """The statuses to redo, or one ConfigError sentence naming the unknown ones and the allowed."""
    redo = tuple(dict.fromkeys(redo))
    unknown = [s for s in redo if s not in REDO_STATUSES]
    if unknown:
        raise ConfigError(
            f"--redo: unknown status {', '.join(repr(s) for s in unknown)}; the statuses that can be redone are {', '.join(REDO_STATUSES)}."
        )
    return redo


def run_ingest(
    cfg: LycheeConfig, input_path: str, out_dir: str, *, force: bool = False, redo: tuple[str, ...] | list[str] = ()
) -> IngestSummary:
    """`force`: write into a non-empty folder that is not a store (nothing there is deleted).
    `redo`: statuses (REDO_STATUSES) whose stored conversations are processed again; the new
    commit replaces their rows (`pending` ones are redone by every run). The summary's
    `failures` say whether the run counts as failed (the CLI then exits non-zero)."""
    start = time.perf_counter()
    cfg.resolve()  # once, here: the workers get the resolved values with the config
    redo = check_redo(redo)
    files = list_input_files(input_path, exclude=out_dir)  # an output inside the input is not input
    tokenizer = token_counter(cfg.tokenizer_spec).name  # a tokenizer that cannot load fails here, before any work
    done_ids = prepare_output(out_dir, cfg, force=force, redo_statuses=redo)
    stored = _stored(out_dir, cfg, redo) if done_ids else StoredIndex.empty()
    summary = IngestSummary(out_dir=out_dir, files=len(files), tokenizer=tokenizer)
    init_ray(cfg.ray)
    registry = registry_actor()
    resume = stored.any_turns()  # a grown conversation gets its stored state
    ds = ingest_pipeline(cfg, out_dir, resume=resume, lease=registry).on_ray(read_dataset(cfg, files, stored, input_path, registry),
                                                            reserve_cpus=cfg.ray.reserve_cpus)
    try:
        for row in iter_rows(ds, no_progress_timeout(cfg)):
            summary.add(row)
    except PipelineStalled as exc:  # what was finished is committed; the rest is for a rerun
        summary.stopped = stalled_sentence(exc, summary)
    import ray

    summary.resumed = ray.get(registry.count_unchanged.remote())
    finalize_manifest(out_dir)
    summary.turn_accounts = turn_accounts(out_dir, summary.batch_ids)
    summary.turn_accounts["pending"] += summary.held_turns
    summary.assess(cfg)
    summary.wall_s = time.perf_counter() - start
    summary.mean_exchanges_per_segment = _mean_exchanges(out_dir)
    return summary


def no_progress_timeout(cfg: LycheeConfig) -> float:
    """How long a run may go with no stage moving (`ray.no_progress_timeout_s`; see its default)."""
    if cfg.ray.no_progress_timeout_s is not None:
        return cfg.ray.no_progress_timeout_s
    return 1800.0 if cfg.llm.backend == "rules" else cfg.llm.conversation_deadline_s + 600.0


def stalled_sentence(exc: PipelineStalled, summary: IngestSummary) -> str:
    held = f"work held by {'stage' if len(exc.stages) == 1 else 'stages'} {' and '.join(exc.stages)}" if exc.stages else "every task waiting for a CPU"
    return (f"the run stopped: no stage made progress for {exc.timeout_s:.0f} s (ray.no_progress_timeout_s), with {held}; "
            f"the {summary.conversations} conversations written before are committed, and running the same command again "
            f"resumes after them.")


def _stored(out_dir: str, cfg: LycheeConfig, redo: tuple[str, ...]) -> StoredIndex:
    """The committed conversations a read task compares its input with; those in a redo state
    (and `pending` ones, always) are left out, so they are processed whole as if new."""
    with open_store(out_dir, cfg) as store:
        return stored_digests(store, skip_statuses=set(redo) | {"pending"})


def _mean_exchanges(out_dir: str) -> str:
    try:
        row = open_store(out_dir).con.execute("select avg(n_exchanges), count(*) from segments").fetchone()
        return f"{row[0]:.2f} (over {row[1]} segments in the store)" if row and row[1] else "n/a"
    except Exception as exc:  # the summary must never fail the job
        return f"n/a ({exc})"
