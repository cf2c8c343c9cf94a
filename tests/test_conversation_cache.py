"""The conversation cache of the retrieval engine (query/conversation.py) on a real store (rules
backend, real MiniLM): NULL vectors are skipped, the cache is bounded in bytes (LRU), the bound
reaches the retriever and `Memory`, and a rewritten store is not served stale."""

from __future__ import annotations

import shutil

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from lychee_ray import Memory
from lychee_ray.query.conversation import ConversationCache, LoadedConversation, cache_for
from lychee_ray.query.retrieve import Retriever
from lychee_ray.schemas import QueryPlan, Route
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter
from lychee_ray.tables import INGEST_TABLES

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


def test_rows_without_a_vector_are_skipped_by_vector_ranking():
    dim = 4
    vecs = pa.array([[1, 0, 0, 0], None, [0, 1, 0, 0], None], type=pa.list_(pa.float32(), dim))
    nodes = pa.table({"node_id": ["n0", "n1", "n2", "n3"], "name": ["a", "b", "c", "d"],
                      "n_records": [1, 1, 1, 1], "embedding": vecs})
    conv = LoadedConversation(_turns(dim), _records(dim), nodes, _no_edges(), dim)
    assert conv.nodes.vec_rows.tolist() == [0, 2] and conv.nodes.matrix.shape == (2, dim)
    sims = conv.nodes.cosine(np.array([[0.5, 1, 0, 0]], np.float32))
    assert conv.nodes.top(sims[0], 10) == [2, 0]  # the NULL rows are never ranked
    assert conv.nodes.vector(1) is None and conv.match_nodes(["b"]) == [1]  # but still match by name
    # a table without an embedding column at all (a kind that is never embedded)
    bare = LoadedConversation(_turns(dim), _records(dim), nodes.drop(["embedding"]), _no_edges(), dim)
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
    size = {cid: LoadedConversation.load(store, cid).nbytes for cid in CIDS}
    vectors = LoadedConversation.load(store, "conv-26")
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


def test_the_configured_bound_reaches_the_retriever_and_memory(store, embedder, locomo_dev_store):
    r = Retriever(store, local_config("retrieval.cache_mb=3").retrieval, embedder.encode)
    assert r.cache is cache_for(store) and r.cache.max_bytes == 3 * 2**20
    assert Retriever(store, local_config().retrieval, embedder.encode).cache.max_bytes == 512 * 2**20  # back to the default
    with pytest.warns(FutureWarning, match="retrieval.engine"):  # the old switch is read and ignored
        assert local_config("retrieval.engine=store").retrieval.cache_mb == 512
    with Memory.open(locomo_dev_store) as memory:
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
            assert new.fused == old.fused  # the same rows rank the same; only their text is new
            records = [e for e in new.candidates.values() if e.kind == "record"]
            assert records and all(e.text.startswith("(edited) ") for e in records)
        # the old Store's snapshot is unchanged, and so is what its cache serves
        again = Retriever(before, cfg.retrieval, embedder.encode).retrieve("conv-30", plan, "Gina dance studio?")
        assert again.context_text == old.context_text and again.fused == old.fused
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
