"""Evaluate throughput on LoCoMo dev (rules backend): questions/s with 1 and with 2 actors per
stage, measured side by side in one run.

The dev conversations (`benchmarks/dev_split.py`, all 7 by default, the first N with
`--conversations N`) are ingested once with `configs/local.yaml` (rules backend, bundled MiniLM,
local Ray). Then `run_evaluate` runs over the same store into two fresh output folders: every
stage with 1 actor, then every stage with 2. The clock covers `run_evaluate` whole: actor start
(each retrieve actor loads MiniLM and fills its conversation cache), every category 1-4 question
through plan, retrieve (with both baselines at every recall budget), answer and judge, the
committed answers and report.md; Ray itself is started before. Both runs give each actor the
same fraction of a CPU (plan/answer/judge 0.1, retrieve 0.5), so only the actor count differs
and two actors per stage fit a 2-core Ray. The two answers tables are compared row by row.

    python -m benchmarks.bench_evaluate [--quick] [--conversations N] [--out DIR]

`--quick` is `--conversations 1`. Writes benchmarks/results/evaluate.md and returns its path.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from benchmarks import machine_load, write_markdown
from benchmarks.dev_split import PARTS, conversations
from lychee_ray.config import LycheeConfig, load_config

REPO = Path(__file__).resolve().parents[1]
STAGES = ("plan", "retrieve", "answer", "judge")
CPUS = {"plan": 0.1, "retrieve": 0.5, "answer": 0.1, "judge": 0.1}
TARGET_QPS = 10.0  # issue 15: evaluate >= 10 questions/s on LoCoMo dev, rules backend, this machine


def config(actors: int) -> LycheeConfig:
    sets = ["ray.progress_bars=false"]
    sets += [f"evaluate.stages.{s}.num_actors={actors}" for s in STAGES]
    sets += [f"evaluate.stages.{s}.num_cpus={c}" for s, c in CPUS.items()]
    return load_config(REPO / "configs" / "local.yaml", sets)


def timed_evaluate(cfg: LycheeConfig, store: Path, out: Path) -> tuple[int, float]:
    from lychee_ray.evaluate.job import run_evaluate

    start = time.perf_counter()
    result = run_evaluate(cfg, str(store), str(out))
    return result.asked, time.perf_counter() - start


def answers(out: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in pq.read_table(out / "answers").to_pylist()}


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="one conversation (same as --conversations 1)")
    p.add_argument("--conversations", type=int, default=None, help=f"the first N dev conversations (of {len(PARTS['all'])})")
    p.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = p.parse_args(argv)
    from lychee_ray.ingest.job import run_ingest
    from lychee_ray.runtime.ray import init_ray

    n_conv = 1 if args.quick else (args.conversations or len(PARTS["all"]))
    work = Path(args.out or tempfile.mkdtemp(prefix="bench_evaluate_"))
    work.mkdir(parents=True, exist_ok=True)
    convs = conversations("all")[:n_conv]
    src = work / "locomo_dev.json"
    src.write_text(json.dumps(convs))
    one, two = config(1), config(2)
    init_ray(one.ray)  # not on the clock
    start = time.perf_counter()
    run_ingest(one, str(src), str(work / "store"))
    ingest_s = time.perf_counter() - start

    runs = {}
    for actors, cfg in ((1, one), (2, two)):
        runs[actors] = timed_evaluate(cfg, work / "store", work / f"eval_{actors}")
    same = answers(work / "eval_1") == answers(work / "eval_2")

    ids = ", ".join(c["sample_id"] for c in convs)
    cmd = "python -m benchmarks.bench_evaluate" + (" --quick" if args.quick else f" --conversations {n_conv}" if args.conversations else "")
    lines = [
        "# Evaluate throughput: 1 vs 2 actors per stage (LoCoMo dev, rules backend)",
        "",
        f"`{cmd}` on this machine ({machine_load()}). "
        f"{n_conv} conversation(s) ({ids}), categories 1-4, both baselines at recall budgets {one.evaluate.recall_budgets}; "
        f"ingest of the store first ({ingest_s:.0f} s, not in the figures). Each run is `run_evaluate` whole, "
        "actor start and report included; actor CPUs: " + ", ".join(f"{s} {c}" for s, c in CPUS.items()) + ".",
        "",
        "| actors per stage | questions | wall s | questions/s |",
        "|---:|---:|---:|---:|",
    ]
    for actors, (asked, seconds) in runs.items():
        lines.append(f"| {actors} | {asked} | {seconds:.1f} | {asked / seconds:.2f} |")
    (q1, s1), (q2, s2) = runs[1], runs[2]
    ratio = (q2 / s2) / (q1 / s1)
    best = max(q1 / s1, q2 / s2)
    lines += [
        "",
        f"- 2 actors / 1 actor: **{ratio:.2f}x** questions/s.",
        f"- Target >= {TARGET_QPS:g} questions/s: best here {best:.2f}, {'met' if best >= TARGET_QPS else 'not met'}.",
        f"- Answers tables of the two runs identical row by row: {'yes' if same else '**no**'}.",
    ]
    return write_markdown("evaluate", lines)


if __name__ == "__main__":
    main()
