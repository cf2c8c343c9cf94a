"""record_links end to end on a hand-made store: the table as declared, the rows the builder
writes, validity derived alike by the DuckDB view and the loaded conversation, retrieval's
validity unit (current first, successors and partners brought in, lines marked, the budget
charged on the marked line, a time window asking what held then), and the `Memory` API
(records(current_only=...), history(), the link fields of a MemoryItem).

The conversation is invented: Odalys lives in Quarrenby (1 March), moves to Brindlecote (10 April),
says she never flew a kite (2 May) and flies one (1 June). Vectors are chosen by hand so a query
lands next to the record it names."""

from __future__ import annotations

import numpy as np
import pytest

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.llm.prompts import ValidityNote
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.memory import Memory
from lychee_ray.query.retrieve import Retriever
from lychee_ray.schemas import Conversation, QueryPlan, Route, Segment, TimeWindow
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import conversation_rows
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.tables import TABLES, BuildStats, Node, Record, RecordLink, Turn
from lychee_ray.tokens import count_tokens

from .support.small_store import DIM, make_cfg

CID = "odalys"
DAYS = ["2024-03-01", "2024-04-10", "2024-05-02", "2024-06-01", "2024-06-20"]
TEXTS = ["Odalys lives in Quarrenby.", "Odalys moved to Brindlecote.", "Odalys has never flown a kite.",
         "Odalys flew a kite on the beach.", "Odalys bakes rye bread on Sundays."]
IDS = ["r-home-old", "r-home-new", "r-never", "r-kite", "r-bread"]


def axis(k: int) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[k] = 1.0
    return v


# home-old and home-new share axis 0 (home-old closer to it), the kite pair axis 2, bread axis 5
VECTORS = np.stack([axis(0), 0.8 * axis(0) + 0.6 * axis(1), axis(2), 0.8 * axis(2) + 0.6 * axis(3), axis(5)])


def make_conversation(links=True) -> Conversation:
    turns = [Turn(turn_id=f"t{i}", turn_idx=i, session_id=f"s{i}", speaker="Odalys", role="user", text=TEXTS[i],
                  timestamp=f"{DAYS[i]}T10:00:00") for i in range(5)]
    records = [Record(conversation_id=CID, record_id=IDS[i], segment_id=f"seg-{i}", type="fact", text=TEXTS[i], entities=["Odalys"],
                      topics=[], time_start=None, time_end=None, time_granularity="none", time_expression=None,
                      source_turn_ids=[f"t{i}"], backend="rules") for i in range(5)]
    conv = Conversation(conversation_id=CID, source="chat_jsonl", source_file="x.jsonl", turns=turns, exchanges=[[i] for i in range(5)],
                        turn_embeddings=VECTORS.copy(), records=records, record_embeddings=VECTORS.copy(),
                        segments=[Segment(f"seg-{i}", i, [i], [i], 10, 1.0, "session") for i in range(5)],
                        nodes=[Node(node_id="n-odalys", kind="entity", name="Odalys", n_records=5)],
                        node_embeddings=axis(7)[None, :], record_nodes=[(r, "n-odalys") for r in IDS], stats=BuildStats(backend="rules"))
    if links:
        conv.links = [RecordLink(record_id="r-home-new", other_record_id="r-home-old", kind="supersedes", found_by="rules"),
                      RecordLink(record_id="r-kite", other_record_id="r-never", kind="contradicts", found_by="llm")]
    return conv


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("links") / "store")
    cfg = make_cfg()
    prepare_output(out, cfg)
    StoreWriter(out, cfg).write_batch([make_conversation()])
    return out


@pytest.fixture()
def store(store_dir):
    with open_store(store_dir, make_cfg()) as s:
        yield s


class Embedder:
    """Query vectors by hand: a question naming a record gets that record's vector."""

    dim = DIM

    def encode(self, texts):
        def vec(text):
            t = text.lower()
            if "kite" in t:
                return VECTORS[2]
            return VECTORS[0] if "live" in t else axis(5)
        return np.stack([vec(t) for t in texts]).astype(np.float32)


def plan(goal: str, window: tuple[str, str] | None = None) -> QueryPlan:
    tw = TimeWindow(start=window[0], end=window[1]) if window else None
    return QueryPlan(routes=[Route(goal=goal, search_terms=[], entities=[], topics=[], time_window=tw)])


def retriever(store, validity=True, **over) -> Retriever:
    cfg = RetrievalConfig(channels=["record_vector"], validity=validity, time_routes="channel", **over)
    return Retriever(store, cfg, Embedder().encode)


# ---------------------------------------------------------------------------- the table and its rows
def test_record_links_is_declared_once_and_written_with_the_later_records_day():
    assert TABLES["record_links"] is RecordLink
    assert RecordLink.column_names() == ["conversation_id", "record_id", "other_record_id", "kind", "stated_at", "found_by"]
    rows = conversation_rows(make_conversation(), DIM)["record_links"]
    assert [(r["record_id"], r["other_record_id"], r["kind"], str(r["stated_at"]), r["found_by"]) for r in rows] == [
        ("r-home-new", "r-home-old", "supersedes", "2024-04-10", "rules"), ("r-kite", "r-never", "contradicts", "2024-06-01", "llm")]
    assert all(r["conversation_id"] == CID for r in rows)


def test_the_view_and_the_loaded_conversation_derive_the_same_validity(store):
    view = {r["record_id"]: r for r in store.sql("SELECT * FROM record_validity WHERE conversation_id = $cid", {"cid": CID})}
    assert set(view) == set(IDS)
    assert (str(view["r-home-old"]["valid_until"]), view["r-home-old"]["superseded_by"]) == ("2024-04-10", "r-home-new")
    assert view["r-home-new"]["superseded_by"] is None and view["r-home-new"]["valid_until"] is None
    assert view["r-never"]["conflicts_with"] == ["r-kite"] and view["r-kite"]["conflicts_with"] == ["r-never"]
    conv = LoadedConversation.load(store, CID)
    v, ids = conv.validity, conv.records.ids
    for i, rid in enumerate(ids):
        assert v.valid_from[i] == str(view[rid]["valid_from"])
        assert v.valid_until.get(i) == (None if view[rid]["valid_until"] is None else str(view[rid]["valid_until"]))
        assert (ids[v.superseded_by[i]] if i in v.superseded_by else None) == view[rid]["superseded_by"]
        assert [ids[j] for j in v.conflicts.get(i, [])] == view[rid]["conflicts_with"]


def test_the_successor_said_first_wins_in_both_derivations(tmp_path):
    """Two records superseding one: both derivations pick the one said first."""
    conv = make_conversation()
    conv.links.append(RecordLink(record_id="r-bread", other_record_id="r-home-old", kind="supersedes", found_by="llm"))
    out = str(tmp_path / "s")
    prepare_output(out, make_cfg())
    StoreWriter(out, make_cfg()).write_batch([conv])
    with open_store(out, make_cfg()) as s:
        (row,) = s.sql("SELECT superseded_by, valid_until FROM record_validity WHERE record_id = 'r-home-old'")
        loaded = LoadedConversation.load(s, CID)
    assert (row["superseded_by"], str(row["valid_until"])) == ("r-home-new", "2024-04-10")
    i = loaded.records.ids.index("r-home-old")
    assert loaded.records.ids[loaded.validity.superseded_by[i]] == "r-home-new"
    assert loaded.validity.chain(i) == sorted(loaded.validity.chain(i), key=lambda j: loaded.validity.valid_from[j])


# ---------------------------------------------------------------------------- retrieval
def test_current_first_and_the_superseded_line_is_marked_and_charged(store):
    got = retriever(store).retrieve(CID, plan("where does Odalys live"), "where does Odalys live")
    order = [k for k, _ in got.fused]
    assert order.index("r-home-new") < order.index("r-home-old")  # the old one was the nearer vector
    by_key = {e.key: e for e in got.selected}
    assert {"r-home-old", "r-home-new"} <= set(by_key)
    old = by_key["r-home-old"]
    assert old.note == ValidityNote(until="2024-04-10", now="Odalys moved to Brindlecote.")
    line = old.render()
    assert "[was: Odalys lives in Quarrenby. until 2024-04-10; now: Odalys moved to Brindlecote.]" in line and "said 2024-03-01" in line
    assert old.tokens == count_tokens(line)
    assert got.context_tokens == count_tokens(got.context_text)
    assert by_key["r-home-new"].note is None


def test_the_superseded_weight_is_the_share_of_its_fused_score_the_old_record_keeps(store):
    query = "where does Odalys live"
    off = dict(retriever(store, validity=False).retrieve(CID, plan(query), query).fused)
    for weight in (0.0, 0.7, 1.0):
        fused = dict(retriever(store, superseded_weight=weight).retrieve(CID, plan(query), query).fused)
        assert fused["r-home-old"] == pytest.approx(off["r-home-old"] * weight)
        assert fused["r-home-new"] >= off["r-home-old"]  # the successor comes in at the old one's score


def test_off_the_links_change_nothing(store):
    off = retriever(store, validity=False).retrieve(CID, plan("where does Odalys live"), "where does Odalys live")
    assert [k for k, _ in off.fused][0] == "r-home-old" and all(e.note is None for e in off.selected)


def test_a_question_about_the_past_asks_what_held_then(store):
    march = retriever(store).retrieve(CID, plan("where did Odalys live", ("2024-03-01", "2024-03-31")), "where did Odalys live in March")
    order = [k for k, _ in march.fused]
    assert order.index("r-home-old") < order.index("r-home-new")


def test_contradictions_come_in_pairs_with_their_days(store):
    got = retriever(store).retrieve(CID, plan("has Odalys ever flown a kite"), "has Odalys ever flown a kite")
    by_key = {e.key: e for e in got.selected}
    assert {"r-never", "r-kite"} <= set(by_key)
    assert by_key["r-never"].note.conflicts == ("said 2024-06-01: Odalys flew a kite on the beach.",)
    assert by_key["r-kite"].note.conflicts == ("said 2024-05-02: Odalys has never flown a kite.",)
    assert "[conflicts with: said 2024-06-01: Odalys flew a kite on the beach.]" in by_key["r-never"].render()


def test_whatever_the_budget_a_superseded_record_comes_with_its_successor(store):
    r = retriever(store)
    full = r.retrieve(CID, plan("where does Odalys live"), "q")
    lines = {e.key: e.tokens for e in full.selected}
    for budget in range(lines["r-home-old"], sum(lines.values()) + 2):
        got = r.retrieve(CID, plan("where does Odalys live"), "q", budget=budget)
        keys = {e.key for e in got.selected}
        assert "r-home-old" not in keys or "r-home-new" in keys, budget
        assert "r-never" not in keys or "r-kite" in keys, budget
        assert got.context_tokens == count_tokens(got.context_text) <= budget


def test_the_context_at_any_budget_is_what_retrieve_makes_there(store):
    """evaluate's recall curve reads `at_budget` on one retrieval: it must be the context a
    retrieval at that budget makes, validity completion included (a superseded record never
    without its successor)."""
    r = retriever(store)
    big = r.retrieve(CID, plan("where does Odalys live"), "q", budget=10_000)
    for budget in range(10, sum(e.tokens for e in big.selected) + 2, 3):
        again = [e.key for e in r.retrieve(CID, plan("where does Odalys live"), "q", budget=budget).selected]
        at = r.at_budget(big, budget)
        assert [e.key for e in at] == again, budget
        assert "r-home-old" not in again or "r-home-new" in again, budget


# ---------------------------------------------------------------------------- Memory
@pytest.fixture()
def memory(store_dir):
    from lychee_ray.config import LycheeConfig

    cfg = LycheeConfig.model_validate({"embedding": {"model": "test-model", "dim": DIM}, "retrieval": {"channels": ["record_vector"]}})
    mem = Memory(cfg, open_store(store_dir, cfg), embedder=Embedder())
    yield mem
    mem.close()


def test_records_say_their_validity_and_current_only_drops_the_superseded(memory):
    everything = memory.records(CID)
    assert everything.num_rows == 5
    assert {"valid_from", "valid_until", "superseded_by", "conflicts_with"} <= set(everything.column_names)
    current = memory.records(CID, current_only=True)
    assert set(current.column("record_id").to_pylist()) == set(IDS) - {"r-home-old"}


def test_items_carry_what_the_links_say(memory):
    items = {i.key: i for i in memory.search(CID, "where does Odalys live")}
    old = items["r-home-old"]
    assert (old.valid_from, old.valid_until, old.superseded_by) == ("2024-03-01", "2024-04-10", "r-home-new")
    assert old.note == ValidityNote(until="2024-04-10", now="Odalys moved to Brindlecote.")
    assert "[was: Odalys lives in Quarrenby. until 2024-04-10" in old.prompt_item().line()
    assert items["r-home-new"].superseded_by is None and items["r-home-new"].valid_from == "2024-04-10"


def test_history_is_the_chain_of_values_with_days_and_sources(memory):
    history = memory.history(CID, "where does Odalys live")
    assert [(h.record_id, h.valid_from, h.valid_until, h.current, h.source_turn_ids) for h in history] == [
        ("r-home-old", "2024-03-01", "2024-04-10", False, ("t0",)), ("r-home-new", "2024-04-10", None, True, ("t1",))]
    kite = memory.history(CID, "has Odalys ever flown a kite")
    assert [h.record_id for h in kite] == ["r-never", "r-kite"] and kite[0].conflicts_with == ("r-kite",)
