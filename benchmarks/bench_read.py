"""Reading one large JSON Lines archive with the ingest job's Ray read plan: one task (byte ranges
off) against several tasks (`read.split_bytes` set so the file is cut into that many ranges),
side by side in one run (issue 13).

The archive: generated conversations (lychee_ray.synth, `chat` format: generic chat JSONL, one
conversation a line, chit-chat as `{conversation_id, title, turns: [...]}` and work
conversations as OpenAI-style `messages`), repeated under new ids until the file reaches `--mb`
megabytes, in a temp folder. What is measured is reading, so repeated text changes nothing; it
saves generating hundreds of megabytes.

A pass runs the job's read stage (`ingest.job.read_dataset`: plan on the driver, one newline
count per range, the read tasks, then keep-first and turn grouping) and a task stage after it
that unpickles every conversation and counts it and its turns, as the embed stage receives
them; only the counts reach the driver. Passes alternate (1 task, N tasks, 1 task, ...), so a
burst of load on a shared machine hits both sides; the ratio is mean seconds of the 1-task
passes over mean seconds of the N-task passes. Memory, per pass: the driver's peak RSS (VmHWM,
reset before the pass), and the largest RSS of one Ray worker process and of all of them
together, sampled every 50 ms (object-store pages a process touched count in its RSS).

    python -m benchmarks.bench_read [--mb 200] [--tasks N] [--repeats 2] [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import write_markdown
from benchmarks.synth_archive import write_archive
from lychee_ray.config import load_config
from lychee_ray.synth import SynthParams
from lychee_ray.synth import write_archive as write_generated

REPO = Path(__file__).resolve().parents[1]
LOCAL_CONFIG = REPO / "configs" / "local.yaml"
BASE_CONVERSATIONS = 100  # generated once (about 6 MiB), then repeated
_PAGE = os.sysconf("SC_PAGE_SIZE")


# --------------------------------------------------------------------------------------------
# The archive
# --------------------------------------------------------------------------------------------
def generated_chats(out: Path) -> list[dict]:
    """BASE_CONVERSATIONS generated conversations (chit-chat and work alternating), as chat objects."""
    write_generated(out, SynthParams(seed=0, conversations=BASE_CONVERSATIONS, format="chat"))
    return [json.loads(line) for line in (out / "archive" / "conversations.jsonl").read_text().splitlines()]


def sized(base: list[dict], target_bytes: int) -> Iterator[dict]:
    """The base conversations, round after round under new ids (`<id>-r<round>`), until their
    JSON Lines reach `target_bytes`."""
    total, round_ = 0, 0
    while True:
        for conv in base:
            chat = {**conv, "conversation_id": f"{conv['conversation_id']}-r{round_}"}
            yield chat
            total += len(json.dumps(chat, ensure_ascii=False).encode()) + 1
            if total >= target_bytes:
                return
        round_ += 1


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------
def reset_peak_rss() -> None:
    """Linux: writing 5 to clear_refs resets this process's VmHWM (peak RSS) to its RSS now."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def peak_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        kb = next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    return kb / 1024


class WorkerRss(threading.Thread):
    """Samples, every 50 ms, the RSS of this run's Ray worker processes: `ray::` in the command
    line and this process among their ancestors (another Ray on a shared machine is not ours)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.max_one, self.max_sum = threading.Event(), 0.0, 0.0

    def run(self) -> None:
        while not self.stop.wait(0.05):
            sizes = list(self._worker_rss_mb())
            self.max_one = max([self.max_one, *sizes])
            self.max_sum = max(self.max_sum, sum(sizes))

    @staticmethod
    def _worker_rss_mb() -> Iterator[float]:
        for pid in _descendants(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if not fh.read(64).startswith(b"ray::"):
                        continue
                with open(f"/proc/{pid}/statm") as fh:
                    yield int(fh.read().split()[1]) * _PAGE / 2**20
            except OSError:  # the process ended between the listing and the read
                continue


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rpartition(")")[2].split()[1])  # after the command name, which may hold spaces
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(pid)
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


# --------------------------------------------------------------------------------------------
# One pass
# --------------------------------------------------------------------------------------------
def _count(batch):
    import pickle

    import numpy as np

    convs = [pickle.loads(s) for s in batch["state"]]
    return {"conversations": np.array([len(convs)]), "turns": np.array([sum(len(c.turns) for c in convs)])}


def read_pass(path: Path, split_bytes: int) -> dict:
    from lychee_ray.ingest.job import read_dataset
    from lychee_ray.io.readers.files import list_input_files
    from lychee_ray.io.readers.plan import plan_parts

    cfg = load_config(LOCAL_CONFIG, ["ray.progress_bars=false", f"read.split_bytes={split_bytes}"])
    files = list_input_files(str(path))
    tasks = len(plan_parts(files, str(path), split_bytes))
    reset_peak_rss()
    sampler = WorkerRss()
    sampler.start()
    start = time.perf_counter()
    counts = read_dataset(cfg, files, {}, str(path)).map_batches(_count, batch_size=None, batch_format="numpy", num_cpus=0.5)
    totals = {"conversations": 0, "turns": 0}
    for batch in counts.iter_batches(batch_format="numpy", batch_size=None):
        for key in totals:
            totals[key] += int(batch[key].sum())
    seconds = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    return {"tasks": tasks, "split_bytes": split_bytes, "seconds": seconds, **totals,
            "driver_peak_mb": peak_rss_mb(), "worker_max_mb": sampler.max_one, "workers_sum_mb": sampler.max_sum}  # fmt: skip


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def render(runs: list[dict], size: int, args, cpus: int) -> list[str]:
    one = [r for r in runs if r["split_bytes"] == 0]
    many = [r for r in runs if r["split_bytes"]]
    ratio = statistics.mean(r["seconds"] for r in one) / statistics.mean(r["seconds"] for r in many)
    same = all((r["conversations"], r["turns"]) == (runs[0]["conversations"], runs[0]["turns"]) for r in runs)
    lines = [
        "# Reading one large JSON Lines archive: 1 task vs byte ranges",
        "",
        f"Command: `python -m benchmarks.bench_read --mb {args.mb:g} --tasks {args.tasks} --repeats {args.repeats}`; "
        f"{os.cpu_count()} CPUs on this machine, Ray started with {cpus}. Archive: {size / 2**20:.1f} MiB, "
        f"{runs[0]['conversations']} chat conversations, {runs[0]['turns']} turns (generated: lychee_ray.synth, {BASE_CONVERSATIONS} conversations repeated under new ids).",
        "",
        f"**Ratio (mean seconds, 1 task / {many[0]['tasks']} tasks): {ratio:.2f}x.** "
        f"Every pass read the same conversations and turns: {'yes' if same else 'NO'}.",
        "",
        "| pass | tasks | split_bytes | seconds | conversations/s | MiB/s | driver peak RSS (MiB) | largest worker RSS (MiB) | workers' RSS summed (MiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for k, r in enumerate(runs, start=1):
        lines.append(
            f"| {k} | {r['tasks']} | {r['split_bytes']} | {r['seconds']:.1f} | {r['conversations'] / r['seconds']:.0f} | "
            f"{size / 2**20 / r['seconds']:.1f} | {r['driver_peak_mb']:.0f} | {r['worker_max_mb']:.0f} | {r['workers_sum_mb']:.0f} |"
        )
    lines += [
        "",
        "Seconds cover the whole read stage: planning, the newline counts of the ranges, the read tasks, the barrier "
        "(what they read waits in Ray's object store), keep-first and a task stage that unpickles and counts every "
        "conversation. Ray's start-up is not included.",
    ]
    return lines


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mb", type=float, default=200.0, help="archive size in MiB (default 200)")
    p.add_argument("--tasks", type=int, default=os.cpu_count() or 2, help="read tasks with byte ranges on (default: CPUs)")
    p.add_argument("--repeats", type=int, default=2, help="passes of each kind, alternating (default 2)")
    p.add_argument("--quick", action="store_true", help="a 10 MiB archive, one pass of each kind")
    args = p.parse_args(argv)
    if args.quick:
        args.mb, args.repeats = 10.0, 1
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with tempfile.TemporaryDirectory(prefix="bench_read_") as tmp:
        path = Path(tmp) / "input" / "archive.jsonl"
        write_archive(sized(generated_chats(Path(tmp) / "generated"), int(args.mb * 2**20)), path)
        size = path.stat().st_size
        with open(path, "rb") as fh:  # the page cache holds the file for every pass alike
            while fh.read(1 << 24):
                pass

        import ray

        from lychee_ray.runtime.ray import init_ray

        init_ray(load_config(LOCAL_CONFIG, ["ray.progress_bars=false"]).ray)
        try:
            cpus = int(ray.cluster_resources().get("CPU", 0))
            split = math.ceil(size / args.tasks)
            runs = [read_pass(path, s) for _ in range(args.repeats) for s in (0, split)]
        finally:
            ray.shutdown()  # only the private local Ray this process started
    return write_markdown("read_throughput", render(runs, size, args, cpus))


if __name__ == "__main__":
    main()
