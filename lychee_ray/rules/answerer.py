"""`extractive_answer`: the `rules` backend's answer, and the fallback when the LLM answer fails.

No generation: the evidence sentence that shares the most stemmed words with the question, or for
"when" questions the date it names (the "(7 May 2023)" label the encoder wrote, else its last
date). Evaluation answers the retrieval baselines the same way under `rules`.
"""

from __future__ import annotations

from lychee_ray.rules.lexicon import STOPWORDS
from lychee_ray.rules.text import (
    WHEN_Q_RE,
    WORD_RE,
    norm_token,
    normalize_text,
    split_sentences,
    stem,
)
from lychee_ray.rules.timeparse import find_time_expressions


# --------------------------------------------------------------------------------------------
# Extractive answer
# --------------------------------------------------------------------------------------------
def _stems(text: str) -> set[str]:
    """Stemmed non-stopwords. Fillers count here: "love" is small talk in a greeting but the
    point of "What does Elizabeth love?"."""
    return {stem(t) for t in (norm_token(x) for x in WORD_RE.findall(text)) if t and t not in STOPWORDS}


def _date_phrase(sentence: str) -> str | None:
    """The resolved date of a sentence: a parenthesized label we wrote, else its last date."""
    found = find_time_expressions(sentence, None)
    if not found:
        return None
    for te in found:
        if sentence[max(0, te.span[0] - 1) : te.span[0]] == "(":
            return te.label
    return found[-1].label


def extractive_answer(question: str, evidence: list[str]) -> str:
    """The evidence sentence with the most content-word overlap with the question (ties: the
    earlier, higher-ranked evidence). For "when" questions a sentence holding a date wins ties
    and the date itself is returned. Empty evidence gives ""."""
    q = normalize_text(question)
    q_stems = _stems(q)
    wants_date = bool(WHEN_Q_RE.search(q))
    best: tuple[float, str, str | None] | None = None
    for ev in evidence:
        for sent in split_sentences(normalize_text(ev)):
            score = float(len(q_stems & _stems(sent)))
            phrase = _date_phrase(sent) if wants_date else None
            if phrase:
                score += 0.5
            if best is None or score > best[0]:
                best = (score, sent, phrase)
    if best is None:
        return ""
    return best[2] if best[2] else best[1]
