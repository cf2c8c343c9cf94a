"""Shared data shapes: the in-memory types every stage passes along, the LLM reply schemas
(pydantic, turned into JSON schema for structured output), and the Arrow schemas of the
Parquet tables in DESIGN.md.

Nothing here does I/O. Stages import these so that a record made by the `rules` backend and one
made by an LLM are the same type.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

SCHEMA_VERSION = 4  # 4: turn content hashes, segment contexts (incremental ingest); 3: records.stated_at; 2: LongMemEval sessions renamed s1, s2, ... in date order
# How a folder is recognised as a store: its manifest file and the format tag in it. Here, in the
# core, because the store writes them and the input listing (io, below store) must skip a store.
STORE_FORMAT = "lychee-ray-store"
MANIFEST = "manifest.json"

RECORD_TYPES = (
    "fact",
    "preference",
    "event",
    "constraint",
    "procedure",
    "failure_pattern",
    "tool_affordance",
)
RecordType = Literal[
    "fact", "preference", "event", "constraint", "procedure", "failure_pattern", "tool_affordance"
]
TimeGranularity = Literal["day", "week", "month", "year", "none"]
NODE_KINDS = ("entity", "topic", "entity_topic", "time", "event_frame")

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
@dataclass
class Turn:
    turn_id: str  # source id (LoCoMo dia_id) or a generated "s<session>:t<k>"
    turn_idx: int  # 0-based position in the conversation
    session_id: str
    speaker: str
    role: str  # "user" | "assistant" | "speaker_a" | "speaker_b" | free text from the source
    text: str
    timestamp: str | None = None  # ISO 8601 session/turn time, None when the source has none
    has_answer: bool | None = None  # LongMemEval evidence flag
    # The source's own session id where the reader replaced it (LongMemEval names its evidence
    # sessions answer_<hash>_<n>, its fillers sharegpt_/ultrachat_): kept for audit only; no
    # prompt, retrieval or turn id reads it, or the model would be told where the answer is.
    source_session_id: str | None = None


def turn_content_hash(turn: Turn) -> str:
    """What identifies a turn's content across runs: id, session, speaker, role, text and time.
    A later run compares these to tell a grown conversation (same prefix) from an edited one."""
    parts = (turn.turn_id, turn.session_id, turn.speaker, turn.role, turn.text, turn.timestamp or "")
    return hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def turns_digest(hashes: list[str]) -> str:
    """One hash over a conversation's turn hashes in order: equal digests, equal turns."""
    return hashlib.sha1(f"{len(hashes)}:{','.join(hashes)}".encode()).hexdigest()[:20]


@dataclass
class Question:
    conversation_id: str
    question_id: str
    question: str
    answer: str
    category: str  # by name: multi_hop, temporal, open_domain, single_hop, adversarial, or LME type
    evidence_turn_ids: list[str]
    question_date: str | None = None
    difficulty: str | None = None
    rubric: list[str] = field(default_factory=list)
    evidence_roles: list[str] = field(default_factory=list)


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


@dataclass
class MemoryRecord:
    record_id: str
    segment_id: str
    type: str
    text: str
    entities: list[str]
    topics: list[str]
    time_start: str | None
    time_end: str | None
    time_granularity: str
    time_expression: str | None
    source_turn_ids: list[str]
    backend: str  # "rules" | model name
    degraded: bool = False


@dataclass
class BuildStats:
    """What encoding one conversation cost: its `build_stats` row (stage seconds come from
    `Conversation.seconds`)."""

    encode_units: int = 0  # segments (or exchanges/windows) encoded
    llm_calls: int = 0
    llm_failures: int = 0
    degraded_segments: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    est_prompt_tokens: int = 0
    est_completion_tokens: int = 0
    wall_s: float = 0.0
    backend: str | None = None
    model: str | None = None
    encode_mode: str | None = None


@dataclass
class Conversation:
    """One conversation as it flows through the ingest pipeline."""

    conversation_id: str
    source: str  # locomo | longmemeval | chat_jsonl | turns
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
    segments: list[Segment] = field(default_factory=list)
    records: list[MemoryRecord] = field(default_factory=list)
    record_embeddings: object = None
    nodes: list[dict] = field(default_factory=list)
    node_embeddings: object = None
    record_nodes: list[tuple[str, str]] = field(default_factory=list)
    errors: list[dict] = field(default_factory=list)  # `errors` rows found on the way (reader, duplicates)
    n_input_turns: int | None = None  # turns as read, when `turns` was emptied (a duplicate copy)
    entity_aliases: dict[str, str] = field(default_factory=dict)  # encode -> organize: alias -> name
    stats: BuildStats = field(default_factory=BuildStats)
    seconds: dict[str, float] = field(default_factory=dict)  # per stage name
    # set when the store already holds a prefix of this conversation (incremental ingest): what
    # the earlier run stored (`lychee_ray.store.prior.PriorState`), reused by every stage
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


class EncodedRecord(_Strict):
    type: RecordType
    text: str = Field(description="self-contained statement: names instead of pronouns, absolute dates")
    entities: list[str]
    topics: list[str]
    # Nullable on the wire: most records carry no time, and four null fields cost ~18 output
    # tokens per record (~10% of a segment's build tokens, benchmarks/bench_encode.py). In
    # memory it is always a NormalizedTime, so no caller has to test for None.
    time: NormalizedTime | None = Field(description="when it happened; null when the turns say nothing about time")
    source_turn_ids: list[str]

    @field_validator("time", mode="after")
    @classmethod
    def _time_never_none(cls, value: NormalizedTime | None) -> NormalizedTime:
        return NO_TIME if value is None else value

    @field_serializer("time")
    def _empty_time_as_null(self, value: NormalizedTime) -> NormalizedTime | None:
        return None if value.is_empty else value


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


# --------------------------------------------------------------------------------------------
# Parquet tables (DESIGN.md "Tables")
# --------------------------------------------------------------------------------------------
def embedding_type(dim: int) -> pa.DataType:
    """FLOAT[d] in DuckDB is an Arrow fixed-size list of float32."""
    return pa.list_(pa.float32(), dim)


def table_schemas(dim: int) -> dict[str, pa.Schema]:
    emb = embedding_type(dim)
    strs = pa.list_(pa.string())
    return {
        "conversations": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("source", pa.string()),
                ("source_file", pa.string()),
                ("n_turns", pa.int64()),
                ("n_sessions", pa.int64()),
                ("n_exchanges", pa.int64()),
                ("n_segments", pa.int64()),
                ("n_records", pa.int64()),
                ("status", pa.string()),
                ("error", pa.string()),
                ("turns_digest", pa.string()),  # `turns_digest` of its turns: a grown prefix is found by it
                ("extended_at", pa.timestamp("us", tz="UTC")),  # last run that appended turns; null: never
            ]
        ),
        "turns": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("turn_id", pa.string()),
                ("turn_idx", pa.int64()),
                ("exchange_idx", pa.int64()),
                ("session_id", pa.string()),
                ("source_session_id", pa.string()),  # audit only (Turn.source_session_id)
                ("speaker", pa.string()),
                ("role", pa.string()),
                ("text", pa.string()),
                ("timestamp", pa.timestamp("s")),
                ("has_answer", pa.bool_()),
                ("segment_id", pa.string()),
                ("content_hash", pa.string()),  # `turn_content_hash`: an edited turn changes it
                ("embedding", emb),
            ]
        ),
        "segments": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("segment_id", pa.string()),
                ("segment_idx", pa.int64()),
                ("turn_ids", strs),
                ("start_idx", pa.int64()),
                ("end_idx", pa.int64()),
                ("n_exchanges", pa.int64()),
                ("n_tokens", pa.int64()),
                ("boundary_p", pa.float64()),
                ("boundary_reason", pa.string()),
                ("context_json", pa.string()),  # Segment.context_json: rho after this segment
            ]
        ),
        "records": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("record_id", pa.string()),
                ("segment_id", pa.string()),
                ("type", pa.string()),
                ("text", pa.string()),
                ("entities", strs),
                ("topics", strs),
                ("time_start", pa.date32()),
                ("time_end", pa.date32()),
                ("time_granularity", pa.string()),
                ("time_expression", pa.string()),
                ("stated_at", pa.date32()),  # the day it was said: its last source turn's date
                ("source_turn_ids", strs),
                ("backend", pa.string()),
                ("degraded", pa.bool_()),
                ("embedding", emb),
            ]
        ),
        "nodes": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("node_id", pa.string()),
                ("kind", pa.string()),
                ("name", pa.string()),
                ("n_records", pa.int64()),
                ("embedding", emb),
            ]
        ),
        "record_nodes": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("record_id", pa.string()),
                ("node_id", pa.string()),
            ]
        ),
        "build_stats": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("encode_units", pa.int64()),  # segments (or exchanges/windows) encoded
                ("llm_calls", pa.int64()),  # requests actually sent, repairs included
                ("llm_failures", pa.int64()),
                ("degraded_segments", pa.int64()),
                ("prompt_tokens", pa.int64()),
                ("completion_tokens", pa.int64()),
                ("cached_tokens", pa.int64()),
                # o200k count of the prompts/replies an LLM encoder would see, computed under
                # the rules backend with its own outputs as the carried context (cost estimate)
                ("est_prompt_tokens", pa.int64()),
                ("est_completion_tokens", pa.int64()),
                ("embed_s", pa.float64()),
                ("segment_s", pa.float64()),
                ("encode_s", pa.float64()),
                ("organize_s", pa.float64()),
                ("wall_s", pa.float64()),
                ("backend", pa.string()),
                ("model", pa.string()),
                ("encode_mode", pa.string()),
            ]
        ),
        "questions": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("question_id", pa.string()),
                ("question", pa.string()),
                ("answer", pa.string()),
                ("category", pa.string()),
                ("evidence_turn_ids", strs),
                ("question_date", pa.timestamp("s")),
                ("difficulty", pa.string()),
                ("rubric", strs),
                ("evidence_roles", strs),
            ]
        ),
        # Input problems that have no conversation row of their own (a broken JSONL line, a
        # duplicate id, a turn with no text): file, line and field, so nothing is silently lost.
        "errors": pa.schema(
            [
                ("conversation_id", pa.string()),
                ("source_file", pa.string()),
                ("line", pa.int64()),
                ("field", pa.string()),
                ("kind", pa.string()),
                ("message", pa.string()),
            ]
        ),
    }


INGEST_TABLES = (
    "conversations",
    "turns",
    "segments",
    "records",
    "nodes",
    "record_nodes",
    "build_stats",
    "questions",
    "errors",
)
