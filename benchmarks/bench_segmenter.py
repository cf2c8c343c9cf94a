"""Segmenter throughput in exchanges/s on precomputed embeddings (pure numpy; target >= 50,000/s),
side by side with a naive reference that recomputes centroid and mean pairwise cosine from the
segment's embeddings at every exchange (O(n²·d) per step instead of O(d)).

Both run on the same inputs in one process, and must give identical boundaries (checked here and
in tests/test_segmenter.py). Inputs:
- LoCoMo dev exchange embeddings (cached by benchmarks/tune_segmenter.py; embedded on first use)
  under the default config: segments of ~6 exchanges, where the naive cost is mostly overhead;
- a synthetic conversation of unit vectors with session cuts off and a high threshold, so
  segments grow to hundreds of exchanges and the O(n²) term shows.

Timing is the best of several repeats (the least-disturbed run on a shared machine).

    python -m benchmarks.bench_segmenter [--quick]
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from lychee_ray.config import load_config
from lychee_ray.config_sections import SegmenterConfig
from lychee_ray.ingest.segment import (
    Boundary,
    merge_short_tails,
    segment_exchanges,
    sigmoid,
    surprise_feature,
)

RESULTS = Path(__file__).resolve().parent / "results"
LOCAL_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "local.yaml"


def naive_segment_exchanges(embeddings, n_tokens, sessions, cfg: SegmenterConfig) -> tuple[list[Boundary], np.ndarray]:
    """The DESIGN.md formulation computed literally: centroid and Coh(S) from all of S's vectors,
    every step. Same decisions as `segment_exchanges`, none of its incremental algebra."""
    emb = np.asarray(embeddings, dtype=np.float64)
    emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    T = len(emb)
    probs = np.zeros(T)
    bounds, start, seg_tokens = [], 0, 0

    def mean_pairwise(vectors: np.ndarray) -> float:
        n = len(vectors)
        gram = vectors @ vectors.T
        return float(gram[np.triu_indices(n, 1)].mean()) if n >= 2 else 0.0

    for t in range(T):
        if t > start:
            members, e = emb[start:t], emb[t]
            centroid = members.mean(axis=0)
            sim_c = float(e @ centroid) / np.linalg.norm(centroid) if np.linalg.norm(centroid) > 0 else 0.0
            s = 1.0 - max(sim_c, float(e @ emb[t - 1]))
            d = max(0.0, mean_pairwise(members) - mean_pairwise(emb[start : t + 1])) if len(members) >= 2 else 0.0
            logit = (
                cfg.bias
                + cfg.w_surprise * surprise_feature(s, cfg.surprise_center)
                + cfg.w_cohesion * d
                + cfg.w_length * (seg_tokens + n_tokens[t]) / cfg.length_scale_tokens
                + cfg.w_turns * len(members) / cfg.turn_scale
            )
            changed = sessions[t] != sessions[t - 1]
            if changed and cfg.session_policy == "feature":
                logit += cfg.w_session
            probs[t] = p = sigmoid(logit)
            reason = ""
            if changed and cfg.session_policy == "boundary":
                reason = "session"
            elif seg_tokens + n_tokens[t] > cfg.token_cap:
                reason = "token_cap"
            elif p > cfg.delta and len(members) >= cfg.min_exchanges:
                reason = "threshold"
            if reason:
                bounds.append(Boundary(start, t, p, reason))
                start, seg_tokens = t, 0
        seg_tokens += int(n_tokens[t])
    bounds.append(Boundary(start, T, 1.0, "end"))
    if cfg.merge_short_tails:
        bounds = merge_short_tails(bounds, [int(x) for x in n_tokens], list(sessions), cfg)
    return bounds, probs


def synthetic_long(n: int, dim: int = 384, seed: int = 0):
    """Unit vectors around one slowly drifting topic: one session, no threshold cuts."""
    rng = np.random.default_rng(seed)
    topic = rng.normal(size=dim)
    emb = []
    for _ in range(n):
        topic += 0.05 * rng.normal(size=dim)
        emb.append(topic / np.linalg.norm(topic) + 0.05 * rng.normal(size=dim))
    emb = np.array(emb, dtype=np.float32)
    return [(emb / np.linalg.norm(emb, axis=1, keepdims=True), [20] * n, ["s"] * n)]


def best_seconds(fn, repeats: int) -> float:
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def compare(inputs, cfg: SegmenterConfig, repeats: int) -> dict:
    """Time both implementations on the same conversations and check they agree."""
    fast = [segment_exchanges(e, tok, sess, cfg) for e, tok, sess in inputs]
    slow = [naive_segment_exchanges(e, tok, sess, cfg) for e, tok, sess in inputs]
    same = all([(b.start, b.end, b.reason) for b in f[0]] == [(b.start, b.end, b.reason) for b in s[0]] for f, s in zip(fast, slow))
    max_dp = max(float(np.max(np.abs(f[1] - s[1]))) for f, s in zip(fast, slow))
    n_ex = sum(len(e) for e, _, _ in inputs)
    t_fast = best_seconds(lambda: [segment_exchanges(e, tok, sess, cfg) for e, tok, sess in inputs], repeats)
    t_slow = best_seconds(lambda: [naive_segment_exchanges(e, tok, sess, cfg) for e, tok, sess in inputs], max(1, repeats // 3))
    lens = [b.end - b.start for f in fast for b in f[0]]
    return {
        "exchanges": n_ex,
        "segments": len(lens),
        "mean_len": float(np.mean(lens)),
        "fast": n_ex / t_fast,
        "naive": n_ex / t_slow,
        "identical": same,
        "max_dp": max_dp,
    }


def locomo_inputs(quick: bool):
    from benchmarks.tune_segmenter import DEFAULT_SRC, load_dev

    dev = load_dev(DEFAULT_SRC, 2 if quick else None)
    return [(c.embeddings, c.tokens, c.sessions) for c in dev]


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="2 LoCoMo conversations, a 200-exchange synthetic one")
    args = p.parse_args(argv)
    cfg = load_config(LOCAL_CONFIG).segmenter
    long_cfg = cfg.model_copy(update={"delta": 0.999999, "token_cap": 10**9, "w_length": 0.0, "w_turns": 0.0})
    repeats = 3 if args.quick else 9
    cases = [
        ("LoCoMo dev, default config", cfg, locomo_inputs(args.quick)),
        ("synthetic, one long segment (no cuts)", long_cfg, synthetic_long(200 if args.quick else 300)),
    ]
    rows = [(name, compare(inputs, c, repeats)) for name, c, inputs in cases]
    lines = [
        "# Segmenter throughput (embeddings precomputed, pure numpy, one process)",
        "",
        "| input | exchanges | segments | mean exchanges/segment | incremental ex/s | naive O(n²) ex/s | speed-up | identical boundaries | max abs Δp |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
        *[
            f"| {name} | {r['exchanges']:,} | {r['segments']} | {r['mean_len']:.1f} | {r['fast']:,.0f} | {r['naive']:,.0f} | "
            f"{r['fast'] / r['naive']:.1f}x | {'yes' if r['identical'] else '**NO**'} | {r['max_dp']:.1e} |"
            for name, r in rows
        ],
        "",
        f"Target >= 50,000 exchanges/s (issue 2). Best of {repeats} repeats (naive: {max(1, repeats // 3)}).",
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / "segmenter_throughput.md"
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return out


if __name__ == "__main__":
    main()
