"""Tune the segmenter's default weights on the LoCoMo dev conversations and report the
distribution of segment lengths (exchanges per segment).

Target (issue 2): mean near the paper's ~5.8 exchanges per segment, without single-exchange
fragmentation. Embeddings are computed once (cached under benchmarks/results/) and the grid
search runs the pure-numpy segmenter only.

    python -m benchmarks.tune_segmenter [--src ../shared/data/locomo/locomo_dev.json] [--grid]
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import numpy as np

from lychee_ray.config import EmbeddingConfig, ReadConfig, SegmenterConfig
from lychee_ray.read import read_file
from lychee_ray.segment import exchange_embeddings, segment_exchanges
from lychee_ray.tokens import count_many

RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_SRC = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo_dev.json"


def load_inputs(src: Path, exchange_rule: str = "pair"):
    """Per conversation: exchange embeddings, exchange token counts, exchange session ids."""
    RESULTS.mkdir(exist_ok=True)
    cache = RESULTS / f"dev_turn_embeddings_{exchange_rule}.npz"
    convs = list(read_file(str(src), ReadConfig(locomo_exchange=exchange_rule)))
    if cache.exists():
        data = np.load(cache)
        turn_embs = [data[c.conversation_id] for c in convs]
    else:
        from lychee_ray.embed import Embedder

        emb = Embedder(EmbeddingConfig())
        turn_embs = [emb.encode([t.text for t in c.turns]) for c in convs]
        np.savez(cache, **{c.conversation_id: e for c, e in zip(convs, turn_embs)})
    out = []
    for c, te in zip(convs, turn_embs):
        tok = count_many([t.text for t in c.turns])
        out.append(
            (
                exchange_embeddings(te, c.exchanges),
                [sum(tok[i] for i in ex) for ex in c.exchanges],
                [c.turns[ex[0]].session_id for ex in c.exchanges],
            )
        )
    return out


def lengths(inputs, cfg: SegmenterConfig) -> np.ndarray:
    out = []
    for emb, tok, sess in inputs:
        bounds, _ = segment_exchanges(emb, tok, sess, cfg)
        out.extend(b.end - b.start for b in bounds)
    return np.array(out)


def describe(lens: np.ndarray) -> dict:
    return {
        "segments": int(len(lens)),
        "mean": float(lens.mean()),
        "median": float(np.median(lens)),
        "p10": float(np.percentile(lens, 10)),
        "p90": float(np.percentile(lens, 90)),
        "single_share": float((lens == 1).mean()),
        "max": int(lens.max()),
    }


def grid(inputs):
    """Coarse grid around the defaults; ranks by |mean - 5.8| + 5 * single-exchange share."""
    rows = []
    for bias, ws, wc, wn, center in itertools.product([-3.5, -3.0, -2.5], [3.0, 4.0, 5.0], [4.0, 6.0], [0.8, 1.2, 1.6], [0.5, 0.55, 0.6]):
        cfg = SegmenterConfig(bias=bias, w_surprise=ws, w_cohesion=wc, w_turns=wn, surprise_center=center)
        d = describe(lengths(inputs, cfg))
        rows.append((abs(d["mean"] - 5.8) + 5 * d["single_share"], dict(bias=bias, w_surprise=ws, w_cohesion=wc, w_turns=wn, surprise_center=center), d))
    rows.sort(key=lambda r: r[0])
    return rows[:10]


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--src", default=str(DEFAULT_SRC))
    p.add_argument("--grid", action="store_true")
    args = p.parse_args(argv)
    inputs = load_inputs(Path(args.src))
    if args.grid:
        for score, params, d in grid(inputs):
            print(f"{score:.3f} {params} {d}")
    cfg = SegmenterConfig()
    t0 = time.perf_counter()
    lens = lengths(inputs, cfg)
    secs = time.perf_counter() - t0
    n_ex = sum(len(e) for e, _, _ in inputs)
    d = describe(lens)
    hist = np.bincount(np.minimum(lens, 16))
    lines = [
        "# Segmenter on LoCoMo dev (defaults of lychee_ray.config.SegmenterConfig)",
        "",
        f"- exchanges: {n_ex}; segments: {d['segments']}; mean exchanges/segment: **{d['mean']:.2f}** (paper ~5.8)",
        f"- median {d['median']:.0f}, p10 {d['p10']:.0f}, p90 {d['p90']:.0f}, max {d['max']}; single-exchange segments: {100 * d['single_share']:.1f}%",
        f"- segmenter throughput (embeddings precomputed): {n_ex / secs:,.0f} exchanges/s",
        "",
        "| exchanges | segments |",
        "|---:|---:|",
        *[f"| {k if k < 16 else '16+'} | {int(v)} |" for k, v in enumerate(hist) if k > 0 and v],
    ]
    report = "\n".join(lines)
    (RESULTS / "segmenter.md").write_text(report + "\n")
    print(report)


if __name__ == "__main__":
    main()
