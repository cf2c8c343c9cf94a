"""`Memory`: the public API for agents over one memory store.

An agent (or any Python program) opens a store that `lychee-ray ingest` wrote and asks it
questions, one conversation at a time::

    with Memory.open("out/store") as memory:
        items = memory.search("chat-1", "Where did Ana move from?")
        reply = memory.answer("chat-1", "Where did Ana move from?")

It is the path `lychee-ray evaluate` measures, not a second one: both build the same
`QueryEngine` (query/engine.py) from the config: the same planner (rules, or the LLM under
`llm.backend: openai`), the same retriever with the same channels, RRF fusion, optional
cross-encoder rerank and MMR selection under a token budget, and the same answerer (extractive
under rules, one LLM call under openai). Evaluate runs those pieces as Ray stages over many
questions (`evaluate/stages.py`); `Memory` runs them in-process for one question at a time.
`lychee-ray query` is a thin printer over `Memory`. Retrieval runs in memory
(query/conversation.py): a conversation's first question loads its rows once (tens of ms),
later ones touch no SQL; `retrieval.cache_mb` bounds what stays loaded.

The API is synchronous on purpose: an agent loop calls it between its own steps, and a sync call
composes with any caller (plain scripts, threads, notebooks) without lending it an event loop.
The planner and answerer are async inside (they share the LLM client with evaluate), so each step
runs under `run_closing` with a fresh client (`QueryEngine.new_client`; `Planner`/`Answerer`
are a config and a client, built per step): the loop and its HTTP pool begin and end inside the call, and nothing leaks
between calls. Called from inside a running loop, a step runs on a helper thread instead. A
`Memory` holds one DuckDB connection (see `Store`): use it from one thread at a time, and open
one per thread otherwise. The store is opened once, at `Memory.open`; the embedding model and
the optional reranker load once, at the first search.

Every query is parameterized: user input (conversation ids, types, dates) is bound, never
formatted into SQL. An unknown conversation id is a one-sentence `StoreError`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

import pyarrow as pa
import pyarrow.compute as pc

from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.dates import parse_iso_date
from lychee_ray.llm.client import LLMClient, Usage, run_closing
from lychee_ray.llm.prompts import BENCHMARKS, EvidenceItem, ValidityNote
from lychee_ray.query.answer import Outcome
from lychee_ray.query.conversation import LoadedConversation, cache_for, drop_cache
from lychee_ray.query.engine import QueryEngine
from lychee_ray.query.errors import QueryError
from lychee_ray.query.evidence import Evidence
from lychee_ray.schemas import QueryPlan
from lychee_ray.store.manifest import StoreError
from lychee_ray.store.reader import Store, open_store, validity_select
from lychee_ray.tables import RECORD_TYPES, Record, Turn

# What `records()` and `turns()` return: the columns queries expose (`tables`), no embedding;
# records() adds what its links say (the record_validity view, store/reader.py).
RECORD_COLUMNS = tuple(Record.column_names(query=True))
VALIDITY_COLUMNS = ("valid_from", "valid_until", "superseded_by", "conflicts_with")
TURN_COLUMNS = tuple(Turn.column_names(query=True))


@dataclass(frozen=True)
class MemoryItem:
    """One piece of selected evidence: a memory record, or a raw turn no record covers."""

    text: str
    type: str | None  # record type (fact, event, ...); None for a raw turn
    time: str | None  # event time, "YYYY-MM-DD" or "start..end"; None when none was stated
    entities: tuple[str, ...]
    source_turn_ids: tuple[str, ...]
    score: float  # fused score (RRF, or the reranker's 1/(1+rank)) the selection ranked it by
    kind: str  # "record" | "turn"
    key: str  # record_id, or "turn:<turn_id>"
    said: str | None = None  # the day it was said (a record's stated_at, a turn's day)
    # what its record_links say (query/validity.py), whether or not retrieval.validity marks it:
    valid_from: str | None = None  # the day it was said: it holds from then
    valid_until: str | None = None  # the day a later record superseded it (None: it holds now, or that day is unknown)
    superseded_by: str | None = None  # that record's id (None: current)
    conflicts_with: tuple[str, ...] = ()  # ids of the records it contradicts or that contradict it
    note: ValidityNote | None = None  # how the answer prompt marks it (retrieval.validity)
    # the whole stored record (every column, its vector included); None for a raw turn
    record: Record | None = field(default=None, compare=False, repr=False)
    show_sources: bool = field(default=True, compare=False, repr=False)  # retrieval.evidence_sources

    def prompt_item(self) -> EvidenceItem:
        """This item as the answer prompt shows it (its source ids only under
        `retrieval.evidence_sources`)."""
        return EvidenceItem(self.text, self.type, self.time, self.said, self.source_turn_ids if self.show_sources else (), self.note)


@dataclass(frozen=True)
class HistoryEntry:
    """One value in the history of a fact: a record, when it held, and where it was said."""

    record_id: str
    text: str
    valid_from: str | None  # the day it was said
    valid_until: str | None  # the day a later record replaced it (None: current, or unknown)
    superseded_by: str | None
    conflicts_with: tuple[str, ...]
    source_turn_ids: tuple[str, ...]
    current: bool  # nothing superseded it


@dataclass
class Recall:
    """What one retrieval produced: the plan it followed and the selected items."""

    conversation_id: str
    question: str
    asked_at: str | None  # the question date used for planning: the conversation's last day
    plan: QueryPlan
    items: list[MemoryItem]
    usage: Usage = field(default_factory=Usage)  # of the plan call (zero under rules)
    errors: list[str] = field(default_factory=list)  # LLM failures; a fallback was used


@dataclass
class MemoryAnswer:
    """An answer with the evidence it was given and what producing it cost."""

    answer: str
    evidence: list[MemoryItem]
    plan: QueryPlan
    usage: Usage  # plan + answer calls, summed
    errors: list[str] = field(default_factory=list)  # non-empty: an LLM step fell back to rules
    asked_at: str | None = None


class Memory:
    """A read-only memory store, ready to search and answer. Build it with `Memory.open`."""

    def __init__(self, cfg: LycheeConfig, store: Store, embedder=None, reranker=None):
        self.cfg = cfg
        self._store = store
        self._engine = QueryEngine(cfg, store, embedder, reranker)
        self._known = store.conversation_ids()
        self._known_set = set(self._known)
        self._asked_at: dict[str, str | None] = {}
        self._benchmark: dict[str, str] = {}

    # ---- lifecycle ----------------------------------------------------------------------------
    @classmethod
    def open(cls, store_uri: str | Path, config: LycheeConfig | str | Path | None = None) -> Memory:
        """Open the store at `store_uri` (a local path or a URI).

        `config`: a `LycheeConfig`, the path of a YAML config, or None for the defaults (rules
        backend, the bundled MiniLM: offline, no LLM). The embedding settings must be the ones
        the store was built with; any mismatch or store problem is a one-sentence StoreError.
        The embedding model (and the reranker, when enabled) load once, at the first `search`
        or `answer`, so a wrong id or path fails in milliseconds, not after a model load.
        """
        cfg = _config(config)
        if cfg.llm.backend == "openai":
            cfg.llm.api_key("llm")  # no key: one sentence here, not at the first question
        store = open_store(str(store_uri), cfg)
        try:
            return cls(cfg, store)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        if self._store is not None:
            drop_cache(self._store)  # the in-memory conversations go with the store
            self._store.close()
            self._store = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def store(self) -> Store:
        if self._store is None:
            raise StoreError("this Memory is closed.")
        return self._store

    # ---- reads -----------------------------------------------------------------------------------
    def conversations(self) -> list[str]:
        """The ids of the conversations in the store, sorted."""
        return list(self._known)

    def search(self, conversation_id: str, query: str, budget_tokens: int | None = 1500,
               k: int | None = None) -> list[MemoryItem]:
        """The evidence the answer step would see for `query`, in selection order: planned,
        retrieved over every channel, fused, (reranked,) and MMR-selected within `budget_tokens`
        (None: `retrieval.context_token_budget`); the first `k` when `k` is given."""
        items = self.recall(conversation_id, query, budget_tokens).items
        return items if k is None else items[: max(0, k)]

    def recall(self, conversation_id: str, query: str, budget_tokens: int | None = None) -> Recall:
        """`search` with its context: the plan, the question date used and the plan's cost."""
        if not any(ch.isalnum() for ch in query or ""):
            # an empty or punctuation-only question matches nothing in particular: retrieval
            # would return whatever ranks first, which reads like an answer
            raise QueryError(f"the question {query!r} has no words to search for.")
        self._check(conversation_id)
        asked_at = self._question_date(conversation_id)
        engine = self._engine
        client = engine.new_client()
        tag = f"memory/{conversation_id}"
        out: Outcome = _run_sync(engine.planner(client).plan(query, asked_at, engine.known_entities(conversation_id), tag), client)
        retrieval = engine.retriever.retrieve(conversation_id, out.value, query, budget=budget_tokens)
        scores = dict(retrieval.fused)
        conv = engine.retriever.conversation(conversation_id)
        items = [_item(e, scores.get(e.key, 0.0), conv) for e in retrieval.selected]
        errors = [f"plan: {out.error}"] if out.error else []
        return Recall(conversation_id, query, asked_at, out.value, items, out.usage, errors)

    def answer(self, conversation_id: str, question: str, budget_tokens: int | None = None) -> MemoryAnswer:
        """Plan, retrieve and answer `question` (one LLM call each for plan and answer under
        `llm.backend: openai`; extractive under rules). An LLM failure never raises: the rules
        fallback answers and `errors` says what failed."""
        found = self.recall(conversation_id, question, budget_tokens)
        client = self._engine.new_client()
        answerer = self._engine.answerer(client)
        evidence = [item.prompt_item() for item in found.items]  # as evaluate's RetrieveStage
        tag = f"memory/{conversation_id}"
        out: Outcome = _run_sync(
            answerer.answer(self._benchmark_of(conversation_id), question, found.asked_at, evidence, tag), client
        )
        errors = found.errors + ([f"answer: {out.error}"] if out.error else [])
        return MemoryAnswer(
            answer=str(out.value or ""),
            evidence=found.items,
            plan=found.plan,
            usage=found.usage + out.usage,
            errors=errors,
            asked_at=found.asked_at,
        )

    def history(self, conversation_id: str, query: str) -> list[HistoryEntry]:
        """The values a fact took, oldest first: the first record `search(query)` selects that has
        links (else the first record it selects) and every record linked to it by supersession,
        with the records they conflict with; each with the days it held and its source turns.
        Empty when nothing is found."""
        items = [i for i in self.recall(conversation_id, query).items if i.kind == "record"]
        if not items:
            return []
        linked = [i for i in items if i.superseded_by or i.valid_until or i.conflicts_with or self._has_predecessor(conversation_id, i.key)]
        conv = self._engine.retriever.conversation(conversation_id)
        validity, pos = conv.validity, {rid: n for n, rid in enumerate(conv.records.ids)}
        chain = validity.chain(pos[(linked or items)[0].key])
        chain += [j for i in chain for j in validity.conflicts.get(i, []) if j not in chain]
        chain.sort(key=lambda j: (validity.valid_from[j] or "", conv.records.ids[j]))
        return [_history_entry(conv, j) for j in chain]

    def _has_predecessor(self, conversation_id: str, record_id: str) -> bool:
        conv = self._engine.retriever.conversation(conversation_id)
        i = conv.records.ids.index(record_id)
        return bool(conv.validity.predecessors.get(i))

    def records(self, conversation_id: str, type: str | None = None, since=None, until=None, current_only: bool = False) -> pa.Table:
        """The conversation's memory records (no embeddings) as an Arrow table, in segment order,
        with what their links say: valid_from, valid_until, superseded_by, conflicts_with.

        `type`: one record type (fact, preference, event, ...). `since` / `until`: dates (ISO
        strings, `date`s or `datetime`s; "2023-06" means its first day for `since` and its last
        for `until`) that keep the records in the window by retrieval's one rule: a record whose
        [time_start, time_end] overlaps it, or, when it states no time, one of whose source turns
        was said in it. `current_only`: only the records no later record superseded (those that
        hold now)."""
        self._check(conversation_id)
        return select_records(self.store, conversation_id, type=type, since=since, until=until, current_only=current_only)

    def turns(self, conversation_id: str, turn_ids: Sequence[str] | None = None) -> pa.Table:
        """The conversation's turns (no embeddings), in order; only `turn_ids` when given. The
        source of an item: `memory.turns(cid, item.source_turn_ids)`."""
        self._check(conversation_id)
        return select_turns(self.store, conversation_id, turn_ids)

    # ---- helpers ---------------------------------------------------------------------------------
    def _check(self, conversation_id: str) -> None:
        store = self.store  # a closed Memory says so
        if conversation_id not in self._known_set:
            raise StoreError(unknown_conversation(conversation_id, store.path, self._known))

    def _question_date(self, conversation_id: str) -> str | None:
        """Asked now, i.e. after the conversation: relative dates ("in June") resolve against
        the day of its last timestamped turn."""
        if conversation_id not in self._asked_at:
            stamps = self.store.conversation_arrow("turns", conversation_id, ["timestamp"]).column("timestamp")
            last = pc.max(stamps).as_py()
            self._asked_at[conversation_id] = last.date().isoformat() if last is not None else None
        return self._asked_at[conversation_id]

    def _benchmark_of(self, conversation_id: str) -> str:
        """The answer prompt evaluate would use: the conversation's source benchmark, else generic."""
        if conversation_id not in self._benchmark:
            sources = self.store.conversation_arrow("conversations", conversation_id, ["source"]).column("source").to_pylist()
            source = sources[0] if sources else None
            self._benchmark[conversation_id] = source if source in BENCHMARKS else "generic"
        return self._benchmark[conversation_id]


# --------------------------------------------------------------------------------------------
# Parameterized reads (module level so they can be tested without the known-id check)
# --------------------------------------------------------------------------------------------
def select_records(store: Store, conversation_id: str, type: str | None = None, since=None, until=None,
                   current_only: bool = False) -> pa.Table:
    if type is not None and type not in RECORD_TYPES:
        raise ValueError(f"type must be one of {', '.join(RECORD_TYPES)}; got {type!r}")
    start, end = _bound_date(since, "since", end=False), _bound_date(until, "until", end=True)
    if start is not None and end is not None and start > end:
        raise ValueError(f"since ({start}) is after until ({end})")
    windowed = start is not None or end is not None
    in_window: list[str] = []
    if windowed:  # the window rule of retrieval, over the conversation retrieval loads
        conv = cache_for(store).get(store, conversation_id)
        in_window = [conv.records.ids[i] for i in conv.records_in_window(start, end)]
    params = {"type": type, "windowed": windowed, "ids": in_window or [""], "current": bool(current_only)}
    columns = ", ".join([*(f'r."{c}"' for c in RECORD_COLUMNS), *(f'v."{c}"' for c in VALIDITY_COLUMNS)])

    def query(src: dict[str, str]) -> str:
        return f"""
        SELECT {columns} FROM {src["records"]} r
        JOIN ({validity_select(src["records"], src["record_links"])}) v
          ON v.conversation_id = r.conversation_id AND v.record_id = r.record_id
        WHERE r.conversation_id = $cid AND v.conversation_id = $cid
          AND ($type::VARCHAR IS NULL OR r.type = $type::VARCHAR)
          AND (NOT $windowed OR list_contains($ids, r.record_id))
          AND (NOT $current OR v.superseded_by IS NULL)
        ORDER BY r.segment_id, r.record_id
        """

    # The conversation's own parts, not the views over every part (store/reader.py says why).
    sources = {"records": [*RECORD_COLUMNS, "stated_at"], "record_links": ["record_id", "other_record_id", "kind", "stated_at"]}
    return store.conversation_query(conversation_id, sources, query, params)


def select_turns(store: Store, conversation_id: str, turn_ids: Sequence[str] | None = None) -> pa.Table:
    turns = store.conversation_arrow("turns", conversation_id, TURN_COLUMNS, order_by=["turn_idx"])
    if turn_ids is None:
        return turns
    return turns.filter(pc.is_in(turns.column("turn_id"), pa.array([str(t) for t in turn_ids], pa.string())))


def unknown_conversation(conversation_id: str, store_dir: str, known_ids: list[str]) -> str:
    shown = ", ".join(known_ids[:5]) + (", ..." if len(known_ids) > 5 else "")
    holds = f"it holds {len(known_ids)} conversations: {shown}" if known_ids else "it holds no conversations"
    return f"conversation {conversation_id!r} is not in the store at {store_dir} ({holds})."


def _bound_date(value, name: str, end: bool) -> dt.date | None:
    if value is None:
        return None
    d = parse_iso_date(value, end=end)
    if d is None:
        raise ValueError(f"{name} must be an ISO date (YYYY-MM-DD, YYYY-MM or YYYY), got {value!r}")
    return d


def _run_sync(coro, client: LLMClient | None):
    """Run one plan or answer step to completion on its own event loop, closing its client.
    Called from inside a running loop (a notebook, an async agent framework), where asyncio.run
    cannot nest, the step runs on a helper thread; the caller blocks as with any sync call."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run_closing(coro, client)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lychee-memory") as pool:
        return pool.submit(run_closing, coro, client).result()


def _config(config: LycheeConfig | str | Path | None) -> LycheeConfig:
    if config is None:
        return LycheeConfig()
    if isinstance(config, LycheeConfig):
        return config
    if isinstance(config, (str, Path)):
        return load_config(config)
    raise TypeError(f"config must be a LycheeConfig, a YAML path or None, got {type(config).__name__}")


def _item(e: Evidence, score: float, conv: LoadedConversation) -> MemoryItem:
    links = _link_fields(conv, conv.records.ids.index(e.key)) if e.kind == "record" else {}
    return MemoryItem(
        text=e.text,
        type=e.type,
        time=e.time,
        entities=tuple(e.entities),
        source_turn_ids=tuple(e.source_turn_ids),
        score=float(score),
        kind=e.kind,
        key=e.key,
        said=e.said,
        **links,
        note=e.note,
        record=e.row if e.kind == "record" else None,
        show_sources=e.show_sources,
    )


def _link_fields(conv: LoadedConversation, i: int) -> dict:
    v, ids = conv.validity, conv.records.ids
    return {
        "valid_from": v.valid_from[i],
        "valid_until": v.valid_until.get(i),
        "superseded_by": ids[v.superseded_by[i]] if i in v.superseded_by else None,
        "conflicts_with": tuple(ids[j] for j in v.conflicts.get(i, [])),
    }


def _history_entry(conv: LoadedConversation, i: int) -> HistoryEntry:
    links = _link_fields(conv, i)
    return HistoryEntry(record_id=conv.records.ids[i], text=conv.records.cols["text"][i], source_turn_ids=tuple(conv.records.cols["source_turn_ids"][i] or ()),
                        current=links["superseded_by"] is None, **links)
