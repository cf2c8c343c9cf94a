"""The one normalisation of entity and topic names.

Organize keys evidence nodes by it, the store's `lychee_norm` SQL function (registered on every
DuckDB connection) compares node names with query names by it, and the rules backend cleans
entity names with the same pieces. So "The Support-Group's" and "support group" are one node and
match one query. Case, a possessive 's, runs of punctuation and a leading article do not count;
accents do (no transliteration).
"""

from __future__ import annotations

import re

POSSESSIVE_RE = re.compile(r"['’]s\b", re.ASCII)  # ASCII \b, as DuckDB's RE2 has it
LEADING_ARTICLE_RE = re.compile(r"^(?:the|a|an)\s+", re.IGNORECASE)
_NOT_LETTER_OR_DIGIT = re.compile(r"[\W_]+")


def normalize_name(name: str) -> str:
    """The comparison key of a name: lower case, no possessive 's, punctuation runs as one space,
    no leading article."""
    text = POSSESSIVE_RE.sub("", name.lower())
    text = _NOT_LETTER_OR_DIGIT.sub(" ", text).strip()
    return LEADING_ARTICLE_RE.sub("", text)


# The same normalisation as a DuckDB macro, so node matching runs inside the query instead of
# calling back into Python per row (a Python UDF cost 17 ms per 3,000 nodes). tests/test_names.py
# checks with Hypothesis that both give the same key.
NORMALIZE_NAME_SQL = (
    "CREATE MACRO lychee_norm(x) AS regexp_replace(trim(regexp_replace(regexp_replace(lower(x), "
    "'[''’]s\\b', '', 'g'), '[^\\p{L}\\p{N}]+', ' ', 'g')), '^(the|a|an) +', '')"
)


_SPACES = re.compile(r"\s+")


def display_form(name: str) -> str:
    """How a topic or entity-topic node is shown: trimmed of edge punctuation, single spaces,
    case-folded ("self-acceptance" stays readable). Only for display; compare with
    `normalize_name`."""
    return _SPACES.sub(" ", name.strip().strip(".,;:!?\"'()[]")).casefold()
