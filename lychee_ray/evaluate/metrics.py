"""Answer and retrieval metrics of the evaluation stage (DESIGN.md step 6, `answers` table).

Lexical scores, computed for every answered question next to the LLM judge:

- `token_f1`: SQuAD-style token F1 (lowercase, strip punctuation and the articles a/an/the,
  bag-of-tokens overlap). Used for LongMemEval and generic questions.
- `bleu1`: BLEU-1 on the same tokens: clipped unigram precision times the brevity penalty.
- `locomo_f1`: the LoCoMo protocol of upstream `task_eval/evaluation.py` (snap-research/locomo),
  re-implemented here: its normalization (commas and "and" dropped too), Porter-stemmed tokens,
  comma-split partial F1 for multi-hop, the first ';' alternative of open-domain answers, and the
  "not mentioned" phrase test for adversarial questions.
- `evidence_recall`: the share of gold evidence turns that the retrieved evidence covers.
- `counts_as_correct`: the judge accuracy's rule for one question (the report's SQL twin is
  `evaluate.report.CORRECT_SQL`).

Pure functions, no I/O. Judge prompts live in `lychee_ray.llm.prompts`.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Collection, Iterable

from lychee_ray.io.readers.common import whole_turn_id
from lychee_ray.schemas import LOCOMO_CATEGORIES

__all__ = [
    "LOCOMO_ADVERSARIAL_PHRASES",
    "counts_as_correct",
    "bleu1",
    "evidence_recall",
    "locomo_category_name",
    "locomo_f1",
    "normalize_answer",
    "normalize_locomo",
    "porter_stem",
    "token_f1",
]

_LOCOMO_NAMES = frozenset(LOCOMO_CATEGORIES.values())

# Upstream scores an adversarial answer as correct iff the output contains one of these.
LOCOMO_ADVERSARIAL_PHRASES = ("no information available", "not mentioned")

_PUNCT = frozenset(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")
_LOCOMO_ARTICLES = re.compile(r"\b(a|an|the|and)\b")


def locomo_category_name(category: int | str) -> str:
    """1..5, "1".."5" or a name from LOCOMO_CATEGORIES -> the name; anything else: ValueError."""
    if isinstance(category, str) and category in _LOCOMO_NAMES:
        return category
    try:
        return LOCOMO_CATEGORIES[int(category)]
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"unknown LoCoMo category {category!r}") from None


# --------------------------------------------------------------------------------------------
# Normalization and tokens
# --------------------------------------------------------------------------------------------
def _strip_punct(text: str) -> str:
    return "".join(ch for ch in text if ch not in _PUNCT)


def normalize_answer(text: object) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop a/an/the, collapse whitespace."""
    text = _strip_punct(str(text).lower())
    return " ".join(_SQUAD_ARTICLES.sub(" ", text).split())


def normalize_locomo(text: object) -> str:
    """Upstream LoCoMo normalization: as SQuAD, but commas go first and "and" is an article."""
    text = _strip_punct(str(text).replace(",", "").lower())
    return " ".join(_LOCOMO_ARTICLES.sub(" ", text).split())


def _f1_from_tokens(pred: list[str], gold: list[str]) -> float:
    common = sum((Counter(pred) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def token_f1(pred: object, gold: object) -> float:
    """SQuAD token F1 of normalized answers; two empty answers score 1.0 (SQuAD's convention)."""
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    return _f1_from_tokens(p, g)


def bleu1(pred: object, gold: object) -> float:
    """Sentence BLEU-1 with one reference, on `normalize_answer` tokens.

    BLEU-1 = BP * p1, where p1 = sum_w min(count_pred(w), count_gold(w)) / len(pred) is the
    clipped unigram precision and BP = 1 if len(pred) > len(gold) else exp(1 - len(gold)/len(pred))
    is the brevity penalty. This equals NLTK's sentence_bleu with weights (1, 0, 0, 0) when any
    unigram matches. No smoothing: no match scores 0. Two empty answers score 1.0, as token_f1.
    """
    p, g = normalize_answer(pred).split(), normalize_answer(gold).split()
    if not p or not g:
        return float(p == g)
    clipped = sum((Counter(p) & Counter(g)).values())
    if clipped == 0:
        return 0.0
    brevity = 1.0 if len(p) > len(g) else math.exp(1.0 - len(g) / len(p))
    return brevity * clipped / len(p)


# --------------------------------------------------------------------------------------------
# LoCoMo F1 (upstream protocol)
# --------------------------------------------------------------------------------------------
def _stemmed_tokens(text: str) -> list[str]:
    return [porter_stem(w) for w in normalize_locomo(text).split()]


def _locomo_plain_f1(pred: str, gold: str) -> float:
    # Upstream returns 0 when nothing overlaps, including when both sides are empty.
    p, g = _stemmed_tokens(pred), _stemmed_tokens(gold)
    if not p or not g:
        return 0.0
    return _f1_from_tokens(p, g)


def _locomo_multi_hop_f1(pred: str, gold: str) -> float:
    # Each comma-separated gold part is matched with its best prediction part; the mean over
    # gold parts rewards listing every item of a multi-part answer.
    preds = [p.strip() for p in pred.split(",")]
    golds = [g.strip() for g in gold.split(",")]
    return sum(max(_locomo_plain_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_f1(pred: object, gold: object, category: int | str) -> float:
    """LoCoMo answer score by category (int 1-5 or its name), as upstream evaluation.py.

    multi_hop: comma-split partial F1. temporal, single_hop: stemmed token F1. open_domain: the
    same F1 against the first ';'-separated gold alternative. adversarial: 1.0 if the prediction
    contains "no information available" or "not mentioned", else 0.0 (`gold` is ignored).
    Answers that are ints in the source are cast with str().
    """
    name = locomo_category_name(category)
    pred, gold = str(pred), str(gold)
    if name == "adversarial":
        low = pred.lower()
        return float(any(phrase in low for phrase in LOCOMO_ADVERSARIAL_PHRASES))
    if name == "multi_hop":
        return _locomo_multi_hop_f1(pred, gold)
    if name == "open_domain":
        gold = gold.split(";")[0].strip()
    return _locomo_plain_f1(pred, gold)


# --------------------------------------------------------------------------------------------
# Evidence recall
# --------------------------------------------------------------------------------------------
def evidence_recall(
    gold: Iterable[str],
    retrieved: Iterable[str],
    valid_turn_ids: Collection[str] | None = None,
) -> float | None:
    """|gold ∩ retrieved| / |gold| over distinct turn ids; None when there is no gold to find.
    A retrieved part of a split turn (X#p2) counts as its turn X: labels name input turns.

    With `valid_turn_ids`, gold ids that are not real turns (LoCoMo has a few malformed or
    dangling evidence ids, e.g. "D:11:26") are dropped first, so they cannot cap recall below 1;
    without it every gold id counts. A question whose gold is empty after that gets None, not 0
    or 1, so averages skip it instead of being biased.
    """
    gold_set = set(gold)
    if valid_turn_ids is not None:
        valid = valid_turn_ids if isinstance(valid_turn_ids, (set, frozenset, dict)) else set(valid_turn_ids)
        gold_set = {g for g in gold_set if g in valid}
    if not gold_set:
        return None
    return len(gold_set & {whole_turn_id(t) for t in retrieved}) / len(gold_set)


# --------------------------------------------------------------------------------------------
# Porter stemmer
# --------------------------------------------------------------------------------------------
# Upstream LoCoMo stems with NLTK's PorterStemmer (default NLTK_EXTENSIONS mode); we use the same
# implementation so our F1 matches upstream's to the digit. The stemmer needs no NLTK data files.
_STEMMER = None


def porter_stem(word: str) -> str:
    global _STEMMER
    if _STEMMER is None:
        from nltk.stem import PorterStemmer

        _STEMMER = PorterStemmer()
    return _STEMMER.stem(word)


def counts_as_correct(status: str, answer_fallback: bool, judge_label: str | None) -> bool:
    """Whether one asked question counts as correct: the judge said CORRECT of the model's own
    answer. A pipeline error, a missing label and the rules fallback after a failed answer call
    count as wrong, so the accuracy's denominator is every question asked."""
    return status == "ok" and not answer_fallback and judge_label == "CORRECT"
