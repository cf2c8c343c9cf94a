"""What the record-link benchmarks share: a store built in this process (no Ray: read -> embed ->
segment -> encode -> organize -> write, the ingest pipeline's own stages), the fake OpenAI server's
config, and the link rows and their source turns read back from a store."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
import time
from pathlib import Path

from lychee_ray.ablate.runner import read_conversations
from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.embedding import Embedder
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.pipeline import ingest_pipeline
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import finalize_manifest, prepare_output

REPO = Path(__file__).resolve().parent.parent
LOCAL = REPO / "configs" / "local.yaml"
RESULTS = REPO / "benchmarks" / "results"


def save_report(name: str, report: dict) -> Path:
    """benchmarks/results/<name>.json."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(report, indent=2))
    return path


def config(*overrides: str) -> LycheeConfig:
    cfg = load_config(LOCAL, ["ray.progress_bars=false", *overrides])
    cfg.resolve()
    return cfg


def fake_llm_overrides(base_url: str) -> list[str]:
    """The encoder on the openai backend against the fake server (tests/support/fake_openai.py),
    as the suite's LLM tests configure it."""
    return ["llm.backend=openai", f"llm.base_url={base_url}", "llm.model=fake-model", "llm.timeout_s=60",
            "llm.max_retries=2", "encoder.max_tokens=6000"]


@contextlib.contextmanager
def fake_server():
    from tests.support.fake_openai import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server


def segmented(cfg: LycheeConfig, input_paths: str | list[str], embedder: Embedder) -> list[Conversation]:
    """The inputs' conversations read, embedded and segmented (what every variant's encode starts
    from: segmentation does not depend on the encoder's settings)."""
    convs = []
    for path in [input_paths] if isinstance(input_paths, str) else input_paths:
        found, problems = read_conversations(cfg, path, None)
        convs += found
        for line in problems:
            print(f"skipped: {line}")
    convs = EmbedTurnsStage(cfg, embedder).process_batch(convs)
    return SegmentStage(cfg).process_batch(convs)


def build_store(cfg: LycheeConfig, convs: list[Conversation], out: Path, embedder: Embedder) -> dict:
    """Encode, organize and write `convs` (copied) into a fresh store at `out`; the build's counts."""
    start = time.perf_counter()
    if out.exists():
        shutil.rmtree(out)
    prepare_output(str(out), cfg)
    ingest_pipeline(cfg, str(out), start="encode", embedder=embedder).in_process(copy.deepcopy(convs))
    manifest = finalize_manifest(str(out))
    return {"conversations": len(convs), "counts": manifest["counts"], "wall_s": time.perf_counter() - start}


def link_rows(store_dir: Path, cfg: LycheeConfig) -> list[dict]:
    """Every link with the source turns of its two records."""
    with open_store(str(store_dir), cfg) as store:
        return store.sql(
            """SELECT l.conversation_id, l.record_id, l.other_record_id, l.kind, l.found_by,
                      a.source_turn_ids AS new_turns, b.source_turn_ids AS old_turns
               FROM record_links l
               JOIN records a ON a.conversation_id = l.conversation_id AND a.record_id = l.record_id
               JOIN records b ON b.conversation_id = l.conversation_id AND b.record_id = l.other_record_id"""
        )


def build_cost(store_dir: Path, cfg: LycheeConfig) -> dict:
    """Calls, segments and tokens of a build (build_stats summed; segments from the store)."""
    with open_store(str(store_dir), cfg) as store:
        (row,) = store.sql(
            """SELECT sum(llm_calls) AS calls, sum(encode_units) AS units, sum(prompt_tokens) AS prompt_tokens,
                      sum(completion_tokens) AS completion_tokens, sum(est_prompt_tokens) AS est_prompt_tokens,
                      sum(est_completion_tokens) AS est_completion_tokens, sum(link_ids_dropped) AS dropped
               FROM build_stats"""
        )
        row["segments"] = store.sql("SELECT count(*) AS n FROM segments")[0]["n"]
    return {k: int(v or 0) for k, v in row.items()}
