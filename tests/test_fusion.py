"""RRF fusion, MMR selection and budgeted top-k (lychee_ray.query.fusion)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from lychee_ray.query.fusion import budget_topk, minmax_normalize, mmr_select, rrf_fuse
from lychee_ray.query.retrieve import source_matrix


# ------------------------------------------------------------------------------------------ RRF
def test_rrf_scores_are_exact_sums_of_reciprocal_ranks():
    fused = rrf_fuse([["a", "b", "c"], ["b", "a", "d"], ["c"]], kappa=60)
    assert fused == [
        ("a", 1 / 61 + 1 / 62),
        ("b", 1 / 62 + 1 / 61),  # exact tie with "a": "a" appeared first
        ("c", 1 / 63 + 1 / 61),
        ("d", 1 / 63),
    ]


def test_rrf_duplicate_within_a_ranking_counts_once_at_best_rank():
    fused = dict(rrf_fuse([["x", "y", "x"]], kappa=60))
    assert fused == {"x": 1 / 61, "y": 1 / 62}


def test_rrf_tie_break_is_first_appearance_across_rankings():
    assert [d for d, _ in rrf_fuse([["p"], ["q"]])] == ["p", "q"]
    assert [d for d, _ in rrf_fuse([["q"], ["p"]])] == ["q", "p"]


def test_rrf_kappa_changes_scores_and_zero_kappa_is_reciprocal_rank():
    assert rrf_fuse([["a", "b"]], kappa=0) == [("a", 1.0), ("b", 0.5)]
    assert rrf_fuse([["a", "b"]], kappa=10) == [("a", 1 / 11), ("b", 1 / 12)]
    with pytest.raises(ValueError):
        rrf_fuse([["a"]], kappa=-1)


def test_rrf_scores_do_not_depend_on_channel_order():
    rankings = [["a", "b", "c", "d"], ["d", "c", "b", "a"], ["b", "d"], ["c", "a", "e"]]
    forward = dict(rrf_fuse(rankings))
    backward = dict(rrf_fuse(rankings[::-1]))
    assert forward == backward  # bit-identical, thanks to fsum


def test_rrf_rewards_agreement_over_a_single_top_rank():
    # "m" is 2nd in both channels, "t" 1st in one only: agreement wins.
    fused = rrf_fuse([["t", "m"], ["z", "m"]])  # the default kappa, 30
    assert fused[0][0] == "m"
    assert math.isclose(fused[0][1], 2 / 32)


def test_rrf_empty_inputs():
    assert rrf_fuse([]) == []
    assert rrf_fuse([[], []]) == []


# ------------------------------------------------------------------------------- cosine top-k






# ----------------------------------------------------------------------------------------- MMR
def _deg(angle: float) -> list[float]:
    return [math.cos(math.radians(angle)), math.sin(math.radians(angle))]


# Hand-made 2-D example. Relevance already spans [0, 1], so normalization leaves it unchanged.
#   0  A   rel 1.00  at   0 deg  cost 100
#   1  A'  rel 0.90  at   5 deg  cost 100   near-duplicate of A
#   2  B   rel 0.70  at  90 deg  cost 100   diverse
#   3  C   rel 0.95  at  80 deg  cost 150   diverse and relevant, but expensive
#   4  D   rel 0.00  at 180 deg  cost  50
REL = np.array([1.0, 0.9, 0.7, 0.95, 0.0])
EMB = np.array([_deg(0), _deg(5), _deg(90), _deg(80), _deg(180)])
COST = np.array([100, 100, 100, 150, 50])
LAM = 0.7


def test_mmr_picks_diverse_item_over_near_duplicate_and_skips_what_does_not_fit():
    # Step 1 (budget 200): 0.7*rel -> A (0.70) beats C (0.665). Remaining 100.
    # Step 2: C would score 0.665 - 0.3*cos(80deg) = 0.613, the best, but costs 150 > 100: skipped.
    #   B: 0.49 - 0.3*0 = 0.49;  A': 0.63 - 0.3*cos(5deg) = 0.331;  D: 0 + 0.3 = 0.3.  -> B.
    assert mmr_select(REL, EMB, COST, budget=200, lam=LAM) == [0, 2]
    # Without diversity the near-duplicate takes the second slot.
    assert budget_topk(np.argsort(-REL, kind="stable"), COST, budget=200) == [0, 1]


def test_mmr_takes_the_expensive_item_when_it_fits():
    # Budget 250: after A, 150 remain and C (0.613) fits and wins.
    assert mmr_select(REL, EMB, COST, budget=250, lam=LAM) == [0, 3]


def test_mmr_keeps_trying_cheaper_items_and_stops_when_nothing_fits():
    # Budget 350: A (250 left), C (100 left). Now B is close to C: 0.49 - 0.3*cos(10deg) = 0.195;
    # A' 0.331; D 0.3*sin(10deg) = 0.052 -> A' (0 left). D (cost 50) no longer fits: stop.
    assert mmr_select(REL, EMB, COST, budget=350, lam=LAM) == [0, 3, 1]
    # Unlimited budget: everything, B before D.
    assert mmr_select(REL, EMB, COST, budget=10_000, lam=LAM) == [0, 3, 1, 2, 4]


def test_mmr_with_lambda_one_is_relevance_order_under_budget():
    order = np.argsort(-REL, kind="stable")
    for budget in (0, 100, 200, 250, 350, 500):
        assert mmr_select(REL, EMB, COST, budget=budget, lam=1.0) == budget_topk(order, COST, budget)


def test_mmr_normalizes_relevance_so_scale_does_not_matter():
    # RRF-sized scores (~0.03) must select exactly what [0, 1] scores select.
    small = 0.01 + 0.02 * REL
    assert mmr_select(small, EMB, COST, budget=200, lam=LAM) == [0, 2]


def test_mmr_ties_go_to_higher_relevance_then_lower_index():
    emb = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    costs = np.array([1, 1, 1])
    assert mmr_select(np.array([0.5, 0.5, 0.5]), emb, costs, budget=3, lam=0.5) == [0, 1, 2]
    # lam=0: score ignores relevance entirely, so relevance decides the tie.
    assert mmr_select(np.array([0.1, 0.9, 0.5]), emb, costs, budget=3, lam=0.0) == [1, 2, 0]


def test_mmr_edge_cases_and_validation():
    assert mmr_select(np.zeros(0), np.zeros((0, 2)), np.zeros(0, dtype=int), budget=10, lam=0.5) == []
    assert mmr_select(REL, EMB, COST, budget=0, lam=LAM) == []
    assert mmr_select(REL, EMB, np.zeros(5, dtype=int), budget=0, lam=LAM)[0] == 0  # free items fit
    with pytest.raises(ValueError):
        mmr_select(REL, EMB, COST, budget=100, lam=1.5)
    with pytest.raises(ValueError):
        mmr_select(REL, EMB, COST[:3], budget=100, lam=0.5)
    with pytest.raises(ValueError):
        mmr_select(REL, EMB, -COST, budget=100, lam=0.5)


def test_minmax_normalize():
    np.testing.assert_allclose(minmax_normalize(np.array([2.0, 4.0, 3.0])), [0.0, 1.0, 0.5])
    np.testing.assert_allclose(minmax_normalize(np.array([0.3, 0.3])), [1.0, 1.0])
    assert minmax_normalize(np.array([])).size == 0


# ---------------------------------------------------------------------------------- budget_topk
def test_budget_topk_skips_items_that_do_not_fit_and_continues():
    costs = np.array([300, 800, 200, 600, 100])
    # order 0, 1, 2, 3, 4 with budget 1000: 0 (700 left), 1 skip, 2 (500 left), 3 skip, 4 (400 left)
    assert budget_topk([0, 1, 2, 3, 4], costs, 1000) == [0, 2, 4]
    assert budget_topk([3, 1, 0], costs, 1000) == [3, 0]
    assert budget_topk([1, 1, 4, 4], costs, 1000) == [1, 4]  # repeats taken once
    assert budget_topk([0, 1], costs, 0) == []
    with pytest.raises(ValueError):
        budget_topk([0], costs, -1)


# ------------------------------------------------------------------------------------ coverage
def test_coverage_gives_the_next_slot_to_a_new_source_not_a_repeat_of_a_chosen_one():
    # Orthogonal vectors (no MMR redundancy), equal costs; relevance min-maxes to 1, .9, .7, 0.
    # Items 0 and 1 cite the same turn, item 2 another, item 3 a third.
    rel = np.array([1.0, 0.9, 0.7, 0.0])
    emb = np.eye(4)
    costs = np.array([10, 10, 10, 10])
    sources = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]], bool)
    assert mmr_select(rel, emb, costs, 20, 0.7) == [0, 1]  # plain MMR: relevance decides
    # item 1 fully covered: 0.7*0.9 - 0.2*1 = 0.43 < item 2's 0.7*0.7 = 0.49
    assert mmr_select(rel, emb, costs, 20, 0.7, sources, covered_weight=0.2) == [0, 2]
    assert mmr_select(rel, emb, costs, 20, 0.7, sources, covered_weight=0.0) == [0, 1]  # weight 0: plain MMR
    # item 1 only half covered loses only half: 0.63 - 0.1 = 0.53 > 0.49
    half = np.array([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], bool)
    assert mmr_select(rel, emb, costs, 20, 0.7, half, covered_weight=0.2) == [0, 1]


def test_coverage_checks_the_sources_shape():
    with pytest.raises(ValueError, match="sources must have 2 rows"):
        mmr_select(np.array([1.0, 0.5]), np.eye(2), np.array([1, 1]), 2, 0.7, np.zeros((3, 1), bool), covered_weight=0.5)


def test_source_matrix_marks_each_items_turns_once_per_turn():
    items = [SimpleNamespace(source_turn_ids=["D1:2", "D1:3"]), SimpleNamespace(source_turn_ids=["D1:3"]), SimpleNamespace(source_turn_ids=[])]
    m = source_matrix(items)
    assert m.shape == (3, 2) and m.dtype == bool
    assert m.tolist() == [[True, True], [False, True], [False, False]]
    assert source_matrix([]).shape == (0, 0)
