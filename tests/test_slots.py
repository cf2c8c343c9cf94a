"""The rules backend's supersession and contradiction detector (rules/slots.py, rules/links.py) on
hand-written cases of the project's own invented text, worded unlike the generator's templates.

Precision first: a wrong supersession hides a true fact, so most cases here are pairs that look
alike and must NOT link (another person, another thing measured, the same value again, a plan, a
question, a list of numbers, an assistant's suggestion); the positive cases are each slot kind."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.rules.links import LinkDetector
from lychee_ray.rules.slots import read_record
from lychee_ray.tables import Record


def rec(n: int, text: str, speaker: str = "Odalys") -> Record:
    return Record(conversation_id="c", record_id=f"r{n}", segment_id="s", type="fact", text=text, entities=[speaker], topics=[],
                  time_start=None, time_end=None, time_granularity="none", time_expression=None, source_turn_ids=[speaker], backend="rules")


def links_of(*pairs: tuple[str, str]) -> list[tuple[str, str, str]]:
    """Links among records (text, speaker), in order; the speaker "assistant" is an assistant."""
    records = [rec(n, text, speaker) for n, (text, speaker) in enumerate(pairs)]
    detector = LinkDetector(lambda r: None if r.source_turn_ids[0] == "assistant" else r.source_turn_ids[0])
    return detector.add(records)


SHOULD_LINK = [
    # (earlier, later, kind)
    ("Odalys lives in Quarrenby with two cats.", "Odalys recently moved to Brindlecote for the new studio.", "supersedes"),
    ("I work as a ferry mechanic at the harbour.", "I quit last spring and I am a beekeeper now, which I love.", "supersedes"),
    ("The nightly export takes 95 minutes end to end.", "After the rewrite the nightly export takes 40 minutes end to end.", "supersedes"),
    ("Our test suite covers 61% of the billing module.", "Coverage of the billing module improved to 74%.", "supersedes"),
    ("We run Redis 6.2 in staging.", "We upgraded Redis to 7.2 last night.", "supersedes"),
    ("The vendor audit is due on 3 September 2024.", "The vendor audit has been pushed to 20 September 2024.", "supersedes"),
    ("My favourite tea is oolong.", "My favourite tea is now rooibos.", "supersedes"),
    ("I prefer trains over planes for short trips.", "These days I prefer planes over trains.", "supersedes"),
    ("I started the kitchen renovation.", "I finally finished the kitchen renovation.", "supersedes"),
    ("I have never flown a kite.", "On the beach last weekend I flew a kite for hours.", "contradicts"),
    ("Odalys has never used Terraform at work.", "Odalys deployed Terraform for the billing stack yesterday.", "contradicts"),
    ("I have never been to Veldmark.", "When I was in Veldmark the market was closed.", "contradicts"),
    ("I wrote the parser in Rust last month.", "I have never written any Rust code.", "contradicts"),  # BEAM's order: the denial comes later
    ("I always cycle to the office.", "I never cycle to the office, it is too far.", "contradicts"),
    # what a number measures is named by the words just before it, however long the clause
    ("The oven preheat cut my morning bake time by 20%.", "I'm kinda curious how the new proofing box helped cut my morning bake time by 35%.", "supersedes"),
    # what a question sentence states before it asks, or presupposes
    ("I've completed 10 balsa gliders, can you suggest harder ones?", "I have now completed 15 balsa gliders, what should I build next?", "supersedes"),
    ("I've secured 3 sponsors for the fair.", "How can I use the fact that I now have 5 sponsors for the fair?", "supersedes"),
    # ... and a hedge in the part it states does not govern what it presupposes
    ("I've secured 3 sponsors for the fair.", "I'm trying to save money, so how can I use the fact that I now have 5 sponsors for the fair?", "supersedes"),
    ("The reading club has a quota of 4 books per month.", "I'm trying to adjust my shelf plan to the new quota of 6 books per month.", "supersedes"),
    # a hedge stops where the speaker opens a clause of their own
    ("I'm trying to plan the move and I have a deadline of 3 May 2024 for the flat handover.", "The flat handover deadline is now 10 May 2024.", "supersedes"),
]

MUST_NOT_LINK = [
    ("Odalys lives in Quarrenby.", "Odalys lives in Quarrenby, still close to the river."),  # the same value again
    ("My sister lives in Quarrenby.", "My brother lives in Brindlecote."),  # other people
    ("The nightly export takes 95 minutes.", "The image resize job takes 40 minutes."),  # another thing measured
    ("I read 12 novels this year.", "I bought 3 novels this year."),  # another action, and no change said
    ("The upload service answers in 300 ms.", "Could the upload service answer in 120 ms?"),  # a question
    ("The upload service answers in 300 ms.", "I want the upload service to answer in 120 ms."),  # a wish
    ("The upload service answers in 300 ms.", "Our goal is to get the upload service under 120 ms now."),  # a bound, a goal
    ("The triangle has sides of 20 cm, 21 cm and 29 cm.", "Now the triangle has sides of 40 cm, 42 cm and 58 cm."),  # lists of numbers
    ("We run Python 3.11 in production.", "We run Python 3.11.4 in production."),  # the same version, more precise
    ("The vendor audit is due on 3 September 2024.", "The pitch deck is due on 20 September 2024."),  # another deadline
    ("I have never flown a kite.", "I would love to fly a kite one day."),  # a wish, not a deed
    ("I have never flown a kite.", "My nephew flew a kite yesterday."),  # someone else did
    ("I have never used Terraform.", "I read a long article about Terraform."),  # reading about it is not using it
    ("I have never been to Veldmark.", "I have still never been to Veldmark."),  # the same denial again
    ("I am a beekeeper.", "I am a huge fan of jazz now."),  # "a X now" without work words is no job
    ("We got a 12% budget increase for the garden club.", "Our newsletter had a 35% increase from June now."),  # "increase" names no thing
    ("I'm kinda proud the bakery orders grew by 18%.", "I'm kinda curious how the new oven cut baking time by 30%."),  # "kinda" neither
    ("Adding keywords raised my portfolio score by 15%.", "I have now completed 90% of my portfolio course."),  # one word of two shared
    ("The upload service answers in 300 ms.", "I'm curious, can the upload service now answer in 120 ms?"),  # what is asked is not stated
    ("The reading club reads 4 books per month.", "I'm trying to get the reading club to 6 books per month now."),  # still a wish
    ("I have a submission deadline of 15 June 2024 for the grant abstract.", "I have a submission deadline of 20 July 2024 for the grant report."),  # two deliverables
]


@pytest.mark.parametrize("earlier,later,kind", SHOULD_LINK)
def test_each_slot_kind_links_a_later_change(earlier, later, kind):
    assert links_of((earlier, "Odalys"), (later, "Odalys")) == [("r1", "r0", kind)]


@pytest.mark.parametrize("earlier,later", MUST_NOT_LINK)
def test_look_alike_pairs_do_not_link(earlier, later):
    assert links_of((earlier, "Odalys"), (later, "Odalys")) == []


def test_precision_over_the_hand_written_cases():
    """Every pair above in one conversation per pair: all the links found are the expected ones."""
    found = [links_of((a, "Odalys"), (b, "Odalys")) for a, b, _ in SHOULD_LINK] + [links_of((a, "Odalys"), (b, "Odalys")) for a, b in MUST_NOT_LINK]
    made = sum(len(f) for f in found)
    true = sum(1 for f, (_, _, kind) in zip(found, SHOULD_LINK) if f == [("r1", "r0", kind)])
    assert made == true == len(SHOULD_LINK)


def test_another_speaker_or_an_assistant_never_supersedes():
    assert links_of(("I live in Quarrenby.", "Odalys"), ("I live in Brindlecote now.", "Tamsin")) == []
    assert links_of(("We run Redis 6.2.", "Odalys"), ("Let's upgrade: we upgraded Redis to 7.2.", "assistant")) == []


def test_a_chain_supersedes_what_is_still_current_once():
    links = links_of(("The export takes 95 minutes.", "Odalys"), ("The export now takes 60 minutes.", "Odalys"),
                     ("The export is down to 30 minutes.", "Odalys"))
    assert links == [("r1", "r0", "supersedes"), ("r2", "r1", "supersedes")]  # r0 is not replaced twice


def test_a_value_said_again_after_a_change_replaces_only_the_current_one():
    links = links_of(("I live in Quarrenby.", "Odalys"), ("I moved to Brindlecote.", "Odalys"), ("I moved to Quarrenby again.", "Odalys"))
    assert links == [("r1", "r0", "supersedes"), ("r2", "r1", "supersedes")]


def test_stored_records_prime_the_detector_without_links():
    detector = LinkDetector(lambda r: "Odalys")
    assert detector.add([rec(0, "I live in Quarrenby.")], emit=False) == []
    assert detector.add([rec(1, "I moved to Brindlecote.")]) == [("r1", "r0", "supersedes")]


def test_reading_names_the_slot_and_the_claim():
    reading = read_record("Odalys's commute takes 25 minutes each way. Odalys has never driven a tractor.", "Odalys")
    (slot,) = reading.slots
    assert (slot.attribute, slot.value, slot.post) == ("quantity:minute", "25", "each way")
    (claim,) = reading.claims
    assert (claim.polarity, claim.key) == ("never", frozenset({"tractor"}))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=6), st.text(max_size=20))
def test_hostile_text_never_raises_and_links_only_earlier_records(texts, speaker):
    records = [rec(n, t, speaker or "x") for n, t in enumerate(texts)]
    links = LinkDetector(lambda r: speaker).add(records)
    for later, earlier, kind in links:
        assert int(later[1:]) > int(earlier[1:]) and kind in ("supersedes", "contradicts")
