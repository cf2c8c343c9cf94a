"""Session fixture: the LoCoMo dev store (rules backend, real MiniLM, real local Ray), built once.

Building it takes a few minutes on 2 cores, so every test module that needs a real store shares
this one (store, retrieval, evaluate and query-CLI tests). Tests only read it. To iterate on a
test without rebuilding, point LYCHEE_TEST_LOCOMO_STORE at a store built by
`lychee-ray ingest --config configs/local.yaml --input <locomo_dev.json> --out DIR`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import LOCOMO_PATH, REPO

LOCAL_CONFIG = REPO / "configs" / "local.yaml"


def local_config(*overrides: str):
    from lychee_ray.config import load_config

    return load_config(LOCAL_CONFIG, ["ray.progress_bars=false", *overrides])


@pytest.fixture(scope="session")
def locomo_dev_store(tmp_path_factory, ray_local) -> Path:
    """Path of a complete LoCoMo dev store (7 conversations, 4,124 turns)."""
    prebuilt = os.environ.get("LYCHEE_TEST_LOCOMO_STORE")
    if prebuilt:
        return Path(prebuilt)
    if not LOCOMO_PATH.exists():
        pytest.skip(f"shared LoCoMo data not found at {LOCOMO_PATH}")
    from lychee_ray.ingest.job import run_ingest

    out = tmp_path_factory.mktemp("locomo-dev-store")
    summary = run_ingest(local_config(), str(LOCOMO_PATH), str(out))
    assert summary.by_status == {"ok": 7}, summary.by_status
    return out
