"""Retrieval on the rules path over a real store of the LoCoMo fixture: each channel alone returns only
what it should (and only from the asked conversation), time routes keep to their window, RRF
fuses routes x channels with the configured kappa, and MMR selection stays within the budget.

Expected sets are computed from the Parquet files with plain Python, not with the store's SQL."""

from __future__ import annotations

import datetime as dt
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from lychee_ray.names import normalize_name
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.evidence import TURN_PREFIX
from lychee_ray.query.fusion import budget_topk, mmr_select
from lychee_ray.query.retrieve import Retriever
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import QueryPlan, Route, TimeWindow
from lychee_ray.tokens import count_tokens

from .support.locomo_store import local_config

CID = "conv-26"
QUESTION_DATE = "2023-07-06"  # conv-26's last session in the fixture: the date questions are asked at


class Tables:
    """The store's tables read straight from Parquet, indexed for the checks."""

    def __init__(self, store_dir):
        read = lambda t: pq.read_table(os.path.join(store_dir, t)).to_pylist()  # noqa: E731
        self.records = read("records")
        self.turns = read("turns")
        self.edges = read("record_nodes")
        self.nodes = read("nodes")
        self.record_ids = {c: {r["record_id"] for r in self.records if r["conversation_id"] == c}
                           for c in {r["conversation_id"] for r in self.records}}
        self.record = {r["record_id"]: r for r in self.records}
        self.turn_day = {(t["conversation_id"], t["turn_id"]): t["timestamp"].date() for t in self.turns}
        self.cited = {(r["conversation_id"], tid) for r in self.records for tid in r["source_turn_ids"]}

    def nearest(self, table: str, cid: str, qv: np.ndarray, k: int) -> list[str]:
        """Ids of the k rows of `table` nearest to `qv` by cosine (rows without a vector skipped)."""
        id_col = {"nodes": "node_id", "turns": "turn_id"}[table]
        rows = [r for r in getattr(self, table) if r["conversation_id"] == cid and r["embedding"] is not None]
        mat = np.array([r["embedding"] for r in rows], dtype=np.float64)
        sims = mat @ qv / (np.linalg.norm(mat, axis=1) * np.linalg.norm(qv))
        return [rows[i][id_col] for i in np.argsort(-sims, kind="stable")[:k]]

    def in_window(self, rid: str, start: dt.date, end: dt.date) -> bool:
        """DESIGN: a record's [time_start, time_end] overlaps the window; an untimed record is in
        it when one of its source turns was said in it."""
        r = self.record[rid]
        t0, t1 = r["time_start"] or r["time_end"], r["time_end"] or r["time_start"]
        if t0 is not None:
            return t0 <= end and t1 >= start
        days = [self.turn_day[(r["conversation_id"], t)] for t in r["source_turn_ids"]]
        return any(start <= d <= end for d in days)


@pytest.fixture(scope="module")
def tables(locomo_dev_store):
    return Tables(locomo_dev_store)


@pytest.fixture(scope="module")
def embedder(local_embedder):
    return local_embedder


@pytest.fixture(scope="module")
def store(fixture_store):
    return fixture_store


def retriever(store, embedder, *overrides: str) -> Retriever:
    return Retriever(store, local_config(*overrides).retrieval, embedder.encode)


def route(goal: str, entities=(), topics=(), window=None) -> Route:
    tw = TimeWindow(start=window[0], end=window[1]) if window else None
    return Route(goal=goal, search_terms=goal.lower().split(), entities=list(entities), topics=list(topics), time_window=tw)


CAMPING = route("Melanie camping trip with her family", entities=["Melanie"], topics=["nature"])


def only(channel: str) -> str:
    return f'retrieval.channels=["{channel}"]'


# ---------------------------------------------------------------------------- channel isolation
def test_record_vector_channel_is_that_conversations_nearest_records(store, embedder, tables):
    r = retriever(store, embedder, only("record_vector"), "retrieval.top_k_per_channel=20")
    qv = embedder.encode([CAMPING.goal])
    rankings, pool = r.channel_rankings(CID, QueryPlan(routes=[CAMPING]), qv)
    assert list(rankings) == ["r0:record_vector"]
    keys = rankings["r0:record_vector"]
    mine = [x for x in tables.records if x["conversation_id"] == CID]
    sims = np.array([x["embedding"] for x in mine]) @ qv[0]
    want = [mine[i]["record_id"] for i in np.argsort(-sims)[:20]]
    assert set(keys) == set(want)  # the nearest 20 of conv-26, none of another conversation
    assert all(pool[k].kind == "record" for k in keys)


def test_node_channel_returns_only_records_linked_to_matched_nodes(store, embedder, tables):
    r = retriever(store, embedder, only("node"))
    qv = embedder.encode([CAMPING.goal])
    rankings, _ = r.channel_rankings(CID, QueryPlan(routes=[CAMPING]), qv)
    keys = rankings["r0:node"]
    asked = {normalize_name(n) for n in ["Melanie", "nature"]}
    named = [n for n in tables.nodes if n["conversation_id"] == CID and normalize_name(n["name"]) in asked]
    assert {n["name"] for n in named} == {"Melanie", "nature"}
    nearest = tables.nearest("nodes", CID, qv[0], r.cfg.max_node_matches)
    matched = {n["node_id"] for n in named} | set(nearest)
    linked = {e["record_id"] for e in tables.edges if e["conversation_id"] == CID and e["node_id"] in matched}
    assert keys and set(keys) <= linked and set(keys) <= tables.record_ids[CID]
    assert len(keys) == min(r.cfg.top_k_per_channel, len(linked))


def test_time_channel_returns_only_records_inside_the_window(store, embedder, tables):
    r = retriever(store, embedder, only("time"), "retrieval.top_k_per_channel=1000")
    june = route("Melanie camping", window=("2023-06-01", "2023-06-30"))
    rankings, _ = r.channel_rankings(CID, QueryPlan(routes=[june]), embedder.encode([june.goal]))
    keys = rankings["r0:time"]
    start, end = dt.date(2023, 6, 1), dt.date(2023, 6, 30)
    want = {rid for rid in tables.record_ids[CID] if tables.in_window(rid, start, end)}
    assert want and set(keys) == want
    # no window, no time channel
    rankings, _ = r.channel_rankings(CID, QueryPlan(routes=[CAMPING]), embedder.encode([CAMPING.goal]))
    assert rankings == {}


def test_turn_channels_map_hits_to_citing_records_or_keep_the_raw_turn(store, embedder, tables):
    r = retriever(store, embedder, only("turn"))
    # a turn that no record cites (small talk the rules encoder keeps no record of), asked verbatim
    uncovered = [t for t in tables.turns if (t["conversation_id"], t["turn_id"]) not in tables.cited
                 and t["conversation_id"] == CID and len(t["text"].split()) >= 5]
    assert uncovered
    raw = uncovered[0]
    plan = QueryPlan(routes=[CAMPING, route(raw["text"])])
    rankings, pool = r.channel_rankings(CID, plan, embedder.encode([CAMPING.goal, raw["text"]]))
    assert set(rankings) <= {"r0:turn_vector", "r0:turn_bm25", "r1:turn_vector", "r1:turn_bm25"}
    conv = LoadedConversation.load(store, CID)
    for name, keys in rankings.items():
        qv = embedder.encode([plan.routes[int(name[1])].goal])[0]
        k = r.cfg.top_k_per_channel
        hits = set(tables.nearest("turns", CID, qv, k)) if name.endswith("vector") else \
            {conv.turns.ids[i] for i in conv.bm25(" ".join(plan.routes[int(name[1])].search_terms), k)}
        for key in keys:
            if key.startswith(TURN_PREFIX):
                tid = key[len(TURN_PREFIX):]
                assert tid in hits and (CID, tid) not in tables.cited, (name, key)
                assert pool[key].kind == "turn" and pool[key].source_turn_ids == [tid]
            else:
                assert key in tables.record_ids[CID] and set(tables.record[key]["source_turn_ids"]) & hits, (name, key)
    assert TURN_PREFIX + raw["turn_id"] in rankings["r1:turn_vector"]
    assert pool[TURN_PREFIX + raw["turn_id"]].text.endswith(raw["text"])


@pytest.mark.parametrize("channel", ["record_vector", "node", "time", "turn"])
def test_no_channel_leaks_another_conversation(store, embedder, tables, channel):
    """The same question (the names and dates of conv-26) asked against conv-30."""
    r = retriever(store, embedder, only(channel))
    q = route("Melanie camping trip with her family", entities=["Melanie"], topics=["nature"],
              window=("2023-01-01", "2023-12-31"))
    rankings, pool = r.channel_rankings("conv-30", QueryPlan(routes=[q]), embedder.encode([q.goal]))
    assert rankings, channel
    conv30_turns = {t["turn_id"] for t in tables.turns if t["conversation_id"] == "conv-30"}
    for keys in rankings.values():
        for key in keys:
            if key.startswith(TURN_PREFIX):
                assert key[len(TURN_PREFIX):] in conv30_turns
            else:
                assert key in tables.record_ids["conv-30"], (channel, key)


# ---------------------------------------------------------------------------- time routes
def test_time_routed_question_excludes_records_outside_its_window(store, embedder, tables):
    question = "When did Melanie go camping in June?"
    plan = RulesPlanner().plan(question, QUESTION_DATE, ["Melanie", "Caroline"])
    assert plan.routes[0].time_window == TimeWindow(start="2023-06-01", end="2023-06-30")
    start, end = dt.date(2023, 6, 1), dt.date(2023, 6, 30)
    filtered = retriever(store, embedder).retrieve(CID, plan, question, budget=4000)
    assert len(filtered.candidates) > 10
    for key, ev in filtered.candidates.items():  # every candidate of every channel, not just the pick
        if ev.kind == "record":
            assert tables.in_window(key, start, end), (key, ev.text, ev.time)
        else:
            assert start <= tables.turn_day[(CID, ev.source_turn_ids[0])] <= end, key
    assert "D4:8" in filtered.source_turn_ids  # the gold evidence (in June) is still found
    # the same plan with the window as one channel among four lets other times in
    loose = retriever(store, embedder, "retrieval.time_routes=channel").retrieve(CID, plan, question, budget=4000)
    outside = [k for k, ev in loose.candidates.items() if ev.kind == "record" and not tables.in_window(k, start, end)]
    assert outside


def test_a_window_holding_nothing_is_ignored_rather_than_emptying_every_channel(store, embedder):
    plan = QueryPlan(routes=[route("Melanie camping", entities=["Melanie"], window=("1999-01-01", "1999-12-31"))])
    result = retriever(store, embedder).retrieve(CID, plan, "Melanie camping in 1999?")
    assert result.selected and "r0:record_vector" in result.rankings and "r0:time" not in result.rankings


# ---------------------------------------------------------------------------- fusion and selection
def test_rrf_fuses_every_route_and_channel_with_the_configured_kappa(store, embedder):
    r = retriever(store, embedder, "retrieval.rrf_kappa=7")
    plan = QueryPlan(routes=[CAMPING, route("Caroline adoption agencies", entities=["Caroline"], window=("2023-06-01", "2023-06-30"))])
    rankings, _ = r.channel_rankings(CID, plan, embedder.encode([x.goal for x in plan.routes]))
    assert set(rankings) == {f"r{i}:{c}" for i in (0, 1) for c in ("record_vector", "node", "turn_vector", "turn_bm25")} | {"r1:time"}
    fused = r.fuse(rankings)
    want: dict[str, float] = {}
    for keys in rankings.values():
        for rank, key in enumerate(dict.fromkeys(keys), start=1):
            want[key] = want.get(key, 0.0) + 1.0 / (7 + rank)
    assert dict(fused) == pytest.approx(want, rel=1e-12)
    assert [s for _, s in fused] == sorted((s for _, s in fused), reverse=True)
    top, score = fused[0]
    assert sum(1 for keys in rankings.values() if top in keys) >= 2  # agreement across lists wins
    assert dict(retriever(store, embedder).fuse(rankings))[top] != pytest.approx(score)  # kappa 60 differs


@pytest.mark.parametrize("budget", [120, 500, 1500])
def test_mmr_selection_fills_but_never_exceeds_the_token_budget(store, embedder, budget):
    r = retriever(store, embedder)
    question = "What did Melanie and her family do on their camping trips?"
    plan = RulesPlanner().plan(question, QUESTION_DATE, ["Melanie", "Caroline"])
    result = r.retrieve(CID, plan, question, budget=budget)
    assert result.selected and result.context_tokens <= budget
    for ev in result.selected:
        assert ev.tokens == count_tokens(ev.render())  # its line, newline included
    left = budget - result.context_tokens
    chosen = {e.key for e in result.selected}
    assert all(result.candidates[k].tokens > left for k, _ in result.fused if k not in chosen)  # nothing more fits
    assert len(chosen) == len(result.selected)
    assert result.context_text.count("\n") == len(result.selected)
    assert count_tokens(result.context_text) == result.context_tokens  # charged = sent


def test_mmr_selection_is_mmr_over_the_fused_pool_and_changes_what_plain_top_k_takes(store, embedder):
    """Wiring on a real store: the retriever's MMR pick is exactly `mmr_select` over the fused
    scores, the evidence embeddings and token costs it reports (the algorithm's own diversity
    guarantees are pinned on planted near-duplicates in tests/test_fusion.py), and lambda
    matters: the diverse pick is not the plain relevance-ordered top-k."""
    question = "What did Melanie and her family do on their camping trips?"
    plan = RulesPlanner().plan(question, QUESTION_DATE, ["Melanie", "Caroline"])
    plain = retriever(store, embedder, "retrieval.mmr_lambda=1.0").retrieve(CID, plan, question, budget=600)
    mmr = retriever(store, embedder, "retrieval.mmr_lambda=0.5").retrieve(CID, plan, question, budget=600)

    items = [mmr.candidates[k] for k, _ in mmr.fused]
    rel = np.array([s for _, s in mmr.fused], dtype=np.float64)
    emb = np.stack([e.embedding for e in items])
    costs = np.array([e.tokens for e in items])
    want = [items[i].key for i in mmr_select(rel, emb, costs, 600, 0.5)]
    assert [e.key for e in mmr.selected] == want
    assert [e.key for e in plain.selected] == [items[i].key for i in budget_topk(list(range(len(items))), costs, 600)]
    assert [e.key for e in mmr.selected] != [e.key for e in plain.selected]
    assert mmr.selected[0].key == plain.selected[0].key  # both start from the most relevant that fits


def test_cross_encoder_rerank_reorders_the_fused_head_by_its_own_scores(store, embedder):
    """A real CrossEncoder (MiniLM weights with a fresh, seeded score head: no reranker weights
    ship offline); the expected order comes from calling the model directly."""
    import torch
    from sentence_transformers import CrossEncoder

    from lychee_ray.embedding import resolve_model_path
    from lychee_ray.query.rerank import CrossEncoderReranker

    torch.manual_seed(0)
    model = CrossEncoder(resolve_model_path("bundled:all-MiniLM-L6-v2"), num_labels=1)
    cfg = local_config("retrieval.rerank.top_n=10").retrieval
    reranker = CrossEncoderReranker(cfg.rerank, model=model)
    r = Retriever(store, cfg, embedder.encode, reranker)
    question = "What did Melanie and her family do on their camping trips?"
    plan = RulesPlanner().plan(question, QUESTION_DATE, ["Melanie", "Caroline"])
    result = r.retrieve(CID, plan, question, budget=800)
    fused = r.fuse(r.channel_rankings(CID, plan, embedder.encode([question]))[0])
    head = [k for k, _ in fused[:10]]
    scores = model.predict([(question, result.candidates[k].text) for k in head])
    want = [head[i] for i in sorted(range(10), key=lambda i: (-scores[i], i))]
    assert [k for k, _ in result.fused[:10]] == want
    assert [k for k, _ in result.fused[10:]] == [k for k, _ in fused[10:]]
    assert [s for _, s in result.fused] == sorted((s for _, s in result.fused), reverse=True)
    assert result.selected and result.context_tokens <= 800
