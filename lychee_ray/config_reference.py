"""docs/config.md, made from the config's own source: every section of `LycheeConfig`, every key
with its type and default, and the comment that stands beside or above it in
config_sections.py. The comments are the documentation of the keys, written once; this module
only lays them out (tests/test_config.py fails when docs/config.md is out of date).
"""

from __future__ import annotations

import ast
import inspect
import json

from pydantic import BaseModel

from lychee_ray import config_sections
from lychee_ray.config import LycheeConfig

HEAD = """# Configuration reference

Every key of a lychee-ray config, by section, with its default and what it does. A YAML file
sets any of them (`configs/local.yaml` is the offline default); `--set section.key=value`
overrides one on the command line; an unknown key is an error naming it.

Generated from `lychee_ray/config_sections.py` (its comments are these descriptions);
`tests/test_config.py` fails when it is out of date, and
`python -c "from lychee_ray.config_reference import reference; print(reference(), end='')" > docs/config.md`
regenerates it.
"""


def _comments() -> dict[tuple[str, str], str]:
    """(class, field) -> the comment beside the field, or the comment lines just above it."""
    source = inspect.getsource(config_sections)
    lines = source.splitlines()
    out: dict[tuple[str, str], str] = {}
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if not isinstance(item, ast.AnnAssign) or not isinstance(item.target, ast.Name):
                continue
            text = _beside(lines[item.end_lineno - 1]) or _above(lines, item.lineno - 2)
            out[(node.name, item.target.id)] = text
    return out


def _beside(line: str) -> str:
    code, hash_, comment = line.partition("  # ")
    return comment.strip() if hash_ and code.strip() else ""


def _above(lines: list[str], i: int) -> str:
    block = []
    while i >= 0 and lines[i].strip().startswith("#"):
        block.insert(0, lines[i].strip().lstrip("#").strip())
        i -= 1
    return " ".join(block)


def _default(model: type[BaseModel], name: str) -> str:
    value = model().__getattribute__(name) if name in model.model_fields else None
    if isinstance(value, BaseModel):
        return "(section)"
    return f"`{json.dumps(value)}`"


def _type(annotation) -> str:
    return str(annotation).replace("typing.", "").replace("<class '", "").replace("'>", "")


def _section(name: str, model: type[BaseModel], comments: dict, out: list[str]) -> None:
    doc = " ".join((model.__doc__ or "").split())
    out += [f"## `{name}`", "", *([doc, ""] if doc and not doc.startswith("!!") else []),
            "| key | type | default | what it does |", "|---|---|---|---|"]
    nested = []
    for field, info in model.model_fields.items():
        if isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel):
            nested.append((f"{name}.{field}", info.annotation))
            continue
        text = next((comments[(cls.__name__, field)] for cls in model.__mro__ if (cls.__name__, field) in comments), "")
        out.append(f"| `{field}` | `{_type(info.annotation)}` | {_default(model, field)} | {text} |")
    out.append("")
    for sub_name, sub_model in nested:
        _section(sub_name, sub_model, comments, out)


def reference() -> str:
    comments = _comments()
    out = [HEAD]
    for name, info in LycheeConfig.model_fields.items():
        _section(name, info.annotation, comments, out)
    return "\n".join(out)
