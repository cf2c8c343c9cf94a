"""The ingest pipeline, assembled in one place: resume -> embed -> segment -> encode -> organize,
then the write sink. The job runs it on Ray Data after the read stage (`Pipeline.on_ray`); the
ablation grid runs a slice of it in its own process (`Pipeline.in_process`), so both build stores
with the same stages, configured the same way (every stage takes the whole `LycheeConfig`).
"""

from __future__ import annotations

from functools import partial

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage
from lychee_ray.ingest.evidence_nodes import OrganizeStage
from lychee_ray.ingest.resume import ResumeStage
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.ingest.write import WriteSink
from lychee_ray.runtime.pipeline import Pipeline, WorkBatches

STAGE_ORDER = ("resume", "embed", "segment", "encode", "organize")


def ingest_pipeline(cfg: LycheeConfig, out_dir: str, *, resume: bool = False, start: str = "embed",
                    embedder=None, lease=None) -> Pipeline:
    """The stages from `start` on (resume first when the store holds conversations that may have
    grown), then the write sink into `out_dir`. `embedder`: a loaded model the embedding stages
    share instead of loading their own (in process). `lease`: the driver's actor, which the
    write asks before each commit (none is made once the driver is gone)."""
    factories = {
        "resume": partial(ResumeStage, cfg, out_dir),
        "embed": partial(EmbedTurnsStage, cfg, embedder),
        "segment": partial(SegmentStage, cfg),
        "encode": partial(EncodeStage, cfg),
        "organize": partial(OrganizeStage, cfg, embedder),
    }
    names = [n for n in STAGE_ORDER[STAGE_ORDER.index(start):] if n != "resume" or resume]
    if resume and start != "resume":
        names.insert(0, "resume")
    # batches sized by work: about ingest.batch_turns turns, at most one Parquet file's conversations
    batching = WorkBatches(cfg.ingest.batch_turns, cfg.store.conversations_per_file)
    return Pipeline([factories[n] for n in names], partial(WriteSink, cfg, out_dir, lease), batching=batching)
