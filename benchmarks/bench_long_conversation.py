"""One very long conversation end to end (issue 29): about a million tokens, rules backend and
the LLM path through the fake server.

    python -m benchmarks.bench_long_conversation [--tokens 1000000] [--latency 1.0] [--no-llm | --no-rules]
        [--data DIR] [--work DIR] [--set KEY=VALUE ...]

The input: BEAM's development conversations (`--data`, default ../shared/data/beam/100K beside
the clone, read at run time with the project's BEAM reader, never committed) joined end to end
into ONE conversation until it holds `--tokens` o200k tokens, each source's dates shifted to
follow the previous one's, written as one chat JSONL. Without that folder, a generated work
conversation (lychee_ray.synth) of the same size stands in, and the report says so.

Each path (rules; then `llm.backend=openai` against the fake server with `--latency` seconds per
call) is one `lychee-ray ingest` in a child process, sampled every 0.5 s: wall time, the
driver's peak RSS and the peak RSS of each kind of Ray worker (its process title, e.g.
`ray::EmbedStage`); from the store: turns, passages, segments, records, nodes, LLM calls and
the stage seconds of `build_stats`. Then `Memory` over the store: the loaded conversation's bytes
in the query cache, and `Memory.search` latency, cold (the first question loads the
conversation) and warm (p50/p95 of 20 more), the questions being the opening words of 21 user
turns spread over the conversation.

Writes benchmarks/results/long_conversation.md. Times on a shared machine are not
measurements: the report quotes the load averages.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from benchmarks import add_set_option, machine_load, set_flags, write_markdown
from benchmarks.bench_scale import run_sampled
from lychee_ray.config import load_config
from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.beam import read_beam_folder
from lychee_ray.io.readers.common import Source
from lychee_ray.plots import markdown_table
from lychee_ray.query.conversation import cache_for
from lychee_ray.query.memory import Memory
from lychee_ray.store.reader import open_store
from lychee_ray.synth import SynthParams, write_archive
from lychee_ray.tokens import count_tokens

REPO = Path(__file__).resolve().parent.parent
CONFIG = REPO / "configs" / "local.yaml"
DATA = REPO.parent / "shared" / "data" / "beam" / "100K"
CID = "long-1"
N_QUESTIONS = 21  # one cold, then the warm ones


# ---------------------------------------------------------------------------------------------
# The input
# ---------------------------------------------------------------------------------------------
def joined_beam(data: Path, tokens: int) -> tuple[list[dict], int, int]:
    """BEAM folders' turns joined into one conversation of at least `tokens` tokens: (turns as
    chat messages, tokens, sources used). Each source starts a day after the previous one ended."""
    folders = sorted((p for p in data.iterdir() if p.is_dir()), key=lambda p: (len(p.name), p.name))
    turns, total, shift, last = [], 0, timedelta(0), None
    for n, folder in enumerate(folders, start=1):
        conv = read_beam_folder(str(folder.resolve()), Source(str(folder), folder.name, 0), ReadConfig(max_turn_tokens=100_000))
        stamps = [datetime.fromisoformat(t.timestamp) for t in conv.turns if t.timestamp]
        if last is not None and stamps:
            shift = max(timedelta(0), last - min(stamps) + timedelta(days=1))
        for t in conv.turns:
            when = datetime.fromisoformat(t.timestamp) + shift if t.timestamp else None
            turns.append({"role": t.role or "user", "content": t.text, "timestamp": when.isoformat() if when else None})
            total += count_tokens(t.text)
            last = when or last
        if total >= tokens:
            return turns, total, n
    return turns, total, len(folders)


def generated(work: Path, tokens: int) -> tuple[list[dict], int, int]:
    """A generated work conversation of about `tokens` tokens (about 700 per exchange)."""
    sessions = max(1, tokens // (700 * 20))
    params = SynthParams(seed=0, conversations=1, sessions=sessions, turns_per_session=40, turn_words=60, style="work", format="chat")
    write_archive(work / "synth", params)
    turns = json.loads((work / "synth" / "archive" / "conversations.jsonl").read_text().splitlines()[0])["turns"]
    return turns, sum(count_tokens(t["content"]) for t in turns), 0


def write_input(turns: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"conversation_id": CID, "turns": turns}, ensure_ascii=False) + "\n")
    return path


# ---------------------------------------------------------------------------------------------
# One ingest, sampled
# ---------------------------------------------------------------------------------------------
def ingest(path: Path, store: Path, sets: list[str], log: Path) -> dict:
    cmd = [sys.executable, "-m", "lychee_ray.cli", "ingest", "--config", str(CONFIG), "--input", str(path), "--out", str(store),
           "--set", "ray.progress_bars=false", *[a for s in sets for a in ("--set", s)]]
    return run_sampled(cmd, log)


def store_figures(store: Path) -> dict:
    with open_store(str(store)) as s:
        count = {t: s.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("turns", "passages", "segments", "records", "nodes")}
        stats = s.con.execute("SELECT llm_calls, llm_failures, embed_s, segment_s, encode_s, organize_s FROM build_stats").fetchone()
    return {**count, "llm_calls": stats[0], "llm_failures": stats[1], "embed_s": stats[2], "segment_s": stats[3],
            "encode_s": stats[4], "organize_s": stats[5]}


# ---------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------
def probe_questions(turns: list[dict], n: int) -> list[str]:
    """The first 12 words of `n` user turns spread evenly over the conversation."""
    users = [t["content"] for t in turns if t["role"] == "user" and len(t["content"].split()) >= 6]
    step = max(1, len(users) // n)
    return [" ".join(u.split()[:12]) for u in users[::step][:n]]


def search_figures(store: Path, questions: list[str]) -> dict:
    cfg = load_config(CONFIG)
    with Memory.open(str(store), cfg) as memory:
        start = time.perf_counter()
        memory.search(CID, questions[0])  # loads the conversation (and the query model)
        cold = (time.perf_counter() - start) * 1000
        warm = []
        for q in questions[1:]:
            start = time.perf_counter()
            memory.search(CID, q)
            warm.append((time.perf_counter() - start) * 1000)
        cache_mb = cache_for(memory._store).nbytes / 2**20
    warm.sort()
    return {"cold_ms": cold, "warm_p50_ms": statistics.median(warm), "warm_p95_ms": warm[int(0.95 * (len(warm) - 1))],
            "cache_mb": cache_mb}


# ---------------------------------------------------------------------------------------------
def run_path(name: str, slug: str, path: Path, work: Path, sets: list[str], questions: list[str]) -> dict:
    """One path end to end; `slug` names its store and log (`name`, the report's label, may hold
    a "/"). The row is also kept as work/row-<slug>.json, so a later path's failure loses nothing."""
    store = work / f"store-{slug}"
    print(f"bench_long_conversation: ingesting ({name}) ...", file=sys.stderr, flush=True)
    row = {"path": name, **ingest(path, store, sets, work / f"ingest-{slug}.log"), **store_figures(store)}
    row.update(search_figures(store, questions))
    (work / f"row-{slug}.json").write_text(json.dumps(row, indent=2))
    return row


def report(rows: list[dict], source: str, tokens: int, n_turns: int, args) -> Path:
    cols = ["path", "wall_s", "turns", "passages", "segments", "records", "nodes", "llm_calls", "llm_failures",
            "embed_s", "segment_s", "encode_s", "organize_s", "driver_rss_mb", "cache_mb", "cold_ms", "warm_p50_ms", "warm_p95_ms"]
    fmt = {c: ".1f" for c in cols if c.endswith(("_s", "_mb", "_ms"))}
    lines = [
        "# One very long conversation, end to end",
        "",
        f"- Input: {source}; one conversation of {n_turns} turns, {tokens:,} o200k tokens.",
        f"- Command: `python -m benchmarks.bench_long_conversation --tokens {args.tokens} --latency {args.latency}"
        f"{' --no-llm' if args.no_llm else ''}{' --no-rules' if args.no_rules else ''}{set_flags(args.sets)}`",
        f"- Machine: {machine_load()}. Times on a shared machine are not measurements.",
        f"- LLM path: `llm.backend=openai` against the fake server, {args.latency} s per call (its replies are schema-valid"
        " records derived from the prompt, never from labels).",
        "",
        markdown_table(rows, cols, fmt),
        "",
        "Peak RSS per Ray worker kind (MB):",
        "",
    ]
    for r in rows:
        lines.append(f"- {r['path']}: " + ", ".join(f"{k} {v:.0f}" for k, v in r["workers_mb"].items()))
    return write_markdown("long_conversation", lines)


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--latency", type=float, default=1.0, help="seconds per fake LLM call")
    p.add_argument("--no-llm", action="store_true", help="the rules path only")
    p.add_argument("--no-rules", action="store_true", help="the LLM path only")
    p.add_argument("--data", type=Path, default=DATA)
    p.add_argument("--work", type=Path, default=None)
    add_set_option(p)
    args = p.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="lychee-long-"))
    if args.data.is_dir():
        turns, tokens, used = joined_beam(args.data, args.tokens)
        source = f"{used} BEAM conversations of {args.data} joined end to end (read at run time)"
    else:
        turns, tokens, _ = generated(work, args.tokens)
        source = f"a generated work conversation (lychee_ray.synth, seed 0; {args.data} is not there)"
    path = write_input(turns, work / "input" / "long.jsonl")
    questions = probe_questions(turns, N_QUESTIONS)
    rows = [] if args.no_rules else [run_path("rules", "rules", path, work, args.sets, questions)]
    if not args.no_llm:
        from tests.support.fake_openai import spawn_fake_server

        with spawn_fake_server(latency_s=args.latency) as server:
            llm = ["llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model", *args.sets]
            rows.append(run_path(f"llm (fake, {args.latency} s per call)", "llm", path, work, llm, questions))
    return report(rows, source, tokens, len(turns), args)


if __name__ == "__main__":
    main()
