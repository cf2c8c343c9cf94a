"""The retrieval engine's parts on a small synthetic store: a conversation loaded into memory
(query/conversation.py) ranks like numpy brute force, the one time-window rule, node and turn
lookups, BM25, and each registered channel (query/channels.py) on hand-checked cases."""

from __future__ import annotations

import numpy as np
import pytest

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.query.channels import (
    CHANNEL_GROUPS,
    CHANNELS,
    Channel,
    NeighborChannel,
    RouteQuery,
    StandingChannel,
    WindowScope,
    adjacent_turns,
    channels_for,
    register,
)
from lychee_ray.query.conversation import LoadedConversation, cache_for, with_assistant
from lychee_ray.query.evidence import TURN_PREFIX, CandidatePool
from lychee_ray.query.retrieve import Retriever
from lychee_ray.schemas import QueryPlan, Route, TimeWindow
from lychee_ray.tables import INGEST_TABLES

from .support.small_store import CONVS, DIM, INJECT, store, store_dir  # noqa: F401  (fixtures)


def load(store, cid: str) -> LoadedConversation:
    return LoadedConversation.load(store, cid)


def ids_of(rows, positions) -> list[str]:
    return [rows.ids[i] for i in positions]


# ---------------------------------------------------------------------------- the loaded conversation
@pytest.mark.parametrize("table,emb_attr,id_of", [
    ("records", "record_embeddings", lambda c: [r.record_id for r in c.records]),
    ("turns", "turn_embeddings", lambda c: [t.turn_id for t in c.turns]),
    ("nodes", "node_embeddings", lambda c: [n.node_id for n in c.nodes]),
])
def test_top_equals_numpy_bruteforce(store, table, emb_attr, id_of):
    rng = np.random.default_rng(42)
    for cid, conv in CONVS.items():
        rows = getattr(load(store, cid), table)
        for _ in range(3):
            q = rng.standard_normal(DIM).astype(np.float32)
            emb = getattr(conv, emb_attr)
            sims = emb @ q / (np.linalg.norm(emb, axis=1) * np.linalg.norm(q))
            order = np.argsort(-sims, kind="stable")[:5]
            cos = rows.cosine(q[None, :])[0]
            got = rows.top(cos, 5)
            assert ids_of(rows, got) == [id_of(conv)[i] for i in order]
            np.testing.assert_allclose(cos[rows.vec_pos[got]], sims[order], rtol=1e-5, atol=1e-6)


def test_top_keeps_only_allowed_rows_and_checks_the_query(store):
    conv = load(store, "c1")
    q = conv.check_queries(CONVS["c1"].record_embeddings[0])
    allowed = np.array(["Brannoc" in e for e in conv.records.cols["entities"]])
    got = conv.records.top(conv.records.cosine(q)[0], 10, allowed)
    assert got and all("Brannoc" in conv.records.row(i).entities for i in got)
    assert len(got) == int(allowed.sum())
    with pytest.raises(ValueError, match="values"):
        conv.check_queries(np.ones(DIM + 1))
    with pytest.raises(ValueError, match="NaN"):
        conv.check_queries(np.full(DIM, np.nan))


def test_a_loaded_conversation_holds_only_its_own_rows_as_declared_types(store):
    conv, src = load(store, "c2"), CONVS["c2"]
    assert conv.turns.ids == [t.turn_id for t in src.turns]  # turn order
    assert sorted(conv.records.ids) == conv.records.ids == sorted(r.record_id for r in src.records)
    assert {conv.records.row(i).conversation_id for i in range(conv.records.n)} == {"c2"}
    rec = conv.records.row(conv.records.ids.index("c2:r01"))
    assert (rec.time_start, rec.time_end, rec.stated_at) == ("2023-05-20", "2023-05-27", "2023-05-01")
    assert conv.turns.row(0).timestamp == "2023-05-01T10:00:00"
    assert conv.records.row(0) is conv.records.row(0)  # made once
    np.testing.assert_array_equal(np.stack([conv.turns.row(i).embedding for i in range(12)]), src.turn_embeddings)
    assert [conv.records.ids[i] for i in conv.covering("D2:8")] == ["c2:r06"]


def test_bm25_ranks_exact_term_match_first(store):
    conv = load(store, "c1")
    assert ids_of(conv.turns, conv.bm25("When is the trip to Quillmoor?", 5))[0] == CONVS["c1"].turns[7].turn_id
    assert load(store, "c2").bm25("quillmoor", 5) == []  # planted only in c1
    assert conv.bm25("the what of", 5) == []  # stopwords only


def test_the_one_window_rule(store):
    conv = load(store, "c1")
    in_window = lambda s, e: ids_of(conv.records, conv.records_in_window(s, e))  # noqa: E731
    # r01 spans May 20-27; r02 is all of June; r03/r04 have no time and source turns on May 1.
    assert in_window("2023-05-15", "2023-05-31") == ["c1:r01"]
    # r02 (June, from the 1st), r06 (no time, said June 10), r07 (June 10): by date, then id
    assert in_window("2023-06-05", "2023-06-30") == ["c1:r02", "c1:r06", "c1:r07"]
    assert in_window("2023-05-01", "2023-05-01") == ["c1:r00", "c1:r03", "c1:r04"]
    assert in_window(None, "2022-12-31") == ["c1:r05"]
    assert len(in_window(None, None)) == 8
    june = ids_of(conv.turns, np.flatnonzero(conv.turn_mask("2023-06-10", "2023-06-10")))
    assert june == [t.turn_id for t in CONVS["c1"].turns[6:]]
    assert conv.turn_mask(None, "2023-05-01").sum() == 6 and not conv.turn_mask("2023-05-02", "2023-06-09").any()
    with pytest.raises(ValueError, match="ISO date"):
        conv.records_in_window("next tuesday", None)


def test_node_lookups(store):
    conv = load(store, "c1")
    hits = conv.match_nodes(["The Pottery-Club's", "YSOLDE", "nobody"])
    assert ids_of(conv.nodes, hits) == ["c1:n:ysolde", "c1:n:group"]
    recs = conv.node_records(["c1:n:group", "c1:n:2023-05"])
    assert ids_of(conv.records, recs) == ["c1:r01", "c1:r00", "c1:r02"]  # two links first, then by id
    assert conv.node_records(["' OR 1=1 --"]) == []


def test_hostile_ids_and_text_match_nothing_and_change_nothing(store):
    before = {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in INGEST_TABLES}
    empty = load(store, INJECT)
    assert (empty.turns.n, empty.records.n, empty.nodes.n) == (0, 0, 0)
    assert store.turns(INJECT) == [] and store.records(INJECT) == []
    conv = load(store, "c1")
    assert conv.bm25("'; DROP VIEW turns; --", 5) == []
    assert conv.match_nodes(["x' OR '1'='1", "'); DROP VIEW nodes; --"]) == []
    assert {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in INGEST_TABLES} == before


# ---------------------------------------------------------------------------- channels as units
def route_query(conv, route: Route, qv, scope=None, k=30, speaker_k=60) -> RouteQuery:
    q = conv.check_queries(qv)
    sims = {t: getattr(conv, t).cosine(q)[0] for t in ("records", "nodes", "docs")}
    tw = route.time_window
    window = (tw.start, tw.end) if tw else None
    return RouteQuery(conv, route, q[0], sims, window, scope, k, speaker_k)


def test_channels_rank_what_each_promises(store):
    conv = load(store, "c1")
    cfg = RetrievalConfig()
    qv = CONVS["c1"].record_embeddings[4]  # the planted Quillmoor record's vector
    route = Route(goal="trip to Quillmoor", search_terms=[], entities=["Ysolde"], topics=[],
                  time_window=TimeWindow(start="2023-06-01", end="2023-06-30"))
    q = route_query(conv, route, qv)
    by_name = {ch.name: ch for ch in channels_for(cfg)}
    # "turn" and "speaker" name two each
    assert list(by_name) == ["record_vector", "node", "time", "turn_vector", "turn_bm25", "speaker_turn", "speaker_record", "standing", "neighbor"]
    pool = CandidatePool(conv)
    # the route names no speaker of c1 ("A", "B"): the speaker channels have nothing to rank
    assert by_name["speaker_turn"].rank(q, pool) == [] == by_name["speaker_record"].rank(q, pool)
    assert by_name["record_vector"].rank(q, pool)[0] == "c1:r04"
    # node: Ysolde's records (even ones) via the name, ranked by the query vector
    node_keys = by_name["node"].rank(q, pool)
    assert set(node_keys) >= {"c1:r00", "c1:r02", "c1:r04", "c1:r06"} and node_keys[0] == "c1:r04"
    assert set(by_name["time"].rank(q, pool)) == {"c1:r02", "c1:r06", "c1:r07"}  # the route's June window
    # turn_bm25: the planted turn D2:7 is found by its word and handed on as the record citing it
    assert by_name["turn_bm25"].rank(q, pool)[0] == "c1:r07"
    # a turn no record cites stays as raw-turn evidence
    assert pool.add_turn_hits([10]) == [TURN_PREFIX + "D2:10"] and pool[TURN_PREFIX + "D2:10"].kind == "turn"
    # a window scope restricts the vector channels to in-window rows
    scope = WindowScope(np.array([i in conv.records_in_window("2023-06-05", None) for i in range(8)]),
                        conv.turn_mask("2023-06-05", None))
    scoped = route_query(conv, route, qv, scope)
    assert set(by_name["record_vector"].rank(scoped, CandidatePool(conv))) == {"c1:r02", "c1:r06", "c1:r07"}
    turn_keys = by_name["turn_vector"].rank(scoped, CandidatePool(conv))  # June 10 turns: 6-11
    # turn 11 is long: its hits are its passages (D2:11#0, D2:11#1), never the whole turn
    in_june = {"c1:r06", "c1:r07", *(TURN_PREFIX + f"D2:{i}" for i in (6, 10)), TURN_PREFIX + "D2:11#0", TURN_PREFIX + "D2:11#1"}
    assert turn_keys and set(turn_keys) <= in_june and TURN_PREFIX + "D2:11" not in turn_keys


def test_the_neighbor_channel_gives_the_turns_beside_the_best_one_within_its_session(store):
    conv = load(store, "c1")  # turns 0-5 in session s1, 6-11 in s2; record r<i> cites turn i, r06 turns 8-9
    route = Route(goal="x", search_terms=[], entities=[], topics=[], time_window=None)
    assert "neighbor" in [ch.name for ch in channels_for(RetrievalConfig())]  # on by default
    assert [ch.name for ch in channels_for(RetrievalConfig(channels=["record_vector", "neighbor"]))] == ["record_vector", "neighbor"]

    def neighbors(turn: int, scope=None, **cfg) -> list[str]:
        q = route_query(conv, route, CONVS["c1"].turn_embeddings[turn], scope)  # the seed is that turn
        return NeighborChannel(RetrievalConfig(neighbor_seeds=1, **cfg)).rank(q, CandidatePool(conv))

    # turn 5 ends session s1: 6 and 7 are past the boundary; the later neighbour before the earlier
    assert neighbors(5, neighbor_span=2) == ["c1:r04", "c1:r03"]
    # turn 7: turn 8's record, then turn 6, which no record cites, as the raw turn
    assert neighbors(7, neighbor_span=1) == ["c1:r06", TURN_PREFIX + "D2:6"]
    assert neighbors(7, neighbor_span=2) == ["c1:r06", TURN_PREFIX + "D2:6"]  # r06 also cites turn 9: once
    # under a time window a neighbour said outside it is left out
    outside_6 = np.arange(conv.turns.n) != 6
    assert neighbors(7, WindowScope(np.ones(conv.records.n, bool), outside_6), neighbor_span=1) == ["c1:r06"]

    # a conversation with an assistant gets nothing from it, unless the config asks for it
    assert not conv.with_assistant  # speakers A and B, roles speaker_a/b
    conv.with_assistant = True
    assert neighbors(5, neighbor_span=2) == []
    assert neighbors(5, neighbor_span=2, neighbor_with_assistant=True) == ["c1:r04", "c1:r03"]


def test_a_conversation_is_with_an_assistant_by_any_turns_role_or_speaker():
    assert not with_assistant(["speaker_a", "speaker_b"], ["Ana", "Ben"])
    assert not with_assistant([None, ""], [None, "Assistant Manager"])  # a person's title is not a role
    assert with_assistant(["user", "assistant"], ["user", "assistant"])
    assert with_assistant([None, None], ["user", "ChatGPT"])  # roles given as speakers
    assert with_assistant(["speaker_a", "BOT"], ["Ana", "helper"])


def test_the_standing_channel_ranks_preferences_and_constraints_for_a_request_in_the_askers_voice(store):
    conv = load(store, "c1")  # r03 is a preference, r05 a constraint, the rest facts
    assert conv.standing_records.tolist() == [i in (3, 5) for i in range(conv.records.n)]
    channel = StandingChannel(RetrievalConfig())

    def standing(goal: str, toward: int, scope=None) -> list[str]:
        route = Route(goal=goal, search_terms=[], entities=[], topics=[], time_window=None)
        return channel.rank(route_query(conv, route, CONVS["c1"].record_embeddings[toward], scope), CandidatePool(conv))

    # only the two, nearest the query vector first, whatever the facts score
    assert standing("what should I try next?", 5) == ["c1:r05", "c1:r03"]
    assert standing("can you suggest something for my weekend?", 3) == ["c1:r03", "c1:r05"]
    # a question about someone else, in the third person, is for the facts: nothing here
    assert standing("what does Ysolde like?", 3) == []
    assert standing("where is the island?", 5) == []  # "island" holds no "i" as a word
    # a time scope applies as in every channel
    only_r03 = WindowScope(np.arange(conv.records.n) == 3, np.ones(conv.turns.n, bool))
    assert standing("what should I try next?", 5, only_r03) == ["c1:r03"]
    # "the user" is the asker only where someone talks to an assistant (an LLM planner's wording)
    assert standing("find the user's preferred units", 5) == []
    conv.with_assistant = True
    assert standing("find the user's preferred units", 5) == ["c1:r05", "c1:r03"]
    assert standing("find what the users' group decided", 5) == []  # another noun, not the asker


def test_a_standing_instruction_is_a_constraint_and_chat_that_looks_like_one_is_not():
    from lychee_ray.rules.lexicon import STANDING_INSTRUCTION
    from lychee_ray.rules.text import classify

    for said in ("Always include the watering schedule when I ask about bonsai care.",
                 "Please make sure to add type hints whenever I ask for Python code.",
                 "Never use jargon if I ask about taxes.",
                 "Thanks. Remember to keep it short when we talk about recipes.",
                 "Always list the errors when the user ask about failed builds.",  # the rules encoder's rewrite
                 "From now on, please give prices in euros."):
        assert STANDING_INSTRUCTION.search(said), said
        assert classify(said, False) == "constraint", said  # before the failure/procedure cues
    for said in ("I always feel calm when I paint.", "Always a pleasure when we meet!", "Never mind, when I get home I'll call.",
                 "Never been there when I was young.", "Always fun when we go hiking.", "In the future I want to visit Rome.",
                 "You always know what to say when I'm down."):
        assert not STANDING_INSTRUCTION.search(said), said


def test_adjacent_turns_stay_in_the_seeds_session_nearest_first_each_once():
    sessions = ["a"] * 4 + ["b"] * 4
    assert adjacent_turns([1], sessions, 1) == [2, 0]
    assert adjacent_turns([3], sessions, 2) == [2, 1]  # 4 and 5 are session b
    assert adjacent_turns([5, 6], sessions, 1) == [4, 7]  # a seed is never its neighbour's neighbour
    assert adjacent_turns([0, 2], sessions, 1) == [1, 3]  # turn 1 once, for the first seed
    assert adjacent_turns([], sessions, 3) == []


def test_an_unknown_channel_is_one_sentence_and_a_new_one_is_a_unit(store):
    with pytest.raises(ValueError, match="unknown channel 'recrod_vector'.*known: record_vector"):
        channels_for(RetrievalConfig(channels=["recrod_vector"]))

    @register
    class NewestFirst(Channel):  # a channel a user adds: the most recently said records
        name = "test_newest"

        def rank(self, q, pool):
            order = sorted(range(q.conv.records.n), key=lambda i: q.conv.records.cols["stated_at"][i] or "", reverse=True)
            return pool.add_records(order[: q.k])

    try:
        cfg = RetrievalConfig(channels=["test_newest"])
        retriever = Retriever(store, cfg, lambda texts: np.tile(CONVS["c1"].record_embeddings[0], (len(texts), 1)))
        plan = QueryPlan(routes=[Route(goal="x", search_terms=[], entities=[], topics=[], time_window=None)])
        rankings, pool = retriever.channel_rankings("c1", plan, np.tile(CONVS["c1"].record_embeddings[0], (1, 1)))
        assert list(rankings) == ["r0:test_newest"]
        assert pool[rankings["r0:test_newest"][0]].said == "2023-06-10"
    finally:
        del CHANNELS["test_newest"]
    assert set(CHANNEL_GROUPS["turn"]) <= set(CHANNELS)


def test_the_cache_is_per_store_and_bounded(store_dir, store):
    cache = cache_for(store, max_bytes=1)  # smaller than any conversation: one stays loaded
    a = cache.get(store, "c1")
    assert cache.get(store, "c1") is a and cache.loads == 1
    cache.get(store, "c2")
    assert "c1" not in cache and "c2" in cache and len(cache) == 1 and cache.loads == 2
    assert cache.nbytes == cache.get(store, "c2").nbytes > 0
