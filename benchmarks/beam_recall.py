"""Evidence recall on BEAM, per ability, rules backend: ours against naive RAG and BM25.

Ingests one BEAM bucket folder (default ../shared/data/beam/100K: each numbered folder reads as a
conversation, its probing questions land in the store's questions table) with
`configs/local.yaml` (rules backend, bundled MiniLM), evaluates every question from the store,
and reads `answers` with DuckDB: per ability and overall, evidence recall at the configured
context budget (1,500 tokens) for lychee-ray, naive RAG and BM25 at the same budget. Questions
without evidence ids (abstention) have no recall and are counted apart. Beside it, the memory's
size per stored turn (records, and embedded texts: turns + passages + records + nodes with a
vector) and the ingest and evaluate wall seconds. The issue's targets (overall >= BM25 + 15
points, no ability below BM25) are checked, not tuned for: the 100K bucket is development data.

    python -m benchmarks.beam_recall [--data DIR] [--out DIR] [--set key=value ...]
    python -m benchmarks.beam_recall --store DIR --answers DIR    # report only, from an earlier run

Writes benchmarks/results/beam_recall.md and beam_recall_per_ability.png. BEAM is read at run
time, never copied; the report holds figures only, no BEAM text.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import duckdb

from benchmarks import RESULTS, add_set_option, machine_load, set_flags, write_markdown
from lychee_ray.config import load_config
from lychee_ray.evaluate.beam_scoring import BEAM_ABILITIES
from lychee_ray.plots import bar_chart, markdown_table
from lychee_ray.store.reader import open_store

REPO = Path(__file__).resolve().parents[1]
BEAM_100K = REPO.parent / "shared" / "data" / "beam" / "100K"
RUN_SETS = ("ray.progress_bars=false", "ray.num_cpus=2")  # a small private Ray on a shared machine
TIMINGS = "beam_recall_timings.json"  # beside the store and answers in the work folder
SYSTEMS = {"recall": "lychee-ray", "naive_rag": "naive RAG", "bm25": "BM25"}
TARGET_MARGIN = 0.15  # issue 29: overall recall >= BM25 + 15 points

PER_ABILITY_SQL = """
    select category ability, count(*) n,
           count(*) filter (where status <> 'ok') errors,
           count(*) filter (where status = 'ok' and evidence_recall is null) no_evidence,
           count(evidence_recall) with_evidence,
           avg(evidence_recall) recall, avg(naive_rag_recall) naive_rag, avg(bm25_recall) bm25
    from read_parquet($answers) group by grouping sets ((category), ()) order by category nulls last
"""
MEMORY_SQL = """
    select (select count(*) from turns) turns,
           (select count(*) from turns where embedding is not null) turn_vectors,
           (select count(*) from passages where embedding is not null) passages,
           (select count(*) from records) records,
           (select count(*) from records where embedding is not null) record_vectors,
           (select count(*) from nodes) nodes,
           (select count(*) from nodes where embedding is not null) node_vectors,
           (select count(*) from conversations where status = 'ok') conversations
"""


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------
def ability_rows(answers_glob: str) -> list[dict]:
    """One row per ability in BEAM's order (unknown categories after), then `all` (micro average
    over the questions with evidence) and `mean of abilities` (macro, over abilities with recall)."""
    con = duckdb.connect()
    cols = ("ability", "n", "errors", "no_evidence", "with_evidence", "recall", "naive_rag", "bm25")
    rows = [dict(zip(cols, r)) for r in con.execute(PER_ABILITY_SQL, {"answers": answers_glob}).fetchall()]
    overall = [r for r in rows if r["ability"] is None]
    per = [r for r in rows if r["ability"] is not None]
    rank = {a: i for i, a in enumerate(BEAM_ABILITIES)}
    per.sort(key=lambda r: (rank.get(r["ability"], len(rank)), r["ability"]))
    out = per + [{**r, "ability": "all"} for r in overall]
    scored = [r for r in per if r["recall"] is not None]
    if scored:
        macro = {k: sum(r[k] for r in scored) / len(scored) for k in SYSTEMS if all(r[k] is not None for r in scored)}
        out.append({"ability": "mean of abilities", "n": sum(r["n"] for r in per), **macro})
    return out


def memory_size(store_dir: str, cfg) -> dict:
    """Counts from the store and the two per-turn ratios (per stored turn row: a long message the
    reader split into parts counts once per part)."""
    with open_store(store_dir, cfg) as store:
        m = store.sql(MEMORY_SQL)[0]
    embedded = m["turn_vectors"] + m["passages"] + m["record_vectors"] + m["node_vectors"]
    turns = max(m["turns"], 1)
    return {**m, "embedded": embedded, "records_per_turn": m["records"] / turns, "embedded_per_turn": embedded / turns}


def target_lines(rows: list[dict]) -> list[str]:
    """The issue's two targets, as met or missed, with the gap."""
    overall = next((r for r in rows if r["ability"] == "all"), None)
    if overall is None or overall["recall"] is None or overall["bm25"] is None:
        return ["- No question with evidence: the targets cannot be checked."]
    gap = overall["recall"] - overall["bm25"]
    below = [r for r in rows if r["ability"] not in ("all", "mean of abilities") and r["recall"] is not None
             and r["bm25"] is not None and r["recall"] < r["bm25"]]
    return [
        f"- Overall recall {overall['recall']:.3f} vs BM25 {overall['bm25']:.3f}: {100 * gap:+.1f} points "
        f"(target >= +{100 * TARGET_MARGIN:.0f}): {'met' if gap >= TARGET_MARGIN else 'missed'}.",
        "- No ability below BM25: " + ("met." if not below else "missed: " + ", ".join(
            f"{r['ability']} ({r['recall']:.3f} < {r['bm25']:.3f})" for r in below) + "."),
    ]


def chart(rows: list[dict], path: Path) -> Path:
    """Recall per ability for the three systems (abilities without evidence are left out)."""
    per = [r for r in rows if r["ability"] not in ("all", "mean of abilities") and r["recall"] is not None]
    return bar_chart(path, [r["ability"] for r in per], {name: [r[k] for r in per] for k, name in SYSTEMS.items()},
                     "BEAM: evidence recall per ability (rules backend)", "evidence recall")


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def report_lines(rows: list[dict], mem: dict, timings: dict, budget: int, command: str, data_note: str) -> list[str]:
    fmt = {k: ".3f" for k in SYSTEMS}
    table = [{**r, **{SYSTEMS[k]: r.get(k) for k in SYSTEMS}} for r in rows]
    cols = ["ability", "n", "with_evidence", "no_evidence", "errors", *SYSTEMS.values()]
    seconds = lambda k: f"{timings[k]:.0f} s" if timings.get(k) is not None else "not measured in this run"  # noqa: E731
    return [
        "# Evidence recall on BEAM, per ability (rules backend)",
        "",
        f"`{command}`: {data_note}; every question evaluated from the store's questions table; "
        f"evidence recall at a context budget of {budget} tokens for lychee-ray and the naive RAG and BM25 baselines. "
        "`with_evidence`: questions with evidence ids, the only ones in a recall mean; `no_evidence`: answered questions "
        "without evidence ids (recall undefined, counted apart); `errors`: questions that became error rows. "
        "`all` is the mean over every question with evidence; `mean of abilities` the mean of the per-ability means.",
        "",
        markdown_table(table, cols, fmt),
        "Issue 29's targets (development data: reported, not tuned for):",
        "",
        *target_lines(rows),
        "",
        "## Memory size",
        "",
        f"- {mem['conversations']} conversations, {mem['turns']} stored turn rows (a long message split by the reader counts per part), "
        f"{mem['passages']} passages, {mem['records']} records, {mem['nodes']} nodes ({mem['node_vectors']} with a vector).",
        f"- Records per turn: {mem['records_per_turn']:.2f}.",
        f"- Embedded texts per turn ((turns + passages + records + nodes with a vector) / turns): "
        f"{mem['embedded']} / {mem['turns']} = {mem['embedded_per_turn']:.2f}.",
        "",
        "## Wall time",
        "",
        f"- Ingest: {seconds('ingest_s')}; evaluate: {seconds('evaluate_s')}. Measured once on a shared, loaded 2-core machine "
        f"(Ray num_cpus 2) beside other work: a record of this run, not a timing claim. {machine_load()}.",
        "",
        "![recall per ability](beam_recall_per_ability.png)",
    ]


def answers_glob(path: Path) -> str:
    """The answer parts under an evaluate output folder (or a folder of parts itself)."""
    return str((path / "answers" if (path / "answers").is_dir() else path) / "*.parquet")


def write_report(store: Path, answers: Path, cfg, timings: dict, command: str, data_note: str) -> Path:
    rows = ability_rows(answers_glob(answers))
    mem = memory_size(str(store), cfg)
    RESULTS.mkdir(parents=True, exist_ok=True)
    chart(rows, RESULTS / "beam_recall_per_ability.png")
    return write_markdown("beam_recall", report_lines(rows, mem, timings, cfg.retrieval.context_token_budget, command, data_note))


# --------------------------------------------------------------------------------------------
# Run
# --------------------------------------------------------------------------------------------
def run(data: Path, work: Path, cfg, ingest: bool = True) -> dict:
    """Ingest the bucket (unless `ingest` is false: the store already in `work` is taken as it
    is) and evaluate every question; the wall seconds of each, also saved beside the store so a
    report-only rerun can quote them."""
    from lychee_ray.evaluate.job import run_evaluate
    from lychee_ray.ingest.job import run_ingest

    saved = work / TIMINGS
    timings = json.loads(saved.read_text()) if saved.is_file() else {}
    if ingest:
        start = time.perf_counter()
        summary = run_ingest(cfg, str(data), str(work / "store"))
        timings["ingest_s"] = time.perf_counter() - start
        print(summary.render(), flush=True)
        (work / "ingest_summary.txt").write_text(summary.render() + "\n")
        saved.write_text(json.dumps(timings) + "\n")
    start = time.perf_counter()
    result = run_evaluate(cfg, str(work / "store"), str(work / "eval"))
    timings["evaluate_s"] = time.perf_counter() - start
    print(result.render(), flush=True)
    saved.write_text(json.dumps(timings) + "\n")
    return timings


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", type=Path, default=BEAM_100K, help="a BEAM bucket folder (default: ../shared/data/beam/100K)")
    p.add_argument("--out", type=Path, default=None, help="work folder for the store and answers (default: a temporary one)")
    p.add_argument("--store", type=Path, default=None, help="report only: an existing store (with --answers)")
    p.add_argument("--answers", type=Path, default=None, help="report only: an existing evaluate output folder (with --store)")
    p.add_argument("--no-ingest", action="store_true",
                   help="evaluate the store already in --out as it is (e.g. one whose ingest was stopped: the questions "
                        "of conversations it lacks become error rows, counted apart)")
    add_set_option(p)
    args = p.parse_args(argv)
    if (args.store is None) != (args.answers is None):
        p.error("--store and --answers go together (report only)")
    cfg = load_config(REPO / "configs" / "local.yaml", [*RUN_SETS, *args.sets])
    if args.store is not None:
        saved = args.store.parent / TIMINGS
        timings = json.loads(saved.read_text()) if saved.is_file() else {}
        command = f"python -m benchmarks.beam_recall --store {args.store} --answers {args.answers}{set_flags(args.sets)}"
        return write_report(args.store, args.answers, cfg, timings, command, "report only, from an existing store and evaluation")
    if not args.no_ingest and not args.data.is_dir():
        raise SystemExit(f"BEAM data not found at {args.data}: pass --data with a BEAM bucket folder such as .../beam/100K.")
    if args.no_ingest and args.out is None:
        p.error("--no-ingest evaluates the store in --out: give --out")
    work = args.out or Path(tempfile.mkdtemp(prefix="beam_recall_"))
    work.mkdir(parents=True, exist_ok=True)
    timings = run(args.data, work, cfg, ingest=not args.no_ingest)
    command = f"python -m benchmarks.beam_recall --data {args.data} --out {work}{' --no-ingest' if args.no_ingest else ''}{set_flags(args.sets)}"
    note = (f"the store in {work} (ingested from the BEAM bucket {args.data.name} earlier) evaluated" if args.no_ingest
            else f"the BEAM bucket {args.data.name} ingested and evaluated in one run")
    return write_report(work / "store", work / "eval", cfg, timings, command, note)


if __name__ == "__main__":
    main()
