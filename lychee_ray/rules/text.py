"""Text helpers of the rules backend: normalization, sentence splitting, content words, topics
and record types.

The shared layer under the encoder, planner, answerer and entity extraction (the tests use it
directly too): the sentence-level regexes (questions, anaphora, "just did" cues, "when"
questions), the crude stemmer for overlap scoring, and `insert_dates`, which writes a resolved
date into the text ("yesterday (7 May 2023)").
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable, Sequence

from lychee_ray.rules.lexicon import (
    ED_ADJ_CUES,
    ED_NOT_PAST,
    ENTITY_STOP,
    FILLERS,
    IRREGULAR_PAST,
    NOT_TOPICS,
    PRESENT_VERBS,
    STOPWORDS,
    TOPIC_BIGRAMS,
    TOPIC_LEXICON,
    TYPE_RULES,
)
from lychee_ray.rules.timeparse import TimeExpr

# --------------------------------------------------------------------------------------------
# Regexes
# --------------------------------------------------------------------------------------------
_QUOTES = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"', "\u00a0": " "})
CAPTION_RE = re.compile(r"\s*\[image:\s*([^\]]*)\]")
_SENT_SPLIT_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\s*\n+\s*")
_ABBREV_END_RE = re.compile(r"(?:\b(?:Mr|Mrs|Ms|Dr|St|Jr|Sr|vs|etc|approx|e\.g|i\.e|a\.m|p\.m)\.|\b[A-Z]\.)$", re.I)
_LIST_NUMBER_RE = re.compile(r"(?:^|\s)(\d{1,2}[.)])$")  # "1." of a numbered list starts the next item
WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'+-]*")
ANAPHOR_START_RE = re.compile(r"^\W*(?:it|that|this|they|those|these|he|she|there|which|so\s+it|and\s+it|but\s+it)\b", re.I)
INTERROGATIVE_RE = re.compile(
    r"^\W*(?:(?:hey|hi|so|and|but|oh|wow|well|btw|also|anyway|ok|okay|[A-Z][a-z]+),?\s+)?"
    r"(?:what|what's|whats|how|how's|why|when|where|who|whose|which|did|do|does|don't|have|has|had|are|is|was|were|can|could"
    r"|would|will|should|any|anything|ever|wanna|want|you|your|got|is|isn't|aren't|didn't|doesn't|haven't|care|mind|need|tell)\b",
    re.I,
)
RHETORICAL_RE = re.compile(r"^\W*(?:guess|you\s+know)\s+what\b", re.I)
# "I just launched ...", "currently reading": said on the session day, the best date there is.
RECENT_CUE_RE = re.compile(
    rf"\bjust\s+(?!(?:wanted|needed|wondered|thought|meant|felt)\b)(?:(?:{'|'.join(sorted(IRREGULAR_PAST))})\b|[a-z]{{3,}}ed\b)"
    r"|\bcurrently\b|\bright\s+now\b|\bat\s+the\s+moment\b",
    re.I,
)
WHEN_Q_RE = re.compile(r"^\W*(?:when\b|what\s+(?:date|day|year|month|time)\b|which\s+(?:date|day|year|month)\b|in\s+what\s+year\b|on\s+what\s+date\b)", re.I)


# --------------------------------------------------------------------------------------------
# Text helpers (public: the planner, the tests and evaluation reuse them)
# --------------------------------------------------------------------------------------------
def normalize_text(text: str) -> str:
    return (text or "").translate(_QUOTES)


def split_sentences(text: str) -> list[str]:
    """Sentences of an utterance; "Dr." and "e.g." do not end one."""
    out: list[str] = []
    for piece in _SENT_SPLIT_RE.split(text):
        piece = piece.strip()
        if not piece:
            continue
        if out and _ABBREV_END_RE.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
            continue
        if out and (num := _LIST_NUMBER_RE.search(out[-1])):  # "Options: 1." + "Check ..." -> "1. Check ..."
            piece = f"{num.group(1)} {piece}"
            out[-1] = out[-1][: num.start()].rstrip()
            if not out[-1]:
                out.pop()
        out.append(piece)
    return out


def norm_token(tok: str) -> str:
    t = tok.lower().strip("'-+")
    return t[:-2] if t.endswith("'s") else t


def content_words(text: str, names: Iterable[str] = ()) -> list[str]:
    """Lowercased words that carry content: no stopwords, fillers or participant names."""
    skip = {n.lower() for n in names}
    out = []
    for tok in WORD_RE.findall(text):
        t = norm_token(tok)
        if len(t) < 2 and not t.isdigit() or t in STOPWORDS or t in FILLERS or t in skip:
            continue
        if tok[0].isupper() and is_name_prefix(t, skip):  # "Mel" for Melanie
            continue
        out.append(t)
    return out


def stem(word: str) -> str:
    """A crude suffix stripper for overlap scoring: paints/painted/painting -> paint."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif len(w) > 4 and w.endswith("ed"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":  # planned -> plann -> plan
        w = w[:-1]
    return w


def topics_for(words: Sequence[str], max_topics: int = 3) -> list[str]:
    """Lexicon topics of a word list: most frequent first, ties by first occurrence."""
    hits: list[str] = []
    skip_next = False
    for i, w in enumerate(words):
        if skip_next:  # the second word of a bigram already counted
            skip_next = False
            continue
        if i + 1 < len(words) and (big := TOPIC_BIGRAMS.get(f"{w} {words[i + 1]}")):
            hits.append(big)
            skip_next = True
            continue
        topic = TOPIC_LEXICON.get(w) or (TOPIC_LEXICON.get(w[:-1]) if w.endswith("s") else None)
        if topic:
            hits.append(topic)
    counts = Counter(hits)
    first = {t: i for i, t in reversed(list(enumerate(hits)))}
    return sorted(counts, key=lambda t: (-counts[t], first[t]))[:max_topics]


def fallback_topic(words: Sequence[str]) -> list[str]:
    """No lexicon hit: the longest noun-looking content word, so every record has a topic."""
    cands = [
        w for w in words
        if len(w) >= 4 and not w.isdigit() and not w.endswith(("ly", "ed", "ing"))
        and w not in ENTITY_STOP and w not in PRESENT_VERBS and w not in IRREGULAR_PAST and w not in NOT_TOPICS
    ]  # fmt: skip
    if not cands:
        return []
    for w in sorted(cands, key=len, reverse=True):  # stable: the first of equal length wins
        single = _singular(w)
        if single not in NOT_TOPICS and single not in PRESENT_VERBS:
            return [single]
    return []


def _singular(w: str) -> str:
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("oes", "xes", "ches", "shes")) and len(w) > 4:
        return w[:-2]
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def insert_dates(text: str, times: Sequence[TimeExpr]) -> str:
    """"... yesterday ..." -> "... yesterday (7 May 2023) ..." for relative expressions."""
    out, pos = [], 0
    for te in times:
        if not te.relative:
            continue
        out.append(text[pos : te.span[1]])
        out.append(f" ({te.label})")
        pos = te.span[1]
    out.append(text[pos:])
    return "".join(out)


def classify(text: str, has_time: bool) -> str:
    """One of the seven record types from lexical cues (first matching rule wins)."""
    for rtype, rx in TYPE_RULES:
        if rx.search(text):
            return rtype
    if has_time or _has_past_action(text):
        return "event"
    return "fact"


def _has_past_action(text: str) -> bool:
    prev = ""
    for tok in WORD_RE.findall(text):
        t = tok.lower()
        if t in IRREGULAR_PAST:
            return True
        # "-ed" after be/feel/so is an adjective or a passive: "is swamped", "so excited".
        if len(t) > 4 and t.endswith("ed") and t not in ED_NOT_PAST and not t.endswith("eed") and prev not in ED_ADJ_CUES:
            return True
        prev = t
    return False


def is_name_prefix(word: str, names) -> bool:
    return len(word) >= 3 and any(n.startswith(word) for n in names)
