"""Stage 6a, retrieve: the channels (channels.py) per route, RRF fusion, optional rerank, and MMR
selection under a context token budget; and the two baselines on the same store and budget.

There is one engine: the question's conversation is loaded into memory once (conversation.py,
kept in an LRU per opened store) and every channel ranks over it with numpy. The math (RRF, MMR,
the budget) is fusion.py; this module gathers candidates and selects.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.llm.prompts import NO_MEMORIES, format_evidence
from lychee_ray.query.channels import (
    RouteQuery,
    WindowScope,
    channels_for,
    tables_read,
)
from lychee_ray.query.conversation import LoadedConversation, cache_for
from lychee_ray.query.evidence import CandidatePool, Evidence
from lychee_ray.query.focus import asks_for_many, focus_speaker, route_text, vector_text
from lychee_ray.query.fusion import budget_topk, mmr_select, rrf_fuse
from lychee_ray.query.validity_rank import ValidityUnit
from lychee_ray.schemas import QueryPlan, Route
from lychee_ray.tokens import count_tokens


@dataclass
class Retrieval:
    selected: list[Evidence]
    rankings: dict[str, list[str]] = field(default_factory=dict)
    fused: list[tuple[str, float]] = field(default_factory=list)
    candidates: dict[str, Evidence] = field(default_factory=dict)  # evidence of every fused key
    query_vector: np.ndarray | None = None  # the first route's, which selection's diversity reads
    records_allowed: np.ndarray | None = None  # what the plan's window filter lets in (None: any)

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


def _window(route: Route) -> tuple[str | None, str | None] | None:
    tw = route.time_window
    return (tw.start, tw.end) if tw and (tw.start or tw.end) else None


__all__ = ["BASELINES", "Retrieval", "Retriever", "baseline_turns", "entity_names", "route_text"]


class Retriever:
    """Runs the configured channels over one opened `Store`, one question at a time."""

    def __init__(self, store, cfg: RetrievalConfig, embed_fn, reranker=None, count_tokens=count_tokens):
        self.store = store
        self.cfg = cfg
        self.embed = embed_fn  # list[str] -> np.ndarray of unit vectors
        self.reranker = reranker
        self.count_tokens = count_tokens  # the served model's tokenizer when known, else o200k
        self.channels = channels_for(cfg)
        self._tables = tables_read(self.channels)
        self.validity = ValidityUnit(count_tokens, cfg.superseded_weight) if cfg.validity else None
        # the Store's own cache (shared with other Retrievers and baselines over the same Store)
        self.cache = cache_for(store, cfg.cache_mb * 2**20)

    def conversation(self, conversation_id: str) -> LoadedConversation:
        return self.cache.get(self.store, conversation_id)

    # ---- channels ---------------------------------------------------------------------------
    def channel_rankings(self, conversation_id: str, plan: QueryPlan, qvecs: np.ndarray) -> tuple[dict[str, list[str]], CandidatePool]:
        """One ranking of evidence keys per route x channel, named "r<route>:<channel>"."""
        conv = self.conversation(conversation_id)
        q = conv.check_queries(qvecs)
        # one matrix product per table, for every route at once
        sims = {name: getattr(conv, name).cosine(q) for name in self._tables}
        rankings: dict[str, list[str]] = {}
        pool = CandidatePool(conv, self.cfg.evidence_sources)
        speakers = conv.speakers
        for r_idx, (route, qv) in enumerate(zip(plan.routes, qvecs)):
            window = _window(route)
            scope = self._scope(conv, window) if window else None
            speaker = focus_speaker(route, speakers)
            said = WindowScope(*conv.said_by(speaker)) if speaker else None
            k, speaker_k = self._depths(route)
            query = RouteQuery(conv, route, qv, {t: s[r_idx] for t, s in sims.items()}, window, scope, k, speaker_k, said)
            for channel in self.channels:
                rankings[f"r{r_idx}:{channel.name}"] = channel.rank(query, pool)
        memo = conv.token_memo((self.count_tokens, self.cfg.evidence_sources))  # charges counted by earlier questions
        for e in pool.values():
            e.tokens = memo.get(e.memo_key, 0)
        return {name: r for name, r in rankings.items() if r}, pool

    def _depths(self, route: Route) -> tuple[int, int]:
        """How deep the channels rank for this route, and the speaker channels: at least
        `plural_ask_top_k` for a question asking for several things (focus.asks_for_many)."""
        k, speaker_k = self.cfg.top_k_per_channel, self.cfg.speaker_top_k
        if self.cfg.plural_ask_top_k and asks_for_many(route):
            return max(k, self.cfg.plural_ask_top_k), max(speaker_k, self.cfg.plural_ask_top_k)
        return k, speaker_k

    def _scope(self, conv: LoadedConversation, window: tuple[str | None, str | None]) -> WindowScope | None:
        """Under time_routes=filter, what a windowed route may return: the records in the window
        and the turns said in it. A window that holds nothing in this conversation (a misparsed
        date, a question about an unmentioned time) is ignored rather than emptying every channel."""
        if self.cfg.time_routes != "filter":
            return None
        records = np.zeros(conv.records.n, bool)
        records[conv.records_in_window(*window)] = True
        turns = conv.turn_mask(*window)
        if not records.any() and not turns.any():
            return None
        return WindowScope(records, turns)

    def records_allowed(self, conv: LoadedConversation, plan: QueryPlan) -> np.ndarray | None:
        """The records the plan's window scopes let in (the union over its routes), so that what
        the validity unit brings along obeys the same filter as the channels; None: any record
        (a route without a window, or time_routes=channel)."""
        masks = []
        for route in plan.routes:
            window = _window(route)
            scope = self._scope(conv, window) if window else None
            if scope is None:
                return None
            masks.append(scope.records)
        return np.logical_or.reduce(masks) if masks else None

    # ---- fusion and selection -----------------------------------------------------------------
    def query_texts(self, conversation_id: str, plan: QueryPlan, question: str) -> list[str]:
        """The texts of the routes' query vectors (`focus.vector_text`); the question when the
        plan has no route."""
        if not plan.routes:
            return [question]
        speakers = self.conversation(conversation_id).speakers
        return [vector_text(r, speakers, self.cfg.strip_speaker_names) for r in plan.routes]

    def retrieve(self, conversation_id: str, plan: QueryPlan, question: str, budget: int | None = None) -> Retrieval:
        budget = budget or self.cfg.context_token_budget
        qvecs = self.embed(self.query_texts(conversation_id, plan, question))
        if not plan.routes:
            plan = QueryPlan(routes=[Route(goal=question, search_terms=[], entities=[], topics=[], time_window=None)])
        rankings, pool = self.channel_rankings(conversation_id, plan, qvecs)
        fused = self.fuse(rankings)
        if self.reranker is not None and fused:
            fused = self.reranker.rerank(question, fused, pool)
        allowed = self.records_allowed(pool.conv, plan)
        if self.validity is not None:
            fused = self.validity.adjust(fused, pool, plan, allowed)
        result = Retrieval(selected=[], rankings=rankings, fused=fused, candidates=pool, query_vector=qvecs[0], records_allowed=allowed)
        result.selected = self.at_budget(result, budget)
        memo = pool.conv.token_memo((self.count_tokens, self.cfg.evidence_sources))
        memo.update((e.memo_key, e.tokens) for e in pool.values() if e.tokens)
        return result

    def fuse(self, rankings: dict[str, list[str]]) -> list[tuple[str, float]]:
        if not rankings:
            return []
        if self.cfg.fusion == "none":
            # ablation: a single channel's plain top-k (the first channel that returned anything)
            first = next(iter(rankings.values()))
            return [(key, 1.0 / (rank + 1)) for rank, key in enumerate(first)]
        return rrf_fuse(list(rankings.values()), self.cfg.rrf_kappa)

    def at_budget(self, result: Retrieval, budget: int) -> list[Evidence]:
        """What `retrieve` selects from `result`'s fused candidates under `budget`: selection and
        validity completion, exactly as the context is made (evaluate's recall curve reads it)."""
        selected = self.select(result.fused, result.candidates, result.query_vector, budget)
        if self.validity is not None:
            selected = self.validity.complete(selected, result.candidates, budget, result.records_allowed)
        return selected

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
            sources = source_matrix(items) if self.cfg.coverage_weight > 0 else None
            chosen = mmr_select(rel, emb, costs, budget, self.cfg.mmr_lambda, sources, self.cfg.coverage_weight)
        return [items[i] for i in chosen]


def source_matrix(items: list[Evidence]) -> np.ndarray:
    """[items, turns] booleans: which source turns each item cites (selection's coverage term)."""
    cols: dict[str, int] = {}
    pairs = [(i, cols.setdefault(t, len(cols))) for i, e in enumerate(items) for t in e.source_turn_ids]
    out = np.zeros((len(items), len(cols)), bool)
    if pairs:
        rows, idx = zip(*pairs)
        out[list(rows), list(idx)] = True
    return out


# --------------------------------------------------------------------------------------------
# Baselines: the same store, the same budget
# --------------------------------------------------------------------------------------------
BASELINES = ("naive_rag", "bm25")


def baseline_turns(store, kind: str, conversation_id: str, question: str, qvec: np.ndarray, budget: int, k: int = 200,
                   count=count_tokens, show_sources: bool = True) -> list[Evidence]:
    """naive_rag: top-k raw turns by vector; bm25: top-k raw turns by BM25; both cut to budget.
    Reads the Store's conversation cache (`cache_for`), shared with the retriever."""
    if kind not in BASELINES:
        raise ValueError(f"unknown baseline {kind}")
    conv = cache_for(store).get(store, conversation_id)
    if kind == "naive_rag":
        hits = conv.turns.top(conv.turns.cosine(conv.check_queries(qvec))[0], k)
    else:
        hits = conv.bm25(question, k)
    pool = CandidatePool(conv, show_sources)
    items = [pool[key] for key in pool.add_turns(hits)]
    for e in items:
        e.tokens = count(e.render())
    chosen = budget_topk(list(range(len(items))), np.array([e.tokens for e in items]), budget)
    return [items[i] for i in chosen]


def entity_names(store, conversation_id: str) -> list[str]:
    """The conversation's entity node names, most linked first (ties in stored order). Read from
    the conversation's own part (`Store.conversation_arrow`), so the planner's first question of
    a conversation costs the same on a store of any size."""
    nodes = store.conversation_arrow("nodes", conversation_id, ["name", "kind", "n_records"], in_stored_order=True)
    rows = [(name, n or 0) for name, kind, n in zip(*(nodes.column(c).to_pylist() for c in ("name", "kind", "n_records")))
            if kind == "entity"]
    return [name for name, _ in sorted(rows, key=lambda row: -row[1])]
