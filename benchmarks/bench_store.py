"""Store query latency at 10 / 100 / 1,000 conversations, and what conversation pruning buys.

One "question" runs the store side of the four retrieval channels on one random conversation:
record vector top-k; node match + expansion (match_nodes, then node_records); time window; raw
turns (vector top-k + BM25). Stores are synthetic but sized like real LoCoMo-scale ingests
(~600 turns, ~1,500 records, ~400 nodes, 3 edges per record, 384-d float32), generated with
numpy and written through `StoreWriter` (not the pipeline).

Variants per scale:
- pruned: the normal store (rows sorted by conversation_id, small row groups) and the normal
  helpers; `conversation_id = $cid` is pushed into the Parquet scan, and row groups whose min/max
  exclude the conversation are never opened.
- no row-group stats: the same files, but the helpers filter on
  `hash(conversation_id) = hash($cid)`, which statistics cannot decide. DuckDB still evaluates it
  inside the scan and skips decoding the other columns (the embeddings) of row batches with no
  match, so because rows are clustered by conversation this costs little.
- no pushdown: the same files and helpers with DuckDB's filter_pushdown optimizer disabled: the
  scan decodes every row and the filter runs above it. This is what an unpruned store costs.
- one unsorted file (10 and 100 only): all conversations in one file per table, rows shuffled;
  the filter is pushed down, but matches are in every row batch, so everything is decoded.

BM25 is measured cold (index built for the conversation, what the first question of a
conversation pays) and warm (cached). The page cache is warm: stores fit in RAM here.

    python -m benchmarks.bench_store [--scales 10 100 1000] [--questions 40] [--row-group-rows 4096 1024]

Writes a Markdown table to benchmarks/results/store.md (git-ignored) and prints it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow.parquet as pq

from lychee_ray.config import LycheeConfig, StoreConfig
from lychee_ray.schemas import Conversation, MemoryRecord, Segment, Turn
from lychee_ray.store import Store, StoreWriter, open_store, prepare_output

DIM = 384
N_TURNS, N_RECORDS, N_NODES, EDGES_PER_RECORD = 600, 1500, 400, 3
TURNS_PER_SESSION, TURNS_PER_SEGMENT = 30, 8
K = 30
RESULTS = Path(__file__).parent / "results" / "store.md"


# ------------------------------------------------------------------------------ synthetic data
def _vocabulary(rng: np.random.Generator, n: int = 5000) -> np.ndarray:
    syll = np.array(["ka", "lo", "mi", "ren", "tu", "sa", "vel", "dor", "pi", "an", "es", "qu", "zor", "li"])
    return np.array(["".join(rng.choice(syll, size=rng.integers(2, 4))) + str(i % 7) for i in range(n)])


def _texts(rng, vocab, zipf_p, n: int, words: int) -> list[str]:
    ids = rng.choice(len(vocab), size=(n, words), p=zipf_p)
    return [" ".join(row) for row in vocab[ids]]


def _unit(rng, n: int) -> np.ndarray:
    x = rng.standard_normal((n, DIM), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic_conversation(idx: int, vocab: np.ndarray, zipf_p: np.ndarray) -> Conversation:
    rng = np.random.default_rng(1000 + idx)
    cid = f"conv-{idx:05d}"
    day0 = dt.date(2022, 1, 1) + dt.timedelta(days=int(rng.integers(0, 365)))
    session_day = [day0 + dt.timedelta(days=7 * s) for s in range(N_TURNS // TURNS_PER_SESSION)]
    texts = _texts(rng, vocab, zipf_p, N_TURNS, 20)
    turns = [
        Turn(f"D{i // TURNS_PER_SESSION + 1}:{i % TURNS_PER_SESSION + 1}", i, f"s{i // TURNS_PER_SESSION + 1}",
             "A" if i % 2 == 0 else "B", "speaker_a" if i % 2 == 0 else "speaker_b", texts[i],
             f"{session_day[i // TURNS_PER_SESSION].isoformat()}T12:{i % 60:02d}:00")
        for i in range(N_TURNS)
    ]
    segments = [
        Segment(f"{cid}:seg{k:03d}", k, list(range(s, s + TURNS_PER_SEGMENT)),
                list(range(s // 2, (s + TURNS_PER_SEGMENT) // 2)), 300, 0.6, "threshold")
        for k, s in enumerate(range(0, N_TURNS, TURNS_PER_SEGMENT))
    ]
    src = np.sort(rng.integers(0, N_TURNS, size=N_RECORDS))
    timed = rng.random(N_RECORDS) < 0.6
    rtexts = _texts(rng, vocab, zipf_p, N_RECORDS, 15)
    names = vocab[rng.choice(len(vocab), size=N_NODES, replace=False)]
    records = []
    for r in range(N_RECORDS):
        t = int(src[r])
        day = session_day[t // TURNS_PER_SESSION].isoformat() if timed[r] else None
        records.append(MemoryRecord(
            f"{cid}:r{r:05d}", segments[t // TURNS_PER_SEGMENT].segment_id, "fact", rtexts[r],
            [str(names[r % 150])], [str(names[150 + r % 150])], day, day, "day" if day else "none", None,
            [turns[t].turn_id], "rules"))
    kinds = ["entity"] * 150 + ["topic"] * 150 + ["entity_topic"] * 60 + ["time"] * 40
    nodes = [{"node_id": f"{cid}:n{j:04d}", "kind": kinds[j], "name": str(names[j]), "n_records": 0}
             for j in range(N_NODES)]
    edges = rng.integers(0, N_NODES, size=(N_RECORDS, EDGES_PER_RECORD))
    record_nodes = sorted({(records[r].record_id, nodes[j]["node_id"]) for r in range(N_RECORDS) for j in edges[r]})
    for _, node_id in record_nodes:
        nodes[int(node_id.rsplit("n", 1)[1])]["n_records"] += 1
    return Conversation(
        conversation_id=cid, source="synthetic", source_file="bench", turns=turns,
        exchanges=[[i, i + 1] for i in range(0, N_TURNS, 2)], turn_embeddings=_unit(rng, N_TURNS),
        segments=segments, records=records, record_embeddings=_unit(rng, N_RECORDS),
        nodes=nodes, node_embeddings=_unit(rng, N_NODES), record_nodes=record_nodes,
        stats={"llm_calls": len(segments)},
    )


def build_store(out: str, n_convs: int, cfg: LycheeConfig, vocab, zipf_p, batch: int) -> float:
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    t0 = time.perf_counter()
    for start in range(0, n_convs, batch):
        convs = [synthetic_conversation(i, vocab, zipf_p) for i in range(start, min(n_convs, start + batch))]
        writer.write_batch(convs)
    return time.perf_counter() - t0


def shuffle_into_one_file(dst: str, cfg: LycheeConfig, n_convs: int, vocab, zipf_p) -> None:
    """Same data as one batch (one file per table), then every file's rows shuffled in place."""
    build_store(dst, n_convs, cfg, vocab, zipf_p, batch=n_convs)
    rng = np.random.default_rng(7)
    for table_dir in Path(dst).iterdir():
        if table_dir.is_dir() and not table_dir.name.startswith("_"):
            for part in table_dir.glob("part-*.parquet"):
                data = pq.read_table(part)
                data = data.take(rng.permutation(data.num_rows))
                pq.write_table(data, part, row_group_size=cfg.store.row_group_rows,
                               compression=cfg.store.compression)


# ------------------------------------------------------------------------------ queries
class NoStatsStore(Store):
    """Same helpers; the conversation filter is an expression that row-group min/max statistics
    cannot decide, so every row group is opened (DuckDB still evaluates it inside the scan)."""

    def _conv_eq(self, alias: str) -> str:
        return f"hash({alias}.conversation_id) = hash($cid)"


def question_inputs(store: Store, rng: np.random.Generator, conv_ids: list[str]) -> dict:
    cid = conv_ids[int(rng.integers(len(conv_ids)))]
    probe = _probe(int(cid.split("-")[1]))  # inputs from the generator, not the store under test
    r = int(rng.integers(N_RECORDS))
    q = probe["record_embeddings"][r] + 0.3 * _unit(rng, 1)[0]
    day = probe["days"][int(rng.integers(N_TURNS))]
    return {
        "cid": cid, "q": q.astype(np.float32), "text": " ".join(probe["record_texts"][r].split()[:6]),
        "names": [probe["node_names"][int(j)] for j in rng.integers(0, N_NODES, size=2)],
        "start": day - dt.timedelta(days=15), "end": day + dt.timedelta(days=15),
    }


def _probe(idx: int) -> dict:
    if idx not in PROBES:
        conv = synthetic_conversation(idx, VOCAB, ZIPF)
        PROBES[idx] = {
            "record_embeddings": conv.record_embeddings,
            "record_texts": [r.text for r in conv.records],
            "node_names": [n["name"] for n in conv.nodes],
            "days": [dt.date.fromisoformat(t.timestamp[:10]) for t in conv.turns],
        }
    return PROBES[idx]


def run_question(store: Store, qi: dict) -> dict[str, float]:
    cid, times = qi["cid"], {}

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        times[name] = (time.perf_counter() - t0) * 1000
        return out

    timed("record_vec", lambda: store.vector_topk("records", cid, qi["q"], K))
    timed("node", lambda: store.node_records(
        cid, [n["node_id"] for n in store.match_nodes(cid, qi["names"])][:8]))
    timed("time", lambda: store.records_in_window(cid, qi["start"], qi["end"], K))
    timed("turn_vec", lambda: store.vector_topk("turns", cid, qi["q"], K))
    store._bm25.clear()
    timed("bm25_cold", lambda: store.bm25_topk("turns", cid, qi["text"], K))
    timed("bm25_warm", lambda: store.bm25_topk("turns", cid, qi["text"], K))
    times["total"] = sum(v for k, v in times.items() if k != "bm25_warm")
    return times


def measure(store: Store, n_questions: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    rng = np.random.default_rng(seed)
    conv_ids = store.conversation_ids()
    for _ in range(3):  # warm-up: file metadata, first-call overheads
        run_question(store, question_inputs(store, rng, conv_ids))
    runs = [run_question(store, question_inputs(store, rng, conv_ids)) for _ in range(n_questions)]
    return {k: _p50_p95([r[k] for r in runs]) for k in runs[0]}


def _p50_p95(xs: list[float]) -> tuple[float, float]:
    xs = sorted(xs)
    p95 = xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]
    return statistics.median(xs), p95


def _du(path: str) -> str:
    out = subprocess.run(["du", "-sh", path], capture_output=True, text=True).stdout.split()
    return out[0] if out else "?"


# ------------------------------------------------------------------------------ main
PROBES: dict[int, dict] = {}
VOCAB = _vocabulary(np.random.default_rng(0))
_W = 1.0 / np.arange(1, len(VOCAB) + 1) ** 1.07
ZIPF = _W / _W.sum()
COLUMNS = ["record_vec", "node", "time", "turn_vec", "bm25_cold", "bm25_warm", "total"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--questions", type=int, default=40)
    ap.add_argument("--slow-questions", type=int, default=10, help="questions for full-scan variants at >=1000")
    ap.add_argument("--row-group-rows", type=int, nargs="+", default=[StoreConfig().row_group_rows],
                    help="store.row_group_rows values; all variants for the first, 'pruned' for the rest")
    ap.add_argument("--workdir", default=None, help="where stores are built (default: a temp dir, removed)")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="lychee-bench-store-")
    rows, notes = [], []
    try:
        for n in args.scales:
            for i, rg in enumerate(args.row_group_rows):
                rows += bench_scale(n, rg, work, args, full=(i == 0), notes=notes)
            print(f"done: {n} conversations", flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    report = render(rows, notes)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    print(report)


def bench_scale(n: int, rg: int, work: str, args, full: bool, notes: list[str]) -> list[tuple]:
    cfg = LycheeConfig.model_validate({"embedding": {"model": "synthetic", "dim": DIM},
                                       "store": {"row_group_rows": rg}})
    sorted_dir = os.path.join(work, f"sorted-{n}-{rg}")
    build_s = build_store(sorted_dir, n, cfg, VOCAB, ZIPF, cfg.store.conversations_per_file)
    notes.append(f"{n} conversations, row groups of {rg}: written in {build_s:.1f} s, {_du(sorted_dir)} on disk")
    rows = []
    with open_store(sorted_dir, cfg) as store:
        rows.append((n, rg, "pruned", args.questions, measure(store, args.questions)))
    if full:
        with open_store(sorted_dir, cfg) as base:
            store = NoStatsStore(base.path, base.manifest, base.con, base._committed, keep=base._keep)
            rows.append((n, rg, "no row-group stats", args.questions, measure(store, args.questions)))
        slow_q = args.questions if n < 1000 else args.slow_questions
        with open_store(sorted_dir, cfg) as store:
            store.con.execute("SET GLOBAL disabled_optimizers = 'filter_pushdown'")
            rows.append((n, rg, "no pushdown", slow_q, measure(store, slow_q)))
    shutil.rmtree(sorted_dir)
    if full and n <= 100:
        flat_dir = os.path.join(work, f"unsorted-{n}-{rg}")
        shuffle_into_one_file(flat_dir, cfg, n, VOCAB, ZIPF)
        with open_store(flat_dir, cfg) as store:
            rows.append((n, rg, "one unsorted file", args.questions, measure(store, args.questions)))
        shutil.rmtree(flat_dir)
    return rows


def render(rows, notes) -> str:
    head = "| conversations | row group rows | layout / filter | questions | " + " | ".join(COLUMNS) + " |"
    lines = [
        "# Store query latency (ms, p50 / p95 per question)",
        "",
        f"duckdb {duckdb.__version__}, {os.cpu_count()} cores, "
        f"{StoreConfig().conversations_per_file} conversations per file, per conversation {N_TURNS} turns / "
        f"{N_RECORDS} records / {N_NODES} nodes / {N_RECORDS * EDGES_PER_RECORD} edges, {DIM}-d; k={K}.",
        "total = record_vec + node + time + turn_vec + bm25_cold.",
        "",
        head,
        "|" + "---|" * (4 + len(COLUMNS)),
    ]
    for n, rg, variant, nq, stats in rows:
        cells = " | ".join(f"{stats[c][0]:.1f} / {stats[c][1]:.1f}" for c in COLUMNS)
        lines.append(f"| {n} | {rg} | {variant} | {nq} | {cells} |")
    return "\n".join(lines + [""] + [f"- {x}" for x in notes]) + "\n"


if __name__ == "__main__":
    main()
