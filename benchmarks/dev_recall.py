"""Evidence recall on LoCoMo dev, rules backend, reported per part of the tune/check split.

Ingests all dev conversations once with `configs/local.yaml` (rules backend, bundled MiniLM),
evaluates every category 1-4 question, and reads `answers` per part: evidence recall at the
configured context budget (1,500 tokens) beside the naive-RAG and BM25 baselines at the same
budget, token F1, and segment lengths. TUNE is what defaults were chosen on; CHECK is held out
(`benchmarks/dev_split.py`).

    python -m benchmarks.dev_recall [--out DIR] [--set key=value ...]   # writes benchmarks/results/dev_recall.md
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

from benchmarks import add_set_option, set_flags, write_markdown
from benchmarks.dev_split import PARTS, write_part
from lychee_ray.config import load_config

REPO = Path(__file__).resolve().parents[1]

PER_PART_SQL = """
    select count(*) n, avg(evidence_recall) recall, avg(naive_rag_recall) naive, avg(bm25_recall) bm25,
           avg(coalesce(f1, 0.0)) f1
    from read_parquet($answers) where list_contains($ids, conversation_id)
"""
SEGMENTS_SQL = """
    select count(*) segments, avg(n_exchanges) ex, avg(len(turn_ids)) turns
    from read_parquet($segments) where list_contains($ids, conversation_id)
"""


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    add_set_option(p)
    args = p.parse_args(argv)
    from lychee_ray.evaluate.job import run_evaluate
    from lychee_ray.ingest.job import run_ingest

    work = Path(args.out or tempfile.mkdtemp(prefix="dev_recall_"))
    cfg = load_config(REPO / "configs" / "local.yaml", args.sets)
    src = write_part("all", work / "locomo_dev.json")
    start = time.perf_counter()
    run_ingest(cfg, str(src), str(work / "store"))
    run_evaluate(cfg, str(work / "store"), str(work / "eval"))
    seconds = time.perf_counter() - start
    con = duckdb.connect()
    budget = cfg.retrieval.context_token_budget
    lines = [
        "# Evidence recall on LoCoMo dev, per part (rules backend)",
        "",
        f"`python -m benchmarks.dev_recall{set_flags(args.sets)}`: all {len(PARTS['all'])} dev conversations ingested and evaluated in one run "
        f"({seconds:.0f} s on this machine); categories 1-4; context budget {budget} tokens. "
        "TUNE is where defaults were chosen; CHECK is held out (benchmarks/dev_split.py).",
        "",
        "| part | conversations | questions | lychee-ray recall | naive RAG | BM25 | token F1 | segments | exchanges / segment | turns / segment |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for part in ("tune", "check", "all"):
        ids = list(PARTS[part])
        q = con.execute(PER_PART_SQL, {"answers": f"{work}/eval/answers/*.parquet", "ids": ids}).fetchone()
        s = con.execute(SEGMENTS_SQL, {"segments": f"{work}/store/segments/*.parquet", "ids": ids}).fetchone()
        lines.append(f"| {part} | {', '.join(ids)} | {q[0]} | {q[1]:.3f} | {q[2]:.3f} | {q[3]:.3f} | {q[4]:.3f} | {s[0]} | {s[1]:.2f} | {s[2]:.2f} |")
    return write_markdown("dev_recall", lines)


if __name__ == "__main__":
    main()
