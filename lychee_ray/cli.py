"""`lychee-ray` command line: ingest, evaluate, query, serve, ablate.

Each subcommand parses its flags, loads the typed config, and calls one function of the
package. Expected user errors (a missing file, a bad config, a store that does not match) are
printed as one sentence with exit code 2, never as a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys

from .config import ConfigError, load_config

USER_ERRORS: tuple[type[BaseException], ...] = (ConfigError, FileNotFoundError)


def _user_errors() -> tuple[type[BaseException], ...]:
    from .read import InputError
    from .store import StoreError

    return USER_ERRORS + (InputError, StoreError)


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

    p = sub.add_parser("evaluate", help="answer and judge the store's questions; writes answers + report.md")
    _add_config(p)
    p.add_argument("--store", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--questions", default=None, help="questions file (JSONL/Parquet); default: the store's questions table")

    p = sub.add_parser("query", help="show the memory records retrieved for a question")
    _add_config(p)
    p.add_argument("--store", required=True)
    p.add_argument("--conversation", required=True)
    p.add_argument("-k", type=int, default=8)
    p.add_argument("question")

    p = sub.add_parser("serve", help="start vLLM (OpenAI-compatible) for the job and wait")
    _add_config(p, default="configs/vllm.yaml")

    p = sub.add_parser("ablate", help="run the ablation grid of a config and write one comparison table")
    _add_config(p, default="configs/ablations/locomo.yaml")
    p.add_argument("--input", required=True)
    p.add_argument("--out", required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        # ablate's --config is a grid spec, not a LycheeConfig; it loads its own.
        cfg = None if args.command == "ablate" else load_config(args.config, args.set)
        return COMMANDS[args.command](args, cfg)
    except _user_errors() as exc:
        print(f"lychee-ray {args.command}: {exc}", file=sys.stderr)
        return 2


def cmd_ingest(args, cfg) -> int:
    from .pipeline import run_ingest

    summary = run_ingest(cfg, args.input, args.out)
    print(summary.render())
    return 0


def cmd_evaluate(args, cfg) -> int:
    from .evaluate import run_evaluate

    result = run_evaluate(cfg, args.store, args.out, questions_path=args.questions)
    print(result.render())
    return 0


def cmd_query(args, cfg) -> int:
    from .retrieve import query_command

    print(query_command(cfg, args.store, args.conversation, args.question, args.k))
    return 0


def cmd_serve(args, cfg) -> int:
    from .serve import serve

    return serve(cfg)


def cmd_ablate(args, cfg) -> int:
    from .ablate import load_grid, run_ablation

    result = run_ablation(load_grid(args.config, args.set), args.input, args.out)
    print(result.render())
    return 0


COMMANDS = {"ingest": cmd_ingest, "evaluate": cmd_evaluate, "query": cmd_query, "serve": cmd_serve, "ablate": cmd_ablate}

if __name__ == "__main__":
    sys.exit(main())
