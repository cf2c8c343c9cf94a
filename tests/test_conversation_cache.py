"""The conversation cache of the retrieval engine (query/conversation.py) on the generated store
(rules backend, real MiniLM; tests/support/generated.py): NULL vectors are skipped, the cache is bounded in bytes (LRU), the bound
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

from .support.asked import chitchat_ids, speakers_of
from .support.generated import local_config



@pytest.fixture(scope="module")
def embedder(local_embedder):
    return local_embedder


@pytest.fixture(scope="module")
def store(synth_store):
    return synth_store


@pytest.fixture(scope="module")
def asked(generated_locomo):
    """A conversation between friends, a route for one of its single-hop questions (naming the
    person it asks about) and the question."""
    cid = chitchat_ids(generated_locomo)[0]
    question = generated_locomo.asked("single_hop", cid)[0]["question"]
    who = [s for s in speakers_of(generated_locomo, cid) if s in question]
    assert who, question
    route = Route(goal=question, search_terms=question.rstrip("?").split(), entities=who, topics=[], time_window=None)
    return cid, QueryPlan(routes=[route]), question


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
    cids = store.conversation_ids()
    assert len(cids) == 3
    a, b, c = cids
    size = {cid: LoadedConversation.load(store, cid).nbytes for cid in cids}
    vectors = LoadedConversation.load(store, a)
    assert size[a] > sum(r.matrix.nbytes for r in (vectors.turns, vectors.records, vectors.nodes))
    cache = ConversationCache(size[a] + size[b] + size[c] - 1)
    cache.get(store, a)
    cache.get(store, b)
    cache.get(store, a)  # b is now the least recently used
    cache.get(store, c)  # over the bound by one byte: b goes
    assert b not in cache and a in cache and c in cache
    assert cache.nbytes == size[a] + size[c] and cache.loads == 3
    cache.get(store, a)  # a hit loads nothing
    assert cache.loads == 3
    cache.get(store, b)  # a reload after eviction does, and evicts c (LRU)
    assert cache.loads == 4 and {a, b} == {x for x in cids if x in cache}
    tiny = ConversationCache(1)  # smaller than one conversation: still served, one at a time
    assert tiny.get(store, a).records.n and len(tiny) == 1
    tiny.get(store, b)
    assert len(tiny) == 1 and b in tiny


def test_the_configured_bound_reaches_the_retriever_and_memory(store, embedder, synth_store_dir, asked):
    r = Retriever(store, local_config("retrieval.cache_mb=3").retrieval, embedder.encode)
    assert r.cache is cache_for(store) and r.cache.max_bytes == 3 * 2**20
    assert Retriever(store, local_config().retrieval, embedder.encode).cache.max_bytes == 512 * 2**20  # back to the default
    with pytest.warns(FutureWarning, match="retrieval.engine"):  # the old switch is read and ignored
        assert local_config("retrieval.engine=store").retrieval.cache_mb == 512
    cid, _, question = asked
    with Memory.open(synth_store_dir) as memory:
        memory.search(cid, question)
        assert cid in cache_for(memory.store)


def test_a_rewritten_store_is_not_served_stale(synth_store_dir, tmp_path, embedder, asked):
    """The cache belongs to one opened Store, a snapshot of its commits: a store rewritten
    after it was opened (a re-ingest of one conversation) is opened anew and gets a new, empty
    cache, while the old Store keeps answering from its own snapshot, as its SQL views do."""
    copy = tmp_path / "store"
    shutil.copytree(synth_store_dir, copy)
    cfg = local_config()
    cid, plan, question = asked
    with open_store(str(copy), cfg) as before:
        old = Retriever(before, cfg.retrieval, embedder.encode).retrieve(cid, plan, question)
        assert cid in cache_for(before) and old.selected
        rewrite_conversation(copy, cid, cfg)
        with open_store(str(copy), cfg) as after:
            assert cache_for(after) is not cache_for(before) and len(cache_for(after)) == 0
            new = Retriever(after, cfg.retrieval, embedder.encode).retrieve(cid, plan, question)
            assert new.fused == old.fused  # the same rows rank the same; only their text is new
            records = [e for e in new.candidates.values() if e.kind == "record"]
            assert records and all(e.text.startswith("(edited) ") for e in records)
        # the old Store's snapshot is unchanged, and so is what its cache serves
        again = Retriever(before, cfg.retrieval, embedder.encode).retrieve(cid, plan, question)
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
