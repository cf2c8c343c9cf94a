"""Store query latency at 10 / 100 / 1,000 conversations, what pruning by conversation buys, and
one question's retrieval on the in-memory engine (query/cache.py) against the DuckDB one.

How the stores are made (say so in every report):
- base: `synth_archive` recombines LoCoMo dev sessions into `--base` synthetic conversations (3-6
  sessions each, real dialogue), and the real ingest pipeline (rules backend, MiniLM, local Ray)
  builds a store from them. `--base-store DIR` reuses a store built earlier instead.
- 100 and 1,000: an ingest of 1,000 conversations takes far too long on 2 shared cores, so the
  base store's rows are copied and relabelled (new conversation ids, ids prefixed so they stay
  unique) and committed through `StoreWriter.write_tables` in batches of
  `store.conversations_per_file`, i.e. the same file layout an ingest of that size writes.

One "question" is the store side of the four retrieval channels on one random conversation,
each timed: record vector top-k; node match + expansion; time window; turn vector top-k; BM25
over turns (cold: index built, what a conversation's first question pays; warm: cached); and
`retrieve`, the whole `Retriever.retrieve` (all channels, RRF, MMR) on the rules planner's plan.
Query vectors are MiniLM embeddings of the base conversations' real LoCoMo questions.

Engines (`retrieval.engine`, measured side by side in the same run, one conversation at a time):
one question's whole `Retriever.retrieve`, the query embedding included (real MiniLM on the
rules plan's route texts, `--torch-threads` intra-op threads: a short query gains nothing from
more, and on shared cores extra threads only spin), old path (`store`: every route x channel a
DuckDB query) vs new path (`cache`: the conversation loaded once, numpy channels). cold: the
conversation's first question (cache: its rows are loaded; store: its BM25 index is built);
warm: a second, different question of the same conversation right after. The two engines take
turns going first. Also the warm cache's memory per conversation: `Conversation.nbytes` (numpy
buffers exactly, Python strings by sys.getsizeof) and what tracemalloc sees one load allocate.

Variants: pruned (the normal store: rows sorted by conversation_id, small row groups, the filter
pushed into the Parquet scan) and no pushdown (DuckDB's filter_pushdown optimizer off: every
row is decoded and filtered above the scan; what an unpruned store costs). EXPLAIN ANALYZE of a
one-conversation query shows the files and row groups DuckDB actually reads.

Also: exact `array_cosine_similarity` top-k against a numpy brute force on the same vectors, and
whether the `vss` extension installs here (needs the extension repository; no internet here).

    python -m benchmarks.bench_store [--quick] [--scales 10 100 1000] [--questions 40] [--torch-threads 1]

Writes benchmarks/results/store.md (git-ignored) and returns its path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks import machine_load
from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.store.reader import Store, open_store
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.tables import INGEST_TABLES

REPO = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results" / "store.md"
LOCOMO = Path(os.environ.get("LYCHEE_SHARED", REPO.parent / "shared")) / "data" / "locomo" / "locomo_dev.json"
# Id columns that must stay unique per copy (besides conversation_id, which is replaced).
ID_COLUMNS = {"records": ["record_id", "segment_id"], "turns": ["segment_id"], "segments": ["segment_id"],
              "nodes": ["node_id"], "record_nodes": ["record_id", "node_id"], "questions": ["question_id"]}
CHANNELS = ["record_vec", "node", "time", "turn_vec", "bm25_cold", "bm25_warm", "retrieve"]
ENGINE_COLUMNS = ["cold", "warm", "embed"]  # embed: the query embedding inside the warm question


# ------------------------------------------------------------------------------ stores
def local_cfg(*overrides: str) -> LycheeConfig:
    return load_config(REPO / "configs" / "local.yaml", ["ray.progress_bars=false", *overrides])


def build_base_store(out: Path, n: int, seed: int = 0) -> float:
    """n synthetic conversations (synth_archive) through the real ingest, rules backend."""
    from benchmarks.synth_archive import make_archive, write_archive
    from lychee_ray.ingest.job import run_ingest

    archive = out.parent / f"synth-{n}.json"
    write_archive(make_archive(LOCOMO, n, seed), archive)
    t0 = time.perf_counter()
    summary = run_ingest(local_cfg(), str(archive), str(out))
    if summary.by_status.get("ok") != n:
        raise RuntimeError(f"base ingest: {summary.by_status}")
    return time.perf_counter() - t0


def _relabel(table: pa.Table, name: str, old: str, new: str) -> pa.Table:
    """One conversation's rows under a new id; its own ids get a prefix so copies never collide."""
    n = table.num_rows
    table = table.set_column(table.schema.get_field_index("conversation_id"), "conversation_id", pa.array([new] * n))
    for col in ID_COLUMNS.get(name, []):
        i = table.schema.get_field_index(col)
        table = table.set_column(i, col, pc.binary_join_element_wise(pa.scalar(f"{new}/"), table.column(col), ""))
    return table


def replicate_store(base: Path, out: Path, n: int, cfg: LycheeConfig) -> float:
    """A store of n conversations: copy j is base conversation j % n_base, relabelled."""
    tables = {t: pq.read_table(base / t) for t in INGEST_TABLES if (base / t).exists()}
    base_ids = sorted(set(tables["conversations"].column("conversation_id").to_pylist()))
    per_conv = {t: {cid: data.filter(pc.equal(data.column("conversation_id"), cid)) for cid in base_ids}
                for t, data in tables.items()}
    prepare_output(str(out), cfg)
    writer = StoreWriter(str(out), cfg)
    per_file = cfg.store.conversations_per_file
    t0 = time.perf_counter()
    for start in range(0, n, per_file):
        new_ids = [f"syn-{j:05d}" for j in range(start, min(n, start + per_file))]
        batch = {t: [] for t in tables}
        for j, new in zip(range(start, start + len(new_ids)), new_ids):
            old = base_ids[j % len(base_ids)]
            for t in tables:
                batch[t].append(_relabel(per_conv[t][old], t, old, new))
        writer.write_tables({t: pa.concat_tables(parts) for t, parts in batch.items()}, {c: "ok" for c in new_ids})
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------ questions
class QuestionBank:
    """Real LoCoMo questions of the base conversations, embedded once, with their rules plans."""

    def __init__(self, base: Path, cfg: LycheeConfig):
        from lychee_ray.embedding import Embedder
        from lychee_ray.rules.planner import RulesPlanner

        with open_store(str(base), cfg) as store:
            rows = store.sql("SELECT conversation_id, question, CAST(question_date AS VARCHAR) AS qd FROM questions "
                             "WHERE category != 'adversarial' ORDER BY question_id")
            names = {cid: [r["name"] for r in store.sql(
                "SELECT name FROM nodes WHERE conversation_id = $cid AND kind = 'entity' ORDER BY n_records DESC",
                {"cid": cid})] for cid in store.conversation_ids()}
        self.base_ids = sorted(names)
        vecs = Embedder(cfg.embedding).encode([r["question"] for r in rows])
        planner = RulesPlanner()
        self.by_conv: dict[str, list[dict]] = {}
        for row, vec in zip(rows, vecs):
            plan = planner.plan(row["question"], row["qd"], names[row["conversation_id"]])
            self.by_conv.setdefault(row["conversation_id"], []).append({**row, "vec": vec, "plan": plan})

    def draw(self, rng: random.Random, store_ids: list[str]) -> tuple[str, dict]:
        cid, (q,) = self.draw_many(rng, store_ids, 1)
        return cid, q

    def draw_many(self, rng: random.Random, store_ids: list[str], n: int) -> tuple[str, list[dict]]:
        """A random conversation and n different questions of it."""
        cid = rng.choice(store_ids)
        base = cid if cid in self.by_conv else self.base_ids[int(cid.split("-")[1]) % len(self.base_ids)]
        return cid, rng.sample(self.by_conv[base], n)


def run_question(store: Store, retriever, cid: str, q: dict) -> dict[str, float]:
    route, times = q["plan"].routes[0], {}

    def timed(name, fn):
        t0 = time.perf_counter()
        fn()
        times[name] = (time.perf_counter() - t0) * 1000

    k = retriever.cfg.top_k_per_channel
    if route.time_window:
        start, end = route.time_window.start, route.time_window.end
    else:  # no date in the question: the month before it was asked
        asked = dt.date.fromisoformat(q["qd"][:10])
        start, end = asked - dt.timedelta(days=30), asked
    timed("record_vec", lambda: store.vector_topk("records", cid, q["vec"], k))
    timed("node", lambda: store.node_records(cid, [n["node_id"] for n in store.match_nodes(cid, route.entities + route.topics)][:8]))
    timed("time", lambda: store.records_in_window(cid, start, end, k))
    timed("turn_vec", lambda: store.vector_topk("turns", cid, q["vec"], k))
    store._bm25.clear()
    timed("bm25_cold", lambda: store.bm25_topk("turns", cid, route.goal, k))
    timed("bm25_warm", lambda: store.bm25_topk("turns", cid, route.goal, k))
    timed("retrieve", lambda: retriever.retrieve(cid, q["plan"], q["question"]))
    return times


def measure(store: Store, bank: QuestionBank, cfg: LycheeConfig, n_questions: int, seed: int = 0) -> dict:
    from lychee_ray.query.retrieve import Retriever, route_text

    vec_of = {}  # the retriever's embed_fn: texts -> the question's precomputed MiniLM vector
    retriever = Retriever(store, cfg.retrieval, lambda texts: np.stack([vec_of[t] for t in texts]), engine="store")
    rng = random.Random(seed)
    ids = store.conversation_ids()
    runs = []
    for i in range(n_questions + 2):  # 2 warm-up questions: file metadata, first-call costs
        cid, q = bank.draw(rng, ids)
        for r in q["plan"].routes:
            vec_of[route_text(r)] = q["vec"]
        vec_of[q["question"]] = q["vec"]
        t = run_question(store, retriever, cid, q)
        if i >= 2:
            runs.append(t)
    return {c: _p50_p95([r[c] for r in runs]) for c in CHANNELS}


def measure_engines(store: Store, bank: QuestionBank, cfg: LycheeConfig, embedder, n_questions: int,
                    seed: int = 1) -> dict[str, dict]:
    """Per engine: cold and warm `retrieve` (ms, query embedding included) and the embedding's
    share of the warm one; n_questions (cold, warm) pairs on random conversations."""
    from lychee_ray.query.retrieve import Retriever

    embed_ms: list[float] = []

    def embed(texts):
        t0 = time.perf_counter()
        out = embedder.encode(texts)
        embed_ms.append((time.perf_counter() - t0) * 1000)
        return out

    engines = {name: Retriever(store, cfg.retrieval, embed, engine=name) for name in ("store", "cache")}
    times = {name: {c: [] for c in ENGINE_COLUMNS} for name in engines}
    rng = random.Random(seed)
    ids = store.conversation_ids()
    for i in range(n_questions + 2):  # 2 warm-up pairs: file metadata, first-call costs
        cid, (cold_q, warm_q) = bank.draw_many(rng, ids, 2)
        for name in (("store", "cache") if i % 2 else ("cache", "store")):  # take turns going first
            forget(engines[name], store, cid)
            cold = _timed(lambda: engines[name].retrieve(cid, cold_q["plan"], cold_q["question"]))
            warm = _timed(lambda: engines[name].retrieve(cid, warm_q["plan"], warm_q["question"]))
            if i >= 2:
                times[name]["cold"].append(cold)
                times[name]["warm"].append(warm)
                times[name]["embed"].append(embed_ms[-1])
    return {name: {c: _p50_p95(xs) for c, xs in cols.items()} for name, cols in times.items()}


def query_embedder(cfg: LycheeConfig, threads: int, notes: list[str]):
    import torch

    from lychee_ray.embedding import Embedder

    embedder = Embedder(cfg.embedding.model_copy(update={"num_threads": threads}))
    notes.append(f"query embedding: {cfg.embedding.model} on {embedder.device}, torch intra-op threads "
                 f"{torch.get_num_threads()} (embedding.num_threads)")
    return embedder


def forget(retriever, store: Store, cid: str) -> None:
    """Make the next question of `cid` its first: the cache drops it, the store its BM25 index."""
    if retriever.cache is not None:
        retriever.cache.discard(cid)
    store._bm25.pop(("turns", cid), None)


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def cache_memory(store: Store, n: int = 20) -> str:
    """The warm cache's memory per conversation, over the first n conversations: its own count
    and the allocations tracemalloc sees while loading one (numpy and Python heap; Arrow's
    transient buffers are freed by then)."""
    from lychee_ray.query.cache import Conversation

    ids = store.conversation_ids()[:n]
    counted, traced, rows = [], [], []
    for cid in ids:
        tracemalloc.start()
        conv = Conversation.load(store, cid)
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        counted.append(conv.nbytes)
        traced.append(held)
        rows.append((conv.turns.n, conv.records.n, conv.nodes.n, len(conv.nodes.vec_rows)))
        del conv
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    t, r, nd, nv = (mean([x[i] for x in rows]) for i in range(4))
    return (f"warm cache memory per conversation (mean of {len(ids)}): {mean(counted) / 2**20:.2f} MiB counted "
            f"(`Conversation.nbytes`), {mean(traced) / 2**20:.2f} MiB allocated while loading (tracemalloc); "
            f"{t:.0f} turns, {r:.0f} records, {nd:.0f} nodes ({nv:.0f} with a vector) per conversation; "
            f"retrieval.cache_mb={store_cache_mb()} holds about {store_cache_mb() * 2**20 / mean(counted):.0f} of them")


def store_cache_mb() -> int:
    from lychee_ray.config_sections import RetrievalConfig

    return RetrievalConfig().cache_mb


def _p50_p95(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    return statistics.median(xs), xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def scan_profile(store: Store, cid: str) -> str:
    """What DuckDB reads for one conversation's records: files and row groups (EXPLAIN ANALYZE)."""
    plan = store.con.execute("EXPLAIN ANALYZE SELECT count(*), max(array_length(embedding)) FROM records "
                             "WHERE conversation_id = $cid", {"cid": cid}).fetchall()[0][1]
    keep = [re.sub(r"[│\s]+", " ", line).strip() for line in plan.splitlines() if re.search(r"Files Read|Row Groups", line)]
    return "; ".join(keep) or "(no scan statistics in the plan)"


def files_per_table(store_dir: Path) -> int:
    return len(list((store_dir / "records").glob("part-*.parquet")))


# ------------------------------------------------------------------------------ extras
def cosine_check(store: Store, bank: QuestionBank, k: int = 30) -> str:
    """DuckDB array_cosine_similarity top-k vs numpy brute force on the same vectors, timed side by side."""
    cid = store.conversation_ids()[0]
    q = bank.by_conv[cid][0]["vec"]
    ids, emb = store.embeddings("records", cid)
    t0 = time.perf_counter()
    got = store.vector_topk("records", cid, q, k)
    t_duck = time.perf_counter() - t0
    t0 = time.perf_counter()
    ids2, emb2 = store.embeddings("records", cid)
    sims = emb2 @ q / (np.linalg.norm(emb2, axis=1) * np.linalg.norm(q))
    top = np.argsort(-sims)[:k]
    t_np = time.perf_counter() - t0
    same = sorted(g["record_id"] for g in got) == sorted(ids[i] for i in top)
    return (f"array_cosine_similarity top-{k} over {len(ids)} records of {cid}: {t_duck * 1000:.1f} ms; "
            f"numpy (read the conversation's vectors + brute force): {t_np * 1000:.1f} ms; same ids: {same}")


def vss_check() -> str:
    """Try INSTALL/LOAD vss in a child process (a hang or crash must not take the benchmark down)."""
    code = "import duckdb; c = duckdb.connect(); c.execute('INSTALL vss'); c.execute('LOAD vss'); print('ok')"
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    except subprocess.TimeoutExpired:
        return "`INSTALL vss` did not finish within 90 s; not measured."
    if out.returncode == 0 and "ok" in out.stdout:
        return "`INSTALL vss` worked (not yet compared: add an HNSW variant)."
    lines = out.stderr.strip().splitlines()
    err = next((ln for ln in lines if "Error" in ln), lines[-1] if lines else "(no message)")[:300]
    return f"`INSTALL vss` failed, so vss is not measured (exact array_cosine_similarity only): {err}"


# ------------------------------------------------------------------------------ main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a 5-conversation base, 10 and 100 conversations, 10 questions")
    ap.add_argument("--scales", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--slow-questions", type=int, default=8, help="questions for the no-pushdown variant at >= 1000")
    ap.add_argument("--base", type=int, default=10, help="synthetic conversations ingested for the base store")
    ap.add_argument("--base-store", default=None, help="reuse this store as the base instead of ingesting")
    ap.add_argument("--workdir", default=None, help="where stores are built (default: a temp dir, removed)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--torch-threads", type=int, default=1, help="intra-op threads for the query embedding")
    args = ap.parse_args(argv)
    if args.quick:
        args.scales, args.questions, args.slow_questions = [s for s in args.scales if s <= 100] or [10, 100], 10, 5
        args.base = min(args.base, 5)  # a smaller base ingest: the quick run stays near a minute
    return args


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    cfg = local_cfg()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="lychee-bench-store-"))
    work.mkdir(parents=True, exist_ok=True)
    notes, rows, engine_rows = [], [], []
    try:
        if args.base_store:
            base = Path(args.base_store)
            notes.append(f"base store: {base} (reused)")
        else:
            base = work / "base"
            secs = build_base_store(base, args.base, seed=0)
            notes.append(f"base store: {args.base} synth_archive conversations (seed 0) ingested with the rules backend in {secs:.0f} s")
        bank = QuestionBank(base, cfg)
        embedder = query_embedder(cfg, args.torch_threads, notes)  # after the bank's: torch threads are per process
        with open_store(str(base), cfg) as s:
            n_base = len(s.conversation_ids())
            sizes = s.sql("SELECT (SELECT count(*) FROM turns) AS turns, (SELECT count(*) FROM records) AS records, "
                          "(SELECT count(*) FROM nodes) AS nodes")[0]
            notes.append(f"per base conversation (mean): {sizes['turns'] / n_base:.0f} turns, {sizes['records'] / n_base:.0f} records, "
                         f"{sizes['nodes'] / n_base:.0f} nodes; {cfg.embedding.dim}-d; k={cfg.retrieval.top_k_per_channel}")
            notes.append(cosine_check(s, bank))
            notes.append(cache_memory(s))
        notes.append(vss_check())
        for n in args.scales:
            scale_rows, engines = bench_scale(n, base, n_base, work, cfg, bank, args, notes, embedder)
            rows += scale_rows
            engine_rows.append((n, args.questions, engines))
            print(f"done: {n} conversations", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    report = render(rows, notes, engine_rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    return out


def bench_scale(n: int, base: Path, n_base: int, work: Path, cfg, bank, args, notes, embedder) -> tuple[list[tuple], dict]:
    if n == n_base:
        store_dir, how = base, "the base store itself"
    else:
        store_dir = work / f"store-{n}"
        secs = replicate_store(base, store_dir, n, cfg)
        how = f"relabelled copies of the base, written in {secs:.0f} s"
    du = subprocess.run(["du", "-sh", str(store_dir)], capture_output=True, text=True).stdout.split()[:1]
    rows = []
    with open_store(str(store_dir), cfg) as store:
        cid = store.conversation_ids()[len(store.conversation_ids()) // 2]
        notes.append(f"{n} conversations ({how}; {files_per_table(store_dir)} files per table, {du[0] if du else '?'}): "
                     f"one conversation's records scan: {scan_profile(store, cid)}")
        rows.append((n, "pruned", args.questions, measure(store, bank, cfg, args.questions)))
        engines = measure_engines(store, bank, cfg, embedder, args.questions)
    slow_q = args.questions if n < 1000 else args.slow_questions
    with open_store(str(store_dir), cfg) as store:
        store.con.execute("SET GLOBAL disabled_optimizers = 'filter_pushdown'")
        notes.append(f"{n} conversations, no pushdown: one conversation's records scan: {scan_profile(store, cid)}")
        rows.append((n, "no pushdown", slow_q, measure(store, bank, cfg, slow_q)))
    if store_dir != base:
        shutil.rmtree(store_dir)
    return rows, engines


def render_engines(engine_rows) -> list[str]:
    lines = [
        "# One question's retrieval, old path (store) vs new path (cache) (ms, p50 / p95)",
        "",
        "Query embedding included (`embed` is its part of the warm question). cold: the conversation's "
        "first question; warm: a second question right after. Both engines in the same run, taking turns.",
        "",
        "| conversations | engine | questions | " + " | ".join(ENGINE_COLUMNS) + " |",
        "|" + "---|" * (3 + len(ENGINE_COLUMNS)),
    ]
    for n, nq, engines in engine_rows:
        for name, stats in engines.items():
            label = {"store": "old: store", "cache": "new: cache"}[name]
            lines.append(f"| {n} | {label} | {nq} | " + " | ".join(f"{stats[c][0]:.1f} / {stats[c][1]:.1f}" for c in ENGINE_COLUMNS) + " |")
    lines.append("")
    for n, _, e in engine_rows:
        lines.append(f"- {n} conversations: warm p50 old/new = {e['store']['warm'][0] / e['cache']['warm'][0]:.1f}x, "
                     f"warm p95 {e['store']['warm'][1] / e['cache']['warm'][1]:.1f}x; cold p50 old/new = "
                     f"{e['store']['cold'][0] / e['cache']['cold'][0]:.1f}x. Targets (new path): warm p95 <= 50 ms "
                     f"({'met' if e['cache']['warm'][1] <= 50 else 'missed'}), cold p95 <= 250 ms "
                     f"({'met' if e['cache']['cold'][1] <= 250 else 'missed'}).")
    return lines + [""]


def render(rows, notes, engine_rows=()) -> str:
    lines = render_engines(engine_rows) if engine_rows else []
    lines += [
        "# Store query latency per question (ms, p50 / p95)",
        "",
        f"duckdb {duckdb.__version__}, {machine_load()}, "
        f"run {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC. Rules backend; stores as described below.",
        "bm25_cold rebuilds the conversation's BM25 index; retrieve = all channels + RRF + MMR (Retriever.retrieve, "
        "engine=store), on precomputed query vectors.",
        "",
        "| conversations | variant | questions | " + " | ".join(CHANNELS) + " |",
        "|" + "---|" * (3 + len(CHANNELS)),
    ]
    for n, variant, nq, stats in rows:
        lines.append(f"| {n} | {variant} | {nq} | " + " | ".join(f"{stats[c][0]:.1f} / {stats[c][1]:.1f}" for c in CHANNELS) + " |")
    pruned = {n: s["retrieve"][0] for n, v, _, s in rows if v == "pruned"}
    if len(pruned) > 1:
        lo, hi = min(pruned), max(pruned)
        lines += ["", f"Growth, pruned retrieve p50: {hi // lo}x the conversations -> {pruned[hi] / pruned[lo]:.2f}x the latency."]
    for n in pruned:
        slow = next((s["retrieve"][0] for m, v, _, s in rows if m == n and v == "no pushdown"), None)
        if slow:
            lines.append(f"- {n} conversations: pruning makes retrieve {slow / pruned[n]:.1f}x faster than no pushdown.")
    return "\n".join(lines + ["", "## Notes", ""] + [f"- {x}" for x in notes]) + "\n"


if __name__ == "__main__":
    main()
