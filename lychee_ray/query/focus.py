"""Who a route asks about, and what its query vector should be made of.

Two facts of a conversation's text that a query must respect (found on the LoCoMo tune part,
benchmarks/dev_recall.py):
- a turn never names its own speaker ("I signed up for a glassblowing course"), and the records name
  both speakers all the time (pronouns resolved), so a speaker's name in the query text only
  pulls the vector toward turns that *address* that person and spreads evenly over records. The
  vector text therefore leaves the conversation's speakers out (`vector_text`); BM25 and the
  node channel still see the names.
- a question that names exactly one speaker is nearly always answered by what that speaker said
  (95-100% of the gold turns per category), so that speaker's turns and records are a scope a
  channel can rank within (`focus_speaker`, the `speaker_*` channels).
- a question that asks for several things ("which board games has he bought?", "what spices do
  they keep?") is answered by facts spread over many sessions that share little wording
  with the question or each other, so each channel's list must go deeper to hold them
  (`asks_for_many`, `retrieval.plural_ask_top_k`).

Pure string work, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from lychee_ray.names import normalize_name
from lychee_ray.rules.lexicon import ROLE_SPEAKERS
from lychee_ray.schemas import Route

_WORD_RE = re.compile(r"[\w'’-]+")
# "what/which [kinds of] <up to 3 words ending in a plural> <auxiliary>": "what board games does",
# "which kinds of festivals have", "what tools has". A plural noun right before the auxiliary is
# the thing asked for; "what is", "what did she buy" (no plural) do not match. "how many <plural>"
# asks for every one of them too, to count them.
_PLURAL_ASK_RE = re.compile(
    r"\b(?:what|which)\s+(?:(?:kinds?|types?|sorts?)\s+of\s+)?(?:[\w+'’-]+\s+){0,2}?[\w+'’-]+s\s+"
    r"(?:has|have|had|does|do|did|is|are|was|were|can|could|would|will)\b"
    r"|\bhow many\s+(?:[\w+'’-]+\s+){0,2}?[\w+'’-]+s\b",
    re.IGNORECASE,
)


def strip_names(text: str, names: Iterable[str]) -> str:
    """`text` without whole-word occurrences of `names` (any case, with a possessive 's),
    spaces collapsed. When nothing but punctuation would remain, `text` itself."""
    names = sorted({n.strip() for n in names if n and n.strip()}, key=len, reverse=True)
    if not names:
        return text
    pattern = re.compile(r"(?<![\w-])(?:" + "|".join(re.escape(n) for n in names) + r")(?:['’]s)?(?![\w-])", re.IGNORECASE)
    out = " ".join(pattern.sub(" ", text).split())
    return out if _WORD_RE.search(out) else text


def named_speakers(route: Route, speakers: Sequence[str]) -> list[str]:
    """The conversation's speakers that the route names (its entities, or words of its goal),
    in `speakers` order; role speakers ("user", "assistant") are never named this way."""
    keys = {normalize_name(e) for e in route.entities}
    keys.update(normalize_name(w) for w in _WORD_RE.findall(route.goal))
    return [s for s in speakers if s and normalize_name(s) in keys and s.lower() not in ROLE_SPEAKERS]


def focus_speaker(route: Route, speakers: Sequence[str]) -> str | None:
    """The one speaker the route asks about; None when it names none or several."""
    named = named_speakers(route, speakers)
    return named[0] if len(named) == 1 else None


def asks_for_many(route: Route) -> bool:
    """Whether the route's goal asks for several things of one kind (`_PLURAL_ASK_RE`)."""
    return _PLURAL_ASK_RE.search(route.goal) is not None


def vector_text(route: Route, speakers: Sequence[str], strip: bool = True) -> str:
    """What the route's query vector embeds: its goal and the search terms the goal lacks
    (`route_text`), without the speakers' names when `strip`."""
    text = route_text(route)
    return strip_names(text, named_speakers(route, speakers)) if strip else text


def route_text(route: Route) -> str:
    """What a route searches with: its goal and the search terms the goal does not contain."""
    terms = " ".join(t for t in route.search_terms if t.lower() not in route.goal.lower())
    return f"{route.goal} {terms}".strip()

