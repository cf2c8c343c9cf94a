"""Fingerprint a store (and an evaluate output) to show that a change did not move a result.

    python -m benchmarks.store_fingerprint STORE [EVAL]          # JSON on stdout
    python -m benchmarks.store_fingerprint --compare A.json B.json

For every table of the store: the row count and a SHA-256 over its rows, sorted, with the
columns that change from run to run left out (wall-clock seconds, timestamps of the run). For
an evaluate output: the answer count, mean F1 and mean evidence recall, and a hash of report.md
with the store path blanked. Two fingerprints that are equal mean the same tables and figures
to the digit; `--compare` names what differs. Used for the layout refactor (issue 12): ingest +
evaluate of LoCoMo dev before and after the move.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import duckdb

# Differ between two runs of the same input: seconds, and when the run happened.
VOLATILE = frozenset({"last_extended_at", "wall_s", "embed_s", "segment_s", "encode_s", "organize_s"})


def _rows_hash(con: duckdb.DuckDBPyConnection, files: list[str]) -> tuple[int, str]:
    rel = con.read_parquet(files, union_by_name=True)
    cols = [c for c in rel.columns if c not in VOLATILE]
    rows = rel.select(*[duckdb.ColumnExpression(c) for c in cols]).fetchall()
    digest = hashlib.sha256("\n".join(sorted(repr(r) for r in rows)).encode()).hexdigest()[:16]
    return len(rows), digest


def fingerprint(store: Path, evaluation: Path | None = None) -> dict:
    con = duckdb.connect()
    out: dict = {"tables": {}}
    for folder in sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith("_")):
        files = sorted(str(f) for f in folder.glob("part-*.parquet"))
        if files:
            n, digest = _rows_hash(con, files)
            out["tables"][folder.name] = {"rows": n, "sha256": digest}
    if evaluation is not None:
        files = sorted(str(f) for f in (evaluation / "answers").glob("part-*.parquet"))
        a = con.read_parquet(files, union_by_name=True)
        n, f1, recall = a.aggregate("count(*), avg(f1), avg(evidence_recall)").fetchall()[0]
        report = (evaluation / "report.md").read_text().replace(str(store), "STORE")
        out["answers"] = {"rows": n, "mean_f1": round(f1, 6), "mean_evidence_recall": round(recall, 6),
                          "report_sha256": hashlib.sha256(report.encode()).hexdigest()[:16]}
    return out


def differences(a: dict, b: dict, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}".lstrip("."))]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="STORE [EVAL], or two fingerprint files with --compare")
    p.add_argument("--compare", action="store_true")
    args = p.parse_args(argv)
    if args.compare:
        a, b = (json.loads(Path(x).read_text()) for x in args.paths[:2])
        diff = differences(a, b)
        print("\n".join(diff) if diff else "identical")
        return 1 if diff else 0
    store = Path(args.paths[0])
    print(json.dumps(fingerprint(store, Path(args.paths[1]) if len(args.paths) > 1 else None), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
