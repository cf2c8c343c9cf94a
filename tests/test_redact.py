"""Keys never reach a message, a log or a report: the one redaction helper and its users."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.config_sections import ConfigError, LLMConfig
from lychee_ray.evaluate.report import backend_label
from lychee_ray.llm.client import LLMClient
from lychee_ray.redact import mask_url, redact

KEY_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def test_mask_url_hides_userinfo_and_keeps_the_rest():
    assert mask_url("http://user:s3cret@host:8000/v1") == "http://***@host:8000/v1"
    assert mask_url("https://sk-abcdefghijkl@api.example.com/v1") == "https://***@api.example.com/v1"
    assert mask_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1"
    assert mask_url(None) is None


def test_redact_hides_given_secrets_and_key_looking_tokens():
    text = "401 for key sk-proj-ABCDEF123456 (Bearer abc.def.ghi123) at http://u:pw@h/v1 with my-own-secret-value"
    out = redact(text, ["my-own-secret-value"])
    for leaked in ("sk-proj-ABCDEF123456", "abc.def.ghi123", "u:pw", "my-own-secret-value"):
        assert leaked not in out
    assert out.startswith("401 for key ***")


@settings(max_examples=40, deadline=None)
@given(st.text(KEY_CHARS, min_size=16, max_size=48))
def test_a_key_in_the_wrong_config_field_is_never_echoed(tmp_path_factory, body):
    key = f"sk-{body}"
    cfg = tmp_path_factory.mktemp("cfg") / "c.yaml"
    cfg.write_text(f"llm:\n  backend: openai\n  api_key: {key}\n")
    with pytest.raises(ConfigError) as err:
        load_config(cfg)
    message = str(err.value)
    assert "llm.api_key" in message and "Extra inputs are not permitted" in message
    assert key not in message and body not in message
    assert err.value.__cause__ is None  # pydantic's own text (which echoes the value) is not chained


def test_bad_values_elsewhere_are_still_shown():
    with pytest.raises(ConfigError, match=r"segmenter\.delta: .*got 'high'"):
        load_config(None, ["segmenter.delta=high"])


def test_llm_client_masks_its_url_and_key(monkeypatch):
    monkeypatch.setenv("LYCHEE_TEST_KEY", "sk-test-0123456789abcdef")
    client = LLMClient(LLMConfig(backend="openai", model="m", base_url="http://me:sk-test-0123456789abcdef@127.0.0.1:9/v1", api_key_env="LYCHEE_TEST_KEY"))
    assert "0123456789abcdef" not in repr(client)
    assert "0123456789abcdef" not in client._redact("server said: bad key sk-test-0123456789abcdef")


def test_report_backend_line_masks_the_url():
    cfg = LycheeConfig.model_validate({"llm": {"backend": "openai", "model": "m", "base_url": "http://u:topsecret@host/v1"}})
    assert "topsecret" not in backend_label(cfg) and "http://***@host/v1" in backend_label(cfg)
