"""Answer metrics and evidence recall (lychee_ray.evaluate.metrics)."""

from __future__ import annotations

import json
import math

import pytest

from lychee_ray.evaluate.metrics import (
    bleu1,
    evidence_recall,
    locomo_category_name,
    locomo_f1,
    normalize_answer,
    normalize_locomo,
    porter_stem,
    token_f1,
)
from lychee_ray.schemas import LOCOMO_CATEGORIES



# ------------------------------------------------------------------------------ normalization
def test_normalize_answer_is_squad_style():
    assert normalize_answer("The  Cat, and a dog!") == "cat and dog"
    assert normalize_answer("An apple; THE end.") == "apple end"
    assert normalize_answer(2022) == "2022"


def test_normalize_locomo_drops_commas_and_and():
    assert normalize_locomo("Salt, and the Pepper!") == "salt pepper"


# ------------------------------------------------------------------------------------ token F1
def test_token_f1_hand_cases():
    # pred {cat, sat}, gold {cat, sat, down}: P = 1, R = 2/3, F1 = 0.8
    assert token_f1("the cat sat", "a cat sat down") == pytest.approx(0.8)
    assert token_f1("Paris", "paris.") == 1.0
    assert token_f1("London", "Paris") == 0.0
    # bag of tokens with counts: pred [a, a, b] vs gold [a, b, b] -> overlap 2, P = R = 2/3
    assert token_f1("x x y", "x y y") == pytest.approx(2 / 3)


def test_token_f1_empty_answers():
    assert token_f1("", "") == 1.0
    assert token_f1("the", "") == 1.0  # both normalize to nothing
    assert token_f1("", "paris") == 0.0
    assert token_f1("paris", "") == 0.0


# ------------------------------------------------------------------------------------- BLEU-1
def test_bleu1_hand_cases():
    # p1 = 2/2, short prediction: BP = exp(1 - 3/2)
    assert bleu1("cat sat", "the cat sat down") == pytest.approx(math.exp(-0.5))
    # clipping: "cat" counts once; longer than gold: BP = 1
    assert bleu1("cat cat cat", "cat") == pytest.approx(1 / 3)
    # same length, 2 of 3 unigrams match: BP = 1
    assert bleu1("red big car", "red small car") == pytest.approx(2 / 3)
    assert bleu1("blue", "red") == 0.0
    assert bleu1("Yes.", "yes") == 1.0


def test_bleu1_empty_answers():
    assert bleu1("", "") == 1.0
    assert bleu1("", "cat") == 0.0
    assert bleu1("cat", "") == 0.0


# ----------------------------------------------------------------------------- Porter stemmer
@pytest.mark.parametrize(
    "word, stem",
    [
        # reference values from NLTK's PorterStemmer (the stemmer upstream LoCoMo uses)
        ("caresses", "caress"), ("ponies", "poni"), ("ties", "tie"), ("running", "run"),
        ("hopping", "hop"), ("happily", "happili"), ("relational", "relat"),
        ("generalizations", "gener"), ("sky", "sky"), ("dying", "die"), ("agreed", "agre"),
        ("feed", "feed"), ("hopeful", "hope"), ("geology", "geolog"), ("conditional", "condit"),
        ("controlling", "control"), ("filing", "file"), ("sized", "size"), ("is", "is"),
    ],
)  # fmt: skip
def test_porter_stem_matches_nltk(word, stem):
    assert porter_stem(word) == stem


# ---------------------------------------------------------------------------------- LoCoMo F1
def test_locomo_category_mapping_follows_upstream_evaluation():
    assert LOCOMO_CATEGORIES == {
        1: "multi_hop",
        2: "temporal",
        3: "open_domain",
        4: "single_hop",
        5: "adversarial",
    }
    assert locomo_category_name(1) == "multi_hop"
    assert locomo_category_name("4") == "single_hop"
    assert locomo_category_name("temporal") == "temporal"
    with pytest.raises(ValueError):
        locomo_category_name(6)
    with pytest.raises(ValueError):
        locomo_category_name("single-hop")


def test_locomo_multi_hop_is_comma_split_partial_f1():
    # gold parts hiking -> 1, painting -> 1, swimming -> 0: mean 2/3
    assert locomo_f1("painting, hiking", "hiking, painting, swimming", 1) == pytest.approx(2 / 3)
    # the same strings under plain F1 (single-hop) are one bag of tokens: P = 1, R = 2/3
    assert locomo_f1("painting, hiking", "hiking, painting, swimming", 4) == pytest.approx(0.8)
    # a best-matching part per gold part: 0.5 ("beach trip" vs "beach") and 1.0
    assert locomo_f1("beach trip, camping", "beach, camping", "multi_hop") == pytest.approx(
        (2 * 0.5 * 1 / 1.5 + 1.0) / 2
    )


def test_locomo_f1_stems_and_drops_and():
    assert locomo_f1("She runs", "she running", 4) == 1.0
    assert token_f1("She runs", "she running") == 0.5  # SQuAD F1 does not stem
    assert locomo_f1("salt and pepper", "salt, pepper", 2) == 1.0


def test_locomo_open_domain_uses_first_semicolon_alternative():
    gold = "Likely yes; she has said she enjoys reading"
    assert locomo_f1("likely yes", gold, 3) == 1.0
    assert locomo_f1("likely yes", gold, 4) < 1.0


def test_locomo_adversarial_is_phrase_match():
    assert locomo_f1("That was not mentioned in the conversation.", "", 5) == 1.0
    assert locomo_f1("No information available", "whatever", "adversarial") == 1.0
    assert locomo_f1("She went to Paris", "Paris", 5) == 0.0


def test_locomo_f1_casts_int_answers_and_empty_is_zero():
    assert locomo_f1("2022", 2022, 2) == 1.0
    assert locomo_f1("", "", 4) == 0.0  # upstream: no overlap -> 0


def test_locomo_f1_gold_against_itself_on_the_generated_archive(generated_locomo):
    """Every answerable question of the generated LoCoMo-format archive scores 1.0 against its own
    gold answer (for open-domain, its first ';' alternative, which is all that upstream scores)."""
    (path,) = generated_locomo.files
    data = json.loads(path.read_text())
    n = 0
    for conv in data:
        for qa in conv["qa"]:
            if qa["category"] == 5 or "answer" not in qa:
                continue
            gold = str(qa["answer"])
            pred = gold.split(";")[0] if qa["category"] == 3 else gold
            assert locomo_f1(pred, gold, qa["category"]) == pytest.approx(1.0), (gold, qa["category"])
            n += 1
    # every question less the abstentions, which LoCoMo's numbering files as adversarial (5)
    assert n == sum(q["category"] != "abstention" for q in generated_locomo.questions) > 0


# ----------------------------------------------------------------------------- evidence recall
def test_evidence_recall_basic_and_duplicates():
    assert evidence_recall(["D1:1", "D1:2"], ["D1:2", "D3:4"]) == 0.5
    assert evidence_recall(["D1:1", "D1:1", "D1:2"], ["D1:1"]) == 0.5  # distinct gold ids
    assert evidence_recall(["D1:1"], []) == 0.0
    assert evidence_recall(["D1:1"], ["D1:1", "D1:1"]) == 1.0


def test_evidence_recall_ignores_invalid_gold_only_when_told():
    gold = ["D1:1", "D1:2", "D:11:26"]
    retrieved = ["D1:1", "D9:9"]
    valid = {"D1:1", "D1:2", "D9:9"}
    assert evidence_recall(gold, retrieved) == pytest.approx(1 / 3)
    assert evidence_recall(gold, retrieved, valid_turn_ids=valid) == 0.5
    assert evidence_recall(gold, retrieved, valid_turn_ids=list(valid)) == 0.5


def test_evidence_recall_none_without_gold():
    assert evidence_recall([], ["D1:1"]) is None
    assert evidence_recall(["D"], ["D1:1"], valid_turn_ids={"D1:1"}) is None
