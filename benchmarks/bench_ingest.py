"""Full rules ingest throughput (turns/s) against a raw `SentenceTransformer.encode` of the same
turn texts, measured side by side in one run (target ratio >= 0.5, issue 15), and how many texts
each kind put through the model.

Two inputs, each in this order, all in this process with one private local Ray (its start-up
timed apart and excluded):
1. raw: the configured model loaded directly with sentence-transformers; one `encode()` over
   every turn text of the input (batch size and normalization as the embedding stage uses them);
2. full ingest: the real job (read -> embed -> segment -> encode -> organize -> write) with
   `configs/local.yaml` (rules backend) into a fresh store;
3. raw again;
4. raw over everything the store embedded: every turn, every record text and each distinct node
   name of the vector kinds, one `encode()` per kind. This is embedding work no pipeline can skip
   (records are rewritten text with vectors of their own), so raw-turns time over this time is
   the best ratio any ingest could reach on this machine, and full ingest time over it is what
   the pipeline adds (reading, segmenting, rules encoding, Ray, writing Parquet).
The ratio is the ingest's turns/s over the mean of the two raw passes around it, so a neighbour's
burst of load on this shared machine hits both sides. `--set key=value` (repeatable) overrides the
ingest's config, e.g. `--set embedding.num_threads=1`.

Inputs: LoCoMo dev (`/work/shared/data/locomo/locomo_dev.json`, all of `benchmarks/dev_split.py`'s
parts) and 500 short conversations built from dev turns (`benchmarks/short_archive.py`: one
session each, its first 12 turns).

Texts per kind come from the store: turns and records are embedded each (a text repeated within
one stage batch once); node names only for the vector kinds (entity, topic, entity_topic), each
distinct name once per organize actor (its cache), so with one actor and a cache at least as large
as the distinct names that count is exact. "Before" is what organize embedded until issue 15:
every record and every node name of every conversation.

    python -m benchmarks.bench_ingest [--quick] [--short N] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import add_set_option, set_flags, write_markdown
from benchmarks.dev_split import LOCOMO_DEV, PARTS, write_part
from benchmarks.short_archive import write_short_archive
from lychee_ray.config import load_config
from lychee_ray.io.readers.files import read_file

REPO = Path(__file__).resolve().parents[1]
LOCAL_CONFIG = REPO / "configs" / "local.yaml"
STAGES = ("embed_s", "segment_s", "encode_s", "organize_s")
SHORT_TURNS = 12  # turns per short conversation (one session's first 12)


def load_raw_model(cfg):
    """The SentenceTransformer as an ingest actor builds it (`Embedder`: same device, threads and
    `embedding.runtime`), so the raw passes and the ingest encode with the same network."""
    from lychee_ray.embedding import Embedder

    embedder = Embedder(cfg)
    model = embedder.model
    model.runtime = embedder.runtime  # what the report names
    model.encode(["warm-up"] * 8, batch_size=cfg.batch_size)  # first call pays one-off setup
    return model


def raw_encode_seconds(model, texts: list[str], batch_size: int) -> float:
    start = time.perf_counter()
    model.encode(texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return time.perf_counter() - start


def run_full_ingest(cfg, src: Path, out_dir: str):
    """The real job, as `lychee-ray ingest` runs it: (seconds, its IngestSummary)."""
    from lychee_ray.ingest.job import run_ingest

    start = time.perf_counter()
    summary = run_ingest(cfg, str(src), out_dir)
    return time.perf_counter() - start, summary


def store_facts(out_dir: str) -> dict:
    from lychee_ray.store.reader import open_store

    with open_store(out_dir) as store:
        con = store.con
        one = lambda q: con.execute(q).fetchone()  # noqa: E731
        stage_sums = one(f"select {', '.join(f'sum({s})' for s in STAGES)}, sum(wall_s) from build_stats")
        return {
            "turns": one("select count(*), count(distinct text) from turns"),
            "records": one("select count(*), count(distinct text) from records"),
            # kind -> (nodes, with a vector, distinct names)
            "nodes": {k: (n, v, d) for k, n, v, d in con.execute(
                "select kind, count(*), count(embedding), count(distinct name) from nodes group by 1 order by 1").fetchall()},
            "names_embedded": one("select count(distinct name) from nodes where embedding is not null")[0],
            "stage_s": dict(zip(STAGES + ("wall_s",), (float(x or 0.0) for x in stage_sums))),
            "statuses": dict(con.execute("select status, count(*) from conversations group by 1 order by 1").fetchall()),
        }


def measure(cfg, name: str, src: Path, tmp: Path, model) -> dict:
    """raw -> full ingest -> raw over one input; the store's facts."""
    convs = [c for c in read_file(str(src), cfg.read_settings) if c.status == "ok"]
    texts = [t.text for c in convs for t in c.turns]
    raw_before = raw_encode_seconds(model, texts, cfg.embedding.batch_size)
    out = str(tmp / f"store_{name}")
    full_s, summary = run_full_ingest(cfg, src, out)
    raw_after = raw_encode_seconds(model, texts, cfg.embedding.batch_size)
    embedded = stored_texts(out, cfg.organize.vector_node_kinds)
    raw_all = sum(raw_encode_seconds(model, kind_texts, cfg.embedding.batch_size) for kind_texts in embedded.values())
    return {"name": name, "src": src, "n_conv": len(convs), "n_turns": len(texts), "raw_s": (raw_before, raw_after),
            "full_s": full_s, "raw_all_s": raw_all, "n_all": sum(map(len, embedded.values())),
            "summary": summary.render(), "facts": store_facts(out)}


def stored_texts(out_dir: str, vector_kinds) -> dict[str, list[str]]:
    """The texts the store holds vectors for: turns, records, distinct names of the vector kinds."""
    from lychee_ray.store.reader import open_store

    with open_store(out_dir) as store:
        col = lambda q, *a: [r[0] for r in store.con.execute(q, list(a)).fetchall()]  # noqa: E731
        return {"turns": col("select text from turns"), "records": col("select text from records"),
                "names": col("select distinct name from nodes where embedding is not null and list_contains(?, kind)", list(vector_kinds))}


def ratio(run: dict) -> float:
    raw_rate = statistics.mean(run["n_turns"] / s for s in run["raw_s"])
    return run["n_turns"] / run["full_s"] / raw_rate


def texts_rows(run: dict, cfg) -> list[str]:
    f = run["facts"]
    turns, records, nodes = f["turns"], f["records"], f["nodes"]
    vec_kinds = set(cfg.organize.vector_node_kinds)
    now = turns[0] + records[0] + f["names_embedded"]
    before = turns[0] + records[0] + sum(n for n, _, _ in nodes.values())
    exact = cfg.embedding.num_actors == 1 and cfg.organize.name_cache_entries >= f["names_embedded"]
    rows = [
        f"| turns | {turns[0]} | {turns[1]} | {turns[0]} | {turns[0]} at most |",
        f"| records | {records[0]} | {records[1]} | {records[0]} | {records[0]} at most |",
    ]
    for kind, (n, with_vec, distinct) in nodes.items():
        rows.append(f"| node: {kind} | {n} | {distinct} | {n} | {'in the names row' if kind in vec_kinds else 0} |")
    rows += [
        f"| node names (distinct over the vector kinds) | | {f['names_embedded']} | | {f['names_embedded']}{'' if exact else ' (at least)'} |",
        f"| **all texts** | | | **{before}** ({before / turns[0]:.1f} per turn) | **{now}** ({now / turns[0]:.1f} per turn) at most |",
    ]
    return rows


def render(runs: list[dict], cfg, ray_start_s: float, quick: bool, sets: list[str], runtime: str) -> list[str]:
    lines = [
        "# Ingest throughput: full rules ingest vs raw SentenceTransformer.encode",
        "",
        f"Command: `python -m benchmarks.bench_ingest{' --quick' if quick else ''}{set_flags(sets)}`. Config `configs/local.yaml` "
        f"(llm.backend=rules, embedding actors {cfg.embedding.num_actors}, node-name cache {cfg.organize.name_cache_entries} "
        f"entries), {os.cpu_count()} CPUs, torch threads {_torch_threads()}, embedding runtime {runtime} (raw passes and "
        f"ingest alike). Ray start-up, once, excluded: {ray_start_s:.1f} s; "
        "each ingest's time includes its actors' model loads. Absolute numbers drift with the machine's load; the ratio "
        "is measured against raw passes right around it.",
        "",
        "| input | conversations | turns | raw before (turns/s) | full ingest (s) | full ingest (turns/s) | raw after (turns/s) | **ratio** (target >= 0.5) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        rb, ra = (r["n_turns"] / s for s in r["raw_s"])
        lines.append(f"| {r['name']} | {r['n_conv']} | {r['n_turns']} | {rb:.0f} | {r['full_s']:.1f} | "
                     f"{r['n_turns'] / r['full_s']:.0f} | {ra:.0f} | **{ratio(r):.2f}** |")
    lines += [
        "",
        "What no pipeline can skip: a raw `encode()` of every text the store holds a vector for (turns, records, "
        "distinct vector-kind node names), after the passes above. Best reachable ratio = raw turns time / this time.",
        "",
        "| input | texts with a vector | raw encode of them (s) | best reachable ratio | full ingest / that raw time |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in runs:
        raw_turns_s = statistics.mean(r["raw_s"])
        lines.append(f"| {r['name']} | {r['n_all']} | {r['raw_all_s']:.1f} | {raw_turns_s / r['raw_all_s']:.2f} | "
                     f"{r['full_s'] / r['raw_all_s']:.2f}x |")
    for r in runs:
        f = r["facts"]
        lines += [
            "",
            f"## {r['name']}: texts embedded per kind (`{r['src'].name}`; conversations {f['statuses']})",
            "",
            "| kind | rows | distinct texts | embedded before issue 15 | embedded now |",
            "|---|---:|---:|---:|---:|",
            *texts_rows(r, cfg),
            "",
            "Turns and records: a text repeated within one stage batch (4 conversations) is embedded once, which the "
            "store cannot tell, so their rows are an upper bound. Stage seconds summed over conversations (build_stats; "
            "stages overlap in the stream; embed and organize include their encode calls): " + ", ".join(f"{k[:-2]} {v:.1f}" for k, v in f["stage_s"].items()) + ".",
            "",
            "The job's own summary:",
            "",
            "```",
            r["summary"],
            "```",
        ]
    return lines


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def inputs(tmp: Path, quick: bool, n_short: int) -> list[tuple[str, Path]]:
    dev = write_part("all", tmp / "locomo_dev.json")
    if quick:
        import json

        dev.write_text(json.dumps(json.loads(dev.read_text())[:2]))
    short = tmp / f"short_{n_short}.jsonl"
    write_short_archive(LOCOMO_DEV, short, n=n_short, seed=0, turns_per_session=SHORT_TURNS)
    label = "LoCoMo dev" + (" (first 2 conversations)" if quick else f" ({len(PARTS['all'])} conversations)")
    return [(label, dev), (f"{n_short} short conversations", short)]


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 dev conversations and 20 short ones")
    p.add_argument("--short", type=int, default=500, help="how many short conversations (default 500)")
    add_set_option(p)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    cfg = load_config(LOCAL_CONFIG, ["ray.progress_bars=false", *args.sets])
    with tempfile.TemporaryDirectory(prefix="bench_ingest_") as tmp:
        todo = inputs(Path(tmp), args.quick, 20 if args.quick else args.short)
        model = load_raw_model(cfg.embedding)

        import ray

        from lychee_ray.runtime.ray import init_ray

        start = time.perf_counter()
        init_ray(cfg.ray)
        ray_start_s = time.perf_counter() - start
        try:
            runs = [measure(cfg, name, src, Path(tmp), model) for name, src in todo]
        finally:
            ray.shutdown()  # only the private local Ray this process started
    return write_markdown("ingest_throughput", render(runs, cfg, ray_start_s, args.quick, args.sets, model.runtime))


if __name__ == "__main__":
    main()
