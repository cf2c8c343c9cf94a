"""Fingerprint a store (and an evaluate output) to show that a change did not move a result.

    python -m benchmarks.store_fingerprint STORE [EVAL]          # JSON on stdout
    python -m benchmarks.store_fingerprint --no-vectors STORE    # the same, embedding columns left out
    python -m benchmarks.store_fingerprint --compare A.json B.json
    python -m benchmarks.store_fingerprint --vectors STORE_A STORE_B   # max |a - b| of each table's vectors, by key

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


def _rows_hash(con: duckdb.DuckDBPyConnection, files: list[str], skip: frozenset = frozenset()) -> tuple[int, str]:
    rel = con.read_parquet(files, union_by_name=True)
    cols = [c for c in rel.columns if c not in VOLATILE | skip]
    rows = rel.select(*[duckdb.ColumnExpression(c) for c in cols]).fetchall()
    digest = hashlib.sha256("\n".join(sorted(repr(r) for r in rows)).encode()).hexdigest()[:16]
    return len(rows), digest


def fingerprint(store: Path, evaluation: Path | None = None, *, vectors: bool = True) -> dict:
    """`vectors=False`: embedding columns left out (a float's last bits may move with the
    batch a text was embedded in; `vector_differences` measures by how much)."""
    con = duckdb.connect()
    out: dict = {"tables": {}}
    skip = frozenset() if vectors else frozenset({"embedding"})
    for folder in sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith("_")):
        files = sorted(str(f) for f in folder.glob("part-*.parquet"))
        if files:
            n, digest = _rows_hash(con, files, skip)
            out["tables"][folder.name] = {"rows": n, "sha256": digest}
    if evaluation is not None:
        files = sorted(str(f) for f in (evaluation / "answers").glob("part-*.parquet"))
        a = con.read_parquet(files, union_by_name=True)
        n, f1, recall = a.aggregate("count(*), avg(f1), avg(evidence_recall)").fetchall()[0]
        report = (evaluation / "report.md").read_text().replace(str(store), "STORE")
        out["answers"] = {"rows": n, "mean_f1": round(f1, 6), "mean_evidence_recall": round(recall, 6),
                          "report_sha256": hashlib.sha256(report.encode()).hexdigest()[:16]}
    return out


def vector_differences(a: Path, b: Path) -> dict[str, dict]:
    """Per table with vectors: rows matched by key, how many vectors differ at all, and the
    largest absolute difference of one component."""
    from lychee_ray.tables import TABLES

    con = duckdb.connect()
    out = {}
    for table, row in TABLES.items():
        files = [sorted(str(f) for f in (s / table).glob("part-*.parquet")) for s in (a, b)]
        if not all(files) or "embedding" not in con.read_parquet(files[0]).columns:
            continue
        key = list(row.KEY)
        on = " AND ".join(f"x.{k} = y.{k}" for k in key)
        matched, differ, worst = con.execute(
            f"SELECT count(*), count(*) FILTER (WHERE x.embedding != y.embedding), "
            f"max(list_max(list_transform(list_zip(x.embedding, y.embedding), lambda p: abs(p[1] - p[2])))) "
            f"FROM read_parquet(?) x JOIN read_parquet(?) y ON {on} WHERE x.embedding IS NOT NULL AND y.embedding IS NOT NULL",
            files,
        ).fetchone()
        out[table] = {"matched": matched, "vectors_differ": differ, "max_abs_diff": float(worst or 0.0)}
    return out


def differences(a: dict, b: dict, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in differences(a.get(k), b.get(k), f"{path}.{k}".lstrip("."))]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("paths", nargs="+", help="STORE [EVAL], or two fingerprint files with --compare")
    p.add_argument("--compare", action="store_true")
    p.add_argument("--no-vectors", action="store_true", help="leave the embedding columns out of the hashes")
    p.add_argument("--vectors", action="store_true", help="STORE_A STORE_B: compare their vectors by key")
    args = p.parse_args(argv)
    if args.vectors:
        print(json.dumps(vector_differences(Path(args.paths[0]), Path(args.paths[1])), indent=1))
        return 0
    if args.compare:
        a, b = (json.loads(Path(x).read_text()) for x in args.paths[:2])
        diff = differences(a, b)
        print("\n".join(diff) if diff else "identical")
        return 1 if diff else 0
    store = Path(args.paths[0])
    print(json.dumps(fingerprint(store, Path(args.paths[1]) if len(args.paths) > 1 else None, vectors=not args.no_vectors), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
