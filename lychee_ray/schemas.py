"""The pipeline's in-memory shapes and the LLM reply schemas.

- `Conversation` and `Segment`: what one conversation is as it flows through ingest (the rows
  it becomes are declared in `lychee_ray.tables`, where `Turn`, `Question` and `Record` live:
  those three are both pipeline objects and table rows);
- the pydantic reply models of the four LLM calls (encode, plan, answer, judge), turned into JSON
  schemas for structured output by `lychee_ray.llm.schema`. The encoder's `EncodedRecord` is
  derived from the records table's declaration: the columns the reply carries, in their order.

Nothing here does I/O. Stages import these so that a record made by the `rules` backend and one
made by an LLM are the same type.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    create_model,
    field_serializer,
    field_validator,
)

from lychee_ray.table_model import Row
from lychee_ray.tables import BuildStats, Node, Passage, Question, Record, RecordLink, TimeGranularity, Turn

# LoCoMo's integer `category` -> name. This follows upstream snap-research/locomo
# task_eval/evaluation.py, which scores 1 with the multi-hop comma-split F1, 2-4 with plain F1
# and 5 with the "not mentioned" test, and gpt_utils.py, which adds the conversation-date hint
# to 2 (temporal). The questions agree: 1 = multi-hop, 2 = temporal, 3 = open-domain,
# 4 = single-hop, 5 = adversarial. The mem0 evaluation labels 1 = single-hop and 3 = multi-hop
# (mem0ai/mem0 issue #2609), so per-category numbers copied from mem0-derived tables swap
# those two rows. We store names, never numbers, so nobody has to remember which convention.
LOCOMO_CATEGORIES: dict[int, str] = {
    1: "multi_hop",
    2: "temporal",
    3: "open_domain",
    4: "single_hop",
    5: "adversarial",
}


# --------------------------------------------------------------------------------------------
# In-memory conversation state (plain dataclasses: cheap, picklable, no validation overhead)
# --------------------------------------------------------------------------------------------
def turn_content_hash(turn: Turn) -> str:
    """What identifies a turn's content across runs: id, session, speaker, role, text and time.
    A later run compares these to tell a grown conversation (same prefix) from an edited one."""
    parts = (turn.turn_id, turn.session_id, turn.speaker, turn.role, turn.text, turn.timestamp or "")
    return hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def turns_digest(hashes: list[str]) -> str:
    """One hash over a conversation's turn hashes in order: equal digests, equal turns."""
    return hashlib.sha1(f"{len(hashes)}:{','.join(hashes)}".encode()).hexdigest()[:20]


@dataclass
class Segment:
    segment_id: str
    segment_idx: int
    turn_idxs: list[int]  # indexes into Conversation.turns
    exchange_idxs: list[int]
    n_tokens: int
    boundary_p: float  # p_t of the exchange that closed this segment (1.0 for the last segment)
    boundary_reason: str  # "threshold" | "token_cap" | "session" | "end"
    # rho after this segment (d_k and the m newest records) as JSON, set by encode: a later run
    # that finds the conversation grown resumes the encoder from it instead of from scratch
    context_json: str | None = None


# The statuses whose stored conversations `lychee-ray ingest --redo` processes again.
REDO_STATUSES = ("error", "degraded", "pending")


@dataclass
class Conversation:
    """One conversation as it flows through the ingest pipeline."""

    conversation_id: str
    source: str  # the reader that made it (`tables.ConversationRow.source`)
    source_file: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)
    # ok | degraded (some segments are rules fallback records) | empty | error | duplicate |
    # pending (the LLM endpoint failed transiently: nothing but its conversations and errors rows
    # is committed, and the next run processes it whole)
    status: str = "ok"
    error: str | None = None
    # filled by later stages
    exchanges: list[list[int]] = field(default_factory=list)  # turn indexes per exchange
    turn_embeddings: object = None  # np.ndarray [n_turns, d] float32, L2-normalized
    passages: list[Passage] = field(default_factory=list)  # of the turns longer than the embedding model reads
    passage_embeddings: object = None  # np.ndarray [n_passages, d]
    segments: list[Segment] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    record_embeddings: object = None
    nodes: list[Node] = field(default_factory=list)
    node_embeddings: object = None
    record_nodes: list[tuple[str, str]] = field(default_factory=list)
    links: list[RecordLink] = field(default_factory=list)  # encode: later records superseding / contradicting earlier ones
    errors: list[dict] = field(default_factory=list)  # `errors` rows found on the way (reader, duplicates)
    n_input_turns: int | None = None  # turns as read, when `turns` was emptied (a duplicate copy)
    entity_aliases: dict[str, str] = field(default_factory=dict)  # encode -> organize: alias -> name
    stats: BuildStats = field(default_factory=BuildStats)
    seconds: dict[str, float] = field(default_factory=dict)  # per stage name
    # set when the store already holds a prefix of this conversation (incremental ingest): what
    # the earlier run stored (`lychee_ray.store.stored_state.StoredState`), reused by every stage
    prior: object = None
    extended_at: str | None = None  # ISO time of the run that appended turns to a stored prefix


# --------------------------------------------------------------------------------------------
# LLM reply schemas (encode, plan, answer, judge)
# --------------------------------------------------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class NormalizedTime(_Strict):
    # Frozen: NO_TIME below is one instance shared by every untimed record.
    model_config = ConfigDict(extra="forbid", frozen=True)

    start: str | None = Field(description="ISO date YYYY-MM-DD of the start, or null")
    end: str | None = Field(description="ISO date YYYY-MM-DD of the end, or null")
    granularity: TimeGranularity
    expression: str | None = Field(description="the original time expression, or null")

    @property
    def is_empty(self) -> bool:
        return self.start is None and self.end is None and self.expression is None and self.granularity == "none"


NO_TIME = NormalizedTime(start=None, end=None, granularity="none", expression=None)


class _RecordReply(_Strict):
    """What every encoded record does with its time: nullable on the wire (most records carry
    none, and four null fields cost ~18 output tokens per record, ~10% of a segment's build
    tokens: benchmarks/bench_encode.py), always a NormalizedTime in memory, so no caller tests
    for None."""

    @field_validator("time", mode="after", check_fields=False)
    @classmethod
    def _time_never_none(cls, value: NormalizedTime | None) -> NormalizedTime:
        return NO_TIME if value is None else value

    @field_serializer("time", check_fields=False)
    def _empty_time_as_null(self, value: NormalizedTime) -> NormalizedTime | None:
        return None if value.is_empty else value


# Objects inside a reply that carry several columns: "time.start" etc. of the records table.
_NESTED_REPLY_FIELDS: dict[str, tuple[Any, Any]] = {
    "time": (NormalizedTime | None, Field(description="when it happened; null when the turns say nothing about time")),
}


def reply_model(row: type[Row], name: str, base: type[BaseModel], extra: dict[str, tuple[Any, Any]] | None = None) -> type[BaseModel]:
    """The pydantic model of what the LLM returns for one row of `row`'s table: its columns
    declared `llm`, in column order, a dotted path grouped into its nested object; a column's
    `describe` is its description in the JSON schema the model sees. `extra`: reply-only fields
    after them (what the reply says that is not a column of the row)."""
    fields: dict[str, tuple[Any, Any]] = {}
    for col in row.llm_columns():
        head, _, sub = col.reply_path.partition(".")
        if sub:
            nested_type = _NESTED_REPLY_FIELDS[head][0].__args__[0]
            if sub not in nested_type.model_fields:
                raise TypeError(f"{row.TABLE}.{col.name}: the reply's {head!r} has no field {sub!r}")
            fields.setdefault(head, _NESTED_REPLY_FIELDS[head])
            continue
        py_type = col.py_type | None if col.nullable else col.py_type
        fields[head] = (py_type, Field(description=col.describe) if col.describe else ...)
    return create_model(name, __base__=base, **fields, **(extra or {}))


# Reply-only: the ids (as the reference context shows them, e.g. "m3") of earlier records this
# one replaces or contradicts; they become `record_links` rows (ingest/links.py). Empty by
# default, so the rules encoder and a stored context from before them need not say so.
LINK_REPLY_FIELDS: dict[str, tuple[Any, Any]] = {
    "supersedes": (list[str], Field(default_factory=list)),
    "contradicts": (list[str], Field(default_factory=list)),
}
EncodedRecord = reply_model(Record, "EncodedRecord", _RecordReply, LINK_REPLY_FIELDS)


class EntityState(_Strict):
    name: str
    aliases: list[str]
    referent: str = Field(description="who or what the name refers to")


class ResolutionState(_Strict):
    entities: list[EntityState]
    date_anchor: str | None = Field(description="ISO date the conversation is currently at")
    open_threads: list[str]


class EncodeOutput(_Strict):
    records: list[EncodedRecord]
    state: ResolutionState


class TimeWindow(_Strict):
    start: str | None
    end: str | None


class Route(_Strict):
    goal: str
    search_terms: list[str]
    entities: list[str]
    topics: list[str]
    time_window: TimeWindow | None


class QueryPlan(_Strict):
    routes: list[Route]


class AnswerOutput(_Strict):
    answer: str


class JudgeOutput(_Strict):
    label: Literal["CORRECT", "WRONG"]


class RubricGrade(_Strict):
    score: Literal[0, 0.5, 1]
