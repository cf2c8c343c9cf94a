"""One store's query side at 10 / 100 / 1,000 conversations: `Retriever.retrieve` latency (cold
and warm), `Memory.open` time, Parquet parts per table, and the in-memory cache's bytes per
conversation. Retrieval has one engine (query/conversation.py: a conversation is loaded once,
then ranked in memory); this measures how its costs move with the store around it.

    python -m benchmarks.bench_store [--quick] [--scales 10 100 1000] [--questions 40] [--base 10]
        [--base-store DIR] [--set KEY=VALUE ...]

How the stores are made (shared with benchmarks/bench_scale.py, whose functions this imports):
- base: `--base` generated chit-chat chats (synth, 12 turns each) through the real ingest
  (`lychee-ray ingest`, rules backend, MiniLM, a private local Ray); `--base-store DIR` reuses
  a store built earlier (with its synth archive's questions.jsonl beside it: `--questions-file`).
- every larger scale: relabelled copies of the base's rows, committed in an ingest's batches
  (`bench_scale.copy_store`), so the files are laid out as an ingest of that size lays them.

Per scale, `--questions` conversations drawn at random (seed 0): cold = the conversation's
first question (`Retriever.retrieve` loads its rows), warm = a second, different question of
it right after; p50 / p95 in ms. The query embedding IS included (MiniLM on the rules plan's
route texts, inside `retrieve`); planning is not (the rules plan is made before the clock
starts). The cache's memory: `ConversationCache.nbytes` (numpy buffers exactly, Python objects
by sys.getsizeof) over the conversations it holds after the run.

Writes benchmarks/results/store.md (git-ignored) and returns its path.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from benchmarks import add_set_option, machine_load, write_markdown
from benchmarks.bench_scale import (
    base_of,
    cfg_of,
    copy_store,
    draw,
    ingest,
    make_archive,
    open_seconds,
    percentiles,
    question_bank,
    store_shape,
    timed_pairs,
)
from lychee_ray.plots import markdown_table
from lychee_ray.query.conversation import cache_for
from lychee_ray.query.engine import QueryEngine
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.store.reader import open_store

SCALES, QUICK_SCALES = [10, 100, 1000], [5, 20]


def retrieve_latency(store_dir: Path, cfg, bank: dict, n_questions: int) -> dict:
    """Cold and warm `Retriever.retrieve` (module docstring) and the cache's bytes per conversation."""
    planner = RulesPlanner()
    with open_store(str(store_dir), cfg) as store:
        engine = QueryEngine(cfg, store)
        retriever = engine.retriever
        ids = store.conversation_ids()
        base = base_of(ids, sorted(bank))
        warm_up = bank[base(ids[0])][0]
        retriever.retrieve(ids[0], planner.plan(warm_up["question"], warm_up["question_date"]), warm_up["question"])  # model load
        plans = {}

        def questions_of(cid):
            qs = bank[base(cid)]
            first, second = qs[0], qs[1 % len(qs)]
            for q in (first, second):
                plans[q["question"]] = planner.plan(q["question"], q["question_date"], engine.known_entities(cid))
            return first["question"], second["question"]

        picks = [c for c in draw(ids, n_questions) if c != ids[0]]
        cold, warm = timed_pairs(picks, questions_of, lambda cid, q: retriever.retrieve(cid, plans[q], q))
        cache = cache_for(store)
        per_conv = cache.nbytes / max(1, len(cache))
    (c50, c95), (w50, w95) = percentiles(cold), percentiles(warm)
    return {"cold_p50_ms": c50, "cold_p95_ms": c95, "warm_p50_ms": w50, "warm_p95_ms": w95, "cache_kb_per_conversation": per_conv / 1024}


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a base of 5 and a copy of 20, 10 questions")
    p.add_argument("--scales", type=int, nargs="+", default=None)
    p.add_argument("--questions", type=int, default=40, help="conversations asked per scale (default: %(default)s)")
    p.add_argument("--base", type=int, default=10, help="conversations ingested for the base store (default: %(default)s)")
    p.add_argument("--base-store", default=None, help="a store built earlier (with --questions-file)")
    p.add_argument("--questions-file", default=None, help="the synth questions.jsonl of --base-store")
    add_set_option(p)
    args = p.parse_args(argv)
    if args.quick:
        args.scales, args.base, args.questions = args.scales or QUICK_SCALES, min(args.base, 5), min(args.questions, 10)
    command = "python -m benchmarks.bench_store " + " ".join(argv if argv is not None else sys.argv[1:])
    cfg = cfg_of(args.sets)
    work = Path(tempfile.mkdtemp(prefix="bench_store-"))
    try:
        if args.base_store:
            base_store, bank = Path(args.base_store), question_bank(Path(args.questions_file))
        else:
            archive, questions = make_archive(work, args.base)
            base_store, bank = work / "base", question_bank(questions)
            ingest(archive, base_store, args.sets, work)
        with open_store(str(base_store), cfg) as s:
            n_base = len(s.conversation_ids())
        rows = []
        for n in sorted(args.scales or SCALES):
            store = base_store if n == n_base else work / f"store-{n}"
            if store is not base_store:
                copy_store(base_store, store, n, cfg)
            shape = store_shape(store)
            row = {"conversations": n, "built": "ingested" if store is base_store else f"copied from {n_base}",
                   "files_per_table": shape["files_max"], "commits": shape["commits"], "open_s": open_seconds(store, cfg)}
            row.update(retrieve_latency(store, cfg, bank, args.questions))
            rows.append(row)
            print(row, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    columns = ["conversations", "built", "files_per_table", "commits", "open_s", "cold_p50_ms", "cold_p95_ms", "warm_p50_ms",
               "warm_p95_ms", "cache_kb_per_conversation"]
    lines = ["# Store: retrieval against store size", "", f"Command: `{command}`", "", machine_load(), "",
             "Retriever.retrieve, the query embedding included (planning not); cold = a conversation's first question.", "",
             markdown_table(rows, columns, {"open_s": ".3f", "cache_kb_per_conversation": ".1f"})]
    return write_markdown("store", lines)


if __name__ == "__main__":
    main()
