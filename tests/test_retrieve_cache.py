"""The in-memory retrieval engine (query/cache.py) against the DuckDB one, on a real store of the
LoCoMo fixture (rules backend, real MiniLM): question by question the same channel rankings, the
same fused scores and the same selected evidence; its lookups return what the store's queries
return; NULL vectors are skipped; the cache is bounded in bytes (LRU); a rewritten store is not
served stale.

The engines are compared for exact equality, ties included: vector ties order by id in both, and
the two cosine computations (DuckDB's `array_cosine_similarity`, numpy's float32 product) agree
on every fixture question. If a future store made them disagree, it would be on scores within
float32 rounding of each other; the failure message names the channel.
"""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lychee_ray import Memory
from lychee_ray.query.cache import Conversation, ConversationCache, cache_for
from lychee_ray.query.retrieve import Retriever, baseline_turns, route_text
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import INGEST_TABLES, QueryPlan, Route, TimeWindow
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter

from .support.locomo_store import local_config

CIDS = ("conv-26", "conv-30", "conv-41")
WINDOWS = [("2023-06-01", "2023-06-30"), ("2023-05-08", None), (None, "2023-05-31"), ("2023-07", "2023"),
           ("1999-01-01", "1999-12-31"), ("2023-05-25", "2023-05-25")]


@pytest.fixture(scope="module")
def embedder(local_embedder):
    return local_embedder


@pytest.fixture(scope="module")
def store(fixture_store):
    return fixture_store


@pytest.fixture(scope="module")
def asked(store):
    return questions(store)


@pytest.fixture(scope="module")
def embed(embedder, asked):
    """The real MiniLM vectors of every text the comparisons embed, encoded once in one batch
    (both engines get the same vectors; encoding per call would dominate the run)."""
    plans = asked + handmade_plans()
    texts = sorted({route_text(r) for _, _, plan in plans for r in plan.routes} | {q for _, q, _ in plans})
    vecs = dict(zip(texts, embedder.encode(texts)))
    return lambda batch: np.stack([vecs[t] if t in vecs else embedder.encode([t])[0] for t in batch])


def questions(store) -> list[tuple[str, str, QueryPlan]]:
    """(conversation, question, rules plan) for every question of the store."""
    rows = store.sql("SELECT conversation_id AS cid, question, CAST(question_date AS VARCHAR) AS qd "
                     "FROM questions ORDER BY question_id")
    names = {c: [r["name"] for r in store.sql(
        "SELECT name FROM nodes WHERE conversation_id = $c AND kind = 'entity' ORDER BY n_records DESC, name",
        {"c": c})] for c in store.conversation_ids()}
    planner = RulesPlanner()
    return [(r["cid"], r["question"], planner.plan(r["question"], r["qd"], names[r["cid"]])) for r in rows]


def handmade_plans() -> list[tuple[str, str, QueryPlan]]:
    """Windows open at either end, coarse, empty and one day wide; names in odd forms; two routes."""
    out = []
    for i, (start, end) in enumerate(WINDOWS):
        routes = [
            Route(goal="Melanie camping trip with her family", search_terms=["camping", "family"],
                  entities=["melanie's", "THE Caroline"], topics=["nature", "pottery"],
                  time_window=TimeWindow(start=start, end=end)),
            Route(goal="adoption agencies and support group", search_terms=["adoption"], entities=["Caroline"],
                  topics=["support-group"], time_window=None),
        ]
        out.append((CIDS[i % 3], routes[0].goal, QueryPlan(routes=routes)))
    return out


def same(a, b, where: str) -> None:
    """Two Retrievals: every channel ranking, the fused list and the selected evidence equal."""
    assert a.rankings.keys() == b.rankings.keys(), where
    for name in a.rankings:
        assert a.rankings[name] == b.rankings[name], f"{where}: channel {name}"
    assert a.fused == b.fused, where
    assert [e.key for e in a.selected] == [e.key for e in b.selected], where
    for x, y in zip(a.selected, b.selected):
        assert (x.kind, x.text, x.type, x.time, x.said, x.source_turn_ids, x.entities, x.tokens) == \
               (y.kind, y.text, y.type, y.time, y.said, y.source_turn_ids, y.entities, y.tokens), where
        assert np.array_equal(x.embedding, y.embedding), where
    assert a.context_text == b.context_text, where


@pytest.mark.parametrize("overrides, every", [
    ((), 1),  # every question of the store, and the handmade plans
    (("retrieval.time_routes=channel",), 3),
    (("retrieval.top_k_per_channel=5", "retrieval.max_node_matches=2", "retrieval.mmr_lambda=1.0"), 3),
    (('retrieval.channels=["turn"]', "retrieval.fusion=none"), 3),
], ids=["defaults", "time-channel", "small-k", "turn-only"])
def test_both_engines_rank_and_select_the_same_for_every_question(store, embed, asked, overrides, every):
    cfg = local_config(*overrides).retrieval
    old = Retriever(store, cfg, embed, engine="store")
    new = Retriever(store, cfg, embed, engine="cache")
    assert len(asked) > 100
    seen = {"routes>1": 0, "windowed": 0, "raw turns": 0}
    for cid, question, plan in asked[::every] + handmade_plans():
        a, b = old.retrieve(cid, plan, question), new.retrieve(cid, plan, question)
        same(a, b, f"{cid}: {question!r}")
        seen["routes>1"] += len(plan.routes) > 1
        seen["windowed"] += any(r.time_window for r in plan.routes)
        seen["raw turns"] += any(e.kind == "turn" for e in b.selected)
    assert all(seen.values()), seen  # the comparison went through every kind of path


def test_a_cached_conversation_is_retrieved_without_sql(store, embed, asked, monkeypatch):
    r = Retriever(store, local_config().retrieval, embed, engine="cache")
    cid, question, plan = next(x for x in asked if any(route.time_window for route in x[2].routes))
    want = r.retrieve(cid, plan, question)  # loads the conversation (if not yet cached)

    class NoSql:
        def __getattr__(self, name):
            raise AssertionError(f"DuckDB used on a warm question ({name})")

    monkeypatch.setattr(store, "_cur", NoSql())
    monkeypatch.setattr(store, "con", NoSql())
    same(want, r.retrieve(cid, plan, question), "warm")
    for kind in ("naive_rag", "bm25"):
        assert baseline_turns(store, kind, cid, question, embed([question])[0], 500)


def test_both_engines_give_the_same_baselines(store, embed, asked):
    for cid, question, _ in asked[::4]:
        qv = embed([question])[0]
        for kind in ("naive_rag", "bm25"):
            for budget in (250, 1500):
                old = baseline_turns(store, kind, cid, question, qv, budget, engine="store")
                new = baseline_turns(store, kind, cid, question, qv, budget, engine="cache")
                assert [(e.key, e.text, e.said, e.tokens) for e in old] == [(e.key, e.text, e.said, e.tokens) for e in new]


def test_each_lookup_returns_what_its_store_query_returns(store, embedder):
    q = embedder.encode(["Melanie camping trip with her family", "Caroline adoption"])
    for cid in CIDS:
        conv = Conversation.load(store, cid)
        for table, rows in (("records", conv.records), ("turns", conv.turns), ("nodes", conv.nodes)):
            sims = rows.cosine(q)
            for r in range(len(q)):
                for k in (1, 30, 10**6):
                    want = [x[f"{table[:-1]}_id"] for x in store.vector_topk(table, cid, q[r], k)]
                    assert [rows.ids[i] for i in rows.top(sims[r], k)] == want, (cid, table, k)
        for start, end in WINDOWS:
            assert [conv.records.ids[i] for i in conv.records_in_window(start, end)] == \
                   [x["record_id"] for x in store.records_in_window(cid, start, end)], (cid, start, end)
            mask = conv.turn_mask(start, end)
            assert {conv.turns.ids[i] for i in np.flatnonzero(mask)} == \
                   {x["turn_id"] for x in store.turns_in_window(cid, start, end)}, (cid, start, end)
        entity, topic = (store.sql("SELECT min(name) AS name FROM nodes WHERE conversation_id = $c AND kind = $k",
                                   {"c": cid, "k": kind})[0]["name"] for kind in ("entity", "topic"))
        names = [entity.upper(), f"the {entity}'s", f"{topic}!", "", "nobody at all"]
        matched = [conv.nodes.ids[i] for i in conv.match_nodes(names)]
        assert matched == [x["node_id"] for x in store.match_nodes(cid, names)] and matched
        assert [conv.records.ids[i] for i in conv.node_records(matched)] == \
               [x["record_id"] for x in store.node_records(cid, matched)]
        turn_ids = conv.turns.ids[:40]
        covering = sorted({conv.records.ids[i] for t in turn_ids for i in conv.covering(t)})
        assert covering == [x["record_id"] for x in store.records_for_turns(cid, turn_ids)]
        for text in ("camping with the kids", "adoption agency interview", "the of a"):
            assert [conv.turns.ids[i] for i in conv.bm25(text, 30)] == \
                   [x["turn_id"] for x in store.bm25_topk("turns", cid, text, 30)]


def test_rows_without_a_vector_are_skipped_by_vector_ranking():
    dim = 4
    vecs = pa.array([[1, 0, 0, 0], None, [0, 1, 0, 0], None], type=pa.list_(pa.float32(), dim))
    nodes = pa.table({"node_id": ["n0", "n1", "n2", "n3"], "name": ["a", "b", "c", "d"],
                      "n_records": [1, 1, 1, 1], "embedding": vecs})
    conv = Conversation(_turns(dim), _records(dim), nodes, _no_edges(), dim)
    assert conv.nodes.vec_rows.tolist() == [0, 2] and conv.nodes.matrix.shape == (2, dim)
    sims = conv.nodes.cosine(np.array([[0.5, 1, 0, 0]], np.float32))
    assert conv.nodes.top(sims[0], 10) == [2, 0]  # the NULL rows are never ranked
    assert conv.nodes.vector(1) is None and conv.match_nodes(["b"]) == [1]  # but still match by name
    # a table without an embedding column at all (a kind that is never embedded)
    bare = Conversation(_turns(dim), _records(dim), nodes.drop(["embedding"]), _no_edges(), dim)
    assert bare.nodes.top(bare.nodes.cosine(np.ones((1, dim), np.float32))[0], 10) == []


def _no_edges() -> pa.Table:
    return pa.table({"record_id": pa.array([], pa.string()), "node_id": pa.array([], pa.string())})


def _turns(dim: int) -> pa.Table:
    return pa.table({"turn_id": ["t0"], "speaker": ["A"], "text": ["hello there"],
                     "timestamp": pa.array([None], pa.timestamp("us")),
                     "embedding": pa.array([[1.0] * dim], pa.list_(pa.float32(), dim))})


def _records(dim: int) -> pa.Table:
    return pa.table({"record_id": ["r0"], "type": ["fact"], "text": ["hello"], "entities": [["A"]],
                     "time_start": pa.array([None], pa.date32()), "time_end": pa.array([None], pa.date32()),
                     "stated_at": pa.array([None], pa.date32()), "source_turn_ids": [["t0"]],
                     "embedding": pa.array([[1.0] * dim], pa.list_(pa.float32(), dim))})


# ---------------------------------------------------------------------------- the cache itself
def test_the_cache_evicts_the_least_recently_used_conversation_past_its_byte_bound(store):
    size = {cid: Conversation.load(store, cid).nbytes for cid in CIDS}
    vectors = Conversation.load(store, "conv-26")
    assert size["conv-26"] > sum(r.matrix.nbytes for r in (vectors.turns, vectors.records, vectors.nodes))
    cache = ConversationCache(size["conv-26"] + size["conv-30"] + size["conv-41"] - 1)
    cache.get(store, "conv-26")
    cache.get(store, "conv-30")
    cache.get(store, "conv-26")  # conv-30 is now the least recently used
    cache.get(store, "conv-41")  # over the bound by one byte: conv-30 goes
    assert "conv-30" not in cache and "conv-26" in cache and "conv-41" in cache
    assert cache.nbytes == size["conv-26"] + size["conv-41"] and cache.loads == 3
    cache.get(store, "conv-26")  # a hit loads nothing
    assert cache.loads == 3
    cache.get(store, "conv-30")  # a reload after eviction does, and evicts conv-41 (LRU)
    assert cache.loads == 4 and set(CIDS) - {"conv-41"} == {c for c in CIDS if c in cache}
    tiny = ConversationCache(1)  # smaller than one conversation: still served, one at a time
    assert tiny.get(store, "conv-26").records.n and len(tiny) == 1
    tiny.get(store, "conv-30")
    assert len(tiny) == 1 and "conv-30" in tiny


def test_the_configured_engine_and_bound_reach_the_retriever_and_memory(store, embedder, locomo_dev_store):
    r = Retriever(store, local_config("retrieval.cache_mb=3").retrieval, embedder.encode)
    assert r.engine == "cache" and r.cache is cache_for(store) and r.cache.max_bytes == 3 * 2**20
    assert Retriever(store, local_config("retrieval.engine=store").retrieval, embedder.encode).cache is None
    with pytest.raises(ValueError, match="engine must be"):
        Retriever(store, local_config().retrieval, embedder.encode, engine="sql")
    assert Retriever(store, local_config().retrieval, embedder.encode).cache.max_bytes == 512 * 2**20  # back to the default
    with Memory.open(locomo_dev_store) as memory:  # Memory's call site is unchanged: the default engine
        memory.search("conv-30", "Where did Gina go?")
        assert "conv-30" in cache_for(memory.store)


def test_a_rewritten_store_is_not_served_stale(locomo_dev_store, tmp_path, embedder):
    """The cache belongs to one opened Store, a snapshot of its commits: a store rewritten
    after it was opened (a re-ingest of conv-30) is opened anew and gets a new, empty cache,
    while the old Store keeps answering from its own snapshot, as its SQL views do."""
    copy = tmp_path / "store"
    shutil.copytree(locomo_dev_store, copy)
    cfg = local_config()
    plan = QueryPlan(routes=[Route(goal="Gina dance studio", search_terms=["dance"], entities=["Gina"], topics=[],
                                   time_window=None)])
    with open_store(str(copy), cfg) as before:
        old = Retriever(before, cfg.retrieval, embedder.encode).retrieve("conv-30", plan, "Gina dance studio?")
        assert "conv-30" in cache_for(before) and old.selected
        rewrite_conversation(copy, "conv-30", cfg)
        with open_store(str(copy), cfg) as after:
            assert cache_for(after) is not cache_for(before) and len(cache_for(after)) == 0
            new = Retriever(after, cfg.retrieval, embedder.encode).retrieve("conv-30", plan, "Gina dance studio?")
            ref = Retriever(after, cfg.retrieval, embedder.encode, engine="store").retrieve("conv-30", plan, "Gina dance studio?")
            same(ref, new, "rewritten store")
            records = [e for e in new.candidates.values() if e.kind == "record"]
            assert records and all(e.text.startswith("(edited) ") for e in records)
        # the old Store's snapshot is unchanged, and so is what its cache serves
        again = Retriever(before, cfg.retrieval, embedder.encode).retrieve("conv-30", plan, "Gina dance studio?")
        same(old, again, "old snapshot")
        assert not any(e.text.startswith("(edited) ") for e in again.candidates.values())


def rewrite_conversation(store_dir, cid: str, cfg) -> None:
    """Commit `cid` again as a later batch: every record's text edited, and its time and
    event-frame nodes without vectors (as a store that does not embed them)."""
    tables = {}
    for table in INGEST_TABLES:
        path = store_dir / table
        if not path.exists():
            continue
        data = pq.read_table(path)
        data = data.filter(pc.equal(data.column("conversation_id"), cid))
        if table == "records":
            data = data.set_column(data.schema.get_field_index("text"), "text",
                                   pc.binary_join_element_wise(pa.scalar("(edited) "), data.column("text"), ""))
        if table == "nodes":
            plain = pc.invert(pc.is_in(data.column("kind"), pa.array(["time", "event_frame"])))
            emb = data.column("embedding")
            nulled = pa.array([v if keep else None for v, keep in zip(emb.to_pylist(), plain.to_pylist())], emb.type)
            assert nulled.null_count > 0
            data = data.set_column(data.schema.get_field_index("embedding"), "embedding", nulled)
        tables[table] = data
    StoreWriter(str(store_dir), cfg).write_tables(tables, {cid: "ok"})
