"""Ingest throughput (turns/s) of the Ray Data pipeline against raw `SentenceTransformer.encode`
over the same turn texts, measured side by side in one run (target ratio >= 0.7, issue 2).

Run order, all in this process and on this machine, with one private local Ray (its start-up
timed apart and excluded):
1. raw: the configured model loaded directly with sentence-transformers; one `encode()` over
   every turn text (batch size and normalization as the embedding stage uses them);
2. issue-2 ingest: read -> embed -> segment -> write, the same stage classes and adapter as the
   job, to a committed Parquet store;
3. raw again;
4. full ingest: the real job (read -> embed -> segment -> encode -> organize -> write) with
   `configs/local.yaml` (rules backend);
5. raw again.
Each ratio uses the raw passes right around it, so a neighbour's burst of load on this shared
machine hits both sides. The full ingest also embeds every record text and node name
(organize), so the report counts those texts and gives per-stage seconds (build_stats, summed
over conversations) and Ray Data's per-operator stats.

    python -m benchmarks.bench_ingest [--src PATH] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from lychee_ray.config import load_config
from lychee_ray.io.readers.files import read_file

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_SRC = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
LOCAL_CONFIG = REPO / "configs" / "local.yaml"
STAGES = ("embed_s", "segment_s", "encode_s", "organize_s")


def quick_input(src: Path, n_conversations: int, tmp: Path) -> Path:
    """The first conversations of a LoCoMo file, as a LoCoMo file of their own."""
    data = json.loads(src.read_text())[:n_conversations]
    path = tmp / f"{src.stem}_first{n_conversations}.json"
    path.write_text(json.dumps(data))
    return path


def load_raw_model(cfg):
    from sentence_transformers import SentenceTransformer

    from lychee_ray.embedding import pick_device, resolve_model_path

    model = SentenceTransformer(resolve_model_path(cfg.model), device=pick_device(cfg.device))
    model.encode(["warm-up"] * 8, batch_size=cfg.batch_size)  # first call pays one-off setup
    return model


def raw_encode_seconds(model, texts: list[str], batch_size: int) -> float:
    start = time.perf_counter()
    model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return time.perf_counter() - start


def build_core_dataset(cfg, files: list[str], out_dir: str, done: frozenset):
    """Issue 2's ingest, read -> embed -> segment -> write, wired like `build_dataset` (same
    stage classes, adapter and resources) minus the encode and organize stages."""
    from functools import partial

    import ray

    from lychee_ray.ingest.embed import EmbedTurnsStage
    from lychee_ray.ingest.job import _registry_actor, read_files_batch, write_batch
    from lychee_ray.ingest.segment import SegmentStage
    from lychee_ray.runtime.stage import apply_stage

    emb = cfg.embedding
    ds = ray.data.from_items([{"path": f} for f in files], override_num_blocks=max(1, len(files)))
    root = os.path.commonpath(files) if len(files) > 1 else os.path.dirname(files[0])
    ds = ds.map_batches(read_files_batch, fn_args=(cfg, done, _registry_actor(), root), batch_size=1, batch_format="numpy", num_cpus=0.5)
    ds = apply_stage(ds, partial(EmbedTurnsStage, emb))
    ds = apply_stage(ds, partial(SegmentStage, cfg.segmenter, cfg.encoder.mode, cfg.encoder.window_exchanges))
    return ds.map_batches(write_batch, fn_args=(out_dir, cfg), batch_size=cfg.store.conversations_per_file, batch_format="numpy", num_cpus=0.5)


def run_pipeline(cfg, src: Path, out_dir: str, core_only: bool = False) -> tuple[float, str]:
    """The same steps as `run_ingest`, keeping the dataset so its Ray Data stats can be read."""
    from lychee_ray.ingest.job import build_dataset
    from lychee_ray.io.readers.files import list_input_files
    from lychee_ray.store.writer import finalize_manifest, prepare_output

    start = time.perf_counter()
    done = frozenset(prepare_output(out_dir, cfg))
    ds = (build_core_dataset if core_only else build_dataset)(cfg, list_input_files(str(src)), out_dir, done)
    for _ in ds.iter_rows():
        pass
    finalize_manifest(out_dir)
    return time.perf_counter() - start, ds.stats()


def store_facts(out_dir: str) -> dict:
    from lychee_ray.store.reader import open_store

    con = open_store(out_dir).con
    stage_sums = con.execute(f"select {', '.join(f'sum({s})' for s in STAGES)}, sum(wall_s) from build_stats").fetchall()[0]
    return {
        "turns": con.execute("select count(*) from turns").fetchall()[0][0],
        "segments": con.execute("select count(*) from segments").fetchall()[0][0],
        "n_records": con.execute("select count(*) from records").fetchall()[0][0],
        "n_nodes": con.execute("select count(*) from nodes").fetchall()[0][0],
        "stage_s": dict(zip(STAGES + ("wall_s",), (float(x or 0.0) for x in stage_sums))),
        "statuses": con.execute("select status, count(*) from conversations group by 1 order by 1").fetchall(),
    }


def operator_lines(stats: str) -> list[str]:
    """The per-operator headline lines of Ray Data's stats text (the rest is detail)."""
    keep = ("Operator", "* Remote wall time", "* Remote cpu time", "* Output num rows", "Dataset throughput")
    return [ln.rstrip() for ln in stats.splitlines() if ln.strip().startswith(keep)]


def render(src, n_conv, turns, raw_s, pipe_s, ray_start_s, facts, stats) -> str:
    (core_s, full_s), (core_facts, full_facts), (core_stats, full_stats) = pipe_s, facts, stats
    raw_rate = [turns / s for s in raw_s]
    core_ratio = turns / core_s / statistics.mean(raw_rate[:2])
    full_ratio = turns / full_s / statistics.mean(raw_rate[1:])
    n_full_texts = turns + full_facts["n_records"] + full_facts["n_nodes"]
    lines = [
        "# Ingest throughput: Ray Data pipeline vs raw SentenceTransformer.encode",
        "",
        f"Input `{src.name}`: {n_conv} conversations, {turns} turns. Config `configs/local.yaml` (llm.backend=rules), "
        f"{os.cpu_count()} CPUs, torch threads {_torch_threads()}. In run order:",
        "",
        "| measurement | seconds | turns/s |",
        "|---|---:|---:|",
        f"| raw encode of the turn texts (1) | {raw_s[0]:.1f} | {raw_rate[0]:.0f} |",
        f"| issue-2 ingest: read -> embed -> segment -> write | {core_s:.1f} | {turns / core_s:.0f} |",
        f"| raw encode of the turn texts (2) | {raw_s[1]:.1f} | {raw_rate[1]:.0f} |",
        f"| full ingest: read -> embed -> segment -> encode (rules) -> organize -> write | {full_s:.1f} | {turns / full_s:.0f} |",
        f"| raw encode of the turn texts (3) | {raw_s[2]:.1f} | {raw_rate[2]:.0f} |",
        "",
        f"**Ratio to raw (target >= 0.7): issue-2 ingest {core_ratio:.2f} (vs raw 1-2), full ingest {full_ratio:.2f} (vs raw 2-3).** "
        f"Raw passes spread {min(raw_s):.1f}-{max(raw_s):.1f} s: that is the machine's load, not the code. "
        f"Stores: issue-2 {core_facts['turns']} turns / {core_facts['segments']} segments, full {full_facts['turns']} turns / "
        f"{full_facts['segments']} segments, conversations {dict(full_facts['statuses'])}. "
        f"Ray start-up, once, excluded: {ray_start_s:.1f} s; each pipeline's time includes its actors' model loads.",
        "",
        "## Where the time goes",
        "",
        f"The full ingest embeds {turns} turns plus {full_facts['n_records']} record texts and {full_facts['n_nodes']} node "
        f"names in organize: {n_full_texts} texts, {n_full_texts / turns:.1f}x what the raw pass embeds, so its ratio "
        "to a turns-only encode cannot reach 0.7; the issue-2 ingest embeds exactly the raw pass's texts.",
        "",
        "Stage seconds summed over conversations (build_stats; stages overlap in the stream; organize's "
        "embedding of records and nodes is not in organize_s):",
        "",
        "| stage | issue-2 ingest | full ingest |",
        "|---|---:|---:|",
        *[f"| {k[:-2]} | {core_facts['stage_s'][k]:.1f} | {full_facts['stage_s'][k]:.1f} |" for k in full_facts["stage_s"]],
        "",
        "Ray Data per-operator stats (`Dataset.stats()`, headline lines), issue-2 ingest:",
        "",
        "```",
        *operator_lines(core_stats),
        "```",
        "",
        "Full ingest:",
        "",
        "```",
        *operator_lines(full_stats),
        "```",
    ]
    return "\n".join(lines) + "\n"


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", default=str(DEFAULT_SRC))
    p.add_argument("--quick", action="store_true", help="the first 2 conversations only")
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cfg = load_config(LOCAL_CONFIG, ["ray.progress_bars=false"])
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        src = quick_input(Path(args.src), 2, Path(tmp)) if args.quick else Path(args.src)
        convs = [c for c in read_file(str(src), cfg.read) if c.status == "ok"]
        texts = [t.text for c in convs for t in c.turns]
        model = load_raw_model(cfg.embedding)
        raw = lambda: raw_encode_seconds(model, texts, cfg.embedding.batch_size)  # noqa: E731

        import ray

        from lychee_ray.runtime.ray import init_ray

        start = time.perf_counter()
        init_ray(cfg.ray)
        ray_start_s = time.perf_counter() - start
        # raw passes interleaved with the two pipelines: each ratio uses the raw passes right
        # before and after it, so a neighbour's burst of load hits both sides
        try:
            raw_s = [raw()]
            core_s, core_stats = run_pipeline(cfg, src, str(Path(tmp) / "core_store"), core_only=True)
            raw_s.append(raw())
            pipe_s, stats = run_pipeline(cfg, src, str(Path(tmp) / "store"))
            raw_s.append(raw())
        finally:
            ray.shutdown()  # only the private local Ray this process started
        facts, core_facts = store_facts(str(Path(tmp) / "store")), store_facts(str(Path(tmp) / "core_store"))
    report = render(Path(args.src), len(convs), len(texts), raw_s, (core_s, pipe_s), ray_start_s, (core_facts, facts), (core_stats, stats))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "ingest_throughput.md"
    out.write_text(report)
    print(report)
    return out


if __name__ == "__main__":
    main()
