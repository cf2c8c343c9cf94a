"""The `rules` backend (lychee_ray.rules): encoder on LoCoMo-format turns, planner, extractive answers.

Conversations come from two places: the session's generated archive (tests/support/generated.py:
3 conversations, chit-chat and work, with labelled facts and dates) for what must hold on any
conversation, and a hand-made conversation of invented text (tests/fixtures/locomo_quirks.json)
for the exact cases: a greeting by nickname, an image caption, second-person praise, "yesterday",
"last Saturday" and "next month". Turns are built the way `read.py` builds them: the BLIP
caption appended as "[image: ...]", the session stamp as an ISO timestamp.
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

from .conftest import FIXTURES
from .support.generated_lme import labelled_instance



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


def _encoded(conv: dict) -> tuple[dict, list[list[Turn]], list[EncodeOutput]]:
    sessions = _sessions(conv)
    return conv, sessions, _encode_conversation(RulesEncoder(), sessions)


@pytest.fixture(scope="module")
def generated(generated_locomo):
    """(conversation, sessions, outputs) of every conversation of the generated archive."""
    return [_encoded(conv) for conv in json.loads((generated_locomo.archive / "locomo.json").read_text())]


@pytest.fixture(scope="module")
def quirks():
    """The hand-made conversation: Tessaly (nicknamed Tess) and Orrin, two sessions."""
    (conv,) = json.loads((FIXTURES / "locomo_quirks.json").read_text())
    return _encoded(conv)


def _records_of(outs, turn_id):
    return [r for out in outs for r in out.records if turn_id in r.source_turn_ids]


# --------------------------------------------------------------------------------------------
# Encoder on LoCoMo-format turns
# --------------------------------------------------------------------------------------------
def test_relative_date_resolved_and_speaker_attributed(quirks):
    _, _, outs = quirks
    # D1:3 (session of 21 February 2023): Orrin, "I went to the Harbourside woodcarving workshop yesterday and ..."
    [rec] = _records_of(outs, "D1:3")
    assert rec.text.startswith("Orrin went to the Harbourside woodcarving workshop yesterday (20 February 2023)")
    assert (rec.time.start, rec.time.end, rec.time.granularity, rec.time.expression) == ("2023-02-20", "2023-02-20", "day", "yesterday")
    assert rec.type == "event"
    assert rec.entities[0] == "Orrin" and "Harbourside" in rec.entities
    assert 1 <= len(rec.topics) <= 3
    # Topics are keyphrases of the segment found in the record's own text, not lexicon categories.
    words = {singular(w) for w in re.findall(r"[a-z0-9'+-]+", rec.text.lower())}
    assert all(set(_singulars(t)) <= words for t in rec.topics)


def _singulars(topic: str) -> list[str]:
    return [singular(w) for w in topic.split()]


def test_topics_are_short_normalized_phrases(generated):
    for conv, _, outs in generated:
        topics = [t for out in outs for r in out.records for t in r.topics]
        assert topics and all(t == t.lower().strip() and 1 <= len(t.split()) <= 2 for t in topics)
        assert all(len(r.topics) <= 3 and len(set(r.topics)) == len(r.topics) for out in outs for r in out.records)
        shared = Counter(topics)
        assert sum(n for n in shared.values() if n >= 2) > 0.5 * len(topics), conv["sample_id"]  # most topic uses are shared


def test_last_saturday_and_next_month(quirks):
    _, _, outs = quirks
    relay = [r for r in _records_of(outs, "D2:1") if "relay" in r.text]
    assert relay and relay[0].time.start == "2023-03-25"  # session of Thu 30 March 2023
    assert "Tessaly swam in a relay" in relay[0].text and "(25 March 2023)" in relay[0].text
    canoe = [r for r in _records_of(outs, "D2:7") if "canoe" in r.text]
    assert canoe and (canoe[0].time.start, canoe[0].time.end) == ("2023-04-01", "2023-04-30")
    assert canoe[0].time.granularity == "month"


def test_second_person_becomes_the_other_speaker(quirks):
    _, _, outs = quirks
    # D1:6 Tessaly: "You'd be a great teacher! Your patience and warmth will really help ..."
    texts = [r.text for r in _records_of(outs, "D1:6")]
    assert any("Orrin would be a great teacher" in t for t in texts)
    assert any("Orrin's patience" in t for t in texts)
    assert not any(re.search(r"\b(?:you|your|I|my)\b", t) for t in texts)


def test_every_turn_with_content_has_a_record(generated, quirks):
    for conv, sessions, outs in [*generated, quirks]:
        names = {conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]}
        covered = {tid for out in outs for r in out.records for tid in r.source_turn_ids}
        with_content = [t for s in sessions for t in s if content_words(t.text, names)]
        if conv is not quirks[0]:  # the hand-made one is short, and a fifth of it greetings and questions
            assert len(with_content) > 0.9 * sum(len(s) for s in sessions)
        missing = [t.turn_id for t in with_content if t.turn_id not in covered]
        assert missing == [], conv["sample_id"]
        all_ids = {t.turn_id for s in sessions for t in s}
        assert covered <= all_ids


def test_outputs_validate_and_are_deterministic(generated, quirks):
    for _, sessions, outs in [*generated, quirks]:
        for out in outs:
            again = EncodeOutput.model_validate_json(out.model_dump_json())
            assert again == out
            for r in out.records:
                assert r.text.strip() and r.source_turn_ids
                assert r.time.granularity in ("day", "week", "month", "year", "none")
                if r.time.start:
                    assert date.fromisoformat(r.time.start) <= date.fromisoformat(r.time.end)
        assert _encode_conversation(RulesEncoder(), sessions) == outs


def test_image_caption_kept_and_greeting_dropped(quirks):
    conv, _, outs = quirks
    caption = next(t["blip_caption"] for t in conv["conversation"]["session_1"] if t["dia_id"] == "D1:6")
    assert any(f"[image: {caption}]" in r.text for r in _records_of(outs, "D1:6"))
    # D1:1 is "Hi Tess! Good to see you! How are you?": greetings only, no record.
    assert _records_of(outs, "D1:1") == []
    assert not any(r.text.startswith(("Hey Tess", "Hi Tess")) for out in outs for r in out.records)


def test_state_aliases_anchor_and_carry_forward(quirks):
    _, sessions, outs = quirks
    s1, s2 = outs[0].state, outs[1].state
    by_name = {e.name: e for e in s1.entities}
    assert by_name["Tessaly"].aliases == ["Tess"] and by_name["Tessaly"].referent == "Tessaly (speaker)"
    assert by_name["Orrin"].referent == "Orrin (speaker)"
    assert s1.date_anchor == "2023-02-21" and s2.date_anchor == "2023-03-30"
    # Carried forward: mentioned in session 1 only, still known after session 2.
    assert "Harbourside" in {e.name for e in s2.entities}
    assert not any("Harbourside" in t.text for t in sessions[1])
    # Aliases map to the speaker in record entities: "Tess" never appears as its own entity.
    assert all("Tess" not in r.entities for out in outs for r in out.records)


def test_summary_ablation(quirks):
    _, sessions, outs = quirks
    [rec] = RulesEncoder().encode(sessions[0], None, [], summary=True).records
    assert rec.source_turn_ids == [t.turn_id for t in sessions[0]]
    assert "Orrin went to the Harbourside woodcarving workshop yesterday (20 February 2023)" in rec.text
    atomic = outs[0].records
    assert set(rec.entities) == {e for r in atomic for e in r.entities}
    assert set(rec.topics) == {t for r in atomic for t in r.topics}
    assert rec.time.start == min(r.time.start for r in atomic if r.time.start)


def test_temporal_gold_dates_match_record_times(generated, generated_locomo):
    """Temporal questions of the generated archive: does a record on an evidence turn carry the
    date the generator planted there (the fact's `date`, said as "on 14 March", "yesterday",
    "two weeks ago", ...)?

    Measured on the session's archive (GENERATED: 18 dated evidence turns): exact 16 (89%), one
    window containing the day 18 (100%). The two misses are "a week ago" and "two weeks ago",
    which the encoder reads as that calendar week (granularity week) while the generator means
    exactly 7 and 14 days back: the week contains the day. The floors sit a little under the
    figures: one more miss still passes, two fail. The figure is printed with -s."""
    facts = {f["fact_id"]: f for f in generated_locomo.facts()}
    dated = 0
    exact = contained = 0
    for conv, _, outs in generated:
        by_turn: dict[str, list] = {}
        for out in outs:
            for r in out.records:
                for tid in r.source_turn_ids:
                    by_turn.setdefault(tid, []).append(r)
        for q in generated_locomo.asked("temporal", conv["sample_id"]):
            for fact in (facts[fid] for fid in q["fact_ids"]):
                if not fact["date"]:
                    continue
                dated += 1
                day = fact["date"]
                times = [r.time for r in by_turn.get(fact["turn_id"], []) if r.time.expression]
                exact += any((t.start, t.end) == (day, day) for t in times)
                contained += any(t.start <= day <= t.end for t in times)
    print(f"\ngenerated temporal: {dated} dated evidence turns, exact {exact} ({exact / dated:.0%}), contained {contained} ({contained / dated:.0%})")
    assert dated >= 15
    assert exact / dated >= 0.83
    assert contained / dated >= 0.94


# --------------------------------------------------------------------------------------------
# Encoder on hand-made turns
# --------------------------------------------------------------------------------------------
def _turn(tid, speaker, text, ts="2024-04-02T16:27:00", idx=0):
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
        _turn("u1", "user", "I set a personal best of 41:05 in the harbour swim last Saturday.", idx=0),
        _turn("a1", "assistant", "Congratulations on your personal best! I can suggest a training plan.", idx=1),
        _turn("a2", "assistant", "Keep it steady. Run 3 easy runs of 40 minutes a week and one tempo run at `5:20/km`.", idx=2),
    ]
    out = RulesEncoder().encode(turns, None, [])
    texts = [r.text for r in out.records]
    assert texts[0].startswith("The user set a personal best of 41:05 in the harbour swim last Saturday (30 March 2024)")
    # an assistant's pleasantries and generic advice make no record; what it concretely proposed does
    assert not any("can suggest" in t or "Congratulations" in t for t in texts)
    assert [r.source_turn_ids for r in out.records if r.text.startswith("The assistant")] == [["a2"]]
    assert "40 minutes" in texts[-1] and "5:20/km" in texts[-1] and "Keep it steady" not in texts[-1]
    assert all("user" not in r.entities for r in out.records)  # roles are not named entities


def test_longmemeval_instance_encodes(tmp_path):
    """A generated LongMemEval instance (tests/support/generated_lme.py): a knowledge-update
    question whose two evidence turns (the old value and the new) are the user's."""
    lme = labelled_instance(tmp_path)
    inst = lme.instance
    enc, ctx, records = RulesEncoder(), None, []
    for sid, stamp, session in sorted(zip(inst["haystack_session_ids"], inst["haystack_dates"], inst["haystack_sessions"]), key=lambda s: parse_source_datetime(s[1])):
        ts = parse_source_datetime(stamp).isoformat()
        turns = [Turn(turn_id=f"{sid}:{k}", turn_idx=k, session_id=sid, speaker=t["role"], role=t["role"], text=t["content"], timestamp=ts) for k, t in enumerate(session)]
        out = enc.encode(turns, ctx, records[-8:])
        ctx, records = out.state, records + list(out.records)
    values = (lme.change["old_value"], lme.change["new_value"])
    evidence = [r.text for r in records if any(v in r.text for v in values)]
    assert all(any(v in t for t in evidence) for v in values)
    assert len(evidence) >= 2 and all("the user" in t.lower() for t in evidence)
    assert not any(re.search(r"\b(?:I|my|you|your)\b", r.text) for r in records if r.source_turn_ids[0].endswith(":0"))
    # Extractive answering has no notion of which value is newer (a knowledge-update question):
    # it returns a sentence with one of the two values, not necessarily the updated one.
    answer = extractive_answer(inst["question"], evidence)
    assert any(v in answer for v in values), answer


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
        ("I went to the gym.", "Tessaly", "Orrin", "Tessaly went to the gym."),
        ("I love my dog.", "Tessaly", "Orrin", "Tessaly loves Tessaly's dog."),
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
    plan = RulesPlanner().plan("What did Orrin do in May 2023?", None, ["Tessaly", "Orrin", "Harbourside"])
    assert isinstance(plan, QueryPlan) and len(plan.routes) == 1
    route = plan.routes[0]
    assert route.goal == "What did Orrin do in May 2023?"
    assert route.entities == ["Orrin"]
    assert route.time_window is not None
    assert (route.time_window.start, route.time_window.end) == ("2023-05-01", "2023-05-31")
    assert "Orrin" in route.search_terms and "may" not in [t.lower() for t in route.search_terms]


def test_planner_aliases_topics_quotes_and_no_window():
    plan = RulesPlanner().plan('When did tessaly read the book "Always Be Grateful"?', None, ["Tessaly", "Orrin"])
    route = plan.routes[0]
    assert route.entities == ["Tessaly"]  # known names match case-insensitively
    assert route.time_window is None
    assert "Always Be Grateful" in route.search_terms and "book" in route.search_terms
    assert route.topics == ["book"]  # the stored (singular) form; "Always Be Grateful" is stopwords and an adjective
    plan2 = RulesPlanner().plan("When did Tess visit a treehouse?", None, ["Tessaly", "Orrin"])
    # "Tess" is an alias, "visit" a verb: the one topic word is the question's own noun
    assert plan2.routes[0].entities == ["Tessaly"] and plan2.routes[0].topics == ["treehouse"]
    route3 = RulesPlanner().plan("Where did Ann join the sourdough baking classes?", None, ["Ann"]).routes[0]
    assert route3.topics[:2] == ["sourdough baking", "baking class"] and "sourdough" in route3.topics


def test_planner_without_known_entities_and_with_question_date():
    route = RulesPlanner().plan("What did Odile and Brann do last weekend?", parse_source_datetime("2024/03/14 (Thu) 08:30")).routes[0]
    assert route.entities == ["Odile", "Brann"]
    assert (route.time_window.start, route.time_window.end) == ("2024-03-09", "2024-03-10")
    assert RulesPlanner().plan("What did Odile do?", None) == RulesPlanner().plan("What did Odile do?", None)


# --------------------------------------------------------------------------------------------
# Extractive answers
# --------------------------------------------------------------------------------------------
EVIDENCE = [
    "Orrin went to the Harbourside woodcarving workshop yesterday (20 February 2023) and found it calming. He felt calm.",
    "Tessaly painted a harbour mural last year (2022). Tessaly loves painting.",
    "Orrin is researching chisel suppliers.",
]


def test_extractive_picks_the_best_sentence():
    assert extractive_answer("What is Orrin researching?", EVIDENCE) == "Orrin is researching chisel suppliers."
    assert extractive_answer("What does Tessaly love?", EVIDENCE) == "Tessaly loves painting."


def test_extractive_when_returns_the_date():
    assert extractive_answer("When did Orrin go to the Harbourside woodcarving workshop?", EVIDENCE) == "20 February 2023"
    assert extractive_answer("When did Tessaly paint a mural?", EVIDENCE) == "2022"


def test_extractive_ties_go_to_earlier_evidence_and_empty():
    ev = ["Brann opened a bike shop.", "Brann opened a bakery."]
    assert extractive_answer("What did Brann open?", ev) == "Brann opened a bike shop."
    assert extractive_answer("What did Brann open?", ev[::-1]) == "Brann opened a bakery."
    assert extractive_answer("Anything?", []) == ""
