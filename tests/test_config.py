"""Typed config: YAML + `--set` overrides, and the one-sentence errors a user sees."""

from __future__ import annotations

import pytest

from lychee_ray.config import ConfigError, load_config, nest_dotted, parse_dotted

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
