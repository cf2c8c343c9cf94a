"""`embedding.backend: openai` against the fake server's `/v1/embeddings`
(tests/support/fake_openai.py): vectors, batching and order, usage, retries, the dim check,
errors that name the endpoint and never the key, the config rules, and one ingest + Memory
search end to end on a generated LoCoMo-format archive (tests/support/generated.py).

The fake's vectors are `embedding_for(text)` (seeded per word, not unit length) and its replies
list them in reverse order, so a client that skipped normalization or placed rows by position
instead of `index` fails here."""

from __future__ import annotations

import logging
import socket
import time

import duckdb
import numpy as np
import pytest
from pydantic import ValidationError

from lychee_ray.config import load_config
from lychee_ray.config_sections import ConfigError, EmbeddingConfig
from lychee_ray.embedding import Embedder, EmbeddingError
from tests.support.fake_openai import embedding_for
from tests.support.generated import generate

from .conftest import REPO

TEXTS = ["I adopted a puppy.", "We went hiking.", "I adopted a puppy.", "The meeting moved to Friday."]


def http_cfg(server, **changes) -> EmbeddingConfig:
    fields = {"backend": "openai", "model": "fake-embed", "base_url": server.base_url, "timeout_s": 10.0, "max_retries": 2}
    return EmbeddingConfig(**{**fields, **changes})


def expected(texts: list[str], dim: int = 384) -> np.ndarray:
    vecs = np.stack([embedding_for(t or " ", dim) for t in texts])
    return vecs / np.linalg.norm(vecs, axis=1, keepdims=True)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- vectors and usage
def test_vectors_are_unit_float32_deterministic_and_the_servers(fake_openai):
    emb = Embedder(http_cfg(fake_openai))
    vecs = emb.encode(TEXTS)
    assert emb.dim == 384 and vecs.shape == (4, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(vecs[0], vecs[2]) and not np.allclose(vecs[0], vecs[1])
    assert np.allclose(vecs, expected(TEXTS), atol=1e-5)
    assert np.array_equal(emb.encode([TEXTS[3]])[0], vecs[3])  # alone or in a batch: the same
    (req, _) = fake_openai.requests
    # TEXTS[2] repeats TEXTS[0]: sent once, its vector copied to both places
    assert req["endpoint"] == "embeddings" and req["model"] == "fake-embed" and req["input"] == list(dict.fromkeys(TEXTS))
    assert len(req["input"]) == len(TEXTS) - 1 and emb.usage.duplicates == 1
    assert req["dimensions"] is None  # not sent unless configured


def test_order_is_kept_across_batches_and_usage_equals_the_servers(fake_openai):
    texts = [f"turn {i}: {w}" for i, w in enumerate("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda".split())]
    emb = Embedder(http_cfg(fake_openai, batch_size=3))
    groups = emb.encode_groups([texts[:5], [], texts[5:]])
    assert [g.shape for g in groups] == [(5, 384), (0, 384), (6, 384)]
    assert np.allclose(np.concatenate(groups), expected(texts), atol=1e-5)
    reqs = fake_openai.requests
    assert [len(r["input"]) for r in reqs] == [3, 3, 3, 2]
    assert [t for r in reqs for t in r["input"]] == texts
    server = fake_openai.total_usage()
    assert (emb.usage.requests, emb.usage.texts, emb.usage.prompt_tokens) == (server["ok"], len(texts), server["prompt_tokens"])
    assert server["prompt_tokens"] > len(texts)


def test_an_empty_string_keeps_its_row_and_is_sent_as_a_space(fake_openai):
    emb = Embedder(http_cfg(fake_openai))
    vecs = emb.encode(["hello there", "", "general kenobi"])  # the fake, like OpenAI, 400s on ""
    assert fake_openai.requests[0]["input"] == ["hello there", " ", "general kenobi"]
    assert np.allclose(vecs, expected(["hello there", " ", "general kenobi"]), atol=1e-5)
    assert emb.encode([]).shape == (0, 384) and len(fake_openai.requests) == 1  # nothing sent for nothing


def test_dimensions_is_sent_and_shortens_the_vectors(fake_openai):
    emb = Embedder(http_cfg(fake_openai, dim=256, dimensions=256))
    vecs = emb.encode(TEXTS[:2])
    assert vecs.shape == (2, 256) and fake_openai.requests[0]["dimensions"] == 256
    assert np.allclose(vecs, expected(TEXTS[:2], 256), atol=1e-5)


# ----------------------------------------------------------------------------- faults
def test_a_429_is_retried_by_the_client_and_succeeds(fake_openai):
    fake_openai.set_faults(schedule=["429"])
    emb = Embedder(http_cfg(fake_openai))
    vecs = emb.encode(TEXTS)
    assert [r["status"] for r in fake_openai.requests] == [429, 200]
    assert np.allclose(vecs, expected(TEXTS), atol=1e-5)
    assert emb.usage.requests == 1 and emb.usage.prompt_tokens == fake_openai.total_usage()["prompt_tokens"]


def test_a_persistent_500_fails_after_the_retries_with_the_endpoint_named(fake_openai):
    fake_openai.set_faults(schedule=["500"] * 3)
    emb = Embedder(http_cfg(fake_openai, max_retries=2))
    with pytest.raises(EmbeddingError) as err:
        emb.encode(TEXTS)
    msg = str(err.value)
    assert f"{fake_openai.base_url}/embeddings" in msg and "HTTP 500" in msg and "after 2 retries" in msg, msg
    assert len(fake_openai.requests) == 3 and emb.usage.requests == 0


def test_a_hung_request_times_out_instead_of_hanging(fake_openai):
    fake_openai.set_faults(schedule=["hang"])
    emb = Embedder(http_cfg(fake_openai, timeout_s=1.0, max_retries=0))
    start = time.monotonic()
    with pytest.raises(EmbeddingError, match="timed out"):
        emb.encode(TEXTS)
    assert time.monotonic() - start < 10


@pytest.mark.parametrize("fault", ["invalid", "truncate"])
def test_a_malformed_reply_is_an_error_not_shifted_rows(fake_openai, fault):
    fake_openai.set_faults(schedule=[fault])  # invalid: one vector short; truncate: the body cut in half
    emb = Embedder(http_cfg(fake_openai))
    with pytest.raises(EmbeddingError, match="fake-embed") as err:
        emb.encode(TEXTS)
    assert fake_openai.base_url in str(err.value)


def test_a_dim_mismatch_names_model_endpoint_and_both_widths(fake_openai):
    emb = Embedder(http_cfg(fake_openai, dim=512))
    with pytest.raises(EmbeddingError) as err:
        emb.encode(TEXTS)
    msg = str(err.value)
    for part in ("'fake-embed'", f"{fake_openai.base_url}/embeddings", "384-d", "embedding.dim is 512"):
        assert part in msg, msg


def test_a_closed_port_fails_fast_naming_the_endpoint():
    port = closed_port()
    emb = Embedder(EmbeddingConfig(backend="openai", model="fake-embed", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1))
    start = time.monotonic()
    with pytest.raises(EmbeddingError) as err:
        emb.encode(TEXTS)
    assert time.monotonic() - start < 30
    msg = str(err.value)
    assert f"http://127.0.0.1:{port}/v1/embeddings" in msg and "cannot connect" in msg, msg


def test_the_key_is_sent_but_never_logged_or_echoed(fake_openai, monkeypatch, caplog):
    key = "sk-embedtest-0123456789abcdef"
    monkeypatch.setenv("LYCHEE_TEST_EMBED_KEY", key)
    fake_openai.set_faults(schedule=["auth"])  # the fake's 401 echoes the key it was given
    caplog.set_level(logging.DEBUG, logger="lychee_ray")
    emb = Embedder(http_cfg(fake_openai, api_key_env="LYCHEE_TEST_EMBED_KEY"))
    with pytest.raises(EmbeddingError) as err:
        emb.encode(TEXTS)
    assert fake_openai.requests[0]["authorization"] == f"Bearer {key}"
    assert "HTTP 401" in str(err.value) and key not in str(err.value) and key not in repr(emb.backend)
    assert err.value.__cause__ is None and err.value.__suppress_context__  # the raw error (with the echo) is not chained
    assert key not in caplog.text and "fake-embed" in caplog.text


def test_openai_without_base_url_needs_a_key(monkeypatch):
    monkeypatch.delenv("LYCHEE_TEST_NO_KEY", raising=False)
    with pytest.raises(ConfigError, match="set the environment variable LYCHEE_TEST_NO_KEY .named by embedding.api_key_env."):
        Embedder(EmbeddingConfig(backend="openai", model="text-embedding-3-small", api_key_env="LYCHEE_TEST_NO_KEY"))


# ----------------------------------------------------------------------------- config
def test_config_rejects_fields_of_the_other_backend():
    with pytest.raises(ConfigError, match="bundled model"):
        load_config(REPO / "configs" / "local.yaml", ["embedding.backend=openai"])
    with pytest.raises(ValidationError, match="embedding.base_url is only used by embedding.backend=openai"):
        EmbeddingConfig(base_url="http://127.0.0.1:8080/v1")
    with pytest.raises(ValidationError, match="embedding.dim is 384"):
        EmbeddingConfig(backend="openai", model="text-embedding-3-small", dimensions=512)
    with pytest.raises(ValidationError, match="at most 2048"):
        EmbeddingConfig(backend="openai", model="text-embedding-3-small", batch_size=4096)
    cfg = load_config(REPO / "configs" / "local.yaml", [
        "embedding.backend=openai", "embedding.model=text-embedding-3-small", "embedding.dim=1536"])
    assert cfg.embedding.base_url is None and cfg.embedding.api_key_env == "OPENAI_API_KEY"


# ----------------------------------------------------------------------------- end to end
def test_ingest_and_memory_search_embed_over_http(fake_openai, ray_local, tmp_path):
    from lychee_ray import Memory
    from lychee_ray.ingest.job import run_ingest

    generated = generate(tmp_path / "generated", "locomo", conversations=2, sessions=2)
    src = generated.archive
    cfg = load_config(REPO / "configs" / "local.yaml", [
        "ray.progress_bars=false", "embedding.backend=openai", "embedding.model=fake-embed",
        f"embedding.base_url={fake_openai.base_url}", "embedding.batch_size=32", "embedding.max_retries=3",
    ])
    fake_openai.set_faults(schedule=["ok", "429"])  # a rate limit mid-ingest is retried, not a failed conversation
    summary = run_ingest(cfg, str(src), str(tmp_path / "store"))
    assert summary.by_status == {"ok": 2}, summary
    reqs = fake_openai.requests
    assert reqs and {r["endpoint"] for r in reqs} == {"embeddings"}  # rules LLM: no chat at all
    assert 429 in [r["status"] for r in reqs]
    # every stored turn vector is the server's vector of that turn's text, in its row
    rows = duckdb.sql(f"select text, embedding from read_parquet('{tmp_path}/store/turns/**/*.parquet')").fetchall()
    assert rows
    stored = np.array([r[1] for r in rows], dtype=np.float32)
    assert np.allclose(stored, expected([r[0] for r in rows]), atol=1e-4)
    sent = {t for r in reqs if r["status"] == 200 for t in r["input"]}
    assert {r[0] or " " for r in rows} <= sent
    n_before = len(fake_openai.requests)
    with Memory.open(tmp_path / "store", cfg) as memory:
        cid = memory.conversations()[0]
        question = generated.asked("single_hop", cid)[0]
        items = memory.search(cid, question["question"])
    assert items, "no evidence found"
    assert len(fake_openai.requests) > n_before  # the question was embedded over HTTP too
