"""Session fixture: a store of the LoCoMo fixture (rules backend, real MiniLM, real local Ray),
built once.

`tests/fixtures/locomo_fixture.json` (conv-26, conv-30 and conv-41, the first sessions of
each) is ingested once per session, and every test module that needs a real store shares this
one (store, retrieval, evaluate, Memory and query-CLI tests). Tests only read it. To iterate on
a test without rebuilding, point LYCHEE_TEST_LOCOMO_STORE at a store built by
`lychee-ray ingest --config configs/local.yaml --input tests/fixtures/locomo_fixture.json --out DIR`.
"""

from __future__ import annotations

import json
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
    """Path of a complete store of the LoCoMo fixture (every conversation of it ingested ok)."""
    prebuilt = os.environ.get("LYCHEE_TEST_LOCOMO_STORE")
    if prebuilt:
        return Path(prebuilt)
    from lychee_ray.ingest.job import run_ingest

    n_conversations = len(json.loads(LOCOMO_PATH.read_text()))
    out = tmp_path_factory.mktemp("locomo-fixture-store")
    summary = run_ingest(local_config(), str(LOCOMO_PATH), str(out))
    assert summary.by_status == {"ok": n_conversations}, summary.by_status
    return out


@pytest.fixture(scope="module")
def local_embedder():
    """The real bundled MiniLM, configured as `configs/local.yaml` says, loaded once per module."""
    from lychee_ray.embedding import Embedder

    return Embedder(local_config().embedding)


@pytest.fixture(scope="module")
def fixture_store(locomo_dev_store):
    """The LoCoMo fixture store, opened read-only for one module."""
    from lychee_ray.store.reader import open_store

    with open_store(str(locomo_dev_store), local_config()) as s:
        yield s
