"""Speed and cost measurements (never timed asserts in the test suite).

Convention, for every `benchmarks/bench_<name>.py`:
- it runs as `python -m benchmarks.bench_<name> [--quick]`, and `--quick` is a small size that
  finishes in about a minute;
- it exposes `main(argv: list[str] | None = None) -> pathlib.Path`, which parses `argv` (None:
  the command line), writes `benchmarks/results/<name>.md` (plus any PNGs beside it; the folder
  is git-ignored) and returns the Markdown's path;
- speed figures are ratios or side-by-side numbers measured in the same run, with the command
  and the machine (CPUs) in the Markdown, since absolute numbers on a shared box drift;
- the module docstring says what is measured and how.

`python -m benchmarks.run_all [--quick] [--only NAME ...]` (the Makefile's `make bench`) finds
these modules and runs each `main`. Helpers that are not benchmarks (synth_archive,
tune_segmenter, ...) do not start with `bench_` and are not run by it.
"""

import os
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def add_set_option(parser) -> None:
    """`--set key=value` (repeatable) into `args.sets`: config overrides as `lychee-ray --set` takes them."""
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")


def set_flags(sets: list[str]) -> str:
    """The overrides as they were typed, for the command line a report quotes."""
    return "".join(f" --set {x}" for x in sets)


def write_markdown(name: str, lines: list[str]) -> Path:
    """`benchmarks/results/<name>.md` from `lines`, printed too; returns its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return out


def machine_load() -> str:
    """The load averages when a report is written, for its Markdown: on a shared machine they
    say whether other work ran beside the measurement (read them against the CPU count)."""
    one, five, fifteen = os.getloadavg()
    return f"{os.cpu_count()} CPUs, load average {one:.2f} / {five:.2f} / {fifteen:.2f} (1 / 5 / 15 min) when the report was written"
