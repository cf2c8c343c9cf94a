"""The `rules` backend (lychee_ray.rules): encoder on real LoCoMo turns, planner, extractive answers.

LoCoMo tests read the fixture tests/fixtures/locomo_fixture.json (conv-26, conv-30 and conv-41,
the first sessions of each) and the LongMemEval one tests/fixtures/longmemeval_fixture.json. Turns are
built the way `read.py` builds them: the BLIP caption appended as "[image: ...]", the session
stamp as an ISO timestamp.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import date

import pytest

from lychee_ray.dates import parse_source_datetime
from lychee_ray.rules.answerer import extractive_answer
from lychee_ray.rules.encoder import RulesEncoder
from lychee_ray.rules.planner import RulesPlanner
from lychee_ray.rules.pronouns import resolve_pronouns
from lychee_ray.rules.text import (
    classify,
    content_words,
    segment_keyphrases,
    singular,
    split_sentences,
    topics_in,
)
from lychee_ray.rules.timeparse import find_time_expressions
from lychee_ray.schemas import EncodeOutput, EntityState, QueryPlan, ResolutionState
from lychee_ray.tables import Turn

from .conftest import LME_PATH, LOCOMO_PATH


# --------------------------------------------------------------------------------------------
# Loading LoCoMo as Turns
# --------------------------------------------------------------------------------------------
def _sessions(conv: dict) -> list[list[Turn]]:
    body = conv["conversation"]
    nums = sorted(int(m.group(1)) for k in body if (m := re.fullmatch(r"session_(\d+)", k)))
    out, idx = [], 0
    for n in nums:
        stamp = parse_source_datetime(body[f"session_{n}_date_time"])
        turns = []
        for t in body[f"session_{n}"]:
            text = t.get("text") or ""
            if t.get("blip_caption"):
                text = f"{text} [image: {t['blip_caption']}]".strip()
            turns.append(Turn(turn_id=t["dia_id"], turn_idx=idx, session_id=f"session_{n}", speaker=t["speaker"], role="speaker", text=text, timestamp=stamp.isoformat()))
            idx += 1
        out.append(turns)
    return out


def _encode_conversation(enc: RulesEncoder, sessions: list[list[Turn]]) -> list[EncodeOutput]:
    """Session by session, carrying d_k and the 8 most recent records like encode.py does."""
    outs, ctx, recent = [], None, []
    for turns in sessions:
        out = enc.encode(turns, ctx, recent)
        outs.append(out)
        ctx, recent = out.state, (recent + list(out.records))[-8:]
    return outs


@pytest.fixture(scope="module")
def locomo():
    return json.loads(LOCOMO_PATH.read_text())


@pytest.fixture(scope="module")
def conv26(locomo):
    conv = next(c for c in locomo if c["sample_id"] == "conv-26")
    sessions = _sessions(conv)[:5]
    assert len(sessions) == 5  # the fixture keeps 6 of conv-26's sessions
    return conv, sessions, _encode_conversation(RulesEncoder(), sessions)


def _records_of(outs, turn_id):
    return [r for out in outs for r in out.records if turn_id in r.source_turn_ids]


# --------------------------------------------------------------------------------------------
# Encoder on real turns
# --------------------------------------------------------------------------------------------
def test_relative_date_resolved_and_speaker_attributed(conv26):
    _, _, outs = conv26
    # D1:3 (session of 8 May 2023): "I went to a LGBTQ support group yesterday and it was so powerful."
    [rec] = _records_of(outs, "D1:3")
    assert rec.text.startswith("Caroline went to a LGBTQ support group yesterday (7 May 2023)")
    assert (rec.time.start, rec.time.end, rec.time.granularity, rec.time.expression) == ("2023-05-07", "2023-05-07", "day", "yesterday")
    assert rec.type == "event"
    assert rec.entities[0] == "Caroline" and "LGBTQ" in rec.entities
    assert 1 <= len(rec.topics) <= 3
    # Topics are keyphrases of the segment found in the record's own text, not lexicon categories.
    words = {singular(w) for w in re.findall(r"[a-z0-9'+-]+", rec.text.lower())}
    assert all(set(_singulars(t)) <= words for t in rec.topics)


def _singulars(topic: str) -> list[str]:
    return [singular(w) for w in topic.split()]


def test_topics_are_short_normalized_phrases(conv26):
    _, _, outs = conv26
    topics = [t for out in outs for r in out.records for t in r.topics]
    assert topics and all(t == t.lower().strip() and 1 <= len(t.split()) <= 2 for t in topics)
    assert all(len(r.topics) <= 3 and len(set(r.topics)) == len(r.topics) for out in outs for r in out.records)
    shared = Counter(topics)
    assert sum(n for n in shared.values() if n >= 2) > 0.5 * len(topics)  # most topic uses are shared


def test_last_saturday_and_next_month(conv26):
    _, _, outs = conv26
    race = [r for r in _records_of(outs, "D2:1") if "charity race" in r.text]
    assert race and race[0].time.start == "2023-05-20"  # session of Thu 25 May 2023
    assert "Melanie ran a charity race" in race[0].text and "(20 May 2023)" in race[0].text
    camping = [r for r in _records_of(outs, "D2:7") if "camping" in r.text]
    assert camping and (camping[0].time.start, camping[0].time.end) == ("2023-06-01", "2023-06-30")
    assert camping[0].time.granularity == "month"


def test_second_person_becomes_the_other_speaker(conv26):
    _, _, outs = conv26
    # D1:12 Melanie: "You'd be a great counselor! Your empathy and understanding will really help ..."
    texts = [r.text for r in _records_of(outs, "D1:12")]
    assert any("Caroline would be a great counselor" in t for t in texts)
    assert any("Caroline's empathy" in t for t in texts)
    assert not any(re.search(r"\b(?:you|your|I|my)\b", t) for t in texts)


def test_every_turn_with_content_has_a_record(conv26):
    conv, sessions, outs = conv26
    names = {conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]}
    covered = {tid for out in outs for r in out.records for tid in r.source_turn_ids}
    with_content = [t for s in sessions for t in s if content_words(t.text, names)]
    assert len(with_content) > 0.9 * sum(len(s) for s in sessions)
    missing = [t.turn_id for t in with_content if t.turn_id not in covered]
    assert missing == []
    all_ids = {t.turn_id for s in sessions for t in s}
    assert covered <= all_ids


def test_outputs_validate_and_are_deterministic(conv26):
    _, sessions, outs = conv26
    for out in outs:
        again = EncodeOutput.model_validate_json(out.model_dump_json())
        assert again == out
        for r in out.records:
            assert r.text.strip() and r.source_turn_ids
            assert r.time.granularity in ("day", "week", "month", "year", "none")
            if r.time.start:
                assert date.fromisoformat(r.time.start) <= date.fromisoformat(r.time.end)
    assert _encode_conversation(RulesEncoder(), sessions) == outs


def test_image_caption_kept_and_greeting_dropped(conv26):
    conv, _, outs = conv26
    caption = next(t["blip_caption"] for t in conv["conversation"]["session_1"] if t["dia_id"] == "D1:12")
    assert any(f"[image: {caption}]" in r.text for r in _records_of(outs, "D1:12"))
    # D1:1 is "Hey Mel! Good to see you! How have you been?": greetings only, no record.
    assert _records_of(outs, "D1:1") == []
    assert not any(r.text.startswith(("Hey Mel", "Hi Mel")) for out in outs for r in out.records)


def test_state_aliases_anchor_and_carry_forward(conv26):
    _, sessions, outs = conv26
    s1, s2 = outs[0].state, outs[1].state
    by_name = {e.name: e for e in s1.entities}
    assert by_name["Melanie"].aliases == ["Mel"] and by_name["Melanie"].referent == "Melanie (speaker)"
    assert by_name["Caroline"].referent == "Caroline (speaker)"
    assert s1.date_anchor == "2023-05-08" and s2.date_anchor == "2023-05-25"
    # Carried forward: mentioned in session 1, still known after session 2.
    assert "LGBTQ" in {e.name for e in s2.entities}
    # Aliases map to the speaker in record entities: "Mel" never appears as its own entity.
    assert all("Mel" not in r.entities for out in outs for r in out.records)



def test_summary_ablation(conv26):
    _, sessions, outs = conv26
    [rec] = RulesEncoder().encode(sessions[0], None, [], summary=True).records
    assert rec.source_turn_ids == [t.turn_id for t in sessions[0]]
    assert "Caroline went to a LGBTQ support group yesterday (7 May 2023)" in rec.text
    atomic = outs[0].records
    assert set(rec.entities) == {e for r in atomic for e in r.entities}
    assert set(rec.topics) == {t for r in atomic for t in r.topics}
    assert rec.time.start == min(r.time.start for r in atomic if r.time.start)


def test_temporal_gold_dates_match_record_times(locomo):
    """LoCoMo category 2 (temporal): does a record on an evidence turn carry the gold date?

    Measured on the fixture (3 conversations cut to 5-6 sessions, 24 temporal questions, 23
    with a parseable gold date): exact 18 (78%), one window containing the other 19 (83%).
    (On the whole dev file, 7 conversations and 177 parsed dates: exact 72%, contained 84%.)
    The floors below sit a little under the fixture's figures: one more miss still passes, two
    fail. The figure is printed with -s."""
    enc = RulesEncoder()
    parsed = exact = contained = 0
    for conv in locomo:
        sessions = _sessions(conv)
        outs = _encode_conversation(enc, sessions)
        session_date = {t.turn_id: t.timestamp[:10] for s in sessions for t in s}
        by_turn: dict[str, list] = {}
        for out in outs:
            for r in out.records:
                for tid in r.source_turn_ids:
                    by_turn.setdefault(tid, []).append(r)
        for qa in conv["qa"]:
            evidence = [e for e in qa["evidence"] if e in session_date]
            if qa["category"] != 2 or not evidence:
                continue
            gold = find_time_expressions(str(qa.get("answer", "")), session_date[evidence[0]])
            if not gold:
                continue  # durations ("4 years") and non-dates
            parsed += 1
            g = gold[0]
            times = [r.time for e in evidence for r in by_turn.get(e, []) if r.time.expression]
            exact += any((t.start, t.end) == (g.start, g.end) for t in times)
            contained += any((t.start <= g.start and t.end >= g.end) or (g.start <= t.start and g.end >= t.end) for t in times)
    print(f"\nLoCoMo temporal: {parsed} gold dates, exact {exact} ({exact / parsed:.0%}), contained {contained} ({contained / parsed:.0%})")
    assert parsed >= 20
    assert exact / parsed >= 0.70
    assert contained / parsed >= 0.78


# --------------------------------------------------------------------------------------------
# Encoder on hand-made turns
# --------------------------------------------------------------------------------------------
def _turn(tid, speaker, text, ts="2023-05-08T13:56:00", idx=0):
    return Turn(turn_id=tid, turn_idx=idx, session_id="s1", speaker=speaker, role="speaker", text=text, timestamp=ts)


def test_open_threads_are_unanswered_questions():
    turns = [
        _turn("t1", "Ann", "I adopted a cat. What do you think of cats?", idx=0),
        _turn("t2", "Bob", "Love them! Did you name her yet?", idx=1),
    ]
    out = RulesEncoder().encode(turns, None, [])
    assert out.state.open_threads == ["Bob: Did Ann name her yet?"]  # Ann's own question got Bob's reply
    # The next segment answers it: the thread closes.
    nxt = RulesEncoder().encode([_turn("t3", "Ann", "Yes, she is called Luna.", idx=2)], out.state, [])
    assert nxt.state.open_threads == []
    assert "Luna" in {e.name for e in nxt.state.entities}


def test_single_speaker_segment_resolves_you_through_the_state():
    ctx = ResolutionState(
        entities=[EntityState(name="Ann", aliases=[], referent="Ann (speaker)"), EntityState(name="Bob", aliases=["Bobby"], referent="Bob (speaker)")],
        date_anchor="2023-05-08",
        open_threads=[],
    )
    [rec] = RulesEncoder().encode([_turn("t1", "Ann", "I loved your review of the film.")], ctx, []).records
    assert rec.text == "Ann loved Bob's review of the film."
    assert rec.entities == ["Ann", "Bob"]
    # Without the state there is no known listener: "you" stays.
    [bare] = RulesEncoder().encode([_turn("t1", "Ann", "I loved your review of the film.")], None, []).records
    assert bare.text == "Ann loved your review of the film."


def test_context_date_anchor_used_when_turns_have_no_timestamp():
    ctx = ResolutionState(entities=[EntityState(name="Ann", aliases=[], referent="Ann (speaker)")], date_anchor="2023-05-08", open_threads=[])
    out = RulesEncoder().encode([_turn("t1", "Ann", "I moved to Berlin yesterday.", ts=None)], ctx, [])
    [rec] = out.records
    assert rec.time.start == "2023-05-07" and "Ann moved to Berlin yesterday (7 May 2023)" in rec.text
    assert "Berlin" in rec.entities and out.state.date_anchor == "2023-05-08"




def test_role_speakers_longmemeval_style():
    turns = [
        _turn("u1", "user", "I set a personal best of 27:12 in a charity 5K run last Saturday.", idx=0),
        _turn("a1", "assistant", "Congratulations on your personal best! I can suggest a training plan.", idx=1),
        _turn("a2", "assistant", "Keep it steady. Run 3 easy runs of 40 minutes a week and one tempo run at `5:20/km`.", idx=2),
    ]
    out = RulesEncoder().encode(turns, None, [])
    texts = [r.text for r in out.records]
    assert texts[0].startswith("The user set a personal best of 27:12 in a charity 5K run last Saturday (6 May 2023)")
    # an assistant's pleasantries and generic advice make no record; what it concretely proposed does
    assert not any("can suggest" in t or "Congratulations" in t for t in texts)
    assert [r.source_turn_ids for r in out.records if r.text.startswith("The assistant")] == [["a2"]]
    assert "40 minutes" in texts[-1] and "5:20/km" in texts[-1] and "Keep it steady" not in texts[-1]
    assert all("user" not in r.entities for r in out.records)  # roles are not named entities


def test_longmemeval_excerpt_encodes():
    inst = json.loads(LME_PATH.read_text())[0]
    enc, ctx, records = RulesEncoder(), None, []
    for sid, stamp, session in zip(inst["haystack_session_ids"], inst["haystack_dates"], inst["haystack_sessions"]):
        ts = parse_source_datetime(stamp).isoformat()
        turns = [Turn(turn_id=f"{sid}:{k}", turn_idx=k, session_id=sid, speaker=t["role"], role=t["role"], text=t["content"], timestamp=ts) for k, t in enumerate(session)]
        out = enc.encode(turns, ctx, records[-8:])
        ctx, records = out.state, records + list(out.records)
    evidence = [r.text for r in records if "25:50" in r.text or "27:12" in r.text]
    assert len(evidence) >= 2 and all("the user" in t.lower() for t in evidence)
    assert not any(re.search(r"\b(?:I|my|you|your)\b", r.text) for r in records if r.source_turn_ids[0].endswith(":0"))
    # Extractive answering has no notion of which value is newer (a knowledge-update question):
    # it returns a personal-best sentence, not necessarily the updated one.
    assert "personal best" in extractive_answer(inst["question"], evidence)


SOURDOUGH = [
    "I started sourdough baking last month. My first sourdough loaf came out flat.",
    "Oh no! Did you feed the starter every day?",
    "Yes, twice a day. The starter smells great now, so my second sourdough loaf rose much better.",
    "That is great! Baking bread at home is so rewarding.",
    "I'm going to bake sourdough for the neighbors next weekend.",
]


def test_topics_come_from_the_segment_text():
    """No word list knows "sourdough": it is a topic because the segment keeps talking about it,
    and every record of the segment that says it shares the topic node."""
    turns = [_turn(f"t{i}", "Ann" if i % 2 == 0 else "Bob", text, idx=i) for i, text in enumerate(SOURDOUGH)]
    out = RulesEncoder().encode(turns, None, [])
    assert any("sourdough" in kp for kp in segment_keyphrases("\n".join(SOURDOUGH), ["Ann", "Bob"]))
    with_sourdough = [r for r in out.records if "sourdough" in r.text.lower()]
    assert len(with_sourdough) >= 3
    shared = set.intersection(*(set(r.topics) for r in with_sourdough))
    assert any("sourdough" in t for t in shared), [r.topics for r in with_sourdough]
    assert all(1 <= len(r.topics) <= 3 for r in with_sourdough)
    # "starter" is said in two records (one a question): each that says it carries it.
    starter = [r for r in out.records if "starter" in r.text]
    assert starter and all("starter" in r.topics for r in starter)
    assert RulesEncoder().encode(turns, None, []) == out  # deterministic


@pytest.mark.parametrize(
    "text,keyphrases,expected",
    [
        ("Ann walks her dogs at dawn.", ["dog", "dawn"], ["dog", "dawn"]),  # plural text, singular topic
        ("The dog park was full of dogs.", ["dog park", "dog"], ["dog park"]),  # no word twice
        ("Two puppies and one puppy.", ["puppy"], ["puppy"]),
        ("The support groups meet weekly.", ["support group", "group"], ["support group"]),
        ("Nothing about that here.", ["dog", "sourdough"], []),
        ("a b c d", ["a", "b", "c", "d"], ["a", "b", "c"]),  # at most 3
    ],
)
def test_topics_in(text, keyphrases, expected):
    assert topics_in(text, keyphrases) == expected


@pytest.mark.parametrize(
    "text,names,present,absent",
    [
        # names are entities, not topics; a capitalized prefix of a name ("Sam") is an alias
        ("Sam told Samantha about the kayak trip. Samantha loved the kayak trip and the kayak.",
         ["Samantha"], ["kayak trip"], ["samantha", "sam"]),
        # adjectives and verbs said as such are no topics of their own
        ("I feel so thankful and hopeful. I cherish the garden. We cherish it. The garden is lovely.",
         [], ["garden"], ["thankful", "hopeful", "cherish"]),
        # an -ing word is a topic where it is used as a noun
        ("We went camping by the river. Camping is our thing. It was inspiring, inspiring!",
         [], ["camping"], ["inspiring"]),
        ("", [], [], []),
    ],
)
def test_segment_keyphrases(text, names, present, absent):
    kps = segment_keyphrases(text, names)
    assert all(kp == kp.lower() and 1 <= len(kp.split()) <= 2 for kp in kps)
    assert all(p in kps for p in present), kps
    assert not any(a in kps for a in absent), kps


@pytest.mark.parametrize(
    "text,expected",
    [
        ("I love hiking in the mountains.", "preference"),
        ("My favorite food is sushi.", "preference"),
        ("I went to Paris with my sister.", "event"),
        ("I'm going to a conference next month.", "event"),
        ("I'm allergic to peanuts.", "constraint"),
        ("I can't eat gluten anymore.", "constraint"),
        ("First you mix the flour, then you add the eggs.", "procedure"),
        ("Here is how to reset the router.", "procedure"),
        ("The build failed again after the update.", "failure_pattern"),
        ("The sync didn't work on my phone.", "failure_pattern"),
        ("I use an app to track my runs.", "tool_affordance"),
        ("You can use Notion to plan your week.", "tool_affordance"),
        ("My sister is a nurse.", "fact"),
        ("I'm so excited about it.", "fact"),  # "-ed" adjective, not a past action
        ("I can't wait to see it!", "fact"),  # "can't wait" is no constraint
    ],
)
def test_classify(text, expected):
    has_time = bool(find_time_expressions(text, date(2023, 5, 8)))
    assert classify(text, has_time) == expected


@pytest.mark.parametrize(
    "text,speaker,other,expected",
    [
        ("I went to the gym.", "Caroline", "Melanie", "Caroline went to the gym."),
        ("I love my dog.", "Caroline", "Melanie", "Caroline loves Caroline's dog."),
        ("I'm tired and I've been busy.", "Ann", "Bob", "Ann is tired and Ann has been busy."),
        ("I'd like that, and I'll try.", "Ann", "Bob", "Ann would like that, and Ann will try."),
        ("You're amazing and your art is great!", "Ann", "Bob", "Bob is amazing and Bob's art is great!"),
        ("Have you been there?", "Ann", "Bob", "Has Bob been there?"),
        ("Did you go?", "Ann", "Bob", "Did Bob go?"),  # no "goes" after an auxiliary
        ("Thank you, you know, it helps.", "Ann", "Bob", "Thank you, you know, it helps."),
        ("I took some me-time.", "Ann", "Bob", "Ann took some me-time."),
        ("You said I should go.", "Ann", None, "You said Ann should go."),  # no unambiguous listener
    ],
)
def test_resolve_pronouns(text, speaker, other, expected):
    assert resolve_pronouns(text, speaker, other) == expected


def test_split_sentences():
    assert split_sentences("Hi! I met Dr. Smith today. It was fun... Really?") == ["Hi!", "I met Dr. Smith today.", "It was fun...", "Really?"]
    assert split_sentences("Tips: 1. Drink water. 2. Sleep.") == ["Tips:", "1. Drink water.", "2. Sleep."]
    assert split_sentences("") == []


# --------------------------------------------------------------------------------------------
# Planner
# --------------------------------------------------------------------------------------------
def test_planner_entities_and_time_window():
    plan = RulesPlanner().plan("What did Caroline do in May 2023?", None, ["Melanie", "Caroline", "LGBTQ"])
    assert isinstance(plan, QueryPlan) and len(plan.routes) == 1
    route = plan.routes[0]
    assert route.goal == "What did Caroline do in May 2023?"
    assert route.entities == ["Caroline"]
    assert route.time_window is not None
    assert (route.time_window.start, route.time_window.end) == ("2023-05-01", "2023-05-31")
    assert "Caroline" in route.search_terms and "may" not in [t.lower() for t in route.search_terms]


def test_planner_aliases_topics_quotes_and_no_window():
    plan = RulesPlanner().plan('When did melanie read the book "Nothing is Impossible"?', None, ["Melanie", "Caroline"])
    route = plan.routes[0]
    assert route.entities == ["Melanie"]  # known names match case-insensitively
    assert route.time_window is None
    assert "Nothing is Impossible" in route.search_terms and "book" in route.search_terms
    assert route.topics == ["book"]  # the stored (singular) form; "Nothing is Impossible" is stopwords and an adjective
    plan2 = RulesPlanner().plan("When did Mel paint a sunrise?", None, ["Melanie", "Caroline"])
    # "Mel" is an alias, "paint" a verb: the one topic word is the question's own noun
    assert plan2.routes[0].entities == ["Melanie"] and plan2.routes[0].topics == ["sunrise"]
    route3 = RulesPlanner().plan("Where did Ann join the sourdough baking classes?", None, ["Ann"]).routes[0]
    assert route3.topics[:2] == ["sourdough baking", "baking class"] and "sourdough" in route3.topics


def test_planner_without_known_entities_and_with_question_date():
    route = RulesPlanner().plan("What did Jon and Gina do last weekend?", parse_source_datetime("2023/06/01 (Thu) 00:58")).routes[0]
    assert route.entities == ["Jon", "Gina"]
    assert (route.time_window.start, route.time_window.end) == ("2023-05-27", "2023-05-28")
    assert RulesPlanner().plan("What did Jon do?", None) == RulesPlanner().plan("What did Jon do?", None)


# --------------------------------------------------------------------------------------------
# Extractive answers
# --------------------------------------------------------------------------------------------
EVIDENCE = [
    "Caroline went to a LGBTQ support group yesterday (7 May 2023) and it was so powerful. She felt accepted.",
    "Melanie painted a lake sunrise last year (2022). Melanie loves painting.",
    "Caroline is researching adoption agencies.",
]


def test_extractive_picks_the_best_sentence():
    assert extractive_answer("What is Caroline researching?", EVIDENCE) == "Caroline is researching adoption agencies."
    assert extractive_answer("What does Melanie love?", EVIDENCE) == "Melanie loves painting."


def test_extractive_when_returns_the_date():
    assert extractive_answer("When did Caroline go to the LGBTQ support group?", EVIDENCE) == "7 May 2023"
    assert extractive_answer("When did Melanie paint a sunrise?", EVIDENCE) == "2022"


def test_extractive_ties_go_to_earlier_evidence_and_empty():
    ev = ["Jon opened a dance studio.", "Jon opened a bakery."]
    assert extractive_answer("What did Jon open?", ev) == "Jon opened a dance studio."
    assert extractive_answer("What did Jon open?", ev[::-1]) == "Jon opened a bakery."
    assert extractive_answer("Anything?", []) == ""
