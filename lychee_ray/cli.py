"""`lychee-ray` command line: ingest, compact, evaluate, query, serve, ablate, synth.

Each subcommand parses its flags, loads the typed config, and calls one function of the
package. Expected user errors (a missing file, a bad config, a store that does not match) are
printed as one sentence with exit code 2, never as a traceback; so is a run that could not start or
go on (Ray would not start, a stage made no progress), with exit code 1. An ingest that ran but counts as
failed (pending conversations, more degraded segments than ingest.max_degraded_fraction, turns
that do not add up) prints one sentence per reason after its summary and exits 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from lychee_ray.config import load_config
from lychee_ray.config_sections import ConfigError
from lychee_ray.io.fs import PathProblem, os_reason
from lychee_ray.io.readers.common import InputError
from lychee_ray.query.errors import QueryError
from lychee_ray.runtime.ray import RayStartError
from lychee_ray.schemas import REDO_STATUSES
from lychee_ray.store.manifest import StoreError
from lychee_ray.synth import FORMATS, STYLES, SynthError, SynthParams, write_archive

# Each command imports its own layer when it runs: together they take about 3 s to import
# (the ablation report alone pulls scipy and matplotlib), which every `lychee-ray query` or
# `synth` would otherwise pay before doing anything.

# Expected user errors: one sentence and rc 2, never a traceback. The OSErrors are what a path
# the user gave can raise outside our own checks (no permission, a file where a folder should be).
OS_ERRORS = (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, FileExistsError)
USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, InputError, StoreError, QueryError, PathProblem, SynthError, *OS_ERRORS)
# A run that could not start or go on (Ray would not start, a stage made no progress): one
# sentence and rc 1, as for a run that counts as failed; what was finished is committed.
RUN_ERRORS: tuple[type[BaseException], ...] = (RayStartError,)


def _add_config(p: argparse.ArgumentParser, default: str | None = "configs/local.yaml") -> None:
    p.add_argument("--config", default=default, help="YAML config (default: %(default)s)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE", help="override a config value; repeatable")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lychee-ray", description="LycheeMemory V2 on Ray: build and evaluate long-term memory")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="read conversations, segment, encode, and write a memory store")
    _add_config(p)
    p.add_argument("--input", required=True, help="a file or a directory of .json/.jsonl/.parquet")
    p.add_argument("--out", required=True, help="output store directory (local path or URI)")
    p.add_argument("--force", action="store_true",
                   help="write into an existing non-empty folder that is not a store (nothing already there is deleted)")
    p.add_argument("--redo", default="", metavar="STATUSES",
                   help=f"comma-separated statuses of stored conversations to process again, replacing their rows: "
                        f"{','.join(REDO_STATUSES)} (pending ones are redone by every run)")

    p = sub.add_parser("compact", help="rewrite a store's many small parts into a few large ones (atomically, by commits)")
    _add_config(p)
    p.add_argument("--store", required=True)
    p.add_argument("--turns-per-file", type=int, default=65_536, help="turn rows per new part (default: %(default)s)")

    p = sub.add_parser("evaluate", help="answer and judge the store's questions; writes answers + report.md")
    _add_config(p)
    p.add_argument("--store", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--questions", default=None, help="questions file (JSONL/Parquet); default: the store's questions table")

    p = sub.add_parser("query", help="show the memory records retrieved for a question (and its answer)")
    _add_config(p)
    p.add_argument("--store", required=True)
    p.add_argument("--conversation", required=True)
    p.add_argument("-k", type=int, default=8, help="items shown (default: %(default)s); the answer sees the whole selection")
    p.add_argument("--answer", action="store_true", help="also answer the question and show its token usage")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--history", action="store_true", help="show the values the fact took, oldest first (Memory.history), instead of the items")
    p.add_argument("question")

    p = sub.add_parser("serve", help="start vLLM (OpenAI-compatible) for the job and wait")
    _add_config(p, default="configs/vllm.yaml")

    p = sub.add_parser("ablate", help="run the ablation grid of a config and write one comparison table")
    _add_config(p, default="configs/ablations/locomo.yaml")
    p.add_argument("--input", required=True)
    p.add_argument("--out", required=True)

    p = sub.add_parser("synth", help="generate labelled conversations (and their questions) in an input format")
    p.add_argument("--out", required=True, help="an empty or new folder (or one holding an earlier synth archive, replaced)")
    defaults = SynthParams()
    for flag, field in (("--seed", "seed"), ("--conversations", "conversations"), ("--sessions", "sessions"),
                        ("--turns-per-session", "turns_per_session"), ("--turn-words", "turn_words")):
        p.add_argument(flag, type=int, default=getattr(defaults, field), help="default: %(default)s")
    p.add_argument("--style", choices=STYLES, default=defaults.style, help="default: %(default)s")
    p.add_argument("--format", choices=FORMATS, default=defaults.format, help="default: %(default)s")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # ablate's --config is a grid spec, not a LycheeConfig; it loads its own. synth needs none.
        cfg = None if args.command in ("ablate", "synth") else load_config(args.config, args.set)
        return COMMANDS[args.command](args, cfg)
    except USER_ERRORS as exc:
        print(f"lychee-ray {args.command}: {user_message(exc)}", file=sys.stderr)
        return 2
    except RUN_ERRORS as exc:
        print(f"lychee-ray {args.command}: {exc}", file=sys.stderr)
        return 1


def user_message(exc: BaseException) -> str:
    """The one sentence shown for a user error; an OSError without Python's "[Errno N]" prefix."""
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return f"{os_reason(exc)}{where}."
    return str(exc)


def cmd_ingest(args, cfg) -> int:
    from lychee_ray.ingest.job import run_ingest

    redo = [s.strip() for s in args.redo.split(",") if s.strip()]
    summary = run_ingest(cfg, args.input, args.out, force=args.force, redo=redo)
    print(summary.render())
    for failure in summary.failures:
        print(f"lychee-ray ingest: {failure}", file=sys.stderr)
    return 1 if summary.failures else 0


def cmd_compact(args, cfg) -> int:
    from lychee_ray.store.compact import compact_store

    print(compact_store(args.store, cfg, turns_per_file=args.turns_per_file).render())
    return 0


def cmd_evaluate(args, cfg) -> int:
    from lychee_ray.evaluate.job import run_evaluate

    result = run_evaluate(cfg, args.store, args.out, questions_path=args.questions)
    print(result.render())
    return 0


def cmd_query(args, cfg) -> int:
    """A thin printer over `Memory`: the same plan, retrieval and answer an agent gets."""
    from lychee_ray.query.memory import Memory, MemoryAnswer

    if args.history:
        return cmd_history(args, cfg)
    answered: MemoryAnswer | None = None
    with Memory.open(args.store, cfg) as memory:
        if args.answer:
            answered = memory.answer(args.conversation, args.question)
            asked_at, plan, selected = answered.asked_at, answered.plan, answered.evidence
        else:
            found = memory.recall(args.conversation, args.question)
            asked_at, plan, selected = found.asked_at, found.plan, found.items
        items = selected[: max(0, args.k)]
        shown = list(dict.fromkeys(t for item in items for t in item.source_turn_ids[:QUERY_SOURCES_SHOWN]))
        turns = {t["turn_id"]: t for t in memory.turns(args.conversation, shown).to_pylist()}
    if args.json:
        out = {
            "question": args.question,
            "conversation_id": args.conversation,
            "asked_at": asked_at,
            "plan": plan.model_dump(mode="json"),
            "items": [item_json(item) for item in items],
        }
        if answered is not None:
            out.update(answer=answered.answer, usage=dataclasses.asdict(answered.usage), errors=answered.errors)
        print(json.dumps(out, ensure_ascii=False))
        return 0
    lines = [f"{args.conversation}: {args.question}", f"asked at: {asked_at}", f"plan: {plan.model_dump_json()}", ""]
    for i, item in enumerate(items, start=1):
        lines.append(f"{i}. [{item.type or 'raw turn'}] {item.text}")
        if item.time:
            lines.append(f"   time: {item.time}")
        if item.said:
            lines.append(f"   said: {item.said}")
        if item.entities:
            lines.append(f"   entities: {', '.join(item.entities)}")
        lines += link_lines(item)
        lines.append(f"   sources: {', '.join(item.source_turn_ids)} (score {item.score:.4f})")
        for tid in item.source_turn_ids[:QUERY_SOURCES_SHOWN]:
            if t := turns.get(tid):
                lines.append(f"   <- {tid} {t['speaker']}: {t['text'][:160]}")
    if not items:
        lines.append("(no memory matched)")
    if answered is not None:
        u = answered.usage
        lines += ["", f"answer: {answered.answer}",
                  f"usage: {u.prompt_tokens} prompt + {u.completion_tokens} completion tokens in {u.calls} LLM calls"]
        lines += [f"llm error (fell back to rules): {e}" for e in answered.errors]
    print("\n".join(lines))
    return 0


QUERY_SOURCES_SHOWN = 3  # source turns quoted under each shown item


def cmd_history(args, cfg) -> int:
    from lychee_ray.query.memory import Memory

    with Memory.open(args.store, cfg) as memory:
        entries = memory.history(args.conversation, args.question)
    if args.json:
        print(json.dumps({"question": args.question, "conversation_id": args.conversation,
                          "history": [dataclasses.asdict(e) for e in entries]}, ensure_ascii=False))
        return 0
    lines = [f"{args.conversation}: {args.question}", ""]
    for e in entries:
        state = "current" if e.current else f"until {e.valid_until or '?'} (superseded by {e.superseded_by})"
        lines.append(f"- {e.valid_from or '?'} {state}: {e.text}")
        if e.conflicts_with:
            lines.append(f"  conflicts with: {', '.join(e.conflicts_with)}")
        lines.append(f"  sources: {', '.join(e.source_turn_ids)}  [{e.record_id}]")
    print("\n".join(lines if entries else [*lines, "(no memory matched)"]))
    return 0


def item_json(item) -> dict:
    """A `MemoryItem` as --json prints it: every field it shows in its repr, so not the stored
    record (it holds a vector) nor the rendering flags (show_sources)."""
    out = {f.name: getattr(item, f.name) for f in dataclasses.fields(item) if f.repr}
    out["note"] = None if item.note is None else dataclasses.asdict(item.note)
    return out


def link_lines(item) -> list[str]:
    """What the item's record links say: when it was replaced and by what, what it conflicts with."""
    lines = []
    if item.superseded_by:
        lines.append(f"   superseded: valid {item.valid_from or '?'} .. {item.valid_until or '?'}, by {item.superseded_by}")
        if item.note is not None and item.note.now:
            lines.append(f"   now: {item.note.now}")
    if item.conflicts_with:
        lines.append(f"   conflicts with: {', '.join(item.conflicts_with)}")
        lines += [f"     {c}" for c in (item.note.conflicts if item.note is not None else ())]
    return lines


def cmd_serve(args, cfg) -> int:
    from lychee_ray.llm.serve import serve

    return serve(cfg)


def cmd_ablate(args, cfg) -> int:
    from lychee_ray.ablate.grid import load_grid
    from lychee_ray.ablate.runner import run_ablation

    result = run_ablation(load_grid(args.config, args.set), args.input, args.out)
    print(result.render())
    return 0


def cmd_synth(args, cfg) -> int:
    params = SynthParams.checked(seed=args.seed, conversations=args.conversations, sessions=args.sessions, turns_per_session=args.turns_per_session,
                                 turn_words=args.turn_words, style=args.style, format=args.format)
    print(write_archive(args.out, params).render())
    return 0


COMMANDS = {"ingest": cmd_ingest, "compact": cmd_compact, "evaluate": cmd_evaluate, "query": cmd_query, "serve": cmd_serve, "ablate": cmd_ablate, "synth": cmd_synth}

if __name__ == "__main__":
    sys.exit(main())
