"""The ingest job as a Ray Data pipeline: read -> embed -> segment -> encode -> organize -> write.

Planning happens on the driver and is cheap: list the input files, open the output (which
removes debris of a killed run and tells which conversations are already complete), and
describe the dataset. Execution streams: each input file is read by a task that yields small
blocks of conversations; stateful stages (the embedding model, the LLM client) are actor
pools; the writer commits Parquet files batch by batch. The driver only aggregates counters,
so its memory does not grow with the archive.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage
from lychee_ray.ingest.organize import OrganizeStage
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.readers.common import ErrorEntry
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.runtime.ray import init_ray
from lychee_ray.runtime.stage import apply_stage, pack, unpack
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, finalize_manifest, prepare_output
from lychee_ray.tokens import token_counter

log = logging.getLogger(__name__)


def _registry_actor():
    import ray

    @ray.remote(num_cpus=0)
    class ConversationIdRegistry:
        """Remembers where each conversation id was first seen, across all reader tasks."""

        def __init__(self):
            self.first: dict[str, str] = {}

        def claim(self, ids: list[str], where: list[str]) -> list[str | None]:
            """Where each id was first seen, None for a first sighting. In order, one id at a
            time: two copies in one call must not both come back as first."""
            seen = []
            for cid, w in zip(ids, where):
                seen.append(self.first.get(cid))
                self.first.setdefault(cid, w)
            return seen

    return ConversationIdRegistry.remote()


# --------------------------------------------------------------------------------------------
# Read stage (generator: one file in, many small blocks out)
# --------------------------------------------------------------------------------------------
def read_files_batch(batch, cfg: LycheeConfig, done_ids: frozenset, registry, input_root: str):
    for path in batch["path"]:
        chunk: list[Conversation] = []
        # error ids hash the path relative to the input root: the same archive read from another
        # mount point or spelled relative/absolute gives the same ids
        for conv in read_file(str(path), cfg.read, root=input_root):
            if conv.conversation_id in done_ids:
                continue
            chunk.append(conv)
            if len(chunk) >= cfg.ray.read_block_conversations:
                yield pack(mark_duplicates(chunk, registry))
                chunk = []
        if chunk:
            yield pack(mark_duplicates(chunk, registry))


def mark_duplicates(convs: list[Conversation], registry) -> list[Conversation]:
    """The first copy of an id wins; a later copy is kept as a `duplicate` row under a derived
    id, with both locations in its error, and its turns are not ingested twice."""
    import ray

    real = [c for c in convs if c.source != "error"]
    if not real:
        return convs
    firsts = ray.get(registry.claim.remote([c.conversation_id for c in real], [c.source_file for c in real]))
    for conv, first in zip(real, firsts):
        if first is None:
            continue
        original = conv.conversation_id
        conv.n_input_turns = len(conv.turns)
        # Derived id: deterministic per (id, file) so a resumed run finds the same row.
        suffix = hashlib.sha1(f"{original}|{conv.source_file}".encode()).hexdigest()[:8]
        conv.conversation_id = f"{original}#dup-{suffix}"
        conv.status = "duplicate"
        conv.error = f"duplicate conversation id {original!r}: first seen in {first}; this copy in {conv.source_file} ({len(conv.turns)} turns) was not ingested"
        conv.errors.append(ErrorEntry(conv.source_file, None, "conversation_id", "duplicate_id", conv.error, conv.conversation_id).as_row())
        conv.turns, conv.questions, conv.exchanges = [], [], []
        log.warning("%s", conv.error)
    return convs


# --------------------------------------------------------------------------------------------
# Write stage
# --------------------------------------------------------------------------------------------
def write_batch(batch, out_dir: str, cfg: LycheeConfig):
    convs = unpack(batch)
    for c in convs:
        c.stats.wall_s = sum(c.seconds.values())
    summaries = StoreWriter(out_dir, cfg).write_batch(convs)
    keys = ("conversation_id", "status", "n_turns", "n_segments", "n_records", "llm_calls", "prompt_tokens", "completion_tokens")
    out = {k: np.array([s.get(k) for s in summaries], dtype=object) for k in keys}
    # per-stage seconds travel to the driver with the rows, to be summed in the run summary
    seconds = {c.conversation_id: c.seconds for c in convs}  # the writer returns rows sorted by id
    out["stage_seconds"] = np.array([json.dumps(seconds.get(r["conversation_id"], {})) for r in summaries], dtype=object)
    return out


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
@dataclass
class IngestSummary:
    out_dir: str
    files: int = 0
    resumed: int = 0  # conversations already complete before this run
    by_status: Counter = field(default_factory=Counter)
    turns: int = 0
    segments: int = 0
    records: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    stage_seconds: Counter = field(default_factory=Counter)  # summed over conversations
    problems: list[str] = field(default_factory=list)  # first few non-ok conversations
    mean_exchanges_per_segment: str = "n/a"
    tokenizer: str = "o200k_base"  # what the segment cap and context budget counted with

    @property
    def conversations(self) -> int:
        return sum(self.by_status.values())

    def add(self, row: dict) -> None:
        self.by_status[row["status"]] += 1
        self.turns += int(row["n_turns"] or 0)
        self.segments += int(row["n_segments"] or 0)
        self.records += int(row["n_records"] or 0)
        self.llm_calls += int(row["llm_calls"] or 0)
        self.prompt_tokens += int(row["prompt_tokens"] or 0)
        self.completion_tokens += int(row["completion_tokens"] or 0)
        self.stage_seconds.update(json.loads(row["stage_seconds"]))
        if row["status"] not in ("ok",) and len(self.problems) < 20:
            self.problems.append(f"{row['conversation_id']}: {row['status']}")

    def render(self) -> str:
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.by_status.items()))
        lines = [
            f"ingest -> {self.out_dir}",
            f"  files: {self.files}; conversations written: {self.conversations} ({statuses or 'none'}); already complete: {self.resumed}",
            f"  turns: {self.turns}; segments: {self.segments}; exchanges/segment: {self.mean_exchanges_per_segment}",
            f"  records: {self.records}; LLM calls: {self.llm_calls}; tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion",
            f"  tokenizer for the segment cap and context budget: {self.tokenizer}",
            f"  time: {self.wall_s:.1f} s; stage seconds summed over conversations: "
            + (", ".join(f"{k} {v:.1f}" for k, v in self.stage_seconds.items()) or "none"),
        ]
        if self.problems:
            lines.append("  not ok: " + "; ".join(self.problems[:10]))
        return "\n".join(lines)


def build_dataset(cfg: LycheeConfig, files: list[str], out_dir: str, done_ids: frozenset, input_root: str):
    import ray

    registry = _registry_actor()
    ds = ray.data.from_items([{"path": f} for f in files], override_num_blocks=max(1, len(files)))
    ds = ds.map_batches(
        read_files_batch, fn_args=(cfg, done_ids, registry, input_root), batch_size=1, batch_format="numpy", num_cpus=0.5
    )
    emb = cfg.embedding
    # each stage declares its resources (actors, CPUs, GPUs, batch size) from its config
    ds = apply_stage(ds, partial(EmbedTurnsStage, emb))
    ds = apply_stage(ds, partial(SegmentStage, cfg.segmenter, cfg.encoder.mode, cfg.encoder.window_exchanges, cfg.tokenizer_spec))
    ds = apply_stage(ds, partial(EncodeStage, cfg))
    ds = apply_stage(ds, partial(OrganizeStage, cfg.organize, emb))
    return ds.map_batches(
        write_batch, fn_args=(out_dir, cfg), batch_size=cfg.store.conversations_per_file, batch_format="numpy", num_cpus=0.5
    )


def run_ingest(cfg: LycheeConfig, input_path: str, out_dir: str, *, force: bool = False) -> IngestSummary:
    """`force`: write into a non-empty folder that is not a store (nothing there is deleted)."""
    start = time.perf_counter()
    files = list_input_files(input_path, exclude=out_dir)  # an output inside the input is not input
    tokenizer = token_counter(cfg.tokenizer_spec).name  # a tokenizer that cannot load fails here, before any work
    done_ids = frozenset(prepare_output(out_dir, cfg, force=force))
    summary = IngestSummary(out_dir=out_dir, files=len(files), resumed=len(done_ids), tokenizer=tokenizer)
    init_ray(cfg.ray)
    for row in build_dataset(cfg, files, out_dir, done_ids, input_path).iter_rows():
        summary.add(row)
    finalize_manifest(out_dir)
    summary.wall_s = time.perf_counter() - start
    summary.mean_exchanges_per_segment = _mean_exchanges(out_dir)
    return summary


def _mean_exchanges(out_dir: str) -> str:
    try:
        row = open_store(out_dir).con.execute("select avg(n_exchanges), count(*) from segments").fetchone()
        return f"{row[0]:.2f} (over {row[1]} segments in the store)" if row and row[1] else "n/a"
    except Exception as exc:  # the summary must never fail the job
        return f"n/a ({exc})"
