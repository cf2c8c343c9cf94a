"""Which word sequences of the tracked files also occur in the benchmark data given at run time.

The repository must hold no text of LoCoMo, LongMemEval or BEAM (tests and the demo use data the
project generates). A name grep finds the speakers; this finds the rest: every run of --n words
(lowercased, punctuation dropped) that a tracked file shares with any string of the data files.
Stock phrases ("let me know if you need") match too, so it is a list for a person to read, most
frequent in the data first, not a pass/fail check.

    python -m benchmarks.scan_borrowed_text [--data DIR] [--n 6]

Prints one line per shared sequence: its count in the data, the first tracked file holding it,
the words.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO.parent / "shared" / "data"
WORD = re.compile(r"[a-z0-9']+")


def word_runs(text: str, n: int) -> set[str]:
    words = WORD.findall(text.lower())
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def strings(value) -> Iterator[str]:
    """Every string inside a parsed JSON value."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def tracked_runs(n: int) -> dict[str, str]:
    """word run -> the first tracked text file holding it."""
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    runs: dict[str, str] = {}
    for name in files:
        try:
            text = (REPO / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary (plots) or gone
        for run in word_runs(text, n):
            runs.setdefault(run, name)
    return runs


def shared_runs(data: Path, n: int) -> collections.Counter:
    ours = tracked_runs(n)
    found: collections.Counter = collections.Counter()
    for path in sorted(data.rglob("*.json")):
        for text in strings(json.loads(path.read_text(encoding="utf-8"))):
            for run in word_runs(text, n) & ours.keys():
                found[(run, ours[run])] += 1
    return found


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA), help="the benchmark data folder (read only)")
    p.add_argument("--n", type=int, default=6, help="words per sequence")
    args = p.parse_args(argv)
    if not Path(args.data).is_dir():
        raise SystemExit(f"scan_borrowed_text: no data folder at {args.data} (pass --data DIR)")
    for (run, name), count in shared_runs(Path(args.data), args.n).most_common():
        print(f"{count:6d}  {name}  {run}")


if __name__ == "__main__":
    main()
