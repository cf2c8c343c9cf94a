"""Retrieval on the rules path over the generated store (tests/support/generated.py), asked about
a conversation between friends with routes built from the generator's labels: each channel alone
returns only what it should (and only from the asked conversation), time routes keep to their
window, RRF fuses routes x channels with the configured kappa, and MMR selection stays within the
budget.

Expected sets are computed from the Parquet files with plain Python, not with the store's SQL."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.names import normalize_name
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.evidence import TURN_PREFIX
from lychee_ray.query.fusion import budget_topk, mmr_select
from lychee_ray.query.retrieve import Retriever, source_matrix
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import QueryPlan, Route, TimeWindow
from lychee_ray.store.reader import open_store
from lychee_ray.tokens import count_tokens

from .support.asked import MonthQuestion, chitchat_ids, month_question
from .support.generated import local_config



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
def tables(synth_store_dir):
    return Tables(synth_store_dir)


@pytest.fixture(scope="module")
def embedder(local_embedder):
    return local_embedder


@pytest.fixture(scope="module")
def store(synth_store):
    return synth_store


def retriever(store, embedder, *overrides: str) -> Retriever:
    return Retriever(store, local_config(*overrides).retrieval, embedder.encode)


def route(goal: str, entities=(), topics=(), window=None) -> Route:
    tw = TimeWindow(start=window[0], end=window[1]) if window else None
    return Route(goal=goal, search_terms=goal.lower().split(), entities=list(entities), topics=list(topics), time_window=tw)


@dataclass(frozen=True)
class Asked:
    """What the tests ask, all from the labels and the store: a conversation between friends, the
    day its questions are asked on (its last turn's), a month-windowed question about a dated
    event, the route of that event (its person and a topic of the records that cite its turn),
    another route (a single-hop question about the other speaker) and a broad question."""

    cid: str
    other: str  # another conversation of the store
    date: str
    month: MonthQuestion
    topic: str
    event: Route
    second: Route
    broad: str

    @property
    def speakers(self) -> list[str]:
        return list(self.month.speakers)


@pytest.fixture(scope="module")
def asked(generated_locomo, tables) -> Asked:
    cid = chitchat_ids(generated_locomo)[0]
    month = month_question(generated_locomo, cid)
    date = max(day for (c, _), day in tables.turn_day.items() if c == cid).isoformat()
    citing = {r["record_id"] for r in tables.records if r["conversation_id"] == cid and month.evidence_turn_id in r["source_turn_ids"]}
    linked = {e["node_id"] for e in tables.edges if e["conversation_id"] == cid and e["record_id"] in citing}
    # a topic of the event's records, one the question names first ("driving test"), then the most linked
    topics = sorted((n for n in tables.nodes if n["node_id"] in linked and n["kind"] == "topic"),
                    key=lambda n: (n["name"].lower() not in month.bare.lower(), -n["n_records"], n["name"]))
    assert topics, f"no topic node links a record of {month.evidence_turn_id}"
    topic = topics[0]["name"]
    (other_speaker,) = set(month.speakers) - {month.subject}
    single = next(q["question"] for q in generated_locomo.asked("single_hop", cid) if other_speaker in q["question"])
    other = next(c for c in generated_locomo.conversation_ids() if c != cid)
    return Asked(cid, other, date, month, topic, route(month.bare, entities=[month.subject], topics=[topic]),
                 route(single, entities=[other_speaker], window=(month.start, month.end)),
                 f"What did {month.subject} do with friends and family, and where?")


def only(channel: str) -> str:
    return f'retrieval.channels=["{channel}"]'


# ---------------------------------------------------------------------------- channel isolation
def test_record_vector_channel_is_that_conversations_nearest_records(store, embedder, tables, asked):
    r = retriever(store, embedder, only("record_vector"), "retrieval.top_k_per_channel=20")
    qv = embedder.encode([asked.event.goal])
    rankings, pool = r.channel_rankings(asked.cid, QueryPlan(routes=[asked.event]), qv)
    assert list(rankings) == ["r0:record_vector"]
    keys = rankings["r0:record_vector"]
    mine = [x for x in tables.records if x["conversation_id"] == asked.cid]
    sims = np.array([x["embedding"] for x in mine]) @ qv[0]
    want = [mine[i]["record_id"] for i in np.argsort(-sims)[:20]]
    assert set(keys) == set(want)  # the nearest 20 of the asked conversation, none of another
    assert all(pool[k].kind == "record" for k in keys)


def test_node_channel_returns_only_records_linked_to_matched_nodes(store, embedder, tables, asked):
    r = retriever(store, embedder, only("node"))
    qv = embedder.encode([asked.event.goal])
    rankings, _ = r.channel_rankings(asked.cid, QueryPlan(routes=[asked.event]), qv)
    keys = rankings["r0:node"]
    names = {normalize_name(n) for n in [asked.month.subject, asked.topic]}
    named = [n for n in tables.nodes if n["conversation_id"] == asked.cid and normalize_name(n["name"]) in names]
    assert {n["name"] for n in named} == {asked.month.subject, asked.topic}
    nearest = tables.nearest("nodes", asked.cid, qv[0], r.cfg.max_node_matches)
    matched = {n["node_id"] for n in named} | set(nearest)
    linked = {e["record_id"] for e in tables.edges if e["conversation_id"] == asked.cid and e["node_id"] in matched}
    assert keys and set(keys) <= linked and set(keys) <= tables.record_ids[asked.cid]
    assert len(keys) == min(r.cfg.top_k_per_channel, len(linked))


def test_time_channel_returns_only_records_inside_the_window(store, embedder, tables, asked):
    r = retriever(store, embedder, only("time"), "retrieval.top_k_per_channel=1000")
    month = route(asked.event.goal, window=(asked.month.start, asked.month.end))
    rankings, _ = r.channel_rankings(asked.cid, QueryPlan(routes=[month]), embedder.encode([month.goal]))
    keys = rankings["r0:time"]
    start, end = dt.date.fromisoformat(asked.month.start), dt.date.fromisoformat(asked.month.end)
    want = {rid for rid in tables.record_ids[asked.cid] if tables.in_window(rid, start, end)}
    assert want and set(keys) == want
    # no window, no time channel
    rankings, _ = r.channel_rankings(asked.cid, QueryPlan(routes=[asked.event]), embedder.encode([asked.event.goal]))
    assert rankings == {}


@pytest.fixture()
def uncovered(synth_store_dir, tables, asked, tmp_path):
    """A copy of the store where one turn of the asked conversation is cited by no record (the
    records citing it are removed, with their node links): the rules encoder keeps a record of
    every generated turn, as it does not of small talk. (store, its tables, the turn)."""
    turn = next(t for t in tables.turns if t["conversation_id"] == asked.cid and len(t["text"].split()) >= 5
                and t["turn_id"] != asked.month.evidence_turn_id)
    dropped = pa.array([r["record_id"] for r in tables.records
                        if r["conversation_id"] == asked.cid and turn["turn_id"] in r["source_turn_ids"]])
    assert len(dropped)
    copy = tmp_path / "store"
    shutil.copytree(synth_store_dir, copy)
    for table in ("records", "record_nodes"):  # the committed files, rewritten in place
        for part in (copy / table).glob("part-*.parquet"):
            data = pq.read_table(part)
            pq.write_table(data.filter(pc.invert(pc.is_in(data.column("record_id"), dropped))), part)
    with open_store(str(copy), local_config()) as s:
        yield s, Tables(copy), turn


def test_turn_channels_map_hits_to_citing_records_or_keep_the_raw_turn(uncovered, embedder, asked):
    store, tables, raw = uncovered
    r = retriever(store, embedder, only("turn"))
    assert (asked.cid, raw["turn_id"]) not in tables.cited
    # the turn no record cites, asked verbatim
    plan = QueryPlan(routes=[asked.event, route(raw["text"])])
    rankings, pool = r.channel_rankings(asked.cid, plan, embedder.encode([asked.event.goal, raw["text"]]))
    assert set(rankings) <= {"r0:turn_vector", "r0:turn_bm25", "r1:turn_vector", "r1:turn_bm25"}
    conv = LoadedConversation.load(store, asked.cid)
    for name, keys in rankings.items():
        qv = embedder.encode([plan.routes[int(name[1])].goal])[0]
        k = r.cfg.top_k_per_channel
        hits = set(tables.nearest("turns", asked.cid, qv, k)) if name.endswith("vector") else \
            {conv.turns.ids[i] for i in conv.bm25(" ".join(plan.routes[int(name[1])].search_terms), k)}
        for key in keys:
            if key.startswith(TURN_PREFIX):
                tid = key[len(TURN_PREFIX):]
                assert tid in hits and (asked.cid, tid) not in tables.cited, (name, key)
                assert pool[key].kind == "turn" and pool[key].source_turn_ids == [tid]
            else:
                assert key in tables.record_ids[asked.cid] and set(tables.record[key]["source_turn_ids"]) & hits, (name, key)
    assert TURN_PREFIX + raw["turn_id"] in rankings["r1:turn_vector"]
    assert pool[TURN_PREFIX + raw["turn_id"]].text.endswith(raw["text"])
    # and a hit on a cited turn is handed on as the records citing it
    assert any(not key.startswith(TURN_PREFIX) for keys in rankings.values() for key in keys)


@pytest.mark.parametrize("channel", ["record_vector", "node", "time", "turn"])
def test_no_channel_leaks_another_conversation(store, embedder, tables, asked, channel):
    """The same question (the names of the asked conversation, a window over every turn of the
    store) asked against another conversation."""
    r = retriever(store, embedder, only(channel))
    days = tables.turn_day.values()
    q = route(asked.event.goal, entities=asked.event.entities, topics=asked.event.topics,
              window=(min(days).isoformat(), max(days).isoformat()))
    rankings, pool = r.channel_rankings(asked.other, QueryPlan(routes=[q]), embedder.encode([q.goal]))
    assert rankings, channel
    other_turns = {t["turn_id"] for t in tables.turns if t["conversation_id"] == asked.other}
    for keys in rankings.values():
        for key in keys:
            if key.startswith(TURN_PREFIX):
                assert key[len(TURN_PREFIX):] in other_turns
            else:
                assert key in tables.record_ids[asked.other], (channel, key)


# ---------------------------------------------------------------------------- time routes
def test_time_routed_question_excludes_records_outside_its_window(store, embedder, tables, asked):
    question = asked.month.question
    plan = RulesPlanner().plan(question, asked.date, asked.speakers)
    assert plan.routes[0].time_window == TimeWindow(start=asked.month.start, end=asked.month.end)
    start, end = dt.date.fromisoformat(asked.month.start), dt.date.fromisoformat(asked.month.end)
    filtered = retriever(store, embedder).retrieve(asked.cid, plan, question, budget=4000)
    assert len(filtered.candidates) > 10
    for key, ev in filtered.candidates.items():  # every candidate of every channel, not just the pick
        if ev.kind == "record":
            assert tables.in_window(key, start, end), (key, ev.text, ev.time)
        else:
            assert start <= tables.turn_day[(asked.cid, ev.source_turn_ids[0])] <= end, key
    assert asked.month.evidence_turn_id in filtered.source_turn_ids  # the gold evidence (in the month) is still found
    # the same plan with the window as one channel among four lets other times in
    loose = retriever(store, embedder, "retrieval.time_routes=channel").retrieve(asked.cid, plan, question, budget=4000)
    outside = [k for k, ev in loose.candidates.items() if ev.kind == "record" and not tables.in_window(k, start, end)]
    assert outside


def test_a_window_holding_nothing_is_ignored_rather_than_emptying_every_channel(store, embedder, asked):
    plan = QueryPlan(routes=[route(asked.event.goal, entities=asked.event.entities, window=("1999-01-01", "1999-12-31"))])
    result = retriever(store, embedder).retrieve(asked.cid, plan, f"{asked.month.bare.removesuffix('?')} in 1999?")
    assert result.selected and "r0:record_vector" in result.rankings and "r0:time" not in result.rankings


# ---------------------------------------------------------------------------- fusion and selection
def test_rrf_fuses_every_route_and_channel_with_the_configured_kappa(store, embedder, asked):
    r = retriever(store, embedder, "retrieval.rrf_kappa=7")
    plan = QueryPlan(routes=[asked.event, asked.second])
    rankings, _ = r.channel_rankings(asked.cid, plan, embedder.encode([x.goal for x in plan.routes]))
    # both routes name one speaker, so the speaker channels rank too; only the second has a window;
    # two people talk, so the neighbor channel ranks
    channels = ("record_vector", "node", "turn_vector", "turn_bm25", "speaker_turn", "speaker_record", "neighbor")
    assert set(rankings) == {f"r{i}:{c}" for i in (0, 1) for c in channels} | {"r1:time"}
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
def test_mmr_selection_fills_but_never_exceeds_the_token_budget(store, embedder, asked, budget):
    plan = RulesPlanner().plan(asked.broad, asked.date, asked.speakers)
    # with the validity unit the budget still holds, but its completion may evict an item to
    # seat a successor and leave room unfilled (tests/test_links.py covers it)
    validated = retriever(store, embedder).retrieve(asked.cid, plan, asked.broad, budget=budget)
    assert validated.selected and validated.context_tokens <= budget
    r = retriever(store, embedder, "retrieval.validity=false")
    result = r.retrieve(asked.cid, plan, asked.broad, budget=budget)
    assert result.selected and result.context_tokens <= budget
    for ev in result.selected:
        assert ev.tokens == count_tokens(ev.render())  # its line, newline included
    left = budget - result.context_tokens
    chosen = {e.key for e in result.selected}
    assert all(result.candidates[k].tokens > left for k, _ in result.fused if k not in chosen)  # nothing more fits
    assert len(chosen) == len(result.selected)
    assert result.context_text.count("\n") == len(result.selected)
    assert count_tokens(result.context_text) == result.context_tokens  # charged = sent


def test_mmr_selection_is_mmr_over_the_fused_pool_and_changes_what_plain_top_k_takes(store, embedder, asked):
    """Wiring on a real store: the retriever's MMR pick is exactly `mmr_select` over the fused
    scores, the evidence embeddings and token costs it reports (the algorithm's own diversity
    guarantees are pinned on planted near-duplicates in tests/test_fusion.py), and lambda
    matters: the diverse pick is not the plain relevance-ordered top-k."""
    question = asked.broad
    plan = RulesPlanner().plan(question, asked.date, asked.speakers)
    # without the validity unit, which adds successors and partners after selection (its own tests)
    plain = retriever(store, embedder, "retrieval.mmr_lambda=1.0", "retrieval.validity=false").retrieve(asked.cid, plan, question, budget=600)
    mmr = retriever(store, embedder, "retrieval.mmr_lambda=0.5", "retrieval.validity=false").retrieve(asked.cid, plan, question, budget=600)

    items = [mmr.candidates[k] for k, _ in mmr.fused]
    rel = np.array([s for _, s in mmr.fused], dtype=np.float64)
    emb = np.stack([e.embedding for e in items])
    costs = np.array([e.tokens for e in items])
    # with the coverage term as configured (query/fusion.py; 0 would be plain MMR)
    weight = RetrievalConfig().coverage_weight
    want = [items[i].key for i in mmr_select(rel, emb, costs, 600, 0.5, source_matrix(items), weight)]
    assert [e.key for e in mmr.selected] == want
    assert [e.key for e in plain.selected] == [items[i].key for i in budget_topk(list(range(len(items))), costs, 600)]
    assert [e.key for e in mmr.selected] != [e.key for e in plain.selected]
    assert mmr.selected[0].key == plain.selected[0].key  # both start from the most relevant that fits


def test_cross_encoder_rerank_reorders_the_fused_head_by_its_own_scores(store, embedder, asked):
    """A real CrossEncoder (MiniLM weights with a fresh, seeded score head: no reranker weights
    ship offline); the expected order comes from calling the model directly."""
    import torch
    from sentence_transformers import CrossEncoder

    from lychee_ray.embedding import resolve_model_path
    from lychee_ray.query.rerank import CrossEncoderReranker

    torch.manual_seed(0)
    model = CrossEncoder(resolve_model_path("bundled:all-MiniLM-L6-v2"), num_labels=1)
    cfg = local_config("retrieval.rerank.top_n=10", "retrieval.validity=false").retrieval  # validity re-ranks after rerank
    reranker = CrossEncoderReranker(cfg.rerank, model=model)
    r = Retriever(store, cfg, embedder.encode, reranker)
    question = asked.broad
    plan = RulesPlanner().plan(question, asked.date, asked.speakers)
    result = r.retrieve(asked.cid, plan, question, budget=800)
    fused = r.fuse(r.channel_rankings(asked.cid, plan, embedder.encode(r.query_texts(asked.cid, plan, question)))[0])
    head = [k for k, _ in fused[:10]]
    scores = model.predict([(question, result.candidates[k].text) for k in head])
    want = [head[i] for i in sorted(range(10), key=lambda i: (-scores[i], i))]
    assert [k for k, _ in result.fused[:10]] == want
    assert [k for k, _ in result.fused[10:]] == [k for k, _ in fused[10:]]
    assert [s for _, s in result.fused] == sorted((s for _, s in result.fused), reverse=True)
    assert result.selected and result.context_tokens <= 800
