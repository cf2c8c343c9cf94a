"""Ingest and query against archive size (issue 31): 1,000 / 10,000 / 100,000 short generated chats.

    python -m benchmarks.bench_scale [--quick] [--sizes 1000 10000 100000] [--ingest-up-to 10000]
        [--search-conversations 200] [--eval-questions 200] [--compact] [--work DIR [--reuse]] [--set KEY=VALUE ...]

What each size gets:
- the archive: `lychee_ray.synth`, chit-chat style, chat JSONL, 2 sessions x 6 turns (12-turn
  chats), seed 0. Sizes up to `--ingest-up-to` (and at most 10,000, synth's own limit) are
  ingested by the real CLI (`lychee-ray ingest`, configs/local.yaml: rules backend, MiniLM, a
  private local Ray) in a child process, sampled every 0.5 s: wall time, turns/s, the driver's
  peak RSS and the largest Ray worker's peak RSS (a `ray::` process under the driver).
- a larger size is built by relabelled copies of the largest ingested store's rows (copy j is
  base conversation j mod n under a new id; its own ids prefixed so they stay unique),
  committed through `StoreWriter.write_tables` in the batches an ingest makes (`WorkBatches`:
  ingest.batch_turns turns, at most store.conversations_per_file conversations), so the file
  layout is the one an ingest of that size writes. The report says which sizes were ingested
  and which copied; copied sizes have no ingest figures.
- the store: Parquet parts per table, commits, bytes; `Memory.open` seconds (median of 3);
  `Memory.search` latency (the rules planner, the query embedding, every channel, fusion and
  MMR: what an agent's call costs) on `--search-conversations` conversations drawn at random
  (seed 0): cold = a conversation's first question (its rows are loaded), warm = a second,
  different question of it right after; p50 and p95 in ms. The same again with every load
  through the views over all parts (`_view_scan`: how reads went before a conversation's load
  took its own part), side by side in the same run; and `Memory.records` + `Memory.turns` of a
  conversation (p50/p95 ms), both ways.
- evaluate: `lychee-ray evaluate` (child process, default config) on a fixed sample of
  `--eval-questions` questions (the first ones of conversations drawn with seed 0): questions/s
  over the command's whole wall time (Ray start and model loads included, the same at every size).
- `--compact`: the same store figures again after `lychee-ray compact` (store/compact.py).

Writes benchmarks/results/scale.md (Markdown table, command, machine and load) and one PNG per
figure against archive size (log x). Speed figures on a shared machine are not measurements:
run it on a quiet one; `--quick` (100 ingested, 300 copied) only checks that it works.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks import RESULTS, add_set_option, machine_load, write_markdown
from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.plots import line_chart, markdown_table
from lychee_ray.query.memory import Memory
from lychee_ray.runtime.pipeline import WorkBatches
from lychee_ray.store.reader import Store, open_store
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.synth import SynthParams, write_archive
from lychee_ray.tables import INGEST_TABLES

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "local.yaml"
SIZES, QUICK_SIZES = [1_000, 10_000, 100_000], [100, 300]
SYNTH_MAX = 10_000
# Id columns that must stay unique per copy (conversation_id itself is replaced).
ID_COLUMNS = {"records": ["record_id", "segment_id"], "turns": ["segment_id"], "segments": ["segment_id"],
              "nodes": ["node_id"], "record_nodes": ["record_id", "node_id"], "questions": ["question_id"]}


def cfg_of(sets: list[str]) -> LycheeConfig:
    return load_config(CONFIG, ["ray.progress_bars=false", *sets])


# ------------------------------------------------------------------------------ building stores
def make_archive(work: Path, n: int) -> tuple[Path, Path]:
    """(archive folder, questions.jsonl) of n 12-turn chit-chat conversations."""
    summary = write_archive(work / f"synth-{n}", SynthParams(conversations=n, sessions=2, turns_per_session=6, style="chitchat", format="chat"))
    return summary.out / "archive", summary.out / "questions.jsonl"


def worker_kind(cmdline: list[str]) -> str | None:
    """A Ray worker's kind from its process title (`ray::MapWorker(MapBatches(embed)).submit` ->
    `ray::MapWorker(MapBatches(embed))`); None for a process that is no Ray worker."""
    title = cmdline[0] if cmdline else ""
    return title.split()[0].removesuffix(".submit").removesuffix(".__init__") if title.startswith("ray::") else None


def run_sampled(cmd: list[str], log_path: Path) -> dict:
    """Run `cmd`, sampling its RSS and its Ray workers' every 0.5 s: wall time, the driver's peak,
    the largest worker's peak and each worker kind's peak (MB)."""
    import psutil

    start, driver_peak, peaks = time.perf_counter(), 0, {}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        ps = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                driver_peak = max(driver_peak, ps.memory_info().rss)
                for child in ps.children(recursive=True):
                    kind = worker_kind(child.cmdline())
                    if kind:
                        peaks[kind] = max(peaks.get(kind, 0), child.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                pass
            time.sleep(0.5)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:5])} failed (rc {proc.returncode}): {log_path.read_text(errors='replace')[-2000:]}")
    return {"wall_s": time.perf_counter() - start, "driver_rss_mb": driver_peak / 2**20,
            "worker_rss_mb": max(peaks.values(), default=0) / 2**20, "workers_mb": {k: v / 2**20 for k, v in sorted(peaks.items())}}


def ingest(archive: Path, store: Path, sets: list[str], work: Path) -> dict:
    cmd = [sys.executable, "-m", "lychee_ray.cli", "ingest", "--config", str(CONFIG), "--input", str(archive), "--out", str(store),
           "--set", "ray.progress_bars=false", *[a for s in sets for a in ("--set", s)]]
    out = run_sampled(cmd, work / f"ingest-{store.name}.log")
    with open_store(str(store)) as s:
        out["turns"] = s.con.execute("SELECT count(*) FROM turns").fetchone()[0]
    out["turns_per_s"] = out["turns"] / out["wall_s"]
    return out


def _spans(table: pa.Table) -> dict[str, tuple[int, int]]:
    """conversation_id -> (first row, rows) of a table sorted by conversation_id."""
    ids = table.column("conversation_id").to_numpy(zero_copy_only=False)
    uniq, first, count = np.unique(ids, return_index=True, return_counts=True)
    return {cid: (int(a), int(n)) for cid, a, n in zip(uniq, first, count)}


def copy_store(base: Path, out: Path, n: int, cfg: LycheeConfig) -> float:
    """A store of n conversations from relabelled copies of `base`'s (module docstring)."""
    with open_store(str(base), cfg) as store:
        tables = {t: store.con.sql(f"SELECT * FROM {t} WHERE conversation_id IS NOT NULL ORDER BY conversation_id").to_arrow_table()
                  for t in INGEST_TABLES}
    spans = {t: _spans(data) for t, data in tables.items()}
    convs = tables["conversations"]
    base_ids = convs.column("conversation_id").to_pylist()
    status = dict(zip(base_ids, convs.column("status").to_pylist()))
    n_turns = dict(zip(base_ids, convs.column("n_turns").to_pylist()))
    source = [base_ids[j % len(base_ids)] for j in range(n)]
    new_ids = [f"x{j:06d}" for j in range(n)]
    prepare_output(str(out), cfg)
    writer = StoreWriter(str(out), cfg)
    start = time.perf_counter()
    for a, b in WorkBatches(cfg.ingest.batch_turns, cfg.store.conversations_per_file).bounds(n_turns[s] for s in source):
        batch = {t: _copies(t, data, spans[t], source[a:b], new_ids[a:b]) for t, data in tables.items()}
        writer.write_tables(batch, {new: status[old] for old, new in zip(source[a:b], new_ids[a:b])})
    return time.perf_counter() - start


def _copies(table: str, data: pa.Table, spans: dict, old_ids: list[str], new_ids: list[str]) -> pa.Table:
    """The rows of `old_ids` (in order, repeats allowed) under `new_ids`, own ids prefixed."""
    parts = [(spans[o], new) for o, new in zip(old_ids, new_ids) if o in spans]
    if not parts:
        return data.slice(0, 0)
    rows = np.concatenate([np.arange(a, a + k) for (a, k), _ in parts])
    out = data.take(pa.array(rows))
    labels = pa.array(np.repeat([new for _, new in parts], [k for (_, k), _ in parts]).tolist(), pa.string())
    out = out.set_column(out.schema.get_field_index("conversation_id"), "conversation_id", labels)
    for col in ID_COLUMNS.get(table, []):
        i = out.schema.get_field_index(col)
        prefixed = pc.binary_join_element_wise(labels, pa.scalar("/"), out.column(col).cast(pa.string()), "")
        out = out.set_column(i, col, prefixed)
    return out


# ------------------------------------------------------------------------------ the store's figures
def store_shape(store: Path) -> dict:
    files = {t: len(list((store / t).glob("part-*.parquet"))) for t in INGEST_TABLES}
    return {"files": files, "files_max": max(files.values()), "commits": len(list((store / "_commits").glob("*.json"))),
            "store_mb": sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 2**20}


def open_seconds(store: Path, cfg: LycheeConfig, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        memory = Memory.open(str(store), cfg)
        times.append(time.perf_counter() - t0)
        memory.close()
    return statistics.median(times)


def question_bank(questions: Path) -> dict[str, list[dict]]:
    """The base archive's questions by conversation."""
    bank: dict[str, list[dict]] = {}
    for line in questions.read_text().splitlines():
        q = json.loads(line)
        bank.setdefault(q["conversation_id"], []).append(q)
    return bank


def base_of(store_ids: list[str], base_ids: list[str]):
    """copy id -> the base conversation it copies (itself for an ingested store)."""
    known = set(base_ids)
    return lambda cid: cid if cid in known else base_ids[int(cid[1:]) % len(base_ids)]


def draw(store_ids: list[str], n: int, seed: int = 0) -> list[str]:
    return random.Random(seed).sample(store_ids, min(n, len(store_ids)))


def percentiles(ms: list[float]) -> tuple[float, float]:
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def timed_pairs(conversations: list[str], questions_of, ask) -> tuple[list[float], list[float]]:
    """(cold ms, warm ms): per conversation its first question (`ask(cid, q)` loads it), then a
    second, different one."""
    cold, warm = [], []
    for cid in conversations:
        first, second = questions_of(cid)
        for out, q in ((cold, first), (warm, second)):
            t0 = time.perf_counter()
            ask(cid, q)
            out.append((time.perf_counter() - t0) * 1000)
    return cold, warm


def search_latency(store: Path, cfg: LycheeConfig, bank: dict[str, list[dict]], n_convs: int) -> dict:
    with Memory.open(str(store), cfg) as memory:
        ids = memory.conversations()
        base = base_of(ids, sorted(bank))
        memory.search(ids[0], bank[base(ids[0])][0]["question"])  # model load and first-call costs, not counted
        picks = [c for c in draw(ids, n_convs) if c != ids[0]]

        def questions_of(cid):
            qs = bank[base(cid)]
            return qs[0]["question"], qs[1 % len(qs)]["question"]

        cold, warm = timed_pairs(picks, questions_of, lambda cid, q: memory.search(cid, q))
    (c50, c95), (w50, w95) = percentiles(cold), percentiles(warm)
    return {"cold_p50_ms": c50, "cold_p95_ms": c95, "warm_p50_ms": w50, "warm_p95_ms": w95}


def records_latency(store: Path, cfg: LycheeConfig, n_convs: int) -> dict:
    """`Memory.records` (with validity) plus `Memory.turns` of one conversation, as an
    application browsing a memory calls them: p50/p95 ms over the drawn conversations."""
    with Memory.open(str(store), cfg) as memory:
        ids = memory.conversations()
        memory.records(ids[0]), memory.turns(ids[0])  # first-call costs, not counted
        ms = []
        for cid in [c for c in draw(ids, n_convs) if c != ids[0]]:
            t0 = time.perf_counter()
            memory.records(cid), memory.turns(cid)
            ms.append((time.perf_counter() - t0) * 1000)
    p50, p95 = percentiles(ms)
    return {"records_p50_ms": p50, "records_p95_ms": p95}


@contextmanager
def view_scans():
    """Every conversation load through the views over all parts, as reads went before a load
    took the one part its newest commit wrote: the side-by-side baseline of the cold figures."""
    @contextmanager
    def through_the_view(self, table, conversation_id, columns):
        yield table, {}

    with mock.patch.object(Store, "_conversation_source", through_the_view):
        yield


def eval_rate(store: Path, bank: dict[str, list[dict]], n_questions: int, sets: list[str], work: Path) -> dict:
    """Questions/s of `lychee-ray evaluate` on the first questions of conversations drawn with seed 0."""
    with open_store(str(store)) as s:
        ids = s.conversation_ids()
    base = base_of(ids, sorted(bank))
    rows = []
    for cid in draw(ids, n_questions):
        q = dict(bank[base(cid)][0])
        rows.append({**q, "conversation_id": cid, "question_id": f"{cid}/{q['question_id']}"})
    path = work / f"questions-{store.name}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out_dir = work / f"eval-{store.name}"
    shutil.rmtree(out_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "lychee_ray.cli", "evaluate", "--config", str(CONFIG), "--store", str(store), "--out", str(out_dir),
           "--questions", str(path), "--set", "ray.progress_bars=false", *[a for s in sets for a in ("--set", s)]]
    run = run_sampled(cmd, work / f"evaluate-{store.name}.log")
    return {"eval_questions": len(rows), "eval_s": run["wall_s"], "eval_qps": len(rows) / run["wall_s"]}


# ------------------------------------------------------------------------------ the run
def measure_size(n: int, built: dict, args, cfg: LycheeConfig, bank: dict, work: Path) -> dict:
    store = built["store"]
    row = {"size": n, "built": built["how"], **{k: v for k, v in built.items() if k not in ("store", "how")}}
    row.update(store_shape(store))
    row["open_s"] = open_seconds(store, cfg)
    row.update(search_latency(store, cfg, bank, args.search_conversations))
    row.update(records_latency(store, cfg, args.search_conversations))
    with view_scans():
        row.update({f"{k}_view_scan": v for k, v in search_latency(store, cfg, bank, args.search_conversations).items()})
        row.update({f"{k}_view_scan": v for k, v in records_latency(store, cfg, args.search_conversations).items()})
    if args.eval_questions:
        row.update(eval_rate(store, bank, args.eval_questions, args.sets, work))
    if args.compact:
        from lychee_ray.store.compact import compact_store

        t0 = time.perf_counter()
        compact_store(str(store), cfg)
        row["compact_s"] = time.perf_counter() - t0
        after = store_shape(store)
        row.update({"files_max_compacted": after["files_max"], "open_s_compacted": open_seconds(store, cfg)})
        row.update({f"{k}_compacted": v for k, v in search_latency(store, cfg, bank, args.search_conversations).items()})
    print(json.dumps({k: v for k, v in row.items() if k != "files"}, default=str), flush=True)
    return row


COLUMNS = ["size", "built", "turns", "turns_per_s", "driver_rss_mb", "worker_rss_mb", "files_max", "commits", "store_mb", "open_s",
           "cold_p50_ms", "cold_p95_ms", "warm_p50_ms", "warm_p95_ms", "eval_qps"]
VIEW_COLUMNS = ["size", "cold_p50_ms", "cold_p95_ms", "cold_p50_ms_view_scan", "cold_p95_ms_view_scan", "warm_p95_ms",
                "warm_p95_ms_view_scan", "records_p95_ms", "records_p95_ms_view_scan"]
COMPACT_COLUMNS = ["size", "compact_s", "files_max_compacted", "open_s_compacted", "cold_p95_ms_compacted", "warm_p95_ms_compacted"]
PLOTS = {"turns_per_s": "ingest turns/s", "driver_rss_mb": "driver peak RSS (MB)", "worker_rss_mb": "largest worker peak RSS (MB)",
         "files_max": "Parquet parts per table", "store_mb": "store size (MB)", "open_s": "Memory.open (s)",
         "cold_p95_ms": "Memory.search cold p95 (ms)", "warm_p95_ms": "Memory.search warm p95 (ms)", "eval_qps": "evaluate questions/s"}


def report(rows: list[dict], args, command: str) -> Path:
    ingested = [r["size"] for r in rows if r["built"] == "ingested"]
    reused = [r["size"] for r in rows if r["built"] == "reused"]
    copied = [f"{r['size']} ({r['built']})" for r in rows if r["built"] not in ("ingested", "reused")]
    lines = ["# Scale: ingest and query against archive size", "", f"Command: `{command}`", "", machine_load(), "",
             f"Ingested: {', '.join(map(str, ingested)) or 'none'}; reused (built by an earlier run in --work, no ingest figures): "
             f"{', '.join(map(str, reused)) or 'none'}; copied: {', '.join(copied) or 'none'} "
             "(relabelled copies of the largest ingested store, committed in an ingest's batches: no ingest figures).", "",
             "Archives: synth chit-chat chats of 12 turns (2 sessions x 6), seed 0; rules backend. Memory.search includes the "
             "rules planner and the query embedding. Evaluate: the command's whole wall time (Ray start, model loads).", "",
             markdown_table(rows, COLUMNS, {"turns_per_s": ".1f", "driver_rss_mb": ".0f", "worker_rss_mb": ".0f", "store_mb": ".1f",
                                            "open_s": ".3f", "eval_qps": ".2f"})]
    lines += ["", "Parts per table: " + "; ".join(f"{r['size']}: " + ", ".join(f"{t} {k}" for t, k in r["files"].items()) for r in rows)]
    lines += ["", "A conversation's first question reads the one part its newest commit wrote; the same questions with every "
              "load going through the views over all parts (`_view_scan`, how reads went before), measured in the same run:", "",
              markdown_table(rows, VIEW_COLUMNS, {})]
    if args.compact:
        lines += ["", "After `lychee-ray compact`:", "", markdown_table(rows, COMPACT_COLUMNS, {"open_s_compacted": ".3f"})]
    sizes = [r["size"] for r in rows]
    for key, label in PLOTS.items():
        values = [r.get(key) for r in rows]
        if any(v is not None for v in values):
            png = line_chart(RESULTS / f"scale_{key}.png", sizes, {label: values}, label, "conversations", label, log_x=True)
            lines.append(f"![{label}]({png.name})")
    return write_markdown("scale", lines)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="100 ingested and 300 copied conversations, a few questions: checks that it works")
    p.add_argument("--sizes", type=int, nargs="+", default=None)
    p.add_argument("--ingest-up-to", type=int, default=10_000, help="larger sizes are copies (default: %(default)s)")
    p.add_argument("--search-conversations", type=int, default=200)
    p.add_argument("--eval-questions", type=int, default=200, help="0: no evaluate run")
    p.add_argument("--compact", action="store_true", help="also measure each store after lychee-ray compact")
    p.add_argument("--work", default=None, help="keep archives and stores here (default: a temp folder, removed)")
    p.add_argument("--reuse", action="store_true", help="with --work: measure the stores an earlier run left there again instead of building them")
    add_set_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or QUICK_SIZES
        args.ingest_up_to, args.search_conversations, args.eval_questions = min(args.ingest_up_to, 100), 20, min(args.eval_questions, 20)
    sizes = sorted(args.sizes or SIZES)
    command = "python -m benchmarks.bench_scale " + " ".join(argv if argv is not None else sys.argv[1:])
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_scale-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = cfg_of(args.sets)
    rows, base, bank = [], None, {}
    try:
        for n in sizes:
            store = work / f"store-{n}"
            if args.reuse and (store / "manifest.json").exists():
                built = {"store": store, "how": "reused"}
                if n <= min(args.ingest_up_to, SYNTH_MAX):
                    base, bank = (store, n), question_bank(make_archive(work, n)[1])
                rows.append(measure_size(n, built, args, cfg, bank, work))
                continue
            shutil.rmtree(store, ignore_errors=True)
            if n <= min(args.ingest_up_to, SYNTH_MAX):
                archive, questions = make_archive(work, n)
                built = {"store": store, "how": "ingested", **ingest(archive, store, args.sets, work)}
                base, bank = (store, n), question_bank(questions)
            elif base is None:
                raise SystemExit(f"size {n} is above --ingest-up-to, and no smaller size was ingested to copy from")
            else:
                built = {"store": store, "how": f"copied from {base[1]}", "copy_s": copy_store(base[0], store, n, cfg)}
            rows.append(measure_size(n, built, args, cfg, bank, work))
        return report(rows, args, command)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
