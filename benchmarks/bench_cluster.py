"""Ingest on a multi-node Ray cluster: throughput for 1 vs 2 worker nodes, peak memory for 4x the
data, and a GPU-hour estimate for a large archive.

Runs a private `ray start` cluster on 127.0.0.1 (tests/support/ray_cluster.py: free ports, own
temp dir, stops only its own processes) and submits `jobs/ingest.py` with `ray job submit`,
exactly as on a real cluster, over short synthetic conversations (benchmarks/short_archive.py),
rules backend.

- throughput: head (0 CPUs: driver only) + 1 worker node, then a second worker node joins and the
  same archive is ingested again with one embedding actor per node. turns/s is taken from the
  job's own summary (whole run, actor start-up included).
- memory: with both worker nodes, archives of N and 4N conversations; every process of the
  cluster is polled (psutil) and the peak RSS of the job's driver, of the largest Ray worker, and
  of all Ray workers together is recorded.
- estimate: build tokens per LoCoMo dev conversation from the encoder benchmark
  (benchmarks/bench_encode.py) over assumed vLLM prefill/decode throughputs (cited below).

    .venv/bin/python -m benchmarks.bench_cluster [--quick]
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from benchmarks.short_archive import write_short_archive
from tests.support.ray_cluster import LocalRayCluster

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_SRC = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
JOB_CONFIG = ["--config", "configs/local.yaml", "--set", "ray.progress_bars=false", "--set", "embedding.num_threads=1"]
TURNS_PER_SESSION = 4
# Assumptions for the estimate (not measured here; override with --decode-tok-s/--prefill-tok-s
# once you have measured your own server with `vllm bench serve`).
# Decode: 5,333 output tok/s at saturation for Llama-3.1-8B-Instruct, BF16, one H100 80GB, vLLM
# 0.23.0, prefix caching off (runinfra.ai, "vLLM vs SGLang vs TensorRT-LLM benchmark", June 2026;
# a third-party measurement with an open harness). vLLM's own published comparison (blog post
# "vLLM v0.6.0: 2.7x Throughput Improvement", 2024-09-05, Llama 3 8B on 1xH100, ShareGPT) gives
# its throughput only in plots (requests/s), so no token rate can be quoted from it here. An H200
# (more HBM bandwidth) is taken as equal to the H100: conservative for decode. Prefill: assumed
# 10x decode per token (it is compute-bound and batched); prefix caching, which serves our
# stable instruction prefix, would lower it further and is ignored.
ASSUMED_DECODE_TOK_S = 5_333
ASSUMED_PREFILL_TOK_S = 53_330


@dataclass
class PeakRss:
    """Polls the cluster's processes in a thread; keeps the peak RSS per role."""

    cluster: LocalRayCluster
    interval_s: float = 0.25
    driver: int = 0
    worker_max: int = 0
    workers_sum: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _poll(self) -> None:
        while not self._stop.is_set():
            total = 0
            for proc in self.cluster.processes():
                try:
                    rss, cmd = proc.memory_info().rss, " ".join(proc.cmdline())
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if "jobs/ingest.py" in cmd:
                    self.driver = max(self.driver, rss)
                elif cmd.startswith("ray::") and not cmd.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
                    self.worker_max = max(self.worker_max, rss)
                    total += rss
            self.workers_sum = max(self.workers_sum, total)
            self._stop.wait(self.interval_s)


def ingest(cluster: LocalRayCluster, archive: Path, store: Path, extra: list[str]) -> dict:
    out = cluster.submit(["python", "jobs/ingest.py", *JOB_CONFIG, *extra, "--input", str(archive), "--out", str(store)],
                         working_dir=str(REPO), timeout=3600).stdout
    turns = int(re.search(r"turns: (\d+);", out).group(1))
    wall = float(re.search(r"time: ([\d.]+) s", out).group(1))
    return {"turns": turns, "wall_s": wall, "turns_per_s": turns / wall}


def token_estimate(decode_tok_s: float = ASSUMED_DECODE_TOK_S, prefill_tok_s: float = ASSUMED_PREFILL_TOK_S) -> dict:
    """Build tokens per LoCoMo dev conversation from the encoder benchmark (segment mode, o200k,
    rules outputs as the carried context), put through the cost model."""
    from benchmarks.bench_encode import LOCOMO, _means, bench_tokens

    rows, _ = bench_tokens(LOCOMO)
    seg = next(m for m in _means(rows) if m["mode"] == "segment")
    per_conv = {"calls": seg["calls"], "prompt": seg["prompt"], "completion": seg["completion"], "conversations": seg["conversations"]}
    return {**per_conv, "decode_tok_s": decode_tok_s, "prefill_tok_s": prefill_tok_s,
            "gpu_hours_10k": gpu_hours(per_conv, decode_tok_s, prefill_tok_s),
            "sensitivity": {d: gpu_hours(per_conv, d, 10 * d) for d in SENSITIVITY_DECODE_TOK_S}}


SENSITIVITY_DECODE_TOK_S = (2_500, 5_333, 12_500)  # pessimistic / cited / optimistic (earlier third-party figure)


def gpu_hours(per_conv: dict, decode_tok_s: float, prefill_tok_s: float, conversations: int = 10_000) -> float:
    """The cost model: encoder prompt tokens over prefill throughput plus completion tokens over
    decode throughput, per conversation, times the archive size."""
    return conversations * (per_conv["prompt"] / prefill_tok_s + per_conv["completion"] / decode_tok_s) / 3600


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def render(sizes: dict, tput: dict, mem: dict, est: dict) -> str:
    t1, t2 = tput[1], tput[2]
    small, large = mem[sizes["mem_small"]], mem[sizes["mem_large"]]
    ratio = lambda key: large[key] / small[key] if small[key] else float("nan")  # noqa: E731
    lines = [
        "# bench_cluster: ingest on a two-node local Ray cluster (`ray job submit`, rules backend)",
        "",
        f"Synthetic archive: short conversations (1 LoCoMo session, first {TURNS_PER_SESSION} turns). Machine: "
        f"{psutil.cpu_count()} logical CPUs shared by all nodes and by other users of the box; the nodes are Ray processes on one host.",
        "",
        "## Throughput: 1 vs 2 worker nodes (one run, same archive)",
        "",
        "| worker nodes | embedding actors | conversations | turns | wall s | turns/s |",
        "|---|---|---|---|---|---|",
        f"| 1 | 1 | {sizes['tput']} | {t1['turns']} | {t1['wall_s']:.1f} | {t1['turns_per_s']:.1f} |",
        f"| 2 | 2 | {sizes['tput']} | {t2['turns']} | {t2['wall_s']:.1f} | {t2['turns_per_s']:.1f} |",
        "",
        f"**Ratio 2 nodes / 1 node: {t2['turns_per_s'] / t1['turns_per_s']:.2f}.** What it can mean: that the pipeline spreads its"
        " actors and tasks over a node that joins, and what that costs (scheduling, object transfer between raylets)."
        " What it cannot mean: scaling on real hardware. Both nodes share the same physical cores"
        " (one torch thread per embedding actor, so 1 node uses ~1 core for embedding and 2 nodes ~2), other"
        " processes compete for them, and the 2-node run comes second (warm page cache). Wall time includes actor start-up.",
        "",
        "## Peak memory: N vs 4N conversations (2 worker nodes)",
        "",
        "| conversations | turns | driver peak RSS MiB | largest worker peak RSS MiB | all workers peak RSS MiB |",
        "|---|---|---|---|---|",
    ]
    for n in (sizes["mem_small"], sizes["mem_large"]):
        m = mem[n]
        lines.append(f"| {n} | {m['turns']} | {mib(m['driver'])} | {mib(m['worker_max'])} | {mib(m['workers_sum'])} |")
    lines += [
        "",
        f"**Ratio 4N / N:** driver {ratio('driver'):.2f}, largest worker {ratio('worker_max'):.2f}, all workers {ratio('workers_sum'):.2f}"
        " (target <= 1.5). RSS sampled every 0.25 s with psutil over every process of the cluster; the driver is the"
        " job's `python jobs/ingest.py`; workers are the `ray::` processes (the per-node Ray agents excluded). Resident"
        " memory is dominated by the embedding model in each actor.",
        "",
        "## GPU-hour estimate: 10,000 LoCoMo-sized conversations, one H200 (ESTIMATE)",
        "",
        f"Measured: the encoder benchmark's build tokens per LoCoMo dev conversation (benchmarks/bench_encode.py, segment"
        f" mode, mean of {est['conversations']} conversations): the o200k tokens an LLM encoder would be sent and would"
        " return, with the rules outputs as the carried context and as the assumed reply.",
        "",
        f"- per conversation: {est['calls']:.0f} encode calls, {est['prompt']:,.0f} prompt + {est['completion']:,.0f} completion tokens",
        f"- ASSUMED vLLM throughput for a 7-8B model on one GPU: decode {est['decode_tok_s']:,.0f} output tok/s aggregate,"
        f" prefill {est['prefill_tok_s']:,.0f} tok/s. Default decode: 5,333 tok/s, Llama-3.1-8B-Instruct BF16 on one H100,"
        " vLLM 0.23.0 (runinfra.ai, June 2026, third-party); vLLM's own v0.6.0 benchmark post gives throughput only as"
        " plots. H200 taken as equal to H100; prefill assumed 10x decode. Not measured here; o200k counts stand in for"
        " the open model's tokenizer.",
        f"- **estimate: {est['gpu_hours_10k']:.1f} GPU-hours** for 10,000 conversations (encode only; planner/answer/judge not included)",
        "",
        "| assumed decode tok/s (prefill 10x) | GPU-hours, 10,000 conversations |",
        "|---|---|",
        *[f"| {d:,} | {h:.1f} |" for d, h in est["sensitivity"].items()],
        "",
        f"Command: `.venv/bin/python -m benchmarks.bench_cluster{' --quick' if sizes['quick'] else ''}`",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a few minutes on 2 cores)")
    parser.add_argument("--src", default=str(DEFAULT_SRC), help="LoCoMo JSON to draw sessions from")
    parser.add_argument("--decode-tok-s", type=float, default=ASSUMED_DECODE_TOK_S, help="assumed aggregate decode throughput of the GPU server")
    parser.add_argument("--prefill-tok-s", type=float, default=ASSUMED_PREFILL_TOK_S, help="assumed prefill throughput")
    args = parser.parse_args(argv)
    sizes = {"quick": args.quick, "tput": 60 if args.quick else 200,
             "mem_small": 50 if args.quick else 250, "mem_large": 200 if args.quick else 1000}
    work = Path(tempfile.mkdtemp(prefix="lyr-bench-"))
    archives = {n: work / f"synth_{n}.jsonl" for n in {sizes["tput"], sizes["mem_small"], sizes["mem_large"]}}
    for n, path in archives.items():
        write_short_archive(args.src, path, n=n, seed=0, turns_per_session=TURNS_PER_SESSION)

    cluster = LocalRayCluster()
    tput, mem = {}, {}
    try:
        cluster.start_head(num_cpus=0)  # the driver only: the work goes to the worker nodes
        cluster.add_node(num_cpus=2)
        tput[1] = ingest(cluster, archives[sizes["tput"]], work / "tput1", ["--set", "embedding.num_actors=1"])
        cluster.add_node(num_cpus=2)
        two = ["--set", "embedding.num_actors=2"]
        tput[2] = ingest(cluster, archives[sizes["tput"]], work / "tput2", two)
        for n in (sizes["mem_small"], sizes["mem_large"]):
            with PeakRss(cluster) as peak:
                run = ingest(cluster, archives[n], work / f"mem{n}", two)
            mem[n] = {"turns": run["turns"], "driver": peak.driver, "worker_max": peak.worker_max, "workers_sum": peak.workers_sum}
    finally:
        cluster.stop()
    est = token_estimate(args.decode_tok_s, args.prefill_tok_s)
    shutil.rmtree(work, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "bench_cluster.md"
    out.write_text(render(sizes, tput, mem, est))
    print(out.read_text())
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
