"""Named entities from text: capitalized spans, quoted titles, and known names in any case.

`EntityIndex` is the table of known names, where a short alias ("Tess") resolves to the one
participant it prefixes. The encoder fills it from d_k and recent records, the planner from the
store's names; both use the same span rules, hence one module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lychee_ray.names import LEADING_ARTICLE_RE
from lychee_ray.rules.lexicon import ENTITY_STOP
from lychee_ray.rules.pronouns import at_sentence_start
from lychee_ray.rules.text import WORD_RE, norm_token

# A dot only inside a word ("St.Louis"), so "Ana. Taking" is two spans.
_CAP_WORD = r"[A-Z](?:[\w'&+-]|\.(?=\w))*"
CAP_SPAN_RE = re.compile(rf"(?<![\w'-]){_CAP_WORD}(?:\s+(?:(?:of|the|and|de|la|van|von|&)\s+){{0,2}}{_CAP_WORD})*")
PHOTO_OF_RE = re.compile(r"\[image:\s*(?:a\s+)?(?:photo|photograph|photography|picture|pic|close up|closeup|screenshot)\s+of\b", re.I)
QUOTED_RE = re.compile(r'"([^"\n]{2,60})"')


# --------------------------------------------------------------------------------------------
# Entities
# --------------------------------------------------------------------------------------------
@dataclass
class EntityIndex:
    """Known names (lowercase -> canonical) and the participant names aliases resolve to."""

    participants: list[str] = field(default_factory=list)
    canonical: dict[str, str] = field(default_factory=dict)
    aliases: dict[str, list[str]] = field(default_factory=dict)  # canonical -> aliases seen

    def add(self, name: str) -> None:
        self.canonical.setdefault(name.lower(), name)

    def lookup(self, name: str) -> str | None:
        low = name.lower()
        if low in self.canonical:
            return self.canonical[low]
        if len(low) >= 3:  # "Eliza" for "Elizabeth": a proper prefix of exactly one participant
            hits = [p for p in self.participants if p.lower().startswith(low) and p.lower() != low]
            if len(hits) == 1:
                self.aliases.setdefault(hits[0], [])
                if name not in self.aliases[hits[0]]:
                    self.aliases[hits[0]].append(name)
                return hits[0]
        return None


def clean_entity(span: str) -> str:
    span = re.sub(r"'s$|'$", "", span.strip(" .,'-+&"))
    span = LEADING_ARTICLE_RE.sub("", span)  # "The Expanse" and "Expanse" are one entity
    return " ".join(span.split())


AND_SPLIT_RE = re.compile(r"\s+(?:and|&)\s+")


def _span_names(words: list[str], at_start: bool, index: EntityIndex) -> list[str]:
    """Names in one capitalized span; "Josh and Mark" is two."""
    if at_start and words and index.lookup(clean_entity(words[0])) is None:
        first = clean_entity(words[0]).lower()
        # A sentence-initial word is only capitalized by position: keep it only as part of a
        # longer name that does not start with an ordinary word ("Kingkiller Chronicle").
        if len(words) == 1 or first in ENTITY_STOP or first.endswith(("ing", "ed", "ly", "'s")):
            words = words[1:]
    out = []
    for part in AND_SPLIT_RE.split(" ".join(words)):
        ws = part.split()
        while ws and clean_entity(ws[0]).lower() in ENTITY_STOP:
            ws = ws[1:]
        while ws and clean_entity(ws[-1]).lower() in ENTITY_STOP:
            ws = ws[:-1]
        name = clean_entity(" ".join(ws))
        if len(name) >= 2 and name.lower() not in ENTITY_STOP:
            out.append(index.lookup(name) or name)
    return out


def extract_entities(text: str, index: EntityIndex) -> list[str]:
    """Capitalized spans (a sentence-initial word only when it is a known name or starts a
    longer name), quoted titles, and known names in any case; aliases map to their participant."""
    found: list[tuple[int, str]] = []
    for m in CAP_SPAN_RE.finditer(text):
        if text[max(0, m.start() - 2) : m.start()] == "**" or (text[m.end() : m.end() + 1] == ":" and at_sentence_start(text, m.start())):
            continue  # a markdown heading ("**Strength Training**:"), not a name
        for name in _span_names(m.group(0).split(), at_sentence_start(text, m.start()), index):
            found.append((m.start(), name))
    for m in QUOTED_RE.finditer(text):
        title = clean_entity(m.group(1))
        if title and len(title.split()) <= 8:
            found.append((m.start(), title))
    for tok in WORD_RE.findall(text):  # participants written in lower case ("mel", "caroline")
        hit = index.canonical.get(norm_token(tok))
        if hit and hit in index.participants:
            found.append((len(text), hit))
    found.sort(key=lambda x: x[0])
    out: list[str] = []
    seen: set[str] = set()
    for _, name in found:
        if name.lower() not in seen:
            seen.add(name.lower())
            out.append(name)
    return out
