"""Typed configuration, loaded from YAML: `LycheeConfig` holds one section per pipeline stage
(config_sections.py), validated as the user wrote it and never changed by validation.

What depends on the machine (which tokenizer the budgets count with: a local model directory or
a Hugging Face cache entry; the turn cap, bounded by the segment cap) is resolved once, outside
validation, by `LycheeConfig.resolve()`: the driver of a job calls it, and the resolved values
travel with the config into every Ray worker. `build_hash()` hashes the user's build sections
plus those resolved values, and the store's manifest records both, so one YAML hashes the same
wherever its resolution is the same, and a difference says why.

Deprecated keys (read for one release, with a FutureWarning): `evaluate.max_answer_tokens`,
`max_plan_tokens`, `plan_max_items`, `plan_goal_chars`, `plan_field_chars`, `max_answer_chars`
moved to `query:`; `retrieval.engine` is gone (there is one retrieval engine).
"""

from __future__ import annotations

import copy
import hashlib
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PrivateAttr, ValidationError, model_validator

from lychee_ray.config_sections import (
    MOVED_TO_QUERY,
    ConfigError,
    EmbeddingConfig,
    EncoderConfig,
    EvaluateConfig,
    IngestConfig,
    JudgeConfig,
    LLMConfig,
    OrganizeConfig,
    QueryConfig,
    RayConfig,
    ReadConfig,
    RetrievalConfig,
    SegmenterConfig,
    ServeConfig,
    StoreConfig,
    _Section,
)
from lychee_ray.redact import validation_errors

BUILD_SECTIONS = ("read", "embedding", "segmenter", "llm", "encoder", "organize")  # what changes what ingest writes
NOT_BUILD = {"embedding": ("cache_dir",)}  # where a setting is kept, not what is written


@dataclass(frozen=True)
class Resolved:
    """The values a config leaves to the machine, resolved once (`LycheeConfig.resolve`)."""

    tokenizer: str | None  # spec for `lychee_ray.tokens.token_counter`; None: o200k
    max_turn_tokens: int  # read.max_turn_tokens, never above segmenter.token_cap


class LycheeConfig(_Section):
    ray: RayConfig = Field(default_factory=RayConfig)
    read: ReadConfig = Field(default_factory=ReadConfig)
    embedding: EmbeddingConfig = Field(default_factory=EmbeddingConfig)
    segmenter: SegmenterConfig = Field(default_factory=SegmenterConfig)
    llm: LLMConfig = Field(default_factory=LLMConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    organize: OrganizeConfig = Field(default_factory=OrganizeConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
    query: QueryConfig = Field(default_factory=QueryConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    ingest: IngestConfig = Field(default_factory=IngestConfig)

    _resolved: Resolved | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        """Old spellings, read for one release: evaluate.<query limit> -> query.<it>; the
        retrieval engine switch is gone."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        evaluate = dict(data.get("evaluate") or {})
        moved = {k: evaluate.pop(k) for k in MOVED_TO_QUERY if k in evaluate}
        if moved:
            query = dict(data.get("query") or {})
            for key, value in moved.items():
                if key in query:
                    raise ValueError(f"evaluate.{key} and query.{key} are both set: keep query.{key}")
                query[key] = value
                warnings.warn(f"evaluate.{key} is deprecated: it is now query.{key} (read as such this release)", FutureWarning, stacklevel=2)
            data["evaluate"], data["query"] = evaluate, query
        embedding = data.get("embedding")
        if isinstance(embedding, dict) and "conversations_per_batch" in embedding:
            embedding = dict(embedding)
            embedding.pop("conversations_per_batch")
            warnings.warn("embedding.conversations_per_batch is deprecated and ignored: batches are sized by work (ingest.batch_turns)",
                          FutureWarning, stacklevel=2)
            data["embedding"] = embedding
        retrieval = data.get("retrieval")
        if isinstance(retrieval, dict) and "engine" in retrieval:
            retrieval = dict(retrieval)
            retrieval.pop("engine")
            warnings.warn("retrieval.engine is deprecated and ignored: retrieval has one engine (in memory)", FutureWarning, stacklevel=2)
            data["retrieval"] = retrieval
        return data

    # ---- what the machine decides ---------------------------------------------------------------
    def resolve(self) -> Resolved:
        """Resolve once (the driver calls it; workers get the result with the pickled config)."""
        if self._resolved is None:
            self._resolved = Resolved(
                tokenizer=_tokenizer_spec(self),
                # a turn part longer than the segment cap would be a segment over the cap by itself
                max_turn_tokens=min(self.read.max_turn_tokens, self.segmenter.token_cap),
            )
        return self._resolved

    @property
    def tokenizer_spec(self) -> str | None:
        """The tokenizer budgets and caps count with (`Resolved.tokenizer`)."""
        return self.resolve().tokenizer

    @property
    def read_settings(self) -> ReadConfig:
        """`read:` as the readers use it: the resolved turn cap and tokenizer."""
        read = self.read.model_copy(update={"max_turn_tokens": self.resolve().max_turn_tokens})
        read._tokenizer = self.resolve().tokenizer
        return read

    def build_hash(self) -> str:
        """Hash of everything that changes what ingest writes (not retrieval/eval settings): the
        user's build sections as written plus the resolved values (`build_record`)."""
        blob = json.dumps(self.build_record(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def build_record(self) -> dict:
        """What `build_hash` hashes, as the store's manifest keeps it."""
        config = {k: getattr(self, k).model_dump(mode="json", exclude=set(NOT_BUILD.get(k, ()))) for k in BUILD_SECTIONS}
        return {"config": config, "resolved": asdict(self.resolve())}

    # ---- the judge --------------------------------------------------------------------------------
    def judge_llm(self) -> LLMConfig:
        """The LLM settings the judge calls with: `llm:` with the judge's own fields laid over."""
        own = {k: v for k, v in self.judge.model_dump().items() if v is not None}
        if own.get("base_url", self.llm.base_url) != self.llm.base_url:
            own["extra_body"] = {}  # the answerer's server-specific request fields mean nothing to another endpoint
        return self.llm.model_copy(update=own)

    @property
    def asks_judge(self) -> bool:
        """Whether an evaluation asks an LLM judge: decided by the config, never by whether any
        label came back (a run whose every judge call failed is a judged run with accuracy 0)."""
        return self.llm.backend != "rules" and self.evaluate.judge

    @property
    def judge_is_answerer(self) -> bool:
        judge = self.judge_llm()
        return (judge.model, judge.base_url) == (self.llm.model, self.llm.base_url)

    def with_overrides(self, overlay: dict[str, Any]) -> "LycheeConfig":
        return LycheeConfig.model_validate(deep_merge(self.model_dump(mode="json"), overlay))


# --------------------------------------------------------------------------------------------
# Resolution
# --------------------------------------------------------------------------------------------
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model", "vocab.txt")


def _tokenizer_spec(cfg: LycheeConfig) -> str | None:
    """`llm.tokenizer` resolved (see `LLMConfig.tokenizer`): None for o200k, else a local
    directory or a cached Hugging Face name. Checks the filesystem only; loading happens in
    `token_counter`."""
    explicit = cfg.llm.tokenizer
    if explicit is not None and explicit.strip():
        return None if explicit.strip() in ("o200k", "o200k_base") else explicit.strip()
    if cfg.llm.backend == "rules":
        return None
    candidates = [cfg.llm.model]
    if cfg.serve.served_model_name and cfg.llm.model == cfg.serve.served_model_name:
        candidates.append(cfg.serve.model)  # vLLM serves serve.model under that name
    for name in candidates:
        if _has_local_tokenizer(name):
            return name
    return None


def _has_local_tokenizer(name: str) -> bool:
    """Whether `name` is a local directory with tokenizer files, or a Hugging Face name whose
    tokenizer is in the local HF cache (no network either way)."""
    if not name:
        return False
    path = Path(name).expanduser()
    if path.is_dir():
        return any((path / f).is_file() for f in _TOKENIZER_FILES)
    if name.count("/") > 1 or name.startswith((".", "/", "~")):
        return False  # a path that is not there, not a repo id
    try:
        from huggingface_hub import try_to_load_from_cache

        return any(isinstance(try_to_load_from_cache(name, f), str) for f in ("tokenizer.json", "tokenizer_config.json"))
    except Exception:  # not a valid repo id (e.g. a served name like "gpt-4.1-mini:latest"), no hub package
        return False


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------
def deep_merge(base: dict, overlay: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def nest_dotted(flat: dict[str, Any]) -> dict[str, Any]:
    """{"encoder.mode": "eager"} -> {"encoder": {"mode": "eager"}} (values already parsed)."""
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def parse_dotted(assignments: list[str]) -> dict[str, Any]:
    """["llm.backend=openai", "encoder.mode=eager"] -> nested dict; values parsed as YAML."""
    flat: dict[str, Any] = {}
    for item in assignments:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form section.key=value")
        dotted, raw = item.split("=", 1)
        flat[dotted] = yaml.safe_load(raw)
    return nest_dotted(flat)


def read_yaml_mapping(p: Path, kind: str) -> dict[str, Any]:
    """A YAML file's top-level mapping, or one ConfigError sentence naming the file."""
    if not p.exists():
        raise ConfigError(f"{kind} {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{kind} {p} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{kind} {p} must hold a mapping at the top level")
    return data


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> LycheeConfig:
    data: dict[str, Any] = {}
    if path is not None:
        data = read_yaml_mapping(Path(path), "config file")
    if overrides:
        data = deep_merge(data, parse_dotted(overrides))
    try:
        return LycheeConfig.model_validate(data)
    except ValidationError as exc:
        where = f" in {path}" if path else ""
        raise ConfigError(f"invalid config{where}:\n{validation_errors(exc)}") from None
