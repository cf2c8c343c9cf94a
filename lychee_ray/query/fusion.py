"""Rank fusion and evidence selection: the pure math of the answer stage (DESIGN.md step 6).

The retrieval channels (record vectors, evidence-node expansion, time filter, raw turns) each
return a ranked list of candidate ids. This module turns those lists into the evidence that goes
into the answer prompt:

1. `rrf_fuse` merges the channel rankings with Reciprocal Rank Fusion,
   RRF(d) = sum_j 1 / (kappa + rank_j(d)), kappa = 30 by default (`RetrievalConfig.rrf_kappa`, which says why).
2. `mmr_select` picks a diverse subset under the context token budget with greedy maximal
   marginal relevance (`RetrievalConfig.mmr_lambda`, `RetrievalConfig.context_token_budget`).
3. `budget_topk` is the same budget rule without diversity: the "no selection" ablation and the
   baselines.

Everything here is deterministic: ties are broken by input order, never by hash or sort
instability, so a rerun of the evaluation gives the same evidence and the same answers.
No I/O, no Ray, numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "budget_topk",
    "minmax_normalize",
    "mmr_select",
    "rrf_fuse",
]


def rrf_fuse(rankings: Sequence[Sequence[str]], kappa: float = 30.0) -> list[tuple[str, float]]:
    """Fuse ranked id lists with Reciprocal Rank Fusion.

    Ranks are 1-based. An id that appears twice in one ranking counts once, at its best (first)
    rank, so a channel that returns duplicates cannot vote twice. The result is sorted by score,
    descending; equal scores keep the order in which the ids first appear when the rankings are
    read one after another (ranking 0 top to bottom, then ranking 1, ...).
    """
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0, got {kappa}")
    contributions: dict[str, list[float]] = {}
    first_seen: dict[str, int] = {}
    for ranking in rankings:
        seen_here: set[str] = set()
        for rank, doc in enumerate(ranking, start=1):
            if doc in seen_here:
                continue
            seen_here.add(doc)
            first_seen.setdefault(doc, len(first_seen))
            contributions.setdefault(doc, []).append(1.0 / (kappa + rank))
    # fsum is exactly rounded, so the score does not depend on the order of the channels and
    # two ids with the same multiset of ranks tie exactly (then first appearance decides).
    scores = {doc: math.fsum(parts) for doc, parts in contributions.items()}
    return sorted(scores.items(), key=lambda item: (-item[1], first_seen[item[0]]))


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    """L2-normalize rows; an all-zero row stays zero (cosine 0 to everything, never NaN)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)


def minmax_normalize(values: np.ndarray) -> np.ndarray:
    """Map scores to [0, 1] by (v - min) / (max - min); all-equal scores map to 1.0.

    MMR mixes relevance with cosine similarity. Fused RRF scores live in roughly [0, 0.07]
    while cosines live in [-1, 1], so unnormalized relevance would be drowned out by the
    diversity term. Min-max keeps the relevance order and gives both terms the same scale.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return values
    lo, hi = float(values.min()), float(values.max())
    if hi - lo <= 0.0:
        return np.ones_like(values)
    return (values - lo) / (hi - lo)


def _check_budget_inputs(costs: np.ndarray, budget: int, n: int) -> np.ndarray:
    costs = np.asarray(costs)
    if costs.shape != (n,):
        raise ValueError(f"costs must have shape ({n},), got {costs.shape}")
    if n and costs.min() < 0:
        raise ValueError("costs must be non-negative")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    return costs


def mmr_select(
    relevance: np.ndarray,
    embeddings: np.ndarray,
    costs: np.ndarray,
    budget: int,
    lam: float,
    sources: np.ndarray | None = None,
    covered_weight: float = 0.0,
) -> list[int]:
    """Greedy maximal marginal relevance under a token budget.

    score_i = lam * rel_i - (1 - lam) * max_{j in S} cos(e_i, e_j), with rel min-max
    normalized to [0, 1] (`minmax_normalize`) and the max term 0 while S is empty, so the
    first pick is the most relevant item that fits.

    Each step takes the best-scoring item whose cost still fits the remaining budget; items
    that do not fit are skipped (a cheaper one may still fit), and selection stops when no
    remaining item fits. Ties go to the higher relevance, then the lower index.
    Coverage (`sources`, a boolean [n, u] matrix of each item's source units, e.g. turns, and
    `covered_weight` w > 0): the score also loses w x the share of the item's sources that the
    selection already covers, so an item that only repeats what is chosen yields to one that
    brings something new (an item with no sources loses nothing).

    Returns the chosen indices in pick order.
    """
    relevance = np.asarray(relevance, dtype=np.float64).reshape(-1)
    n = relevance.shape[0]
    costs = _check_budget_inputs(costs, budget, n)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    emb = np.asarray(embeddings)
    if n == 0:
        return []
    if emb.ndim != 2 or emb.shape[0] != n:
        raise ValueError(f"embeddings must have shape ({n}, d), got {emb.shape}")
    emb = _unit_rows(emb)
    rel = minmax_normalize(relevance)

    cover = _Coverage(sources, n) if covered_weight > 0 else None
    max_sim = np.zeros(n)  # max cosine to anything already selected
    covered_share = np.zeros(n)  # share of each item's sources the selection covers
    available = np.ones(n, dtype=bool)
    remaining = budget
    picked: list[int] = []
    while True:
        fits = available & (costs <= remaining)
        if not fits.any():
            return picked
        cand = np.flatnonzero(fits)
        score = lam * rel[cand] - (1.0 - lam) * max_sim[cand] - covered_weight * covered_share[cand]
        # lexsort: last key is primary -> best score, then best relevance, then lowest index.
        best = int(cand[np.lexsort((cand, -rel[cand], -score))[0]])
        picked.append(best)
        available[best] = False
        remaining -= int(costs[best])
        max_sim = np.maximum(max_sim, emb @ emb[best])
        if cover is not None:
            covered_share = cover.update(best)


class _Coverage:
    """Each item's share of sources already covered, updated as items are picked."""

    def __init__(self, sources: np.ndarray | None, n: int):
        src = np.zeros((n, 0), bool) if sources is None else np.asarray(sources, dtype=bool)
        if src.shape[0] != n:
            raise ValueError(f"sources must have {n} rows, got {src.shape}")
        self.src = src
        self.sizes = np.maximum(src.sum(axis=1), 1)
        self.covered = np.zeros(src.shape[1], bool)

    def update(self, picked: int) -> np.ndarray:
        self.covered |= self.src[picked]
        return (self.src & self.covered).sum(axis=1) / self.sizes


def budget_topk(order: Sequence[int], costs: np.ndarray, budget: int) -> list[int]:
    """Take items in the given order while they fit the token budget, without diversity.

    `order` lists item indices best first; `costs[i]` is the token cost of item i (indexed like
    `mmr_select`'s inputs, not by position in `order`). An item that does not fit is skipped and
    later, cheaper ones are still tried, the same rule as `mmr_select`, so an ablation that
    swaps one for the other changes only the diversity term. Repeated indices are taken once.
    """
    costs = np.asarray(costs)
    if costs.ndim != 1:
        raise ValueError(f"costs must be 1-D, got shape {costs.shape}")
    _check_budget_inputs(costs, budget, costs.shape[0])
    remaining = budget
    chosen: list[int] = []
    taken: set[int] = set()
    for idx in order:
        idx = int(idx)
        if idx in taken:
            continue
        cost = int(costs[idx])
        if cost <= remaining:
            chosen.append(idx)
            taken.add(idx)
            remaining -= cost
    return chosen
