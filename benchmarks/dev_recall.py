"""Evidence recall on LoCoMo dev, rules backend, reported per part of the tune/check split.

Ingests all dev conversations once with `configs/local.yaml` (rules backend, bundled MiniLM),
evaluates every category 1-4 question, and reads `answers` per part: evidence recall at the
configured context budget (1,500 tokens) beside the naive-RAG and BM25 baselines at the same
budget, token F1, and segment lengths; then recall per part and category at 1,500 and 250
tokens (the context retrieve makes at each budget: `answers.recall_curve`). TUNE is what
defaults were chosen on; CHECK is held out (`benchmarks/dev_split.py`).

`--ablate` adds one row per retrieval switch of the ablation grid (the variants of
`configs/ablations/locomo.yaml` whose overlay sets only `retrieval.*` keys), each re-evaluated on
the same store (plan + retrieve in process, no re-ingest): recall at both budgets per part.
`--ablate-only` writes just those rows (`dev_recall_ablate.md`). `--store DIR` reuses the store of an earlier run (`--out DIR` keeps it under DIR/store) instead
of ingesting; it must have been built with the same ingest settings.

    python -m benchmarks.dev_recall [--out DIR] [--store DIR] [--ablate [NAME ...]] [--ablate-only] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb

from benchmarks import add_set_option, set_flags, write_markdown
from benchmarks.dev_split import PARTS, write_part
from lychee_ray.config import LycheeConfig, load_config, read_yaml_mapping
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.job import run_evaluate, stage_factories
from lychee_ray.evaluate.questions import conversation_groups, load_questions
from lychee_ray.ingest.job import run_ingest
from lychee_ray.store.reader import open_store

REPO = Path(__file__).resolve().parents[1]
GRID = REPO / "configs" / "ablations" / "locomo.yaml"
RECALL_AT = (1500, 250)  # the budgets the targets name
CATEGORIES = ("multi_hop", "temporal", "open_domain", "single_hop")

PER_PART_SQL = """
    select count(*) n, avg(evidence_recall) recall, avg(naive_rag_recall) naive, avg(bm25_recall) bm25,
           avg(coalesce(f1, 0.0)) f1
    from read_parquet($answers) where list_contains($ids, conversation_id)
"""
SEGMENTS_SQL = """
    select count(*) segments, avg(n_exchanges) ex, avg(len(turn_ids)) turns
    from read_parquet($segments) where list_contains($ids, conversation_id)
"""
CURVES_SQL = "select conversation_id, category, recall_curve from read_parquet($answers) where recall_curve is not null"


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def recall_by(rows: list[tuple[str, str, list]], budgets: list[int]) -> dict[tuple[str, str, int], tuple[float | None, int]]:
    """(part, category or "all", budget) -> (mean recall, questions) over `rows` of
    (conversation_id, category, recall curve over `budgets`); a question without gold evidence
    (a None recall) counts nowhere, as in `avg(evidence_recall)`."""
    out = {}
    for part, ids in PARTS.items():
        for cat in ("all", *CATEGORIES):
            for b in RECALL_AT:
                at = budgets.index(b)
                vals = [curve[at] for cid, c, curve in rows if cid in ids and cat in ("all", c) and curve[at] is not None]
                out[(part, cat, b)] = (_mean(vals), len(vals))
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def category_table(table: dict) -> list[str]:
    """One row per category, the parts side by side at each budget."""
    cols = [(part, b) for b in RECALL_AT for part in ("tune", "check", "all")]
    lines = ["| category | " + " | ".join(f"{part} @{b}" for part, b in cols) + " |", "|---|" + "---:|" * len(cols)]
    for cat in ("all", *CATEGORIES):
        cells = " | ".join(f"{_f(table[(part, cat, b)][0])} ({table[(part, cat, b)][1]})" for part, b in cols)
        lines.append(f"| {cat} | {cells} |")
    return lines


def retrieval_variants(names: list[str] | None) -> list[tuple[str, dict]]:
    """The grid's variants that only switch retrieval (name, overlay), the default first."""
    spec = read_yaml_mapping(GRID, "grid spec")
    out = [("default", {})] if not names or "default" in names else []
    for v in spec["variants"]:
        sets = v.get("set") or {}
        if sets and all(k.startswith("retrieval.") for k in sets) and (not names or v["name"] in names):
            out.append((v["name"], sets))
    return out


def evaluate_recall(cfg: LycheeConfig, store_dir: str, embedder) -> list[tuple[str, str, list]]:
    """Plan + retrieve every question in this process (no answer step, no baselines): the rows
    `recall_by` reads."""
    store = open_store(store_dir, cfg)
    items = [i for i in load_questions(store, cfg, None) if i.status == "ok"]
    store.close()
    groups = conversation_groups(items, cfg.evaluate.batch_size("retrieve"))
    for factory in stage_factories(cfg, store_dir, embedder)[:2]:
        stage = factory()
        stage.setup()
        try:
            for batch in groups:
                stage.process_batch(batch)
        finally:
            stage.close()
    return [(i.conversation_id, i.category, i.recall_curve) for i in items if i.status == "ok" and i.recall_curve]


def ablation_table(base_sets: list[str], store_dir: str, names: list[str] | None) -> list[str]:
    """One row per variant; the default's recall per category follows the rows."""
    cells = [("all", 1500), ("all", 250), ("multi_hop", 1500), ("open_domain", 1500)]
    cols = [(part, cat, b) for cat, b in cells for part in ("tune", "check")]
    lines = ["| variant | overlay | " + " | ".join(f"{part} {cat} @{b}" for part, cat, b in cols) + " |", "|---|---|" + "---:|" * len(cols)]
    embedder, per_category = None, []
    for name, sets in retrieval_variants(names):
        extra = [f"{k}={_yaml_value(v)}" for k, v in sets.items()]
        cfg = load_config(REPO / "configs" / "local.yaml", [*base_sets, "evaluate.baselines=[]", f"evaluate.recall_budgets=[{','.join(map(str, RECALL_AT))}]", *extra])
        embedder = embedder or Embedder(cfg.embedding)
        t = recall_by(evaluate_recall(cfg, store_dir, embedder), list(RECALL_AT))
        lines.append(f"| {name} | {', '.join(extra) or 'as configured'} | " + " | ".join(_f(t[c][0]) for c in cols) + " |")
        print(lines[-1], flush=True)
        if name == "default":
            per_category = ["", "Per category, as configured (questions in brackets):", "", *category_table(t)]
            print("\n".join(per_category), flush=True)
    return lines + per_category


def _yaml_value(v) -> str:
    return "[" + ",".join(map(str, v)) + "]" if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    p.add_argument("--store", default=None, help="reuse this store of the dev conversations instead of ingesting")
    p.add_argument("--ablate", nargs="*", default=None, metavar="NAME", help="add the grid's retrieval variants (all, or these)")
    p.add_argument("--ablate-only", action="store_true", help="with --store: only the variants' rows, no full evaluation")
    add_set_option(p)
    args = p.parse_args(argv)
    work = Path(args.out or tempfile.mkdtemp(prefix="dev_recall_"))
    cfg = load_config(REPO / "configs" / "local.yaml", args.sets)
    budgets = cfg.evaluate.recall_budgets
    if not set(RECALL_AT) <= set(budgets):
        raise SystemExit(f"evaluate.recall_budgets must hold {RECALL_AT}; got {budgets}")
    store = args.store or str(work / "store")
    if args.ablate_only:
        if not args.store:
            raise SystemExit("--ablate-only needs --store")
        return write_markdown("dev_recall_ablate", [
            f"# Retrieval switches on LoCoMo dev (`python -m benchmarks.dev_recall --store STORE --ablate-only{set_flags(args.sets)}`)", "",
            *ablation_table(args.sets, store, args.ablate or None)])
    start = time.perf_counter()
    if not args.store:
        run_ingest(cfg, str(write_part("all", work / "locomo_dev.json")), store)
    run_evaluate(cfg, store, str(work / "eval"))
    seconds = time.perf_counter() - start
    con = duckdb.connect()
    answers = f"{work}/eval/answers/*.parquet"
    budget = cfg.retrieval.context_token_budget
    lines = [
        "# Evidence recall on LoCoMo dev, per part (rules backend)",
        "",
        f"`python -m benchmarks.dev_recall{set_flags(args.sets)}`: all {len(PARTS['all'])} dev conversations "
        f"{'evaluated on a kept store' if args.store else 'ingested and evaluated'} in one run "
        f"({seconds:.0f} s on this machine); categories 1-4; context budget {budget} tokens. "
        "TUNE is where defaults were chosen; CHECK is held out (benchmarks/dev_split.py).",
        "",
        "| part | conversations | questions | lychee-ray recall | naive RAG | BM25 | token F1 | segments | exchanges / segment | turns / segment |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for part in ("tune", "check", "all"):
        ids = list(PARTS[part])
        q = con.execute(PER_PART_SQL, {"answers": answers, "ids": ids}).fetchone()
        s = con.execute(SEGMENTS_SQL, {"segments": f"{store}/segments/*.parquet", "ids": ids}).fetchone()
        lines.append(f"| {part} | {', '.join(ids)} | {q[0]} | {q[1]:.3f} | {q[2]:.3f} | {q[3]:.3f} | {q[4]:.3f} | {s[0]} | {s[1]:.2f} | {s[2]:.2f} |")
    rows = con.execute(CURVES_SQL, {"answers": answers}).fetchall()
    lines += ["", f"## Recall per category at {' and '.join(map(str, RECALL_AT))} tokens (questions in brackets)", "",
              *category_table(recall_by(rows, budgets))]
    if args.ablate is not None:
        lines += ["", "## Retrieval switches on the same store (the grid's retrieval-only variants)", "",
                  *ablation_table(args.sets, store, args.ablate or None)]
    return write_markdown("dev_recall", lines)


if __name__ == "__main__":
    main()
