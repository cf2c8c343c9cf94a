"""json_schema_for: strict, self-contained schemas in the vllm and openai dialects, with
per-field enums and bounds. (xgrammar's acceptance is checked in test_vllm_engine.py.)"""

from __future__ import annotations

import json

import jsonschema
import pytest
from pydantic import BaseModel

from lychee_ray.llm.schema import json_schema_for
from lychee_ray.schemas import AnswerOutput, EncodeOutput, JudgeOutput, QueryPlan
from tests.support.fake_openai import generate

ALL_MODELS = [EncodeOutput, QueryPlan, AnswerOutput, JudgeOutput]


def _walk(node, path="$"):
    """Yield (path, subschema) for every dict in the schema."""
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            if key == "properties":
                for name, sub in value.items():
                    yield from _walk(sub, f"{path}.{name}")
            else:
                yield from _walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, x in enumerate(node):
            yield from _walk(x, f"{path}[{i}]")


def _prop(schema, *names):
    node = schema
    for name in names:
        if node.get("type") == "array":
            node = node["items"]
        if "anyOf" in node:  # nullable object (e.g. a record's time): step into the object branch
            node = next(b for b in node["anyOf"] if "properties" in b)
        node = node["properties"][name]
    return node


@pytest.mark.parametrize("dialect", ["vllm", "openai"])
@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_strict_and_self_contained(model, dialect):
    schema = json_schema_for(model, dialect)
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text
    objects = [node for _, node in _walk(schema) if node.get("type") == "object"]
    assert objects
    for node in objects:
        assert node["additionalProperties"] is False
        assert node["required"] == list(node["properties"])
    for path, node in _walk(schema):
        assert "title" not in node and "default" not in node, path
    jsonschema.Draft202012Validator.check_schema(schema)


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_instances_of_the_schema_validate_as_the_model(model):
    # The schema must not admit anything the pydantic model rejects (nor miss a field).
    schema = json_schema_for(model, "vllm", max_items={"*": 2}, max_length={"*": 10})
    instance = generate(schema, words=["Alpha", "beta", "gamma"])
    jsonschema.validate(instance, schema)
    model.model_validate(instance)


def test_vllm_keeps_bounds_openai_strips_them_but_keeps_enums():
    kwargs = dict(enums={"source_turn_ids": ["D1:1", "D1:2"]}, max_items={"records": 5}, max_length={"text": 80})
    vllm = json_schema_for(EncodeOutput, "vllm", **kwargs)
    openai = json_schema_for(EncodeOutput, "openai", **kwargs)
    assert vllm["properties"]["records"]["maxItems"] == 5
    assert _prop(vllm, "records", "text")["maxLength"] == 80
    for schema in (vllm, openai):
        assert _prop(schema, "records", "source_turn_ids")["items"]["enum"] == ["D1:1", "D1:2"]
        assert _prop(schema, "records", "type")["enum"][0] == "fact"
    allowed = {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "description"}
    for path, node in _walk(openai):
        assert set(node) <= allowed, (path, set(node) - allowed)


def test_enum_constrains_turn_ids():
    schema = json_schema_for(EncodeOutput, "vllm", enums={"source_turn_ids": ["D1:1", "D1:2", "D1:1"]})
    items = _prop(schema, "records", "source_turn_ids")["items"]
    assert items == {"type": "string", "enum": ["D1:1", "D1:2"]}  # deduplicated, order kept
    good = generate(schema, words=["x"])
    good["records"][0]["source_turn_ids"] = ["D1:2"]
    jsonschema.validate(good, schema)
    bad = json.loads(json.dumps(good))
    bad["records"][0]["source_turn_ids"] = ["D9:9"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)


def test_bounds_on_nullable_fields_go_onto_the_string_branch():
    schema = json_schema_for(EncodeOutput, "vllm", max_length={"date_anchor": 10}, enums={"expression": ["today"]})
    anchor = _prop(schema, "state", "date_anchor")
    assert {"type": "string", "maxLength": 10} in anchor["anyOf"]
    assert {"type": "null"} in anchor["anyOf"]
    expression = _prop(schema, "records", "time", "expression")
    assert {"type": "string", "enum": ["today"]} in expression["anyOf"]


def test_wildcard_bounds_and_specific_ones_win():
    schema = json_schema_for(EncodeOutput, "vllm", max_items={"*": 3, "records": 7}, max_length={"*": 20, "text": 200})
    assert schema["properties"]["records"]["maxItems"] == 7
    assert _prop(schema, "records", "entities")["maxItems"] == 3
    assert _prop(schema, "records", "entities")["items"]["maxLength"] == 20
    assert _prop(schema, "records", "text")["maxLength"] == 200
    assert "maxLength" not in _prop(schema, "records", "type")  # enums are bounded already
    # Every string and array of the schema is bounded: a random model must terminate.
    for path, node in _walk(schema):
        if node.get("type") == "string" and "enum" not in node:
            assert "maxLength" in node, path
        if node.get("type") == "array":
            assert "maxItems" in node, path


def test_same_name_at_different_depths_gets_the_same_bound():
    # "entities" is a list of strings in a record and a list of objects in the state.
    schema = json_schema_for(EncodeOutput, "vllm", max_items={"entities": 4})
    assert _prop(schema, "records", "entities")["maxItems"] == 4
    assert _prop(schema, "state", "entities")["maxItems"] == 4


def test_mistakes_fail_loudly():
    with pytest.raises(ValueError, match="source_turn_idz"):
        json_schema_for(EncodeOutput, "vllm", enums={"source_turn_idz": ["D1:1"]})
    with pytest.raises(ValueError, match="empty"):
        json_schema_for(EncodeOutput, "vllm", enums={"source_turn_ids": []})
    with pytest.raises(ValueError, match="dialect"):
        json_schema_for(EncodeOutput, "anthropic")


class _WithDefaults(BaseModel):
    name: str
    note: str | None = None
    tags: list[str] = []


class _Node(BaseModel):
    value: str
    children: list["_Node"]


def test_fields_with_defaults_become_required_and_recursion_is_rejected():
    schema = json_schema_for(_WithDefaults, "openai")
    assert schema["required"] == ["name", "note", "tags"]
    assert "default" not in json.dumps(schema)
    with pytest.raises(ValueError, match="recursive"):
        json_schema_for(_Node, "vllm")


def test_record_time_is_nullable_on_the_wire_and_never_none_in_memory():
    """An untimed record costs `"time":null`, not four null fields; callers still get an object."""
    schema = json_schema_for(EncodeOutput, "openai")
    time_schema = _prop(schema, "records")["items"]["properties"]["time"]
    assert {"type": "null"} in time_schema["anyOf"]
    rec = {"type": "fact", "text": "Ann likes tea.", "entities": ["Ann"], "topics": [], "time": None, "source_turn_ids": ["D1:1"]}
    out = EncodeOutput.model_validate({"records": [rec], "state": {"entities": [], "date_anchor": None, "open_threads": []}})
    assert out.records[0].time.granularity == "none" and out.records[0].time.start is None
    assert json.loads(out.model_dump_json())["records"][0]["time"] is None
    jsonschema.validate(json.loads(out.model_dump_json()), schema)
    timed = dict(rec, time={"start": "2023-05-07", "end": "2023-05-07", "granularity": "day", "expression": "yesterday"})
    again = EncodeOutput.model_validate({"records": [timed], "state": {"entities": [], "date_anchor": None, "open_threads": []}})
    assert json.loads(again.model_dump_json())["records"][0]["time"]["expression"] == "yesterday"
