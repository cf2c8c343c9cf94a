"""pytest fixtures for the LLM path; tests/conftest.py imports them.

- `fake_openai`: a fresh FakeOpenAIServer per test (cheap: a thread), stopped afterwards.
- `tiny_model_dir`: the tiny random-weight model, built once per session by vLLM's python.
- `vllm_server`: the real vLLM CPU server for that model, started once per session through
  `lychee-ray serve`; its shutdown is checked when the session ends. Skips (with the reason)
  only when the vLLM interpreter does not exist.
"""

from __future__ import annotations

import pytest

from tests.support.fake_openai import FakeOpenAIServer
from tests.support.tiny_vllm import (
    VLLMServer,
    build_tiny_model,
    start_vllm_server,
    vllm_available,
    vllm_python,
)


@pytest.fixture
def fake_openai():
    with FakeOpenAIServer() as server:
        yield server


def _require_vllm() -> None:
    if not vllm_available():
        pytest.skip(f"vLLM interpreter {vllm_python()} does not exist (set LYCHEE_VLLM_PYTHON or run make venv-vllm)")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    _require_vllm()
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny")


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory) -> VLLMServer:
    _require_vllm()
    with start_vllm_server(tiny_model_dir, workdir=tmp_path_factory.mktemp("vllm-server")) as server:
        yield server
