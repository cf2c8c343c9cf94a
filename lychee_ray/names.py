"""The one normalisation of entity and topic names.

Organize keys evidence nodes by it, retrieval matches query names to node names by it
(query/conversation.py), and the rules backend cleans entity names with the same pieces. So "The Support-Group's" and "support group" are one node and
match one query. Case, a possessive 's, runs of punctuation and a leading article do not count;
accents do (no transliteration).
"""

from __future__ import annotations

import re

POSSESSIVE_RE = re.compile(r"['’]s\b", re.ASCII)  # ASCII \b, as the rule has always been: stored node keys stay the same
LEADING_ARTICLE_RE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)
_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]+")


def normalize_name(name: str) -> str:
    """The comparison key of a name: lower case, no possessive 's, punctuation runs as one space,
    no leading article."""
    text = POSSESSIVE_RE.sub("", name.lower())
    text = _NOT_LETTER_OR_DIGIT.sub(" ", text).strip()
    return LEADING_ARTICLE_RE.sub("", text)


_SPACES = re.compile(r"\s+")


def display_form(name: str) -> str:
    """How a topic or entity-topic node is shown: trimmed of edge punctuation, single spaces,
    case-folded ("self-acceptance" stays readable). Only for display; compare with
    `normalize_name`."""
    return _SPACES.sub(" ", name.strip().strip(".,;:!?\"'()[]")).casefold()
