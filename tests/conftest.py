"""Paths to the benchmark fixtures, a private local Ray, small fixtures, and the skip policy.

The suite reads LoCoMo and LongMemEval from tests/fixtures/ (small cuts of the development
files, made by tests/fixtures/make_fixtures.py), never from the shared data folder beside the
clone (only benchmarks and tuning read that): the suite runs on a fresh clone with nothing beside
it, and no test skips for missing data.

Skip policy: a skipped test proves nothing, so the terminal summary prints how many tests
skipped and why, and any skip whose reason is not in `ALLOWED_SKIPS` fails the run. Tests
deselected with -m are not skips.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
LOCOMO_PATH = FIXTURES / "locomo_fixture.json"  # conv-26 / conv-30 / conv-41, first sessions of each
LME_PATH = FIXTURES / "longmemeval_fixture.json"  # one LongMemEval instance
DEMO_PATH = REPO / "data" / "demo" / "locomo_conv-30.json"  # the demo's conversation, whole

# Skip reasons that do not fail the run (matched as substrings of the reported reason). Only
# one: Ray Serve LLM's config models import vllm, and ray[llm] pins a vLLM that the package
# venv does not install (tests/test_serve_llm.py, DESIGN.md).
ALLOWED_SKIPS = ("ray.serve.llm's config models import vllm",)

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def ray_local():
    """One private local Ray for the whole session (starting Ray costs seconds)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = False
    yield ray
    ray.shutdown()


from .support.fixtures import (  # noqa: E402,F401  (LLM-path fixtures)
    fake_openai,
    tiny_model_dir,
    vllm_server,
)
from .support.locomo_store import (  # noqa: E402,F401  (one LoCoMo store per session)
    fixture_store,
    local_embedder,
    locomo_dev_store,
)

# --------------------------------------------------------------------------------------------
# Skip policy
# --------------------------------------------------------------------------------------------
_skips: list[tuple[str, str]] = []  # (test or collector id, reason), in the order they happened


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, lineno, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _record_skip(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):  # an xfail is not a skip
        _skips.append((report.nodeid, _skip_reason(report)))


def pytest_runtest_logreport(report):
    _record_skip(report)


def pytest_collectreport(report):
    _record_skip(report)  # a whole module skipped at import (pytest.importorskip at top level)


def _allowed(reason: str) -> bool:
    return any(allowed in reason for allowed in ALLOWED_SKIPS)


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == pytest.ExitCode.OK and any(not _allowed(reason) for _, reason in _skips):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    write = terminalreporter.write_line
    write(f"skipped: {len(_skips)}")
    for nodeid, reason in _skips:
        verdict = "allowed" if _allowed(reason) else "NOT ALLOWED"
        write(f"  {verdict}: {nodeid}: {reason}")
    bad = sum(not _allowed(reason) for _, reason in _skips)
    if bad:
        write(f"{bad} skip(s) outside the allow-list (tests/conftest.py ALLOWED_SKIPS): the run fails", red=True, bold=True)
