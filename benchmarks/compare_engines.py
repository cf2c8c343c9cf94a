"""The two retrieval engines on the full LoCoMo dev store, question by question.

`tests/test_retrieve_cache.py` asserts on the small fixture store that the in-memory engine
(`retrieval.engine: cache`, the default) ranks and selects exactly what the per-query DuckDB engine
(`store`) does. This runs the same comparison on every question of all LoCoMo dev conversations
(rules backend, rules planner, real MiniLM) and reports where they differ, if anywhere: per
channel, the fused list, the selected evidence and the context text. It also times both engines
on the same questions, side by side (query vectors are computed once beforehand, so the times
are retrieval alone).

    python -m benchmarks.compare_engines [--store DIR] [--every N]   # writes benchmarks/results/compare_engines.md

Without --store it ingests LoCoMo dev with `configs/local.yaml` into a temporary folder first.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from benchmarks import machine_load, write_markdown
from benchmarks.dev_split import write_part
from lychee_ray.config import load_config

REPO = Path(__file__).resolve().parents[1]


CHANNEL = "channel "  # prefix of a channel's entry in `differences`


def differences(a, b) -> list[str]:
    """What differs between two Retrievals of one question: "channel <name>" per channel, then
    'fused', 'selected order' (same items, other order) or 'selected items', and 'context'.
    Empty when the engines agree exactly."""
    out = [CHANNEL + n for n in sorted(a.rankings.keys() | b.rankings.keys()) if a.rankings.get(n) != b.rankings.get(n)]
    if a.fused != b.fused:
        out.append("fused")
    keys_a, keys_b = [e.key for e in a.selected], [e.key for e in b.selected]
    if keys_a != keys_b:
        out.append("selected order" if sorted(keys_a) == sorted(keys_b) else "selected items")
    if a.context_text != b.context_text:
        out.append("context")
    return out


def first_divergence(x: list, y: list) -> int:
    """Index of the first position where two rankings differ (len of the shorter if one is a prefix)."""
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))


def vector_swap(store, conv, table: str, cid: str, qv: np.ndarray, k: int = 200) -> tuple[int, float] | None:
    """Where the two engines' raw top-k of `table` by cosine first part, and how far apart the
    two rows' cosines are there, recomputed in float64 (None: the same top-k). A gap below
    float32 resolution (~1e-7) is a tie that only rounding orders."""
    rows = getattr(conv, table)
    theirs = [r[f"{table[:-1]}_id"] for r in store.vector_topk(table, cid, qv, k)]
    ours = [rows.ids[i] for i in rows.top(rows.cosine(qv[None])[0], k)]
    at = first_divergence(theirs, ours)
    if at >= min(len(theirs), len(ours)):
        return None
    q = qv.astype(np.float64) / np.linalg.norm(qv)

    def cos(rid: str) -> float:
        v = rows.vector(rows.ids.index(rid)).astype(np.float64)
        return float(v @ q / np.linalg.norm(v))

    return at, abs(cos(theirs[at]) - cos(ours[at]))


def planned_questions(store, every: int) -> list[tuple[str, str, object]]:
    """(conversation, question, rules plan) for every `every`-th question of the store, planned as
    evaluate plans them (the conversation's entity names, most mentioned first, at most 200)."""
    from lychee_ray.query.retrieve import entity_names
    from lychee_ray.rules.planner import RulesPlanner

    rows = store.sql("SELECT conversation_id AS cid, question, CAST(question_date AS VARCHAR) AS qd "
                     "FROM questions ORDER BY question_id")[::every]
    names = {c: entity_names(store, c)[:200] for c in {r["cid"] for r in rows}}
    planner = RulesPlanner()
    return [(r["cid"], r["question"], planner.plan(r["question"], r["qd"], names[r["cid"]])) for r in rows]


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--store", default=None, help="an existing rules store of LoCoMo dev (default: ingest one)")
    p.add_argument("--every", type=int, default=1, help="compare every N-th question (default: all)")
    args = p.parse_args(argv)
    from lychee_ray.embedding import Embedder
    from lychee_ray.query.retrieve import Retriever, route_text
    from lychee_ray.store.reader import open_store

    cfg = load_config(REPO / "configs" / "local.yaml", ["ray.progress_bars=false"])
    store_dir = args.store
    if store_dir is None:
        from lychee_ray.ingest.job import run_ingest

        work = Path(tempfile.mkdtemp(prefix="compare_engines_"))
        store_dir = str(work / "store")
        run_ingest(cfg, str(write_part("all", work / "locomo_dev.json")), store_dir)
    embedder = Embedder(cfg.embedding)
    with open_store(store_dir, cfg) as store:
        asked = planned_questions(store, args.every)
        texts = sorted({route_text(r) for _, _, plan in asked for r in plan.routes} | {q for _, q, _ in asked})
        vecs = dict(zip(texts, embedder.encode(texts)))

        def embed(batch):
            return np.stack([vecs[t] for t in batch])

        engines = {name: Retriever(store, cfg.retrieval, embed, engine=name) for name in ("store", "cache")}
        results: dict[str, list] = {}
        seconds: dict[str, list[float]] = {}
        for name, retriever in engines.items():
            results[name], seconds[name] = [], []
            for cid, question, plan in asked:
                t0 = time.perf_counter()
                results[name].append(retriever.retrieve(cid, plan, question))
                seconds[name].append(time.perf_counter() - t0)
        diffs = [differences(a, b) for a, b in zip(results["store"], results["cache"])]
        why = explain(store, engines["cache"].cache, asked, diffs, embed)
        n_conv = len({cid for cid, _, _ in asked})
    return write_markdown("compare_engines", report(args, asked, results, diffs, seconds, n_conv, why))


def explain(store, cache, asked, diffs, embed) -> dict[int, str]:
    """For each question whose vector channels differ: the swap in the raw turn or record
    ranking behind it (position and float64 cosine gap). Conversations come from the cache
    engine's own cache, already loaded by the comparison."""
    from lychee_ray.query.retrieve import route_text

    out: dict[int, str] = {}
    for i, ((cid, _, plan), diff) in enumerate(zip(asked, diffs)):
        notes = []
        for channel in (d.removeprefix(CHANNEL) for d in diff if d.startswith(CHANNEL)):
            route, _, kind = channel.partition(":")  # "r<route index>:<channel kind>"
            table = {"turn_vector": "turns", "record_vector": "records"}.get(kind)
            if table is None or not plan.routes:
                continue
            qv = embed([route_text(plan.routes[int(route[1:])])])[0]
            swap = vector_swap(store, cache.get(store, cid), table, cid, qv)
            notes.append(f"{table} rank {swap[0]}: cosine gap {swap[1]:.1e}" if swap else f"{table}: same top-200")
        if notes:
            out[i] = "; ".join(notes)
    return out


def report(args, asked, results, diffs, seconds, n_conv: int, why: dict[int, str]) -> list[str]:
    kinds: Counter = Counter()
    examples = []
    for i, ((cid, question, _), a, b, diff) in enumerate(zip(asked, results["store"], results["cache"], diffs)):
        kinds.update(diff)
        kinds["any"] += bool(diff)
        if diff and len(examples) < 10:
            ch = next((d.removeprefix(CHANNEL) for d in diff if d.startswith(CHANNEL)), None)
            at = first_divergence(a.rankings.get(ch, []), b.rankings.get(ch, [])) if ch else first_divergence(a.fused, b.fused)
            examples.append(f"| {cid} | {question[:60]} | {', '.join(diff)} | {at} | {why.get(i, '')} |")
    n = len(asked)
    st, ca = (np.array(seconds[k]) * 1000 for k in ("store", "cache"))
    flags = (f" --store {args.store}" if args.store else "") + (f" --every {args.every}" if args.every != 1 else "")
    lines = [
        "# Retrieval engines on LoCoMo dev, question by question (rules backend)",
        "",
        f"`python -m benchmarks.compare_engines{flags}`: {n} questions over {n_conv} conversations, "
        "each retrieved by the `store` engine (DuckDB per query) and the `cache` engine (in memory), "
        f"configs/local.yaml. {machine_load()}.",
        "",
        f"**Questions where the engines differ in anything: {kinds['any']} of {n}.**",
        "",
        "| compared | questions that differ |",
        "|---|---:|",
    ]
    channels = sorted({name for r in results["store"] + results["cache"] for name in r.rankings})
    for what in [CHANNEL + c for c in channels] + ["fused", "selected order", "selected items", "context"]:
        lines.append(f"| {what} | {kinds[what]} |")
    if examples:
        lines += ["", "First differences (position = first rank where the lists part; cause = where the raw turn or "
                  "record ranking of the two engines parts, and the float64 cosine gap of the two rows swapped there: "
                  "below ~1e-6 it is a float32 tie, ordered by rounding, not by the engines' logic):", "",
                  "| conversation | question | differs in | position | cause |", "|---|---|---|---:|---|", *examples]
    lines += [
        "",
        "Retrieval alone (query vectors precomputed), ms per question, the same questions in the same order; "
        "the cache engine's first question of each conversation loads it:",
        "",
        "| engine | p50 | p95 | mean | total s |",
        "|---|---:|---:|---:|---:|",
        *(f"| {k} | {np.percentile(v, 50):.1f} | {np.percentile(v, 95):.1f} | {v.mean():.1f} | {v.sum() / 1000:.1f} |"
          for k, v in (("store", st), ("cache", ca))),
    ]
    return lines


if __name__ == "__main__":
    main()
