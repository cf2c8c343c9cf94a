"""The rules backend's link detector: which later records supersede or contradict earlier ones.

Records arrive in conversation order (`LinkDetector.add`, one segment's at a time, so a grown
conversation only feeds its new segments); each is read into slots and claims (slots.py) once.
- supersedes: a later record of the same speaker gives the same slot (subject and attribute) a
  different value; it replaces every earlier record of that slot still current. The same value
  again is a restatement: no link. Quantities also need the same unit, words that say they
  measure the same thing (the phrase after the unit, or a word of the thing measured), no two
  different things measured ("upload handler" against "dashboard API"), and a later sentence
  that says the value changed ("now", "down to", "improved", "new record").
- contradicts: a "never" claim and an affirmative past of the same action (same verb, or two
  verbs of doing for a named tool or thing, or of being somewhere for a place), in either order;
  or "never" against "always".
Only records a speaker said (not an assistant's) are read: the memory is of what people state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from lychee_ray.rules.lexicon import STOPWORDS
from lychee_ray.rules.slots import DO_VERBS, NOT_A_THING, PLACE_VERBS, Claim, Reading, Slot, read_record
from lychee_ray.rules.text import singular
from lychee_ray.tables import Record

MAX_LINKS_PER_RECORD = 3  # a record replaces at most this many earlier ones (most recent first)


@dataclass
class _Seen:
    record_id: str
    speaker: str
    reading: Reading
    replaced: set[Slot] = field(default_factory=set)  # its slots a later record superseded


class LinkDetector:
    """`speaker_of(record)`: the name of the person who said it, or None for an assistant's (or
    unknown) record, which is neither read nor linked."""

    def __init__(self, speaker_of: Callable[[Record], str | None]):
        self.speaker_of = speaker_of
        self.seen: list[_Seen] = []

    def add(self, records: Iterable[Record], emit: bool = True) -> list[tuple[str, str, str]]:
        """(later record_id, earlier record_id, kind) for each link the records make with those
        added before them (and with each other, in order). `emit=False` only remembers them (a
        grown conversation's stored records, whose links the store already holds); a supersession
        among them still retires the value it replaced."""
        links: list[tuple[str, str, str]] = []
        for rec in records:
            speaker = self.speaker_of(rec)
            if speaker is None:
                continue
            new = _Seen(rec.record_id, speaker, read_record(rec.text, speaker))
            found = self._supersedes(new) + self._contradicts(new)
            if emit:
                links += [(new.record_id, old, kind) for old, kind in found]
            self.seen.append(new)
        return links

    def _supersedes(self, new: _Seen) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for slot in new.reading.slots:
            if slot.attribute.startswith("quantity:") and not slot.update:
                continue  # a number said again without saying it changed: restated, or another case
            hits = []
            for old in reversed(self.seen):
                if old.speaker != new.speaker:
                    continue
                prior = [s for s in old.reading.slots if s not in old.replaced and same_slot(s, slot)]
                if prior and not any(same_value(s, slot) for s in prior):
                    hits.append((old, prior))
                if len(hits) == MAX_LINKS_PER_RECORD:
                    break
            for old, prior in hits:
                old.replaced.update(prior)
                out.append((old.record_id, "supersedes"))
        return list(dict.fromkeys(out))

    def _contradicts(self, new: _Seen) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for claim in new.reading.claims:
            for old in reversed(self.seen):
                if old.speaker != new.speaker:
                    continue
                if any(conflicting(c, claim) for c in old.reading.claims):
                    out.append((old.record_id, "contradicts"))
                    break  # the most recent statement it breaks
        return list(dict.fromkeys(out))[:MAX_LINKS_PER_RECORD]


def same_slot(a: Slot, b: Slot) -> bool:
    """Whether two slots speak of the same attribute of the same thing (their values aside)."""
    if a.attribute != b.attribute:
        return False
    if a.attribute == "due" or a.attribute == "status":
        return bool(a.pre and b.pre and (a.pre <= b.pre or b.pre <= a.pre))
    if not a.attribute.startswith("quantity:"):
        return True
    if a.pre and b.pre and 2 * len(a.pre & b.pre) <= min(len(a.pre), len(b.pre)):  # more than half of the smaller must be shared
        return False  # two different things measured in the same unit ("ATS score" and "ATS course")
    if a.post and a.post == b.post:
        return True
    return bool((a.pre | _words_of(a.post)) & (b.pre | _words_of(b.post)))


def same_value(a: Slot, b: Slot) -> bool:
    """Equal values; a version and its more precise form ("3.11", "3.11.2") are one value."""
    if a.value == b.value:
        return True
    if a.attribute.startswith("version:"):
        return a.value.startswith(b.value + ".") or b.value.startswith(a.value + ".")
    return False


def _words_of(phrase: str) -> set[str]:
    return {singular(w) for w in phrase.split() if len(w) > 2 and w not in STOPWORDS and w not in ("per", "each", "one")} - NOT_A_THING


def conflicting(a: Claim, b: Claim) -> bool:
    """A never-claim and a claim that breaks it (either order), or never against always."""
    pair = {a.polarity, b.polarity}
    if pair not in ({"never", "did"}, {"never", "always"}):
        return False
    never, other = (a, b) if a.polarity == "never" else (b, a)
    if not never.key <= (other.words | other.key):
        return False
    if never.verb == other.verb:
        return True
    if never.named and never.verb in DO_VERBS and other.verb in DO_VERBS:
        return True
    return never.verb in PLACE_VERBS and other.verb in PLACE_VERBS
