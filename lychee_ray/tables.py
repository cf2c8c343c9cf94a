"""The store's tables, each declared once (how a declaration works: `table_model`). A column's
order, Arrow type, nullability, whether the LLM reply carries it, whether queries expose it and
what it holds are said here and nowhere else: the Parquet schemas, the row builder
(store/rows.py), every read back (`from_arrow`, by name), the LLM reply model (schemas.py), the
public API's column lists (query/memory.py) and docs/tables.md are derived from these classes.

Three of them are also the objects the pipeline carries: a reader makes `Turn`s and `Question`s,
the encoder makes `Record`s. A column a producer does not know yet (a turn's conversation_id,
segment and content hash; a record's stated_at and vector) defaults to None in memory and is
filled by the row builder; the annotation says what the store holds (`str`: NOT NULL there).
The others (`ConversationRow`, `SegmentRow`, `Node`, `RecordNode`, `RecordLink`, `BuildStats`, `ErrorRow`)
are rows the builder makes from a processed `schemas.Conversation`.

Adding a column: one line in its class, plus the code that produces its value and the code
that reads it.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import pyarrow as pa

from lychee_ray.table_model import DATE, TIMESTAMP, Row, Vector, column, markdown_reference

# 7: passages of long turns; record_links (supersedes / contradicts, append-only; validity derived
# in the views), build_stats.link_ids_dropped;
# 5: tables declared once (keys NOT NULL), questions.difficulty / rubric / evidence_roles; 4: turn content hashes, segment contexts (incremental
# ingest); 3: records.stated_at; 2: LongMemEval sessions renamed s1, s2, ... in date order
SCHEMA_VERSION = 7
# How a folder is recognised as a store: its manifest file and the format tag in it. Here, in the
# core, because the store writes them and the input listing (io, below store) must skip a store.
STORE_FORMAT = "lychee-ray-store"
MANIFEST = "manifest.json"

RecordType = Literal["fact", "preference", "event", "constraint", "procedure", "failure_pattern", "tool_affordance"]
RECORD_TYPES: tuple[str, ...] = RecordType.__args__
TimeGranularity = Literal["day", "week", "month", "year", "none"]
NodeKind = Literal["entity", "topic", "entity_topic", "time", "event_frame"]
NODE_KINDS: tuple[str, ...] = NodeKind.__args__
LinkKind = Literal["supersedes", "contradicts"]
LINK_KINDS: tuple[str, ...] = LinkKind.__args__
LinkSource = Literal["llm", "rules"]
ISO_IN_MEMORY = "ISO text in memory, "  # how a time column's doc begins


class ConversationRow(Row, table="conversations", key=("conversation_id",)):
    """One row per conversation read, whatever became of it."""

    conversation_id: str = column("the source's id, or `anon-<hash>` of its place and content")
    source: str = column("the reader that made it (locomo, longmemeval, beam, chat_jsonl, sharegpt, chatgpt, turns), or `error`")
    source_file: str = column("the file (or folder) it was read from")
    n_turns: int = column("turns as read (a duplicate copy's are counted here, not stored)")
    n_sessions: int = column("sessions among its turns")
    n_exchanges: int = column("exchanges (a turn and its reply) the segmenter saw")
    n_segments: int = column("segments encoded")
    n_records: int = column("memory records made")
    status: str = column("ok, degraded, pending, error, empty or duplicate")
    error: str | None = column("why it is not ok", default=None)
    turns_digest: str | None = column("hash over its turns' content hashes: a grown prefix is found by it", default=None, query=False)
    extended_at: dt.datetime | None = column("the last run that appended turns to it (UTC)", default=None, arrow=pa.timestamp("us", tz="UTC"))


class Turn(Row, table="turns", key=("conversation_id", "turn_id")):
    """One input turn: made by a reader, stored as one row."""

    conversation_id: str = column("its conversation", default=None)
    turn_id: str = column("the source's id (a LoCoMo dia_id, a BEAM message id) or a generated `s<session>:<k>`")
    turn_idx: int = column("0-based position in the conversation")
    exchange_idx: int | None = column("the exchange it belongs to", default=None, query=False)
    session_id: str = column("its session")
    source_session_id: str | None = column(
        "the source's own session id where the reader renamed it (audit only: LongMemEval's names tell where the answer is)",
        default=None, query=False)
    speaker: str = column("who said it")
    role: str = column("user, assistant, speaker_a, speaker_b, or the source's own role")
    text: str = column("what was said")
    timestamp: str | None = column(ISO_IN_MEMORY + "TIMESTAMP stored: when it was said (its session's date when the source has no turn time)",
                                   default=None, arrow=TIMESTAMP)
    has_answer: bool | None = column("LongMemEval's evidence flag", default=None, query=False)
    segment_id: str | None = column("the segment it was encoded in", default=None, query=False)
    content_hash: str = column("hash of its id, session, speaker, role, text and time: an edited turn changes it", default=None, query=False)
    embedding: Vector | None = column("its vector", default=None, query=False)


class Passage(Row, table="passages", key=("conversation_id", "turn_id", "passage_idx")):
    """A piece of a turn longer than the embedding model reads (ingest/passages.py), embedded on its
    own: a long turn is found by its best passage. Short turns have no rows here."""

    conversation_id: str = column("its conversation", default=None)
    turn_id: str = column("the turn it is a piece of")
    passage_idx: int = column("0-based position in the turn")
    char_start: int = column("where it starts in the turn's text")
    char_end: int = column("where it ends (exclusive)")
    embedding: Vector | None = column("its vector", default=None, query=False)


class SegmentRow(Row, table="segments", key=("conversation_id", "segment_id")):
    """One row per segment: the unit the encoder makes one LLM call for."""

    conversation_id: str = column("its conversation")
    segment_id: str = column("`seg-<k>`")
    segment_idx: int = column("0-based position")
    turn_ids: list[str] = column("its turns, in order")
    start_idx: int | None = column("turn_idx of its first turn")
    end_idx: int | None = column("turn_idx of its last turn")
    n_exchanges: int = column("exchanges in it")
    n_tokens: int = column("tokens of its turns, as the configured tokenizer counts")
    boundary_p: float = column("p_t of the exchange that closed it (1.0 for the last)")
    boundary_reason: str = column("threshold, token_cap, session, end, eager or window")
    context_json: str | None = column("the reference context rho after it: a grown conversation resumes from it", default=None, query=False)


class Record(Row, table="records", key=("conversation_id", "record_id")):
    """One memory record: made by the encoder (an LLM reply or the rules backend), stored as one row."""

    conversation_id: str = column("its conversation")
    record_id: str = column("stable hash of conversation, segment, position and text")
    segment_id: str = column("the segment it was encoded from")
    type: RecordType = column("fact, preference, event, constraint, procedure, failure_pattern or tool_affordance", llm=True)
    text: str = column("the memory, self-contained", llm=True, describe="self-contained statement: names instead of pronouns, absolute dates")
    entities: list[str] = column("who and what it is about", llm=True)
    topics: list[str] = column("what it is about", llm=True)
    time_start: str | None = column(ISO_IN_MEMORY + "DATE stored: when it happened, from ('2023-06' is its first day)", llm="time.start", arrow=DATE)
    time_end: str | None = column(ISO_IN_MEMORY + "DATE stored: ... to ('2023-06' is its last day)", llm="time.end", arrow=DATE)
    time_granularity: TimeGranularity = column("day, week, month, year or none", llm="time.granularity")
    time_expression: str | None = column("the words that said when", llm="time.expression")
    stated_at: str | None = column(ISO_IN_MEMORY + "DATE stored: the day it was said (its last source turn's)", default=None, arrow=DATE)
    source_turn_ids: list[str] = column("the turns it comes from", llm=True)
    backend: str = column("`rules` or the model that encoded it")
    degraded: bool = column("rules records standing in after an LLM failure", default=False)
    embedding: Vector | None = column("its vector", default=None, query=False)


class Node(Row, table="nodes", key=("conversation_id", "node_id")):
    """An evidence node derived from record metadata (ingest/evidence_nodes.py)."""

    conversation_id: str = column("its conversation", default=None)
    node_id: str = column("hash of conversation, kind and normalized name")
    kind: NodeKind = column("entity, topic, entity_topic, time or event_frame")
    name: str = column("its name as most often written")
    n_records: int | None = column("records linked to it", default=None)
    embedding: Vector | None = column("the vector of its name; NULL for time and event-frame nodes", default=None, query=False)


class RecordNode(Row, table="record_nodes", key=("conversation_id", "record_id", "node_id")):
    """An edge between a record and one of its evidence nodes."""

    conversation_id: str = column("its conversation")
    record_id: str = column("the record")
    node_id: str = column("the node")


class RecordLink(Row, table="record_links", key=("conversation_id", "record_id", "other_record_id", "kind")):
    """A later record's relation to an earlier one of its conversation: it replaces it (a value
    that changed) or contradicts it. Append-only: nothing stored is rewritten when facts change;
    a record's validity (valid_from, valid_until, superseded_by) is derived from these rows (the
    `record_validity` view, query/validity.py)."""

    conversation_id: str = column("its conversation", default=None)
    record_id: str = column("the later record")
    other_record_id: str = column("the earlier record it replaces or contradicts")
    kind: LinkKind = column("supersedes or contradicts")
    stated_at: str | None = column(ISO_IN_MEMORY + "DATE stored: the day the later record was said (its stated_at)", default=None, arrow=DATE)
    found_by: LinkSource = column("llm (the encode reply named it) or rules (the slot detector, rules/slots.py)")


class BuildStats(Row, table="build_stats", key=("conversation_id",)):
    """What building one conversation cost: the encoder fills the counts, the row builder the id
    and the stage seconds (from `Conversation.seconds`)."""

    conversation_id: str = column("its conversation", default=None)
    encode_units: int = column("segments (or exchanges, windows) encoded", default=0)
    llm_calls: int = column("requests sent, repairs included", default=0)
    llm_failures: int = column("calls that failed after retries and the repair", default=0)
    degraded_segments: int = column("segments that fell back to rules records", default=0)
    prompt_tokens: int = column("as the endpoint reported them", default=0)
    completion_tokens: int = column("as the endpoint reported them", default=0)
    cached_tokens: int = column("prompt tokens the server's prefix cache served", default=0)
    est_prompt_tokens: int = column("o200k count of the prompts an LLM encoder would get (rules backend: a cost estimate)", default=0)
    est_completion_tokens: int = column("o200k count of the replies an LLM encoder would give (rules backend)", default=0)
    link_ids_dropped: int = column("ids in the replies' supersedes / contradicts lists that were not offered to that call", default=0)
    embed_s: float = column("seconds in the embed stage", default=0.0)
    segment_s: float = column("seconds in the segment stage", default=0.0)
    encode_s: float = column("seconds in the encode stage", default=0.0)
    organize_s: float = column("seconds in the organize stage", default=0.0)
    wall_s: float = column("the stage seconds summed", default=0.0)
    backend: str | None = column("rules or openai", default=None)
    model: str | None = column("the encoding model", default=None)
    encode_mode: str | None = column("segment, eager or window", default=None)

    STAGE_SECONDS = ("embed", "segment", "encode", "organize")  # the `<stage>_s` columns


class Question(Row, table="questions", key=("conversation_id", "question_id")):
    """A benchmark question: made by a reader, stored as one row."""

    conversation_id: str = column("the conversation it asks about")
    question_id: str = column("the source's id, or one made from the conversation and position")
    question: str = column("the question")
    answer: str | None = column("the reference answer")
    category: str = column("by name: multi_hop, temporal, open_domain, single_hop, adversarial, a LongMemEval type, a BEAM ability")
    evidence_turn_ids: list[str] = column("the turns that hold its evidence")
    question_date: str | None = column(ISO_IN_MEMORY + "TIMESTAMP stored: when it is asked", default=None, arrow=TIMESTAMP)
    difficulty: str | None = column("the benchmark's difficulty label (BEAM: easy, medium, hard)", default=None)
    rubric: list[str] = column("the nuggets a rubric judge grades (BEAM)", factory=list)
    evidence_roles: list[str] = column("the role of each evidence id, parallel to evidence_turn_ids ('' when none; BEAM: "
                                       "original_info / updated_info, first_statement / second_statement, first_event / second_event)", factory=list)


class ErrorRow(Row, table="errors", key=()):
    """An input or processing problem: file, line and field, so nothing is silently lost."""

    conversation_id: str | None = column("the conversation it concerns", default=None)
    source_file: str | None = column("the file it was found in", default=None)
    line: int | None = column("the line (JSON Lines) or item (a JSON document)", default=None)
    field: str | None = column("the field, e.g. `turns[3].text`", default=None)
    kind: str = column("what went wrong, e.g. bad_json, missing_field, bad_timestamp, duplicate_id, llm_failure")
    message: str = column("one sentence naming file, line, conversation and field")


TABLES: dict[str, type[Row]] = {
    cls.TABLE: cls for cls in (ConversationRow, Turn, Passage, SegmentRow, Record, Node, RecordNode, RecordLink, BuildStats, Question, ErrorRow)
}
INGEST_TABLES: tuple[str, ...] = tuple(TABLES)
VECTOR_TABLES = {name: cls.KEY[-1] for name, cls in TABLES.items() if any(c.is_vector for c in cls.columns())}


def table_schemas(dim: int) -> dict[str, pa.Schema]:
    """Every table's Arrow schema at embedding width `dim`."""
    return {name: cls.arrow_schema(dim) for name, cls in TABLES.items()}


DOC_HEAD = """# Tables

Every table of a store, as `lychee_ray/tables.py` declares it: one folder of Parquet parts per
table under the store, and a DuckDB view of the same name (`Memory.open(...).store.con`).
`null`: whether the column may be NULL; `LLM reply`: where the encoder's reply carries it;
`queries`: whether `Memory.records()` / `Memory.turns()` return it.

Generated from the declarations; `tests/test_tables.py` fails when it is out of date, and
`python -c "from lychee_ray.tables import tables_doc; print(tables_doc(), end='')" > docs/tables.md`
regenerates it.

"""


def tables_doc() -> str:
    """docs/tables.md."""
    return DOC_HEAD + markdown_reference(TABLES.values())
