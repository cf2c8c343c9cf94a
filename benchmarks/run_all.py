"""Run every benchmark in benchmarks/: each `bench_*.py` module with a `main(argv) -> Path`
(the convention in benchmarks/__init__.py), one after the other, each in its own interpreter,
and list the Markdown each wrote. A benchmark that fails is reported and the rest still run;
the exit status is 1 then.

    python -m benchmarks.run_all [--quick] [--only ingest segmenter ...]
"""

from __future__ import annotations

import argparse
import pkgutil
import subprocess
import sys
import time
from pathlib import Path

import benchmarks

REPO = Path(benchmarks.__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"


def discover() -> list[str]:
    """Module names `bench_*` in this package, sorted (the order they run in)."""
    return sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))


# Each benchmark runs in a fresh interpreter: one benchmark's Ray instance, torch thread
# setting or loaded models must not colour the next one's timings.
_RUNNER = (
    "import sys; from benchmarks.{name} import main; "
    "path = main(sys.argv[1:]); print('\\n{marker}' + str(path))"
)
_MARKER = "@@benchmark-result@@ "


def run_one(name: str, quick: bool) -> tuple[str, float, Path | None, str | None]:
    """Run one benchmark's main() in a subprocess; (name, seconds, markdown path, error)."""
    start = time.perf_counter()
    code = _RUNNER.format(name=name, marker=_MARKER)
    proc = subprocess.run(
        [sys.executable, "-c", code, *(["--quick"] if quick else [])],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    seconds = time.perf_counter() - start
    lines = proc.stdout.splitlines()
    print("\n".join(ln for ln in lines if not ln.startswith(_MARKER)), flush=True)
    paths = [ln[len(_MARKER):] for ln in lines if ln.startswith(_MARKER)]
    if proc.returncode != 0 or not paths:
        return name, seconds, None, f"exit status {proc.returncode} (its stderr is above)"
    return name, seconds, Path(paths[-1]), None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    p.add_argument("--only", nargs="+", metavar="NAME", help="e.g. ingest segmenter (without bench_)")
    args = p.parse_args(argv)
    names = discover()
    if args.only:
        wanted = {n if n.startswith("bench_") else f"bench_{n}" for n in args.only}
        unknown = sorted(wanted - set(names))
        if unknown:
            p.error(f"unknown benchmark(s) {', '.join(unknown)}; present: {', '.join(names)}")
        names = [n for n in names if n in wanted]
    results = []
    for name in names:
        print(f"== {name}{' --quick' if args.quick else ''}", flush=True)
        results.append(run_one(name, args.quick))
        if results[-1][3]:
            print(f"!! {name} failed: {results[-1][3]}", file=sys.stderr, flush=True)
    print(f"\nResults under {RESULTS}:")
    for name, seconds, path, error in results:
        print(f"  {name:<24} {seconds:7.1f} s  {path if path else 'FAILED: ' + error}")
    return 1 if any(r[3] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
