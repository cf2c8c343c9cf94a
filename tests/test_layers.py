"""The layout is the pipeline: import-linter contracts (pyproject.toml), no import cycles, and no
function-local import of our own modules (the usual way to hide a cycle)."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

REPO = Path(__file__).resolve().parents[1]
LINT = [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"]


def _lint(cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(LINT + ["--no-cache"], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_import_contracts_hold():
    run = _lint(REPO, REPO)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 broken" in run.stdout


def test_import_contracts_catch_a_broken_layer(tmp_path):
    """The contracts bite: the store importing the query layer (an upward import) fails them."""
    shutil.copytree(REPO / "lychee_ray", tmp_path / "lychee_ray", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    writer = tmp_path / "lychee_ray" / "store" / "writer.py"
    writer.write_text(writer.read_text() + "\nfrom lychee_ray.query import retrieve  # noqa\n")
    run = _lint(tmp_path, tmp_path)
    assert run.returncode != 0
    assert "lychee_ray.store.writer -> lychee_ray.query.retrieve" in run.stdout


def _strongly_connected(graph: grimp.ImportGraph, modules: list[str]) -> list[list[str]]:
    """Tarjan's algorithm over the package's own modules; components of size > 1 are cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in modules:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for m in modules:
        if m not in index:
            visit(m)
    return cycles


def test_no_import_cycles():
    graph = grimp.build_graph("lychee_ray")
    modules = sorted(m for m in graph.modules if m.startswith("lychee_ray"))
    assert len(modules) > 40
    assert _strongly_connected(graph, modules) == []


def test_cycle_detector_finds_a_cycle():
    graph = grimp.ImportGraph()
    for m in ("a", "b", "c"):
        graph.add_module(m)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _strongly_connected(graph, ["a", "b", "c"]) == [["a", "b"]]


def local_own_imports(source: str) -> list[int]:
    """Line numbers of `from lychee_ray... import` / relative imports inside functions."""
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    return sorted(
        n.lineno
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and id(n) not in top and (n.level > 0 or (n.module or "").startswith("lychee_ray"))
    )


# The two entry points defer their imports, so that a CLI command or `import lychee_ray` loads
# only the layer it uses (the whole package takes ~3 s to import). No module of the package
# imports either of them, so nothing can sit in a cycle behind a deferred import there; and
# grimp's graph (the cycle check above) sees function-local imports anyway.
DEFERRING_ENTRY_POINTS = {"lychee_ray/__init__.py", "lychee_ray/cli.py"}


def test_no_function_local_imports_of_our_own_modules():
    found = {
        str(p.relative_to(REPO)): lines
        for p in sorted((REPO / "lychee_ray").rglob("*.py"))
        if (lines := local_own_imports(p.read_text()))
    }
    assert set(found) - DEFERRING_ENTRY_POINTS == set(), found


def test_no_module_of_the_package_imports_an_entry_point_that_defers_its_imports():
    graph = grimp.build_graph("lychee_ray")
    assert len(graph.modules) > 40
    assert graph.find_modules_that_directly_import("lychee_ray.cli") == set()
    assert graph.find_modules_that_directly_import("lychee_ray") == set()  # `from lychee_ray import Memory`


def test_the_cli_and_the_package_import_without_the_query_and_ablation_layers():
    """What the deferral buys: `import lychee_ray.cli` loads neither DuckDB's query path nor
    scipy, and `from lychee_ray import Memory` still works."""
    code = ("import sys, lychee_ray.cli; heavy = [m for m in ('lychee_ray.query.memory', 'lychee_ray.ablate.runner', "
            "'lychee_ray.evaluate.job', 'lychee_ray.ingest.job', 'scipy') if m in sys.modules]; "
            "from lychee_ray import Memory; print(heavy, Memory.__module__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[]", "lychee_ray.query.memory"]


def test_local_import_scan_sees_a_hidden_import():
    assert local_own_imports("import os\ndef f():\n    from lychee_ray.store import reader\n    from . import x\n") == [3, 4]
