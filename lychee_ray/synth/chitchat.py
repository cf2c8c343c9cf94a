"""Chit-chat: two friends catching up, short turns, speaker names. The plots that plant its
labelled facts, one function per kind of question, and the filler around them.

Speaker 0 says the odd turns of every session, speaker 1 the even ones; each session opens with
both greeting the other by name (so the names are in the text even where a format keeps only
roles). A speaker's own facts are said in the first person and asked by the speaker's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

from lychee_ray.synth.build import Builder, LabelError, a, contains
from lychee_ray.synth.calendar import day_text, describe_past, recent_day
from lychee_ray.synth.layout import Board, NoRoom
from lychee_ray.synth.model import Fact, TurnRef
from lychee_ray.synth.people import PLACES, Person, Statement, new_relative, statement
from lychee_ray.synth.pool import Exhausted
from lychee_ray.synth.words import (
    COLOURS,
    EVENTS,
    FIRSTS,
    GREETINGS,
    HOBBIES,
    JOBS,
    NEVER_SAID,
    NUMBERS,
    OBJECTS,
    PERSON_MENTIONS,
    PET_NAMES,
    REACTIONS,
    SMALL_TALK,
    SPECIES,
    EventKind,
)


@dataclass(frozen=True)
class Cast:
    speakers: tuple[Person, Person]

    def name(self, who: int) -> str:
        return self.speakers[who].name


def contradiction_answer(who: str, pronoun: str, first: str, second: str) -> str:
    return f"The conversation contradicts itself: {who} said {pronoun} had {first}, and also that {pronoun} {second}."


# --------------------------------------------------------------------------------------------
# single-hop: one turn states it, asked by name
# --------------------------------------------------------------------------------------------
def pet_name(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    species, pet = b.pool.draw(SPECIES), b.pool.draw(PET_NAMES)
    (ref,) = b.place((1, who))
    b.say(ref, b.rng.choice(("We finally adopted {s}, and we named it {p}.", "Did I tell you? I got {s} called {p}.")).format(s=a(species), p=pet))
    fact = b.fact(ref, f"{cast.name(who)}'s {species}", "name", pet)
    b.ask(f"What is the name of {cast.name(who)}'s {species}?", pet, "single_hop", [fact])
    b.mention(who, f"My {species} stole a sock again.")


def object_colour(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    thing, colour = b.pool.draw(OBJECTS), b.pool.draw(COLOURS)
    (ref,) = b.place((1, who))
    b.say(ref, f"I bought {a(colour)} {thing} at the flea market.")
    fact = b.fact(ref, cast.name(who), f"{thing} colour", colour)
    b.ask(f"What colour is the {thing} {cast.name(who)} bought?", colour, "single_hop", [fact])
    b.mention(who, f"The {thing} is taking up half the hallway.")


def own_hobby(b: Builder, cast: Cast) -> None:
    who = b.free_owner("hobby")
    hobby = b.pool.draw(HOBBIES)
    (ref,) = b.place((1, who))
    b.say(ref, f"I have taken up {hobby}, it is so much fun.")
    fact = b.fact(ref, cast.name(who), "hobby", hobby)
    b.ask(f"What hobby has {cast.name(who)} taken up?", hobby, "single_hop", [fact])


def own_job(b: Builder, cast: Cast) -> None:
    who = b.free_owner("job")
    job = b.pool.draw(JOBS)
    (ref,) = b.place((1, who))
    b.say(ref, f"I work as {a(job)} these days.")
    fact = b.fact(ref, cast.name(who), "job", job)
    b.ask(f"What does {cast.name(who)} do for work?", job, "single_hop", [fact])


def relative_fact(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    person = new_relative(b, cast.speakers[who])
    (ref,) = b.place((1, who))
    said = statement(b, person, f"My {person.relation} {person.name}")
    b.say(ref, said.text)
    fact = b.fact(ref, person.name, said.attribute, said.value)
    b.ask(said.question.format(who=person.name), said.value, "single_hop", [fact])
    b.mention(None, b.rng.choice(PERSON_MENTIONS).format(name=person.name))


# --------------------------------------------------------------------------------------------
# coreference: named first, the fact said later with a pronoun or a nickname, asked by name
# --------------------------------------------------------------------------------------------
def _introduced(b: Builder, cast: Cast) -> tuple[int, Person]:
    who = b.rng.choice((0, 1))
    return who, new_relative(b, cast.speakers[who])


def _ask_by_name(b: Builder, person: Person, intro: TurnRef, said_at: TurnRef, said: Statement, named_as: str) -> None:
    if contains(b.lines[said_at].text, person.name):
        raise LabelError(f"the coreference turn {said_at} names {person.name}")
    mention = b.fact(intro, person.name, "named as", named_as, kind="mention")
    fact = b.fact(said_at, person.name, said.attribute, said.value)
    b.ask(said.question.format(who=person.name), said.value, "coreference", [mention, fact], difficulty="medium")
    b.mention(None, b.rng.choice(PERSON_MENTIONS).format(name=person.name))


def pronoun_nearby(b: Builder, cast: Cast) -> None:
    """Name, a reply asking about them, then the fact with a pronoun."""
    who, person = _introduced(b, cast)
    (ref,) = b.place((3, who))
    ask, answer = TurnRef(ref.session, ref.position + 1), TurnRef(ref.session, ref.position + 2)
    b.say(ref, b.rng.choice(("My {r} {n} came over for dinner.", "I had lunch with my {r} {n}.", "My {r} {n} helped me move the sofa.")).format(r=person.relation, n=person.name))
    b.say(ask, f"Oh nice, how is {person.pronoun} doing?" if b.rng.random() < 0.5 else f"How is {person.pronoun} getting on?")
    said = statement(b, person, person.pronoun.capitalize())
    b.say(answer, f"{person.pronoun.capitalize()} is great! {said.text}")
    _ask_by_name(b, person, ref, answer, said, person.name)


def nickname_later(b: Builder, cast: Cast) -> None:
    """Named with a nickname in one session, the fact said with the nickname in a later one."""
    who, person = _introduced(b, cast)
    intro, later = b.place((1, who), (1, who), spread=True)
    b.say(intro, f"My {person.relation} {person.name} is staying with us for a bit; we all call {person.object} {person.nickname}.")
    said = statement(b, person, person.nickname)
    b.say(later, said.text)
    _ask_by_name(b, person, intro, later, said, person.nickname)


def relation_later(b: Builder, cast: Cast) -> None:
    """Named in one session, the fact said in a later one through the relation and a pronoun."""
    who, person = _introduced(b, cast)
    intro, later = b.place((1, who), (1, who), spread=True)
    b.say(intro, f"My {person.relation} {person.name} is staying with us for a bit.")
    said = statement(b, person, person.pronoun.capitalize())
    b.say(later, f"Remember my {person.relation}? {said.text}")
    _ask_by_name(b, person, intro, later, said, f"my {person.relation}")


# --------------------------------------------------------------------------------------------
# multi-hop: a relation in one session, the fact by name in a later one, asked by relation
# --------------------------------------------------------------------------------------------
def relation_then_fact(b: Builder, cast: Cast) -> None:
    who, person = _introduced(b, cast)
    bridge, later = b.place((1, who), (1, who), spread=True)
    b.say(bridge, b.rng.choice(("Did I ever tell you my {r} is called {n}?", "My {r} {n} says hello, by the way.")).format(r=person.relation, n=person.name))
    said = statement(b, person, person.name)
    b.say(later, said.text)
    if contains(b.lines[later].text, person.relation):
        raise LabelError(f"the multi-hop statement {later} names the relation")
    link = b.fact(bridge, cast.name(who), person.relation, person.name, kind="relation")
    fact = b.fact(later, person.name, said.attribute, said.value)
    b.ask(said.question.format(who=f"{cast.name(who)}'s {person.relation}"), said.value, "multi_hop", [link, fact], difficulty="medium")
    b.mention(who, f"My {person.relation} called me earlier.")
    b.mention(None, b.rng.choice(PERSON_MENTIONS).format(name=person.name))


# --------------------------------------------------------------------------------------------
# temporal: dated events, their order, the weeks between them
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    who: str
    kind: EventKind
    thing: str

    def said(self, expression: str) -> str:
        return f"I {self.kind.past} {self.thing} {expression}."

    @property
    def doing(self) -> str:
        return f"{self.who} {self.kind.gerund} {self.thing}"


def _event(b: Builder, cast: Cast, who: int) -> Event:
    for kind in b.rng.sample(EVENTS, len(EVENTS)):
        try:
            thing = b.pool.draw([kind.thing.format(place=p) for p in PLACES] if "{place}" in kind.thing else [kind.thing])
        except Exhausted:
            continue
        return Event(cast.name(who), kind, thing)
    raise Exhausted("no event left")


def _event_turn(b: Builder, event: Event, ref: TurnRef, day) -> Fact:
    expression = describe_past(b.rng, day, b.session_day(ref))
    b.say(ref, event.said(expression))
    b.mention(Board.speaker_of(ref.position), f"I still have to send you the photos from {event.thing}.")
    return b.fact(ref, event.who, event.thing, day.isoformat(), kind="event", expression=expression, day=day)


def event_date(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    event = _event(b, cast, who)
    (ref,) = b.place((1, who))
    fact = _event_turn(b, event, ref, recent_day(b.rng, b.session_day(ref)))
    b.ask(f"When did {event.who} {event.kind.base} {event.thing}?", day_text(fact.date), "temporal", [fact])


def event_order(b: Builder, cast: Cast) -> None:
    whos = (b.rng.choice((0, 1)), b.rng.choice((0, 1)))
    events = [_event(b, cast, w) for w in whos]
    refs = b.place((1, whos[0]), (1, whos[1]), spread=True)
    days = [recent_day(b.rng, b.session_day(r)) for r in refs]
    if days[0] == days[1]:
        raise NoRoom("both events on one day")
    facts = [_event_turn(b, e, r, d) for e, r, d in zip(events, refs, days)]
    first = 0 if days[0] < days[1] else 1
    roles = ["first_event", "second_event"] if first == 0 else ["second_event", "first_event"]
    shown = b.rng.sample(events, 2)
    b.ask(f"Which happened first: {shown[0].doing}, or {shown[1].doing}?", events[first].doing, "temporal", facts, roles, difficulty="medium")


def event_weeks(b: Builder, cast: Cast) -> None:
    whos = (b.rng.choice((0, 1)), b.rng.choice((0, 1)))
    events = [_event(b, cast, w) for w in whos]
    refs = b.place((1, whos[0]), (1, whos[1]), spread=True)
    first = recent_day(b.rng, b.session_day(refs[0]), most=10)
    said_on = b.session_day(refs[1])
    later = [first + timedelta(weeks=k) for k in range(1, 9) if 1 <= (said_on - first - timedelta(weeks=k)).days <= 30]
    if not later:
        raise NoRoom("the sessions are too far apart for a weeks question")
    second = b.rng.choice(later)
    facts = [_event_turn(b, e, r, d) for e, r, d in zip(events, refs, (first, second))]
    weeks = (second - first).days // 7
    b.ask(f"How many weeks apart were {events[0].doing} and {events[1].doing}?", f"{weeks} week{'s' if weeks > 1 else ''}",
          "temporal", facts, ["first_event", "second_event"], difficulty="medium")


# --------------------------------------------------------------------------------------------
# knowledge update and contradiction: both turns labelled, linked by a change
# --------------------------------------------------------------------------------------------
def _update(b: Builder, cast: Cast, who: int, attribute: str, old: tuple[str, str], new: tuple[str, str], question: str) -> None:
    """`old`/`new`: (the turn's text, the value it states)."""
    first, second = b.place((1, who), (1, who), spread=True)
    b.say(first, old[0])
    b.say(second, new[0])
    facts = [b.fact(first, cast.name(who), attribute, old[1]), b.fact(second, cast.name(who), attribute, new[1])]
    b.change("supersedes", *facts)
    b.ask(question, new[1], "knowledge_update", facts, ["original_info", "updated_info"], difficulty="medium")


def moved_house(b: Builder, cast: Cast) -> None:
    who = b.free_owner("home")
    old, new = b.pool.draw(PLACES), b.pool.draw(PLACES)
    _update(b, cast, who, "home", (f"I live in {old}, close to the station.", old), (f"Big news: we moved from {old} to {new}!", new), f"Where does {cast.name(who)} live now?")


def new_job(b: Builder, cast: Cast) -> None:
    who = b.free_owner("job")
    old, new = b.pool.draw(JOBS), b.pool.draw(JOBS)
    _update(b, cast, who, "job", (f"I work as {a(old)}, it keeps me busy.", old), (f"I left my job as {a(old)}; I am {a(new)} now!", new), f"What is {cast.name(who)}'s job now?")


def revised_number(b: Builder, cast: Cast) -> None:
    attribute, said_first, said_later, question, unit, (low, high) = b.rng.choice(NUMBERS)
    who = b.free_owner(attribute)
    old = b.pool.draw_made(lambda r: f"{r.randrange(low, high)} {unit}")
    new = b.pool.draw_made(lambda r: f"{r.randrange(low, high)} {unit}")
    _update(b, cast, who, attribute, (said_first.format(n=old), old), (said_later.format(n=new), new), question.format(who=cast.name(who)))


def never_then_did(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    person = cast.speakers[who]
    if b.rng.random() < 0.5:
        place = b.pool.draw(PLACES)
        b.claim(person.name, f"been to {place}")
        topic = f"been to {place}"
        first_text, first, second_text, second = f"I have never been to {place}, believe it or not.", f"never been to {place}", f"When I was in {place}, I found the best little bookshop.", f"was in {place}"
        question, answer_second = f"Has {person.name} ever been to {place}?", f"was in {place}"
    else:
        never, did, done = b.rng.choice([f for f in FIRSTS if (person.name, f[2]) not in b.claims] or [FIRSTS[0]])
        b.claim(person.name, done)
        topic = done
        first_text, first, second_text, second = f"I have {never}, can you believe it?", never, f"When I was a kid I {did} all the time.", did
        question, answer_second = f"Has {person.name} ever {done}?", f"{did} as a kid"
    refs = b.place((1, who), (1, who), spread=True)
    b.say(refs[0], first_text)
    b.say(refs[1], second_text)
    facts = [b.fact(refs[0], person.name, topic, first, kind="statement"), b.fact(refs[1], person.name, topic, second, kind="statement")]
    b.change("contradicts", *facts)
    b.ask(question, contradiction_answer(person.name, person.pronoun, first, answer_second), "contradiction", facts,
          ["first_statement", "second_statement"], difficulty="clear")


# --------------------------------------------------------------------------------------------
# abstention: about something no turn says
# --------------------------------------------------------------------------------------------
def never_mentioned(b: Builder, cast: Cast) -> None:
    who = b.rng.choice((0, 1))
    kind = b.rng.choice(sorted(NEVER_SAID))
    term = b.rng.choice(NEVER_SAID[kind])
    b.claim("never said", term)
    name = cast.name(who)
    question = {
        "pet": f"What is the name of {name}'s {term}?",
        "object": f"What colour is {name}'s {term}?",
        "place": f"When did {name} visit {term}?",
        "relation": f"What does {name}'s {term} do for work?",
    }[kind]
    b.ask(question, "not mentioned", "abstention", [], never_said=term, rubric=[f"The answer says {term} never came up"])


# Multi-session plots first: they need room in particular sessions, single turns fit anywhere.
PLOTS = (
    relation_then_fact, nickname_later, relation_later, event_order, event_weeks, moved_house, new_job,
    revised_number, never_then_did, pronoun_nearby, pet_name, object_colour, own_hobby, own_job,
    relative_fact, event_date, event_date, never_mentioned, never_mentioned,
)  # fmt: skip


def plots(cast: Cast) -> list:
    return [partial(plot, cast=cast) for plot in PLOTS]


# --------------------------------------------------------------------------------------------
# filler
# --------------------------------------------------------------------------------------------
def filler(b: Builder, cast: Cast, ref: TurnRef, mentions: list[str]) -> str:
    """A greeting (the first two turns of a session), a mention without a fact (`mentions`: the
    ones this speaker may say, next first), or small talk."""
    who = Board.speaker_of(ref.position)
    if ref.position <= 2:
        return f"{b.rng.choice(GREETINGS).format(other=cast.name(1 - who))} {b.rng.choice(SMALL_TALK)}"
    if mentions and b.rng.random() < 0.85:
        return mentions.pop(0)
    return b.rng.choice(REACTIONS + SMALL_TALK)
