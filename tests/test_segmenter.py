"""The segmenter math on hand-computed cases (pure numpy, no model)."""

import itertools
import math

import numpy as np
import pytest

from lychee_ray.config_sections import SegmenterConfig
from lychee_ray.ingest.segment import (
    OnlineSegmenter,
    cohesion,
    exchange_embeddings,
    fixed_windows,
    segment_exchanges,
    sigmoid,
    surprise_feature,
)


def unit(v):
    v = np.asarray(v, dtype=np.float64)
    return v / np.linalg.norm(v)


def brute_cohesion(vectors):
    pairs = list(itertools.combinations(range(len(vectors)), 2))
    return float(np.mean([vectors[i] @ vectors[j] for i, j in pairs])) if pairs else 0.0


@pytest.mark.parametrize("n,dim,seed", [(2, 3, 0), (5, 8, 1), (40, 384, 2), (200, 64, 3)])
def test_incremental_cohesion_equals_brute_force(n, dim, seed):
    rng = np.random.default_rng(seed)
    vecs = [unit(rng.normal(size=dim)) for _ in range(n)]
    running = np.zeros(dim)
    for k, v in enumerate(vecs, start=1):
        running += v  # the O(dim) update the segmenter uses
        assert cohesion(running, k) == pytest.approx(brute_cohesion(vecs[:k]), abs=1e-9)


def test_boundary_probability_hand_computed():
    # Segment = {e1, e2} with e1 = x, e2 = y (orthogonal). New exchange e3 = x.
    cfg = SegmenterConfig(bias=-1.0, w_surprise=2.0, w_cohesion=3.0, w_length=0.5, w_turns=0.25,
                          surprise_center=0.0, length_scale_tokens=100, turn_scale=4, min_exchanges=5)
    seg = OnlineSegmenter(cfg)
    x, y = np.array([1.0, 0, 0]), np.array([0, 1.0, 0])
    seg.step(x, 10, "s1")
    seg.step(y, 20, "s1")
    # centroid = (x+y)/sqrt2 -> sim 1/sqrt2; last = y -> sim 0; surprise = 1 - 1/sqrt2
    s = 1 - 1 / math.sqrt(2)
    # Coh({x,y}) = 0; Coh({x,y,x}) = (0 + 1 + 0)/3 = 1/3 -> drop = max(0, 0 - 1/3) = 0
    d = 0.0
    L = (10 + 20 + 30) / 100
    N = 2 / 4
    expected = sigmoid(-1.0 + 2.0 * s + 3.0 * d + 0.5 * L + 0.25 * N)
    assert seg.boundary_probability(x, 30, False) == pytest.approx(expected, abs=1e-12)


def test_cohesion_drop_is_positive_for_an_off_topic_exchange():
    cfg = SegmenterConfig(bias=0.0, w_surprise=0.0, w_cohesion=1.0, w_length=0.0, w_turns=0.0)
    seg = OnlineSegmenter(cfg)
    a, b = unit([1, 0.1, 0]), unit([1, -0.1, 0])
    seg.step(a, 1, 0)
    seg.step(b, 1, 0)
    off = unit([0, 0, 1])
    coh_before = float(a @ b)
    coh_after = brute_cohesion([a, b, off])
    assert seg.boundary_probability(off, 1, False) == pytest.approx(sigmoid(coh_before - coh_after))


def test_surprise_feature_clips_below_center():
    assert surprise_feature(0.3, 0.5) == 0.0
    assert surprise_feature(0.75, 0.5) == pytest.approx(0.5)
    assert surprise_feature(1.0, 0.5) == pytest.approx(1.0)


def test_topic_shift_is_cut_and_on_topic_run_is_not():
    rng = np.random.default_rng(0)
    topic_a, topic_b = unit(rng.normal(size=32)), unit(rng.normal(size=32))
    emb = [unit(topic_a + 0.1 * rng.normal(size=32)) for _ in range(4)] + [unit(topic_b + 0.1 * rng.normal(size=32)) for _ in range(4)]
    cfg = SegmenterConfig(w_length=0.0, w_turns=0.0, min_exchanges=2)
    bounds, probs = segment_exchanges(np.array(emb), [10] * 8, ["s"] * 8, cfg)
    assert [(b.start, b.end) for b in bounds] == [(0, 4), (4, 8)]
    assert bounds[0].reason == "threshold" and probs[4] > cfg.delta
    assert all(p < cfg.delta for p in probs[1:4])


def test_token_cap_forces_a_cut_even_when_on_topic():
    v = unit([1, 0, 0])
    cfg = SegmenterConfig(token_cap=100, w_length=0.0, w_turns=0.0)
    bounds, _ = segment_exchanges(np.array([v] * 5), [40] * 5, ["s"] * 5, cfg)
    assert [(b.start, b.end) for b in bounds] == [(0, 2), (2, 4), (4, 5)]
    assert {b.reason for b in bounds[:-1]} == {"token_cap"}


def test_turn_pressure_alone_eventually_cuts():
    v = unit([1, 0, 0])
    cfg = SegmenterConfig(bias=-3.0, w_surprise=0.0, w_cohesion=0.0, w_length=0.0, w_turns=1.0, turn_scale=1)
    bounds, _ = segment_exchanges(np.array([v] * 10), [1] * 10, ["s"] * 10, cfg)
    # logit = -3 + |S_k|: p > 0.5 once |S_k| >= 4 -> segments of 4 exchanges
    assert [b.end - b.start for b in bounds] == [4, 4, 2]


@pytest.mark.parametrize("policy,expected", [("boundary", [(0, 2), (2, 4)]), ("ignore", [(0, 4)])])
def test_session_policy(policy, expected):
    v = unit([1, 0, 0])
    cfg = SegmenterConfig(session_policy=policy, w_length=0.0, w_turns=0.0)
    bounds, _ = segment_exchanges(np.array([v] * 4), [1] * 4, ["s1", "s1", "s2", "s2"], cfg)
    assert [(b.start, b.end) for b in bounds] == expected


def test_session_feature_adds_to_the_logit():
    v = unit([1, 0, 0])
    base = dict(bias=-3.0, w_surprise=0.0, w_cohesion=0.0, w_length=0.0, w_turns=0.0, min_exchanges=1)
    with_feature = OnlineSegmenter(SegmenterConfig(session_policy="feature", w_session=3.5, **base))
    with_feature.step(v, 1, "s1")
    assert with_feature.boundary_probability(v, 1, True) == pytest.approx(sigmoid(0.5))
    assert with_feature.boundary_probability(v, 1, False) == pytest.approx(sigmoid(-3.0))


def test_every_exchange_in_exactly_one_segment_and_min_length():
    rng = np.random.default_rng(5)
    emb = np.array([unit(rng.normal(size=16)) for _ in range(300)])
    cfg = SegmenterConfig(min_exchanges=2)
    bounds, probs = segment_exchanges(emb, rng.integers(5, 60, size=300), ["s"] * 300, cfg)
    covered = [i for b in bounds for i in range(b.start, b.end)]
    assert covered == list(range(300))
    # random vectors are maximally surprising, yet min_exchanges forbids 1-exchange segments
    assert all(b.end - b.start >= 2 for b in bounds[:-1] if b.reason == "threshold")
    assert probs[0] == 0.0 and probs.shape == (300,)


def test_exchange_embeddings_are_normalized_means_and_fixed_windows():
    turns = np.array([[1.0, 0], [0, 1.0], [1.0, 0]], dtype=np.float32)
    ex = exchange_embeddings(turns, [[0, 1], [2]])
    assert np.allclose(ex[0], [1 / math.sqrt(2), 1 / math.sqrt(2)])
    assert np.allclose(ex[1], [1, 0])
    assert [(b.start, b.end) for b in fixed_windows(7, 3)] == [(0, 3), (3, 6), (6, 7)]


def topic_walk(rng, n, dim=48, switch=0.15):
    """Unit vectors around topics that switch at random: threshold cuts at varied lengths."""
    topic, out = rng.normal(size=dim), []
    for _ in range(n):
        if rng.random() < switch:
            topic = rng.normal(size=dim)
        out.append(unit(topic + 0.6 * rng.normal(size=dim)))
    return np.array(out)


@pytest.mark.parametrize(
    "overrides",
    [{}, {"session_policy": "feature"}, {"session_policy": "ignore", "merge_short_tails": False}, {"token_cap": 120, "min_exchanges": 3}],
)
def test_incremental_segmenter_equals_naive_pairwise_reference(overrides):
    from benchmarks.bench_segmenter import naive_segment_exchanges

    rng = np.random.default_rng(11)
    emb = topic_walk(rng, 400)
    tokens = rng.integers(5, 60, size=400)
    sessions = [f"s{i // 37}" for i in range(400)]
    cfg = SegmenterConfig(**overrides)
    fast, p_fast = segment_exchanges(emb, tokens, sessions, cfg)
    slow, p_slow = naive_segment_exchanges(emb, tokens, sessions, cfg)
    assert [(b.start, b.end, b.reason) for b in fast] == [(b.start, b.end, b.reason) for b in slow]
    assert np.allclose(p_fast, p_slow, atol=1e-9)
    assert len({b.reason for b in fast}) >= 2 and len(fast) > 20  # the case exercises real cuts


def test_step_and_precomputed_dots_paths_agree():
    rng = np.random.default_rng(3)
    emb = topic_walk(rng, 120)
    cfg = SegmenterConfig(merge_short_tails=False)
    seg = OnlineSegmenter(cfg)
    stepped = [seg.step(e, 30, "s")[0] for e in emb]
    bounds, _ = segment_exchanges(emb, [30] * 120, ["s"] * 120, cfg)
    assert [t for t, cut in enumerate(stepped) if cut] == [b.start for b in bounds[1:]]


def _turn_pressure_cfg(**kw):
    # logit = -3 + |S_k|: cuts make 4-exchange segments, whatever the content
    return SegmenterConfig(bias=-3.0, w_surprise=0.0, w_cohesion=0.0, w_length=0.0, w_turns=1.0, turn_scale=1, **kw)


def test_short_session_tail_joins_the_previous_segment():
    v = unit([1, 0, 0])
    sessions = ["s1"] * 5 + ["s2"] * 4
    merged, _ = segment_exchanges(np.array([v] * 9), [10] * 9, sessions, _turn_pressure_cfg())
    assert [(b.start, b.end, b.reason) for b in merged] == [(0, 5, "session"), (5, 9, "end")]
    kept, _ = segment_exchanges(np.array([v] * 9), [10] * 9, sessions, _turn_pressure_cfg(merge_short_tails=False))
    assert [(b.start, b.end) for b in kept] == [(0, 4), (4, 5), (5, 9)]


@pytest.mark.parametrize("cap,expected", [(80, [(0, 4), (4, 6), (6, 10)]), (120, [(0, 6), (6, 10)])])
def test_short_tail_joins_only_within_the_token_cap(cap, expected):
    v = unit([1, 0, 0])
    sessions = ["s1"] * 6 + ["s2"] * 4
    tokens = [10, 10, 10, 10, 30, 30, 10, 10, 10, 10]  # merged s1 would hold 100 tokens
    bounds, _ = segment_exchanges(np.array([v] * 10), tokens, sessions, _turn_pressure_cfg(token_cap=cap, min_exchanges=3))
    assert [(b.start, b.end) for b in bounds] == expected
