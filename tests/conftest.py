"""Shared fixtures: paths to the shared benchmark data, a private local Ray, small fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("LYCHEE_SHARED", REPO.parent / "shared"))
LOCOMO_PATH = SHARED / "data" / "locomo" / "locomo_dev.json"
LME_PATH = SHARED / "data" / "longmemeval" / "longmemeval_excerpt_dev.json"
DEMO_PATH = REPO / "data" / "demo" / "locomo_conv-30.json"

requires_shared_data = pytest.mark.skipif(not LOCOMO_PATH.exists(), reason=f"shared data not found at {LOCOMO_PATH}")

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


from .support.fixtures import fake_openai, tiny_model_dir, vllm_server  # noqa: E402,F401  (LLM-path fixtures)
from .support.locomo_store import locomo_dev_store  # noqa: E402,F401  (the shared LoCoMo dev store)
