"""JSON schemas for structured output, derived from the pydantic reply models.

Strict mode (OpenAI's, and vLLM's xgrammar) wants inlined refs, every property required and no
extra ones; per-call bounds (turn-id enums, max items, max lengths) keep even a bad model's reply
valid and short. Pure and cached, its own module because the client, the encoder, the planner,
the answerer and the judge all build schemas.
"""

from __future__ import annotations

import copy
import functools
import json
from typing import Any

from pydantic import BaseModel

# Keys OpenAI strict mode has always accepted. Everything else (maxLength, minItems, pattern,
# format, title, default, ...) is dropped under dialect "openai".
_OPENAI_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "items", "enum", "const", "anyOf", "description"}
)


# --------------------------------------------------------------------------------------------
# JSON schema for structured output
# --------------------------------------------------------------------------------------------
def json_schema_for(
    model: type[BaseModel],
    dialect: str,
    *,
    enums: dict[str, list[str]] | None = None,
    max_items: dict[str, int] | None = None,
    max_length: dict[str, int] | None = None,
) -> dict:
    """A self-contained strict JSON schema for `model`.

    `$ref`s are inlined (our reply models are not recursive), every object lists all its
    properties in `required` and sets `additionalProperties: false` (OpenAI strict mode demands
    both; vLLM/xgrammar honours them).

    The three maps are keyed by property name, wherever that name occurs; key "*" applies to
    every array (max_items) or string (max_length) that has no entry of its own:
    - `enums`: the strings of that property (or of its array items) must be one of the values,
      e.g. {"source_turn_ids": segment_turn_ids} so even a random model cites real turns;
    - `max_items` / `max_length`: bounds on arrays / strings, so a bad model cannot run on.

    Dialect "vllm" keeps the bounds (xgrammar enforces them); "openai" keeps only the keywords
    strict mode accepts, so the bounds are dropped there (enums are kept).
    """
    if dialect not in ("vllm", "openai"):
        raise ValueError(f"unknown schema dialect {dialect!r} (expected 'vllm' or 'openai')")
    for name, values in (enums or {}).items():
        if not values:
            raise ValueError(f"enum for property {name!r} is empty: no value could satisfy it")
    schema, known = _strict_base(model)
    for what, mapping in (("enums", enums), ("max_items", max_items), ("max_length", max_length)):
        unknown = sorted(set(mapping or {}) - known - {"*"})
        if unknown:  # a typo would silently leave the output unbounded
            raise ValueError(f"{what}: {model.__name__} has no property {unknown}")
    _apply_field_bounds(schema, enums or {}, max_items or {}, max_length or {})
    if dialect == "openai":
        schema = _keep_keywords(schema, _OPENAI_KEYWORDS)
    return schema


def _strict_base(model: type[BaseModel]) -> tuple[dict, frozenset[str]]:
    """A fresh copy of the model's inlined strict schema and its property names. The encoder
    asks for a schema on every call (the turn-id enum differs per segment); building it from
    pydantic each time was a third of the client's CPU per call."""
    schema_json, known = _strict_base_cached(model)
    return json.loads(schema_json), known  # a JSON round trip copies ~5x faster than deepcopy


@functools.lru_cache(maxsize=64)
def _strict_base_cached(model: type[BaseModel]) -> tuple[str, frozenset[str]]:
    raw = model.model_json_schema()
    schema = _strictify(_inline_refs(raw, raw.get("$defs", {}), ()))
    return json.dumps(schema), frozenset(_property_names(schema))


def _inline_refs(node: Any, defs: dict, seen: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline_refs(x, defs, seen) for x in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        ref = node["$ref"]
        name = ref.rsplit("/", 1)[-1]
        if not ref.startswith("#/$defs/") or name not in defs:
            raise ValueError(f"cannot resolve schema reference {ref!r}")
        if name in seen:
            raise ValueError(f"recursive model {name!r} cannot be inlined into a strict schema")
        target = _inline_refs(defs[name], defs, seen + (name,))
        extra = {k: v for k, v in node.items() if k != "$ref"}  # e.g. a description beside $ref
        return {**copy.deepcopy(target), **_inline_refs(extra, defs, seen)}
    return {k: _inline_refs(v, defs, seen) for k, v in node.items() if k != "$defs"}


def _property_names(node: Any) -> set[str]:
    names: set[str] = set()
    if isinstance(node, list):
        for x in node:
            names |= _property_names(x)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                names |= set(value)
                for sub in value.values():
                    names |= _property_names(sub)
            else:
                names |= _property_names(value)
    return names


def _strictify(node: Any) -> Any:
    """Drop title/default, require every property, forbid extra ones."""
    if isinstance(node, list):
        return [_strictify(x) for x in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "default"):
            continue
        if key == "properties":  # property names are data, not keywords
            out[key] = {name: _strictify(sub) for name, sub in value.items()}
        else:
            out[key] = _strictify(value)
    if out.get("type") == "object" or "properties" in out:
        out.setdefault("properties", {})
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def _apply_field_bounds(node: Any, enums: dict, max_items: dict, max_length: dict, field: str | None = None) -> None:
    """Walk the schema; `field` is the property name the current subschema belongs to."""
    if isinstance(node, list):
        for x in node:
            _apply_field_bounds(x, enums, max_items, max_length, field)
        return
    if not isinstance(node, dict):
        return
    for name, sub in node.get("properties", {}).items():
        _apply_field_bounds(sub, enums, max_items, max_length, name)
    for branch in node.get("anyOf", []):  # nullable: the bounds go onto the non-null branch
        _apply_field_bounds(branch, enums, max_items, max_length, field)
    kind = node.get("type")
    if kind == "array":
        bound = max_items.get(field, max_items.get("*")) if field else max_items.get("*")
        if bound is not None:
            node["maxItems"] = min(bound, node.get("maxItems", bound))
        if "items" in node:
            _apply_field_bounds(node["items"], enums, max_items, max_length, field)
    elif kind == "string":
        if field in enums:
            node["enum"] = list(dict.fromkeys(enums[field]))
        elif "enum" not in node:
            bound = max_length.get(field, max_length.get("*")) if field else max_length.get("*")
            if bound is not None:
                node["maxLength"] = min(bound, node.get("maxLength", bound))


def _keep_keywords(node: Any, allowed: frozenset[str]) -> Any:
    if isinstance(node, list):
        return [_keep_keywords(x, allowed) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _keep_keywords(sub, allowed) for name, sub in value.items()}
        elif key in allowed:
            out[key] = _keep_keywords(value, allowed)
    return out
