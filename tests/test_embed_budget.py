"""Ingest embeds only what retrieval reads (issue 15): no vectors for time and event-frame nodes,
node names embedded once per actor (an LRU across batches) and each distinct text once per call,
with recall paths intact.

Two views of the generated archive (tests/support/generated.py) with the rules backend and the
real MiniLM: the shared store (the real Ray job) for what is stored and what retrieval finds, and
the same stages run in this process, with the model's own encode spied on, for what was sent to
the model."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from lychee_ray.config_sections import OrganizeConfig
from lychee_ray.embedding import Embedder, VectorCache
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage
from lychee_ray.ingest.evidence_nodes import OrganizeStage
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.readers.files import read_file
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.retrieve import Retriever
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import conversation_rows, rows_to_table

from .support.asked import chitchat_ids, speakers_of
from .support.generated import local_config


NO_VECTOR = {"time", "event_frame"}
ATOL = 1e-5  # the same text in another batch: equal up to float noise


class SpiedEmbedder(Embedder):
    """The real Embedder, with every list its model is asked to embed recorded."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.sent: list[list[str]] = []
        inner = self.backend.encode

        def spy(texts):
            self.sent.append(list(texts))
            return inner(texts)

        self.backend.encode = spy


@pytest.fixture(scope="module")
def embedder():
    return SpiedEmbedder(local_config().embedding)


@pytest.fixture(scope="module")
def organized(embedder, generated_locomo):
    """The generated archive through read -> embed -> segment -> encode (rules) in this process, then
    organize one conversation per batch on one stage (one actor): (conversations, stage, what
    the model was sent by organize, per batch)."""
    cfg = local_config()
    (archive,) = generated_locomo.files
    convs = [c for c in read_file(str(archive), cfg.read_settings) if c.status == "ok"]
    assert len(convs) == len(generated_locomo.conversation_ids())
    convs = EmbedTurnsStage(cfg, embedder).process_batch(convs)
    convs = SegmentStage(cfg).process_batch(convs)
    encoder = EncodeStage(cfg)
    encoder.setup()
    convs = encoder.process_batch(convs)
    organize = OrganizeStage(cfg, embedder)
    sent_per_batch = []
    for conv in convs:
        embedder.sent.clear()
        organize.process_batch([conv])
        sent_per_batch.append([t for call in embedder.sent for t in call])
    assert all(c.status == "ok" for c in convs), [(c.conversation_id, c.error) for c in convs]
    return convs, organize, sent_per_batch


# ------------------------------------------------------------------------------ the stored vectors
def test_time_and_event_frame_nodes_have_no_vector_and_the_rest_a_fresh_encode_of_their_name(synth_store_dir, embedder):
    with open_store(str(synth_store_dir), local_config()) as store:
        rows = store.sql("SELECT kind, name, embedding FROM nodes ORDER BY node_id")
    kinds = Counter(r["kind"] for r in rows)
    assert set(kinds) == {"entity", "topic", "entity_topic", "time", "event_frame"}, kinds
    assert all(r["embedding"] is None for r in rows if r["kind"] in NO_VECTOR)
    with_vec = [r for r in rows if r["kind"] not in NO_VECTOR]
    assert all(r["embedding"] is not None for r in with_vec)
    fresh = embedder.encode([r["name"] for r in with_vec])
    np.testing.assert_allclose(np.stack([r["embedding"] for r in with_vec]), fresh, atol=ATOL)


def test_records_and_turns_keep_their_vectors(synth_store_dir):
    with open_store(str(synth_store_dir), local_config()) as store:
        for table in ("records", "turns"):
            n, missing = store.con.execute(f"SELECT count(*), count(*) - count(embedding) FROM {table}").fetchone()
            assert n > 0 and missing == 0, table


def test_node_vector_search_skips_nodes_without_a_vector(synth_store_dir, embedder):
    with open_store(str(synth_store_dir), local_config()) as store:
        for cid in store.conversation_ids():
            kinds = Counter(r[0] for r in store.con.execute("SELECT kind FROM nodes WHERE conversation_id = ?", [cid]).fetchall())
            n_vec = sum(v for k, v in kinds.items() if k not in NO_VECTOR)
            # a query vector equal to a date's own name: the time node it names is still not found
            day = store.sql("SELECT name FROM nodes WHERE conversation_id = $cid AND kind = 'time' LIMIT 1", {"cid": cid})[0]["name"]
            nodes = LoadedConversation.load(store, cid).nodes
            hits = nodes.top(nodes.cosine(embedder.encode([day]))[0], 10_000)
            assert len(hits) == n_vec and not any(nodes.cols["kind"][i] in NO_VECTOR for i in hits), cid
            ids, vecs = store.embeddings("nodes", cid)
            assert len(ids) == n_vec and vecs.shape == (n_vec, store.dim) and np.isfinite(vecs).all()
            # time and event-frame nodes are still there for the name match and the time channel
            assert [nodes.cols["kind"][i] for i in LoadedConversation.load(store, cid).match_nodes([day])] == ["time"]


def test_node_channel_still_answers_a_question(synth_store_dir, generated_locomo, embedder):
    cfg = local_config('retrieval.channels=["node"]')
    cid = chitchat_ids(generated_locomo)[0]
    speaker = speakers_of(generated_locomo, cid)[0]
    with open_store(str(synth_store_dir), cfg) as store:
        # the first stored question of a conversation between friends that names its first speaker
        q = store.sql("SELECT conversation_id, question FROM questions WHERE conversation_id = $cid "
                      "AND question ILIKE $name ORDER BY question_id LIMIT 1", {"cid": cid, "name": f"%{speaker}%"})[0]
        entities = [r["name"] for r in store.sql("SELECT name FROM nodes WHERE conversation_id = $cid AND kind = 'entity'", {"cid": cid})]
        plan = RulesPlanner().plan(q["question"], known_entities=entities)
        retriever = Retriever(store, cfg.retrieval, embedder.encode)
        got = retriever.retrieve(q["conversation_id"], plan, q["question"])
        assert got.rankings.get("r0:node"), q["question"]
        assert got.selected
        # the node channel's vector match alone (no names) still finds linked records
        conv = LoadedConversation.load(store, cid)
        nearest = conv.nodes.top(conv.nodes.cosine(embedder.encode([q["question"]]))[0], cfg.retrieval.max_node_matches)
        assert nearest and conv.node_records([conv.nodes.ids[i] for i in nearest])


# -------------------------------------------------------------------------- what the model is sent
def test_the_model_is_never_sent_the_same_text_twice_in_one_call(organized, embedder):
    convs, _, sent_per_batch = organized
    assert all(sent_per_batch)
    for texts in sent_per_batch:
        assert len(texts) == len(set(texts))
    # and the stage-level dedupe holds for turns too: a repeated turn text is embedded once
    embedder.sent.clear()
    out = embedder.encode(["ok", "haha", "ok", "see you", "haha"])
    assert embedder.sent == [["ok", "haha", "see you"]]
    np.testing.assert_array_equal(out[0], out[2])
    np.testing.assert_allclose(out[[0, 1, 3]], embedder.encode(["ok", "haha", "see you"]), atol=ATOL)


def test_names_embedded_for_an_earlier_conversation_come_from_the_actor_cache(organized, embedder):
    convs, stage, sent_per_batch = organized
    seen: set[str] = set()
    repeated = 0
    for conv, sent in zip(convs, sent_per_batch):
        names = [n.name for n in conv.nodes if n.kind not in NO_VECTOR]
        earlier = [n for n in names if n in seen]
        repeated += len(earlier)
        assert not set(earlier) & set(sent), conv.conversation_id  # not sent again
        assert not {n.name for n in conv.nodes if n.kind in NO_VECTOR} & set(sent) - {r.text for r in conv.records}
        seen.update(names)
    assert repeated > 0  # topics ("calligraphy", "recipe", ...) recur across the archive's conversations
    stats = stage.stats
    assert stats["texts_from_cache"] == repeated
    assert stats["texts_asked"] == stats["texts_embedded"] + stats["texts_from_cache"] + stats["texts_deduplicated"]
    assert stats["texts_embedded"] == sum(len(s) for s in sent_per_batch)
    assert stats["nodes_without_vector"] == sum(n.kind in NO_VECTOR for c in convs for n in c.nodes) > 0
    # every vector handed out, cached or fresh, is the name's own
    for conv in convs:
        has = [i for i, n in enumerate(conv.nodes) if n.kind not in NO_VECTOR]
        assert np.isnan(np.delete(conv.node_embeddings, has, axis=0)).all()
        fresh = embedder.encode([conv.nodes[i].name for i in has])
        np.testing.assert_allclose(conv.node_embeddings[has], fresh, atol=ATOL)
        np.testing.assert_allclose(conv.record_embeddings, embedder.encode([r.text for r in conv.records]), atol=ATOL)


def test_a_nan_node_row_is_stored_as_a_null_embedding(organized):
    conv: Conversation = organized[0][0]
    table = rows_to_table("nodes", conversation_rows(conv, 384)["nodes"], 384)
    kinds, emb = table.column("kind").to_pylist(), table.column("embedding")
    assert [emb[i].is_valid for i in range(len(kinds))] == [k not in NO_VECTOR for k in kinds]


def test_vector_cache_is_bounded_and_evicts_the_least_recently_used():
    cache = VectorCache(2)
    vec = lambda x: np.full((1, 3), x, np.float32)  # noqa: E731
    cache.add(["a"], vec(1))
    cache.add(["b"], vec(2))
    found, missing = cache.split(["a", "c", "a", "c"])  # touches "a"; "c" asked twice, missing once
    assert list(found) == ["a"] and missing == ["c"]
    cache.add(["c"], vec(3))  # evicts "b", the least recently used
    assert len(cache) == 2
    found, missing = cache.split(["a", "b", "c"])
    assert sorted(found) == ["a", "c"] and missing == ["b"]
    assert OrganizeConfig().name_cache_entries > 0


def test_vector_node_kinds_config_restores_vectors_for_time_nodes(organized, embedder):
    conv = organized[0][0]
    every_kind = local_config('organize.vector_node_kinds=["entity", "topic", "entity_topic", "time", "event_frame"]')
    stage = OrganizeStage(every_kind, embedder)
    copy = Conversation(conv.conversation_id, conv.source, conv.source_file, turns=conv.turns, records=conv.records)
    stage.process_batch([copy])
    assert not np.isnan(copy.node_embeddings).any()
    assert stage.stats["nodes_without_vector"] == 0
