"""Text helpers of the rules backend: normalization, sentence splitting, content words, topics
(YAKE keyphrases of a segment's own text) and record types.

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
        if tok[0].isupper() and is_name_prefix(t, skip):  # "Eliza" for Elizabeth
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


# --------------------------------------------------------------------------------------------
# Topics: keyphrases of the text itself (YAKE), no topic lexicon
# --------------------------------------------------------------------------------------------
# Never a topic word: function words, fillers, name-like stop words, common verbs and
# conversational non-topics (all general English).
_NOT_TOPIC_WORDS = STOPWORDS | FILLERS | ENTITY_STOP | NOT_TOPICS | PRESENT_VERBS | IRREGULAR_PAST
# Usage cues for a single word, from the words right before it. After a determiner or possessive
# (or "went", "love") a word is used as a noun: "went camping", "my painting". After a subject
# pronoun, a modal or a do-negation it is a verb: "I cherish", "let's spread", "will continue".
_NOUN_CUES = frozenset(
    "a an the my your his her our their its this these those some any no "
    "go goes went going love loves loved like likes liked enjoy enjoys enjoyed".split()
)
_VERB_CUES = frozenset(
    "i we you they he she me us them i'll we'll you'll they'll let's will would can could should must might "
    "don't didn't doesn't won't can't never".split()
)
# Adjective endings: "thankful", "inclusive", "nervous", "adorable" are not topics.
_ADJ_ENDINGS = ("ful", "ive", "ous", "able", "ible")
_YAKE_TOP = 30  # candidates asked of YAKE per segment, before our filters
_yake = None


def _keyword_extractor():
    """One YAKE extractor per process (1-2 word n-grams; its English stopwords plus ours, which
    are also what `_topic_word` rejects)."""
    global _yake
    if _yake is None:
        import yake  # imported on first use: a rules import stays cheap

        base = yake.KeywordExtractor(lan="en").stopword_set
        _yake = yake.KeywordExtractor(lan="en", n=2, top=_YAKE_TOP, dedup_lim=0.9, stopwords=set(base) | _NOT_TOPIC_WORDS)
    return _yake


def singular(w: str) -> str:
    """A crude singular, so that "dogs" and "dog" are one topic."""
    if w.endswith("ies") and len(w) > 4:
        return w[:-3] + "y"
    if w.endswith(("oes", "xes", "ches", "shes", "sses")) and len(w) > 4:
        return w[:-2]
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def _topic_word(w: str, skip: set[str], capitalized: bool = False) -> bool:
    """Could `w` (lower case) be a word of a topic? Content words only: no stop or filler word,
    verb form, adverb, name (a capitalized prefix of one too: "Tess"), number or two-letter word."""
    if len(w) < 3 or not any(c.isalpha() for c in w) or w in skip or (capitalized and is_name_prefix(w, skip)):
        return False
    stop = _keyword_extractor().stopword_set  # YAKE's English stopwords and ours
    if w in stop or singular(w) in stop:
        return False
    return not w.endswith("ly") and not (len(w) > 4 and w.endswith("ed") and not w.endswith("eed"))


def _phrase_key(words: Sequence[str]) -> str:
    """Match key of a phrase: every word singular, so "dog walks" matches "dogs walk"."""
    return " ".join(singular(w) for w in words)


def _topic_name(words: Sequence[str]) -> str:
    """Shown form: lower case, the head (last) word singular ("support group", "dog")."""
    return " ".join([*words[:-1], singular(words[-1])])


def _usage(text: str) -> tuple[Counter, Counter]:
    """How often each word of the text follows a noun cue, and a verb cue. A determiner before
    an -ing word followed by a content word ("a loving home") makes it an adjective: no count."""
    toks = [norm_token(t) for t in WORD_RE.findall(text)] + [""]
    noun, verb = Counter(), Counter()
    for prev, w, nxt in zip(toks, toks[1:], toks[2:]):
        if prev in _VERB_CUES:
            verb[w] += 1
        elif prev in _NOUN_CUES and not (w.endswith("ing") and nxt and nxt not in STOPWORDS):
            noun[w] += 1
    return noun, verb


def _single_ok(w: str, noun: Counter, verb: Counter) -> bool:
    """A lone word is a topic when it looks like a noun in this text: no adjective ending, an
    -ing word only where used as a noun, and not used more often as a verb than as a noun."""
    if len(w) > 5 and w.endswith(_ADJ_ENDINGS):
        return False
    if w.endswith("ing") and not noun[w]:
        return False  # "inspiring", "taking": adjectives and verbs
    return verb[w] <= noun[w]


def segment_keyphrases(text: str, names: Iterable[str] = (), limit: int = 12) -> list[str]:
    """Topics a segment offers, best first: YAKE keyphrases of the segment's own text (1-2 words),
    kept when every word is a content word, lower-cased, the head word singular. A lone word
    counts only where the text uses it as a noun (`_single_ok`). Participant names (and aliases)
    are entities, not topics. Deterministic: YAKE is, and ties keep its order."""
    text = normalize_text(text)
    if not WORD_RE.search(text):
        return []
    skip = {n.lower() for n in names}
    noun, verb = _usage(text)
    toks = [singular(norm_token(t)) for t in WORD_RE.findall(text)]
    counts = Counter(toks) + Counter(f"{a} {b}" for a, b in zip(toks, toks[1:]))
    cands: list[str] = []
    for kw, _score in _keyword_extractor().extract_keywords(text):
        toks = WORD_RE.findall(kw)
        words = [norm_token(t) for t in toks]
        if not 1 <= len(words) <= 2 or not all(_topic_word(w, skip, t[0].isupper()) for w, t in zip(words, toks)):
            continue
        if len(words) == 1 and not _single_ok(words[0], noun, verb):
            continue
        name = _topic_name(words)
        if name not in cands:
            cands.append(name)
    # A word that only ever occurs inside one kept phrase ("mental" of "mental health") is no topic of its own.
    inside = {w: counts[_phrase_key(c.split())] for c in cands if " " in c for w in _phrase_key(c.split()).split()}
    return [c for c in cands if " " in c or inside.get(c, 0) < counts[c]][:limit]


def topics_in(text: str, keyphrases: Sequence[str], max_topics: int = 3) -> list[str]:
    """The segment keyphrases that occur in `text` (any number, "dogs" matches "dog"), in the
    segment's rank order; a single word inside a phrase already taken is not taken again."""
    toks = [singular(norm_token(t)) for t in WORD_RE.findall(normalize_text(text))]
    grams = set(toks) | {f"{a} {b}" for a, b in zip(toks, toks[1:])}
    out: list[str] = []
    taken: set[str] = set()
    for kp in keyphrases:
        key = _phrase_key(kp.split())
        if key not in grams or (" " not in key and key in taken):
            continue
        out.append(kp)
        taken.update(key.split())
        if len(out) >= max_topics:
            break
    return out


def topics_for(tokens: Sequence[str], max_topics: int = 4, names: Iterable[str] = ()) -> list[str]:
    """Topic names a query may match, in the form the encoder stores topics in: from the query's
    words as written (adjacent, so that capitalized aliases such as "Tess" are known), its two-word
    phrases of content words first, then its single content words (head word singular; no names,
    no adjective endings)."""
    skip = {n.lower() for n in names}
    words = [norm_token(t) for t in tokens]
    ok = [_topic_word(w, skip, t[:1].isupper()) for w, t in zip(words, tokens)]
    pairs = [_topic_name(words[i : i + 2]) for i in range(len(words) - 1) if ok[i] and ok[i + 1]]
    singles = [singular(w) for w, good in zip(words, ok) if good and not (len(w) > 5 and w.endswith(_ADJ_ENDINGS))]
    return list(dict.fromkeys(pairs + singles))[:max_topics]


def fallback_topic(words: Sequence[str]) -> list[str]:
    """No segment keyphrase in a record: its longest noun-looking content word, so every record
    has a topic."""
    cands = [
        w for w in words
        if len(w) >= 4 and not w.isdigit() and not w.endswith(("ly", "ed", "ing")) and not (len(w) > 5 and w.endswith(_ADJ_ENDINGS))
        and w not in ENTITY_STOP and w not in PRESENT_VERBS and w not in IRREGULAR_PAST and w not in NOT_TOPICS
    ]  # fmt: skip
    if not cands:
        return []
    for w in sorted(cands, key=len, reverse=True):  # stable: the first of equal length wins
        single = singular(w)
        if single not in NOT_TOPICS and single not in PRESENT_VERBS:
            return [single]
    return []


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
