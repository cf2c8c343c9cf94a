"""The evidence-recall mechanisms (issue 32), each on a small hand-written conversation whose
vectors come from a concept embedder (tests/support/concept_store.py): the mechanism finds or
selects the record a question needs, and the same retrieval without it does not.

- speaker focus (query/focus.py): the speakers' names are left out of the query vector's text,
  and the `speaker_*` channels rank within what the one named speaker said;
- evidence lines without source ids (`retrieval.evidence_sources`): more evidence per budget.
"""

from __future__ import annotations

import pytest

from lychee_ray.query.focus import asks_for_many, focus_speaker, named_speakers, strip_names, vector_text
from lychee_ray.query.retrieve import Retriever
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.schemas import QueryPlan, Route

from .support.concept_store import SPEAKERS, concept_embed, concept_store, config

CID = "talk"
# (session, speaker, text). Bo asks Ada about her holiday in words that match a question about
# Ada's hobbies better than Ada's own answer does, which never names her.
TURNS = [
    (1, "Bo", "Ada, did you enjoy the holiday?"),
    (1, "Ada", "I restore old clocks on the weekend"),
    (1, "Bo", "Ada, how is the office project?"),
    (1, "Ada", "The deadline is on Friday"),
    (2, "Bo", "I cook soup for dinner"),
    (2, "Ada", "My son likes the train"),
]
HOBBY_TURN, HOBBY_RECORD, ASKING_RECORD = "D1:1", f"{CID}:r001", f"{CID}:r000"


@pytest.fixture()
def store(tmp_path):
    with concept_store(tmp_path, CID, TURNS) as s:
        yield s


def retriever(store, *sets: str) -> Retriever:
    return Retriever(store, config(*sets).retrieval, concept_embed)


def plan(question: str) -> QueryPlan:
    return RulesPlanner().plan(question, "2023-06-01", list(SPEAKERS))


def route(goal: str, entities=()) -> Route:
    return Route(goal=goal, search_terms=[], entities=list(entities), topics=[], time_window=None)


# ---------------------------------------------------------------------------- focus, pure
def test_strip_names_drops_whole_names_and_their_possessive_only():
    assert strip_names("What are Ada's hobbies and does ada like Adam?", ["Ada"]) == "What are hobbies and does like Adam?"
    assert strip_names("Bo-Ada trip with Ada", ["Ada"]) == "Bo-Ada trip with"  # part of a hyphenated word stays
    assert strip_names("Ada?", ["Ada"]) == "Ada?"  # nothing but the name: the text itself
    assert strip_names("Mary Ann's cat", ["Mary Ann", "Mary"]) == "cat"  # the longest name first


def test_the_focus_is_the_one_named_speaker():
    speakers = ["Ada", "Bo", "user"]
    assert named_speakers(route("what does ada cook"), speakers) == ["Ada"]
    assert focus_speaker(route("What do Ada and Bo share?"), speakers) is None  # two: no focus
    assert focus_speaker(route("What did the user buy?"), speakers) is None  # a role is no name
    assert focus_speaker(route("What did she buy?", ["Bo"]), speakers) == "Bo"  # planner entities count
    assert vector_text(route("What hobbies does Ada have?", ["Ada"]), speakers) == "What hobbies does have?"
    assert vector_text(route("What hobbies does Ada have?", ["Ada"]), speakers, strip=False) == "What hobbies does Ada have?"


def test_a_plural_ask_names_a_plural_after_what_which_or_how_many():
    many = ["Which board games has Ivo bought this year?", "what spices does Ivo keep in the van",
            "Which kinds of festivals have they attended?", "Find out what tools the user lent: what tools has the user lent?",
            "How many board games does Ivo own?", "how many old clocks has Ada restored"]
    one = ["What is Ivo's job?", "What did Tess buy?", "What does Ivo do?", "Where has Ivo lived?",
           "What has Ivo done?", "What does Tess's brother do?", "What was the bus fare?", "How much is the bus fare?"]
    assert [asks_for_many(route(g)) for g in many] == [True] * len(many)
    assert [asks_for_many(route(g)) for g in one] == [False] * len(one)


def test_a_plural_ask_ranks_every_channel_as_deep_as_plural_ask_top_k(store):
    """One list deep for a single fact, three deep for "what hobbies ...", speaker channels too."""
    depth = ("retrieval.channels=[record_vector,speaker]", "retrieval.top_k_per_channel=1", "retrieval.speaker_top_k=1")
    for question, sets, want in (("What is Ada's hobby?", ("retrieval.plural_ask_top_k=3",), 1),
                                 ("What hobbies does Ada have?", ("retrieval.plural_ask_top_k=3",), 3),
                                 ("What hobbies does Ada have?", ("retrieval.plural_ask_top_k=0",), 1)):
        r = retriever(store, *depth, *sets)
        p = plan(question)
        rankings, _ = r.channel_rankings(CID, p, concept_embed(r.query_texts(CID, p, question)))
        assert {name: len(keys) for name, keys in rankings.items()} == {
            "r0:record_vector": want, "r0:speaker_turn": want, "r0:speaker_record": want}, question


# ---------------------------------------------------------------------------- speaker focus
def test_without_the_name_the_query_vector_finds_the_speakers_own_turn(store):
    question = "What hobbies does Ada have?"
    for strip, top in ((True, HOBBY_TURN), (False, "D1:0")):
        r = retriever(store, "retrieval.channels=[turn_vector]", "retrieval.top_k_per_channel=1", f"retrieval.strip_speaker_names={str(strip).lower()}")
        p = plan(question)
        rankings, pool = r.channel_rankings(CID, p, concept_embed(r.query_texts(CID, p, question)))
        assert pool[rankings["r0:turn_vector"][0]].source_turn_ids == [top]


def test_the_first_selected_record_is_the_answer_only_with_the_names_stripped(store):
    question = "What hobbies does Ada have?"
    with_it = retriever(store, "retrieval.channels=[record_vector]").retrieve(CID, plan(question), question)
    without = retriever(store, "retrieval.channels=[record_vector]", "retrieval.strip_speaker_names=false").retrieve(CID, plan(question), question)
    assert with_it.selected[0].key == HOBBY_RECORD
    assert without.selected[0].key == ASKING_RECORD


def test_speaker_channels_rank_only_what_the_named_speaker_said(store):
    question = "What hobbies does Ada have?"
    # their depth is speaker_top_k, not top_k_per_channel (the plural ask's depth is off here)
    r = retriever(store, "retrieval.channels=[speaker]", "retrieval.strip_speaker_names=false", "retrieval.speaker_top_k=1",
                  "retrieval.plural_ask_top_k=0")
    p = plan(question)
    rankings, pool = r.channel_rankings(CID, p, concept_embed(r.query_texts(CID, p, question)))
    # even with the name in the vector, Bo's question is out of scope: Ada's own answer is first
    assert rankings["r0:speaker_turn"] == [HOBBY_RECORD]
    assert rankings["r0:speaker_record"] == [HOBBY_RECORD]
    deeper = retriever(store, "retrieval.channels=[speaker]", "retrieval.strip_speaker_names=false", "retrieval.speaker_top_k=2",
                       "retrieval.top_k_per_channel=1", "retrieval.plural_ask_top_k=0").channel_rankings(CID, p, concept_embed(r.query_texts(CID, p, question)))[0]
    assert len(deeper["r0:speaker_record"]) == 2 and deeper["r0:speaker_record"][0] == HOBBY_RECORD
    ada_turns = {f"D{s}:{i}" for i, (s, sp, _) in enumerate(TURNS) if sp == "Ada"}
    full = retriever(store, "retrieval.channels=[speaker]").channel_rankings(CID, p, concept_embed([question]))[1]
    assert {t for e in full.values() for t in e.source_turn_ids} <= ada_turns


def test_speaker_channels_stay_silent_without_one_named_speaker(store):
    r = retriever(store, "retrieval.channels=[speaker]")
    for question in ("What do Ada and Bo both like?", "What is for dinner?"):
        p = plan(question)
        rankings, _ = r.channel_rankings(CID, p, concept_embed(r.query_texts(CID, p, question)))
        assert rankings == {}


# ---------------------------------------------------------------------------- evidence lines
def test_lines_without_source_ids_fit_more_evidence_and_keep_the_rows_sources(store):
    question = "What hobbies does Ada have?"
    budget = 60
    cited = retriever(store, "retrieval.evidence_sources=true").retrieve(CID, plan(question), question, budget)
    bare = retriever(store, "retrieval.evidence_sources=false").retrieve(CID, plan(question), question, budget)
    assert all("src D" in e.render() for e in cited.selected)
    assert not any("src" in e.render() for e in bare.selected)
    assert "src" not in bare.context_text and bare.context_tokens <= budget
    assert len(bare.selected) > len(cited.selected)
    # recall reads the rows: each selected item still knows its source turn
    assert bare.source_turn_ids and all(e.source_turn_ids for e in bare.selected)
