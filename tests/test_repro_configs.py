"""configs/paper.yaml and configs/open.yaml, the reproduction settings (README "Reproducing the
paper's numbers"). Config only: loading needs no network, no key and no model weights."""

from __future__ import annotations

import pytest

from lychee_ray.config import load_config
from lychee_ray.llm.serve import base_url

from .conftest import REPO

CONFIGS = REPO / "configs"


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch):
    # Loading a config must not depend on a key being set.
    for name in ("OPENAI_API_KEY", "VLLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def test_paper_config_names_the_papers_models():
    cfg = load_config(CONFIGS / "paper.yaml")
    assert (cfg.llm.backend, cfg.llm.model, cfg.llm.base_url, cfg.llm.schema_dialect) == ("openai", "gpt-4.1-mini", None, "openai")
    judge = cfg.judge_llm()
    assert (judge.model, judge.base_url, judge.schema_dialect) == ("gpt-4o-mini", None, "openai")
    assert (cfg.embedding.backend, cfg.embedding.model) == ("openai", "text-embedding-3-small")
    assert cfg.embedding.dim == 1536 and cfg.embedding.dimensions in (None, 1536)
    assert cfg.retrieval.rerank.enabled and cfg.retrieval.rerank.model == "BAAI/bge-reranker-v2-m3"
    assert cfg.tokenizer_spec is None  # o200k, gpt-4.1-mini's tokenizer
    assert cfg.encoder.mode == "segment" and cfg.asks_judge


def test_open_config_serves_an_open_model_and_judges_with_the_papers_judge():
    cfg = load_config(CONFIGS / "open.yaml")
    assert cfg.llm.backend == "openai" and cfg.llm.schema_dialect == "vllm"
    assert cfg.llm.base_url == base_url(cfg.serve) == "http://127.0.0.1:8000/v1"
    assert cfg.llm.model == cfg.serve.served_model_name and cfg.serve.model == "Qwen/Qwen2.5-7B-Instruct"
    # The server and client agree as in configs/vllm.yaml.
    vllm = load_config(CONFIGS / "vllm.yaml")
    assert cfg.serve == vllm.serve
    need = cfg.segmenter.token_cap + cfg.encoder.context_token_budget + cfg.encoder.max_tokens
    assert cfg.serve.max_model_len >= need + 1024
    assert cfg.encoder.num_actors * min(cfg.llm.max_in_flight, cfg.encoder.conversations_in_flight) >= cfg.serve.max_num_seqs
    # Local embedder and reranker; the judge is gpt-4o-mini on OpenAI, with its own key.
    assert cfg.embedding.backend == "sentence_transformers" and cfg.embedding.model == "bundled:all-MiniLM-L6-v2"
    assert cfg.embedding.dim == 384 and cfg.embedding.dimensions is None
    assert cfg.retrieval.rerank.enabled and cfg.retrieval.rerank.model == "BAAI/bge-reranker-v2-m3"
    judge = cfg.judge_llm()
    assert (judge.model, judge.base_url, judge.schema_dialect) == ("gpt-4o-mini", "https://api.openai.com/v1", "openai")
    assert judge.api_key_env == "OPENAI_API_KEY" != cfg.llm.api_key_env  # the OpenAI key never goes to vLLM
    assert judge.extra_body == {}


@pytest.mark.parametrize("name", ["paper.yaml", "open.yaml"])
def test_repro_configs_judge_is_not_the_answerer(name):
    cfg = load_config(CONFIGS / name)
    assert cfg.asks_judge and not cfg.judge_is_answerer
    assert cfg.judge_llm().model != cfg.llm.model
    assert cfg.judge.temperature == 0.0


@pytest.mark.parametrize("name", ["paper.yaml", "open.yaml"])
def test_repro_configs_differ_from_the_defaults_only_where_they_say(name):
    # The segmenter runs with the tuned defaults in both (what README's table says).
    cfg = load_config(CONFIGS / name)
    defaults = load_config(None)
    assert cfg.segmenter == defaults.segmenter
    assert cfg.retrieval.context_token_budget == defaults.retrieval.context_token_budget
    assert cfg.encoder.context_token_budget == defaults.encoder.context_token_budget
