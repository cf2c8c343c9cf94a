"""The grid spec: its YAML schema (variants as `section.key: value` overlays on a base config,
references, quick-run limits) and `load_grid`, which validates it and builds every selected
variant's config. Variants may not touch `read` or `embedding`: the grid reads and embeds once
for all of them. Apart from the runner so a spec is checked without Ray, models or data.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lychee_ray.config import (
    LycheeConfig,
    deep_merge,
    load_config,
    nest_dotted,
    parse_dotted,
    read_yaml_mapping,
)
from lychee_ray.config_sections import ConfigError
from lychee_ray.redact import validation_errors

# A variant may not change what the shared read + embedding produce.
SHARED_SECTIONS = ("read", "embedding")


# --------------------------------------------------------------------------------------------
# The grid spec
# --------------------------------------------------------------------------------------------
class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariantSpec(_Spec):
    name: str = Field(pattern=r"^[A-Za-z0-9_.\-]+$")
    # Flat overrides on the base config, e.g. {"encoder.mode": "eager"}.
    set: dict[str, Any] = Field(default_factory=dict)
    # Fixed-window variant: per conversation, as many equal windows as this variant has calls.
    window_matches: str | None = None
    main: bool = False  # shown in the per-category bars
    paper: str = ""  # one line: where this variant differs from the paper's definition


class ReferenceSpec(_Spec):
    name: Literal["full_context", "naive_rag"]
    paper: str = ""
    # full_context: the model's context length; None takes serve.max_model_len of the base config.
    context_tokens: int | None = None


class GridSpec(_Spec):
    base_config: str
    base_set: dict[str, Any] = Field(default_factory=dict)  # overrides on the base for every variant
    reference_build: str = "full"  # whose store the references read (naive RAG needs turn vectors)
    variants: list[VariantSpec]
    references: list[ReferenceSpec] = Field(default_factory=list)
    only: list[str] | None = None  # run just these variants/references (quick runs, tests)
    max_conversations: int | None = None
    # Evaluate only the first N questions of each conversation (quick runs on a shared machine).
    questions_per_conversation: int | None = None
    paper_delta_spread_pp: float = 1.04  # the paper's accuracy spread over its delta sweep

    @model_validator(mode="after")
    def _check_names(self) -> "GridSpec":
        names = [v.name for v in self.variants]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"variant names must be unique; repeated: {sorted(dup)}")
        for v in self.variants:
            if v.window_matches and v.window_matches not in names:
                raise ValueError(f"variant {v.name!r}: window_matches names unknown variant {v.window_matches!r}")
        return self


@dataclass
class Grid:
    """A loaded spec: the validated config of every selected variant."""

    spec: GridSpec
    path: str
    base: LycheeConfig
    configs: dict[str, LycheeConfig]  # variant name -> config
    variants: list[VariantSpec]
    references: list[ReferenceSpec]


def _resolve_base(spec_path: Path, base: str) -> Path:
    p = Path(base)
    if p.is_absolute() or p.exists():
        return p
    # Relative to the repo root (the spec's grandparent) or to the spec's own folder.
    for root in (spec_path.parent.parent.parent, spec_path.parent):
        if (root / p).exists():
            return root / p
    return p


def load_grid(path: str | Path, overrides: list[str] | None = None) -> Grid:
    """Load and validate a grid spec. `overrides` are `--set` items: `grid.KEY=V` changes the spec
    (e.g. grid.only=[full,eager]); anything else applies to the base config of every variant."""
    p = Path(path)
    raw = read_yaml_mapping(p, "grid spec")
    grid_sets = [o.removeprefix("grid.") for o in overrides or [] if o.startswith("grid.")]
    cfg_sets = [o for o in overrides or [] if not o.startswith("grid.")]
    raw = deep_merge(raw, parse_dotted(grid_sets))
    try:
        spec = GridSpec.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid grid spec {p}:\n{validation_errors(exc)}") from None
    base = load_config(_resolve_base(p, spec.base_config), cfg_sets)
    base = _overlay(base, spec.base_set, f"{p}: base_set")
    selected = set(spec.only) if spec.only else None
    known = {v.name for v in spec.variants} | {r.name for r in spec.references}
    if selected and selected - known:
        raise ConfigError(f"{p}: grid.only names unknown variants {sorted(selected - known)}; known: {sorted(known)}")
    variants = [v for v in spec.variants if selected is None or v.name in selected]
    for v in variants:
        if v.window_matches and v.window_matches not in {x.name for x in variants}:
            variants.append(next(x for x in spec.variants if x.name == v.window_matches))  # needed for the counts
    references = [r for r in spec.references if selected is None or r.name in selected]
    if references and spec.reference_build not in {v.name for v in variants}:
        variants.append(next(v for v in spec.variants if v.name == spec.reference_build))
    order = {v.name: i for i, v in enumerate(spec.variants)}
    variants = sorted({v.name: v for v in variants}.values(), key=lambda v: order[v.name])
    configs = {}
    for v in variants:
        bad = [k for k in v.set if k.split(".")[0] in SHARED_SECTIONS]
        if bad:
            raise ConfigError(f"{p}: variant {v.name!r} sets {bad}, but read and embedding settings are shared by the whole grid")
        configs[v.name] = _overlay(base, v.set, f"{p}: variant {v.name!r}")
    return Grid(spec, str(p), base, configs, variants, references)


def _overlay(cfg: LycheeConfig, flat: dict[str, Any], where: str) -> LycheeConfig:
    try:
        return cfg.with_overrides(nest_dotted(flat))
    except ValidationError as exc:
        raise ConfigError(f"{where} has an invalid override:\n{validation_errors(exc)}") from None
