"""Typed config: YAML + `--set` overrides, and the one-sentence errors a user sees."""

from __future__ import annotations

import pytest

from lychee_ray.config import load_config, nest_dotted, parse_dotted
from lychee_ray.config_sections import ConfigError

from .conftest import REPO


def test_overrides_nest_and_parse_values_as_yaml():
    assert parse_dotted(["encoder.mode=eager", "segmenter.delta=0.4", "evaluate.categories=[temporal]"]) == {
        "encoder": {"mode": "eager"},
        "segmenter": {"delta": 0.4},
        "evaluate": {"categories": ["temporal"]},
    }
    assert nest_dotted({"a.b.c": 1, "a.d": 2}) == {"a": {"b": {"c": 1}, "d": 2}}


def test_set_overrides_the_file_and_keeps_the_rest():
    cfg = load_config(REPO / "configs" / "local.yaml", ["segmenter.delta=0.3", "llm.max_in_flight=3"])
    assert cfg.segmenter.delta == 0.3 and cfg.llm.max_in_flight == 3
    assert cfg.llm.backend == "rules"  # from local.yaml, untouched


@pytest.mark.parametrize(
    "content, overrides, message",
    [
        (None, [], "does not exist"),
        ("a: [unclosed", [], "is not valid YAML"),
        ("- a list", [], "must hold a mapping"),
        ("segmenter: {delta: 0.5}", ["segmenter.no_such_knob=1"], "no_such_knob"),
        ("segmenter: {delta: 0.5}", ["segmenter.delta"], "is not of the form section.key=value"),
    ],
)
def test_bad_config_is_one_config_error_naming_the_problem(tmp_path, content, overrides, message):
    path = tmp_path / "c.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_config(path, overrides)


def test_resolution_leaves_the_users_config_as_written_and_the_hash_says_what_was_resolved(tmp_path):
    """Validation never rewrites a field; what the machine decides is resolved once, travels with
    the pickled config, and is part of the build hash and the manifest's build record."""
    import pickle

    cfg = load_config(REPO / "configs" / "local.yaml", ["read.max_turn_tokens=4096", "segmenter.token_cap=700"])
    before = cfg.model_dump()
    resolved = cfg.resolve()
    assert cfg.model_dump() == before and resolved.max_turn_tokens == 700 and resolved.tokenizer is None
    assert pickle.loads(pickle.dumps(cfg))._resolved == resolved  # a Ray worker gets the driver's values
    record = cfg.build_record()
    assert record["resolved"] == {"tokenizer": None, "max_turn_tokens": 700}
    assert record["config"]["read"]["max_turn_tokens"] == 4096
    same = load_config(REPO / "configs" / "local.yaml", ["read.max_turn_tokens=4096", "segmenter.token_cap=700"])
    assert same.build_hash() == cfg.build_hash()
    assert load_config(REPO / "configs" / "local.yaml").build_hash() != cfg.build_hash()
    with pytest.raises(ConfigError, match="read.tokenizer|tokenizer"):  # not a user setting any more
        load_config(None, ["read.tokenizer=o200k"])


def test_moved_query_limits_are_read_with_a_warning_for_one_release():
    with pytest.warns(FutureWarning, match="evaluate.max_answer_tokens is deprecated: it is now query.max_answer_tokens"):
        cfg = load_config(None, ["evaluate.max_answer_tokens=99"])
    assert cfg.query.max_answer_tokens == 99 and not hasattr(cfg.evaluate, "max_answer_tokens")
    with pytest.raises(ConfigError, match="both set"):
        load_config(None, ["evaluate.max_plan_tokens=9", "query.max_plan_tokens=10"])


def test_endpoint_settings_are_one_model_and_the_key_is_read_once(monkeypatch):
    from lychee_ray.config_sections import EndpointConfig

    cfg = load_config(None, ["llm.backend=openai", "llm.api_key_env=LYCHEE_TEST_KEY_A", "embedding.api_key_env=LYCHEE_TEST_KEY_A",
                             "judge.model=gpt-4o-mini", "judge.base_url=https://api.openai.com/v1"])
    assert all(isinstance(s, EndpointConfig) for s in (cfg.llm, cfg.embedding, cfg.judge))
    monkeypatch.delenv("LYCHEE_TEST_KEY_A", raising=False)
    with pytest.raises(ConfigError, match="set the environment variable LYCHEE_TEST_KEY_A .named by llm.api_key_env."):
        cfg.llm.api_key("llm")
    assert cfg.judge_llm().base_url == "https://api.openai.com/v1" and cfg.judge_llm().timeout_s == cfg.llm.timeout_s
    monkeypatch.setenv("LYCHEE_TEST_KEY_A", "sk-test")
    assert cfg.embedding.api_key("embedding") == "sk-test"
    local = load_config(None, ["llm.backend=openai", "llm.base_url=http://127.0.0.1:8000/v1", "llm.api_key_env=LYCHEE_TEST_NONE"])
    assert local.llm.api_key("llm") == "EMPTY"  # a local server takes any key


def test_docs_config_md_is_generated_from_the_config_source():
    from lychee_ray.config_reference import reference

    assert (REPO / "docs" / "config.md").read_text() == reference(), \
        "docs/config.md is out of date: regenerate it with the command in its header"
    text = reference()
    for key in ("`token_cap`", "`context_token_budget`", "`max_known_entities`", "`runtime`"):
        assert key in text
    assert "|  |\n" not in text  # every key says what it does
