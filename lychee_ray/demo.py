"""`make demo`: ingest the bundled LoCoMo conversation and evaluate QA on it (rules backend).

Runs the same functions as `lychee-ray ingest` and `lychee-ray evaluate`, then prints where the
store and the report are.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lychee_ray.config import load_config
from lychee_ray.evaluate.job import run_evaluate
from lychee_ray.ingest.job import run_ingest

REPO = Path(__file__).resolve().parent.parent
DEFAULT_INPUT = REPO / "data" / "demo" / "locomo_conv-30.json"
DEFAULT_CONFIG = REPO / "configs" / "local.yaml"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="lychee_ray.demo")
    p.add_argument("--input", default=str(DEFAULT_INPUT))
    p.add_argument("--config", default=str(DEFAULT_CONFIG))
    p.add_argument("--out", default="out/demo")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    store_dir, eval_dir = str(Path(args.out) / "store"), str(Path(args.out) / "eval")
    summary = run_ingest(cfg, args.input, store_dir)
    print(summary.render())
    result = run_evaluate(cfg, store_dir, eval_dir)
    print(result.render())
    print(f"\nstore:  {store_dir}  (DuckDB: select count(*) from read_parquet('{store_dir}/turns/*.parquet'))")
    print(f"report: {Path(eval_dir) / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
