"""The people of a chit-chat conversation, and what can be said about one of them.

A `Person` has an invented name whose stem is the nickname, and a pronoun. `statement` writes one
fact about a person with a given subject phrase (the name, a nickname, a pronoun) and returns the
question that asks for it by whatever name the caller gives: the same fact serves a single-hop
question (asked by name, said with the name), a coreference one (said with a pronoun or a
nickname, asked by name) and a multi-hop one (asked through a relation: "Ana's sister").
"""

from __future__ import annotations

from dataclasses import dataclass

from lychee_ray.synth.build import Builder, a
from lychee_ray.synth.pool import Exhausted
from lychee_ray.synth.words import (
    COLOURS,
    FEMALE_ENDINGS,
    HOBBIES,
    JOBS,
    MALE_ENDINGS,
    NAME_STEMS,
    OBJECTS,
    PET_NAMES,
    PLACE_HEADS,
    PLACE_TAILS,
    RELATIONS,
    SPECIES,
)

PLACES = tuple(head + tail for head in PLACE_HEADS for tail in PLACE_TAILS)


@dataclass(frozen=True)
class Person:
    name: str
    nickname: str
    pronoun: str  # "she" or "he"
    relation: str | None = None  # to its owner: "sister", "neighbour", ...

    @property
    def object(self) -> str:
        return "her" if self.pronoun == "she" else "him"


def new_person(b: Builder, pronoun: str = "", relation: str | None = None) -> Person:
    """A person with a stem no one else in the conversation has, and a name no value clashes with."""
    pronoun = pronoun or b.rng.choice(("she", "he"))
    endings = FEMALE_ENDINGS if pronoun == "she" else MALE_ENDINGS
    stems = [s for s in NAME_STEMS if (s, "stem") not in b.claims]
    name = b.pool.draw([s + e for s in stems for e in endings])
    stem = next(s for s in stems if name.startswith(s))
    b.claim(stem, "stem")
    return Person(name, stem, pronoun, relation)


def new_relative(b: Builder, owner: Person) -> Person:
    """A relative or friend of `owner` whose relation `owner` has no one else in."""
    free = [r for r in RELATIONS if (owner.name, f"relation {r}") not in b.claims]
    if not free:
        raise Exhausted(f"{owner.name} has a person in every relation")
    relation = b.rng.choice(free)
    b.claim(owner.name, f"relation {relation}")
    return new_person(b, RELATIONS[relation], relation)


@dataclass(frozen=True)
class Statement:
    """A fact about a person as a sentence, and the question for it (`{who}` is left open)."""

    text: str
    attribute: str
    value: str
    question: str


def statement(b: Builder, person: Person, lead: str) -> Statement:
    """One fact about `person` in a sentence starting with `lead` (a name, "She", ...)."""
    kinds = [k for k in ("job", "hobby", "pet", "object", "home") if (person.name, k) not in b.claims]
    kind = b.rng.choice(kinds)
    b.claim(person.name, kind)
    if kind == "job":
        job = b.pool.draw(JOBS)
        return Statement(f"{lead} just started working as {a(job)}.", "job", job, "What job did {who} start?")
    if kind == "hobby":
        hobby = b.pool.draw(HOBBIES)
        return Statement(f"{lead} has taken up {hobby}, and loves it.", "hobby", hobby, "What hobby has {who} taken up?")
    if kind == "pet":
        species, pet = b.pool.draw(SPECIES), b.pool.draw(PET_NAMES)
        return Statement(f"{lead} adopted {a(species)} called {pet}.", f"{species}'s name", pet, "What is the name of {who}'s " + species + "?")
    if kind == "object":
        thing, colour = b.pool.draw(OBJECTS), b.pool.draw(COLOURS)
        return Statement(f"{lead} bought {a(colour)} {thing}.", f"{thing} colour", colour, "What colour is the " + thing + " {who} bought?")
    place = b.pool.draw(PLACES)
    return Statement(f"{lead} lives in {place}, right by the river.", "home", place, "Where does {who} live?")
