"""Stage 6a, retrieve: four deterministic channels per route, RRF fusion, optional rerank, and
MMR selection under a context token budget.

Channels (each a ranking of evidence keys within ONE conversation):
- record_vector: records nearest to the route's query vector;
- node: nodes matched by name (the route's entities/topics) or by vector, expanded to their
  records, ranked by similarity to the query;
- time: records whose normalized time (or source-turn time) overlaps the route's window;
- turn: raw turns by vector and by BM25. A turn hit maps to the records that cite it; a turn
  that no record covers is kept as raw evidence, so nothing said is unreachable.

Evidence keys are `record_id`s, or `turn:<turn_id>` for raw turns. The math (RRF, MMR, budget)
lives in `fusion.py`; this module only gathers candidates.

Two engines gather them, with the same rankings (tests/test_retrieve_cache.py compares them
question by question on the fixture store; benchmarks/compare_engines.py on all of LoCoMo dev,
where they part only at float32 cosine ties, which rounding orders): `cache` (the default,
`retrieval.engine`) loads a conversation once into memory and runs every channel as numpy
(`cache.py`: one matrix product per table for all routes); `store` runs each route x channel
as its own DuckDB query over Parquet (`Store`), kept as the reference the cache is checked
against and for one-off reads that should not hold memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lychee_ray.config import RetrievalConfig
from lychee_ray.llm.prompts import NO_MEMORIES, EvidenceItem, format_evidence
from lychee_ray.query.cache import Conversation, cache_for
from lychee_ray.query.fusion import budget_topk, mmr_select, rrf_fuse
from lychee_ray.schemas import QueryPlan, Route
from lychee_ray.tokens import count_tokens

TURN_PREFIX = "turn:"


@dataclass
class Evidence:
    key: str
    kind: str  # record | turn
    text: str
    type: str | None
    time: str | None
    source_turn_ids: list[str]
    embedding: np.ndarray
    tokens: int = 0  # of `render()`, the line the answer prompt gets: what the budget charges
    entities: list[str] = field(default_factory=list)
    said: str | None = None  # the day it was said: the record's stated_at, or the turn's day

    def prompt_item(self) -> EvidenceItem:
        return EvidenceItem(self.text, self.type, self.time, self.said, tuple(self.source_turn_ids))

    def render(self) -> str:
        return self.prompt_item().line()


@dataclass
class Retrieval:
    selected: list[Evidence]
    rankings: dict[str, list[str]] = field(default_factory=dict)
    fused: list[tuple[str, float]] = field(default_factory=list)
    # evidence of every fused key (the store engine also keeps rows a channel read but cut)
    candidates: dict[str, Evidence] = field(default_factory=dict)

    @property
    def context_text(self) -> str:
        """The answer prompt's context section, exactly as sent."""
        return format_evidence([e.prompt_item() for e in self.selected])

    @property
    def context_tokens(self) -> int:
        """Tokens of `context_text`: the items' charges add up to it exactly (see
        `EvidenceItem.line`); with nothing selected the section still says so."""
        return sum(e.tokens for e in self.selected) if self.selected else count_tokens(NO_MEMORIES)

    @property
    def source_turn_ids(self) -> list[str]:
        return list(dict.fromkeys(t for e in self.selected for t in e.source_turn_ids))


@dataclass
class WindowScope:
    """The records and turns a time-windowed route may return."""

    record_ids: set[str]
    turn_ids: set[str]


@dataclass
class MaskScope:
    """`WindowScope` for the cache engine: masks over the cached conversation's records and turns."""

    records: np.ndarray
    turns: np.ndarray


def _window(route: Route) -> tuple[str | None, str | None] | None:
    tw = route.time_window
    return (tw.start, tw.end) if tw and (tw.start or tw.end) else None


def route_text(route: Route) -> str:
    terms = " ".join(t for t in route.search_terms if t.lower() not in route.goal.lower())
    return f"{route.goal} {terms}".strip()


class Retriever:
    """Runs the channels over an open `Store` for one question at a time; `engine` (default
    `cfg.engine`) picks in-memory ("cache") or per-query DuckDB ("store") channels."""

    def __init__(self, store, cfg: RetrievalConfig, embed_fn, reranker=None, count_tokens=count_tokens,
                 engine: str | None = None):
        self.store = store
        self.cfg = cfg
        self.embed = embed_fn  # list[str] -> np.ndarray of unit vectors
        self.reranker = reranker
        self.count_tokens = count_tokens  # the served model's tokenizer when known, else o200k
        self.engine = engine or cfg.engine
        if self.engine not in ("cache", "store"):
            raise ValueError(f"engine must be 'cache' or 'store', got {self.engine!r}")
        # the Store's own cache (shared with other Retrievers and baselines over the same Store)
        self.cache = cache_for(store, cfg.cache_mb * 2**20) if self.engine == "cache" else None

    # ---- channels ---------------------------------------------------------------------------
    def channel_rankings(self, conversation_id: str, plan: QueryPlan, qvecs: np.ndarray) -> tuple[dict[str, list[str]], dict[str, Evidence]]:
        """One ranking of evidence keys per route x channel, named "r<route>:<channel>"."""
        if self.cache is not None:
            return self._cached_rankings(conversation_id, plan, qvecs)
        return self._store_rankings(conversation_id, plan, qvecs)

    def _store_rankings(self, conversation_id: str, plan: QueryPlan, qvecs: np.ndarray) -> tuple[dict[str, list[str]], dict[str, Evidence]]:
        k = self.cfg.top_k_per_channel
        rankings: dict[str, list[str]] = {}
        pool: dict[str, Evidence] = {}
        for r_idx, (route, qv) in enumerate(zip(plan.routes, qvecs)):
            tag = f"r{r_idx}"
            window = _window(route)
            scope = self._window_scope(conversation_id, window) if window else None
            if "record_vector" in self.cfg.channels:
                where = {"record_id": sorted(scope.record_ids)} if scope else None
                rows = self.store.vector_topk("records", conversation_id, qv, k, where=where)
                rankings[f"{tag}:record_vector"] = self._add_records(rows, pool)
            if "node" in self.cfg.channels:
                rankings[f"{tag}:node"] = self._node_channel(conversation_id, route, qv, pool, k, scope)
            if "time" in self.cfg.channels and window:
                rows = self.store.records_in_window(conversation_id, *window)
                rankings[f"{tag}:time"] = self._rank_by_vector(self._add_records(rows, pool), pool, qv)[:k]
            if "turn" in self.cfg.channels:
                where = {"turn_id": sorted(scope.turn_ids)} if scope else None
                vec_turns = self.store.vector_topk("turns", conversation_id, qv, k, where=where)
                bm25_turns = self.store.bm25_topk("turns", conversation_id, route_text(route), k if scope is None else 10**6)
                if scope:
                    bm25_turns = [t for t in bm25_turns if t["turn_id"] in scope.turn_ids][:k]
                rankings[f"{tag}:turn_vector"] = self._map_turns(conversation_id, vec_turns, pool, scope)
                rankings[f"{tag}:turn_bm25"] = self._map_turns(conversation_id, bm25_turns, pool, scope)
        return {name: r for name, r in rankings.items() if r}, pool

    def _window_scope(self, conversation_id: str, window: tuple[str | None, str | None]) -> "WindowScope | None":
        """Under time_routes=filter, what a windowed route may return: the records
        `records_in_window` gives and the turns said in the window. A window that holds nothing
        in this conversation (a misparsed date, a question about an unmentioned time) is
        ignored rather than emptying every channel."""
        if self.cfg.time_routes != "filter":
            return None
        record_ids = {r["record_id"] for r in self.store.records_in_window(conversation_id, *window)}
        turn_ids = {t["turn_id"] for t in self.store.turns_in_window(conversation_id, *window)}
        if not record_ids and not turn_ids:
            return None
        return WindowScope(record_ids, turn_ids)

    def _add_records(self, rows: list[dict], pool: dict[str, Evidence]) -> list[str]:
        keys = []
        for row in rows:
            key = row["record_id"]
            if key not in pool:
                pool[key] = _record_evidence(row)
            keys.append(key)
        return keys

    def _node_channel(self, conversation_id: str, route: Route, qv: np.ndarray, pool, k: int,
                      scope: "WindowScope | None" = None) -> list[str]:
        names = list(dict.fromkeys([*route.entities, *route.topics]))
        matched = self.store.match_nodes(conversation_id, names) if names else []
        by_vector = self.store.vector_topk("nodes", conversation_id, qv, self.cfg.max_node_matches)
        node_ids = list(dict.fromkeys([n["node_id"] for n in matched] + [n["node_id"] for n in by_vector]))
        node_ids = node_ids[: self.cfg.max_node_matches * 2]
        if not node_ids:
            return []
        rows = self.store.node_records(conversation_id, node_ids)
        if scope:
            rows = [r for r in rows if r["record_id"] in scope.record_ids]
        keys = self._add_records(rows, pool)
        return self._rank_by_vector(list(dict.fromkeys(keys)), pool, qv)[:k]

    def _map_turns(self, conversation_id: str, turn_rows: list[dict], pool,
                   scope: "WindowScope | None" = None) -> list[str]:
        """Turn hits -> the records citing them (in hit order); a turn no (in-scope) record
        cites stays as raw-turn evidence."""
        if not turn_rows:
            return []
        turn_ids = [t["turn_id"] for t in turn_rows]
        covering: dict[str, list[dict]] = {}
        for rec in self.store.records_for_turns(conversation_id, turn_ids):
            if scope and rec["record_id"] not in scope.record_ids:
                continue
            for tid in rec["source_turn_ids"]:
                covering.setdefault(tid, []).append(rec)
        keys: list[str] = []
        for t in turn_rows:
            recs = covering.get(t["turn_id"], [])
            if recs:
                keys.extend(self._add_records(recs, pool))
            else:
                key = TURN_PREFIX + t["turn_id"]
                pool.setdefault(key, _turn_evidence(t))
                keys.append(key)
        return list(dict.fromkeys(keys))

    # ---- the same channels over the cached conversation (cache.py) ---------------------------
    def _cached_rankings(self, conversation_id: str, plan: QueryPlan, qvecs: np.ndarray) -> tuple[dict[str, list[str]], dict[str, Evidence]]:
        """`_store_rankings` step for step, each store query replaced by its in-memory twin."""
        k, channels = self.cfg.top_k_per_channel, self.cfg.channels
        conv = self.cache.get(self.store, conversation_id)
        q = conv.check_queries(qvecs)
        # one matrix product per table, for every route at once
        sims = {name: rows.cosine(q) for name, rows, used in (
            ("records", conv.records, "record_vector" in channels),
            ("nodes", conv.nodes, "node" in channels),
            ("turns", conv.turns, "turn" in channels)) if used}
        rankings: dict[str, list[str]] = {}
        pool: dict[str, Evidence] = {}
        for r_idx, (route, qv) in enumerate(zip(plan.routes, qvecs)):
            tag = f"r{r_idx}"
            window = _window(route)
            scope = self._cached_scope(conv, window) if window else None
            if "record_vector" in channels:
                rows = conv.records.top(sims["records"][r_idx], k, scope.records if scope else None)
                rankings[f"{tag}:record_vector"] = _add_cached(conv, rows, pool)
            if "node" in channels:
                rankings[f"{tag}:node"] = self._cached_node_channel(conv, route, sims["nodes"][r_idx], qv, pool, k, scope)
            if "time" in channels and window:
                rankings[f"{tag}:time"] = _add_cached(conv, _rank_cached(conv, conv.records_in_window(*window), qv)[:k], pool)
            if "turn" in channels:
                vec_turns = conv.turns.top(sims["turns"][r_idx], k, scope.turns if scope else None)
                bm25_turns = conv.bm25(route_text(route), k if scope is None else 10**6)
                if scope:
                    bm25_turns = [t for t in bm25_turns if scope.turns[t]][:k]
                rankings[f"{tag}:turn_vector"] = _map_cached_turns(conv, vec_turns, pool, scope)
                rankings[f"{tag}:turn_bm25"] = _map_cached_turns(conv, bm25_turns, pool, scope)
        memo = conv.token_memo(self.count_tokens)  # charges counted by earlier questions
        for key, e in pool.items():
            e.tokens = memo.get(key, 0)
        return {name: r for name, r in rankings.items() if r}, pool

    def _cached_scope(self, conv: Conversation, window: tuple[str | None, str | None]) -> MaskScope | None:
        """`_window_scope` over the cached conversation."""
        if self.cfg.time_routes != "filter":
            return None
        records = np.zeros(conv.records.n, bool)
        records[conv.records_in_window(*window)] = True
        turns = conv.turn_mask(*window)
        if not records.any() and not turns.any():
            return None
        return MaskScope(records, turns)

    def _cached_node_channel(self, conv: Conversation, route: Route, node_sims: np.ndarray, qv: np.ndarray, pool,
                             k: int, scope: MaskScope | None) -> list[str]:
        names = list(dict.fromkeys([*route.entities, *route.topics]))
        matched = conv.match_nodes(names) if names else []
        by_vector = conv.nodes.top(node_sims, self.cfg.max_node_matches)
        ids = conv.nodes.ids
        node_ids = list(dict.fromkeys([ids[i] for i in matched] + [ids[i] for i in by_vector]))
        node_ids = node_ids[: self.cfg.max_node_matches * 2]
        if not node_ids:
            return []
        rows = conv.node_records(node_ids)
        if scope:
            rows = [i for i in rows if scope.records[i]]
        return _add_cached(conv, _rank_cached(conv, rows, qv)[:k], pool)

    @staticmethod
    def _rank_by_vector(keys: list[str], pool: dict[str, Evidence], qv: np.ndarray) -> list[str]:
        if not keys:
            return []
        sims = np.stack([pool[k].embedding for k in keys]) @ qv
        order = sorted(range(len(keys)), key=lambda i: (-sims[i], i))
        return [keys[i] for i in order]

    # ---- fusion and selection -----------------------------------------------------------------
    def retrieve(self, conversation_id: str, plan: QueryPlan, question: str, budget: int | None = None) -> Retrieval:
        budget = budget or self.cfg.context_token_budget
        qvecs = self.embed([route_text(r) for r in plan.routes] or [question])
        if not plan.routes:
            plan = QueryPlan(routes=[Route(goal=question, search_terms=[], entities=[], topics=[], time_window=None)])
        rankings, pool = self.channel_rankings(conversation_id, plan, qvecs)
        fused = self.fuse(rankings)
        if self.reranker is not None and fused:
            fused = self.reranker.rerank(question, fused, pool)
        result = Retrieval(selected=[], rankings=rankings, fused=fused, candidates=pool)
        result.selected = self.select(fused, pool, qvecs[0], budget)
        if self.cache is not None:
            memo = self.cache.get(self.store, conversation_id).token_memo(self.count_tokens)
            memo.update((k, e.tokens) for k, e in pool.items() if e.tokens)
        return result

    def fuse(self, rankings: dict[str, list[str]]) -> list[tuple[str, float]]:
        if not rankings:
            return []
        if self.cfg.fusion == "none":
            # ablation: a single channel's plain top-k (the first channel that returned anything)
            first = next(iter(rankings.values()))
            return [(key, 1.0 / (rank + 1)) for rank, key in enumerate(first)]
        return rrf_fuse(list(rankings.values()), self.cfg.rrf_kappa)

    def select(self, fused: list[tuple[str, float]], pool: dict[str, Evidence], qv: np.ndarray, budget: int) -> list[Evidence]:
        if not fused:
            return []
        items = [pool[k] for k, _ in fused]
        for e in items:
            if not e.tokens:
                e.tokens = self.count_tokens(e.render())
        costs = np.array([e.tokens for e in items])
        if self.cfg.fusion == "none" or self.cfg.mmr_lambda >= 1.0:
            chosen = budget_topk(list(range(len(items))), costs, budget)
        else:
            rel = np.array([s for _, s in fused], dtype=np.float64)
            emb = np.stack([e.embedding for e in items])
            chosen = mmr_select(rel, emb, costs, budget, self.cfg.mmr_lambda)
        return [items[i] for i in chosen]


def _add_cached(conv: Conversation, rows: list[int], pool: dict[str, Evidence]) -> list[str]:
    """`Retriever._add_records` for cached record positions."""
    keys = []
    for i in rows:
        key = conv.records.ids[i]
        if key not in pool:
            pool[key] = _record_evidence(conv.record_row(i))
        keys.append(key)
    return keys


def _rank_cached(conv: Conversation, rows: list[int], qv: np.ndarray) -> list[int]:
    """`Retriever._rank_by_vector` on cached record positions (unique), before any evidence is
    built: the same product over the same float32 vectors, so the same order; only the top
    ones then become evidence. A record without a vector (none today) ranks last."""
    if not rows:
        return []
    idx = np.asarray(rows, np.int64)
    pos = conv.records.vec_pos[idx]
    sims = np.full(len(idx), -np.inf, dtype=np.result_type(np.float32, qv))
    has = pos >= 0
    sims[has] = conv.records.matrix[pos[has]] @ qv
    return [rows[i] for i in sorted(range(len(rows)), key=lambda i: (-sims[i], i))]


def _map_cached_turns(conv: Conversation, turn_rows: list[int], pool: dict[str, Evidence],
                      scope: MaskScope | None) -> list[str]:
    """`Retriever._map_turns` for cached turn positions."""
    keys: list[str] = []
    for t in turn_rows:
        tid = conv.turns.ids[t]
        recs = [i for i in conv.covering(tid) if scope is None or scope.records[i]]
        if recs:
            keys.extend(_add_cached(conv, recs, pool))
        else:
            key = TURN_PREFIX + tid
            if key not in pool:
                pool[key] = _turn_evidence(conv.turn_row(t))
            keys.append(key)
    return list(dict.fromkeys(keys))


def _as_vec(value) -> np.ndarray:
    return np.asarray(value, dtype=np.float32)


def _record_evidence(row: dict) -> Evidence:
    time = row.get("time_start")
    if time is not None and row.get("time_end") not in (None, time):
        time = f"{time}..{row['time_end']}"
    return Evidence(
        key=row["record_id"],
        kind="record",
        text=row["text"],
        type=row.get("type"),
        time=str(time) if time is not None else None,
        source_turn_ids=list(row.get("source_turn_ids") or []),
        embedding=_as_vec(row["embedding"]),
        entities=list(row.get("entities") or []),
        said=_day(row.get("stated_at")),
    )


def _day(value) -> str | None:
    return str(value)[:10] if value is not None else None


def _turn_evidence(row: dict) -> Evidence:
    return Evidence(
        key=TURN_PREFIX + row["turn_id"],
        kind="turn",
        text=f"{row.get('speaker', '')}: {row['text']}",
        type=None,
        time=None,  # a turn has no event time of its own; the day it was said is `said`
        source_turn_ids=[row["turn_id"]],
        embedding=_as_vec(row["embedding"]),
        said=_day(row.get("timestamp")),
    )


# --------------------------------------------------------------------------------------------
# Baselines: the same store, the same budget
# --------------------------------------------------------------------------------------------
def baseline_turns(store, kind: str, conversation_id: str, question: str, qvec: np.ndarray, budget: int, k: int = 200,
                   count=count_tokens, engine: str = "cache") -> list[Evidence]:
    """naive_rag: top-k raw turns by vector; bm25: top-k raw turns by BM25; both cut to budget.
    engine "cache" reads the Store's conversation cache (`cache_for`), "store" queries DuckDB."""
    if kind not in ("naive_rag", "bm25"):
        raise ValueError(f"unknown baseline {kind}")
    if engine not in ("cache", "store"):
        raise ValueError(f"engine must be 'cache' or 'store', got {engine!r}")
    if engine == "cache":
        conv = cache_for(store).get(store, conversation_id)
        if kind == "naive_rag":
            hits = conv.turns.top(conv.turns.cosine(conv.check_queries(qvec))[0], k)
        else:
            hits = conv.bm25(question, k)
        rows = [conv.turn_row(i) for i in hits]
    elif kind == "naive_rag":
        rows = store.vector_topk("turns", conversation_id, qvec, k)
    else:
        rows = store.bm25_topk("turns", conversation_id, question, k)
    items = [_turn_evidence(r) for r in rows]
    for e in items:
        e.tokens = count(e.render())
    chosen = budget_topk(list(range(len(items))), np.array([e.tokens for e in items]), budget)
    return [items[i] for i in chosen]


def entity_names(store, conversation_id: str) -> list[str]:
    rows = store.con.execute(
        "select name from nodes where conversation_id = ? and kind = 'entity' order by n_records desc", [conversation_id]
    ).fetchall()
    return [r[0] for r in rows]
