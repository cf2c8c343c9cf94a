"""Tune the segmenter's default weights on the LoCoMo dev conversations and report the
distribution of segment lengths.

Every turn is embedded once with the configured model (cached under benchmarks/results/, keyed
by the turn texts and the model); the grid then runs only the pure-numpy segmenter.

Units. The segmenter's unit is the exchange x_t. With LoCoMo's `pair` rule an exchange is one
speaker's run of turns plus the other speaker's reply run (~2 turns, a dialogue line each), so
the report gives segment lengths in exchanges and in turns. The target is the paper's ~5.8 per
segment, read as 5.8 of the segmenter's units x_t (issue 2: "~5.8 exchanges per segment").

Criteria, in order: mean within 5.8 ± 0.3 exchanges, no single-exchange segments (<= 2%), and
then evidence locality: of the questions whose gold evidence spans 2+ turns of one session,
the share whose evidence lies in one segment. Fixed windows of the same mean length (restarted
at every session) are the baseline that says whether the cuts follow content at all.

delta is not gridded: p_t > delta  <=>  logit > ln(delta / (1 - delta)), so moving delta is the
same as moving the bias b; delta stays at DESIGN.md's 0.50 and b is tuned.

    python -m benchmarks.tune_segmenter [--src PATH] [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.dev_split import CHECK, PARTS, TUNE
from lychee_ray.config import load_config
from lychee_ray.config_sections import SegmenterConfig
from lychee_ray.ingest.segment import (
    Boundary,
    exchange_embeddings,
    fixed_windows,
    segment_exchanges,
)
from lychee_ray.io.readers.files import read_file
from lychee_ray.tokens import count_many

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
DEFAULT_SRC = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
LOCAL_CONFIG = REPO / "configs" / "local.yaml"
TARGET_MEAN = 5.8


@dataclass
class DevConversation:
    """What the segmenter and the metrics need of one conversation."""

    conversation_id: str
    embeddings: np.ndarray  # [exchanges, d] unit-norm exchange embeddings
    tokens: list[int]  # o200k tokens per exchange
    sessions: list[str]  # session id per exchange
    turns_per_exchange: np.ndarray  # [exchanges]
    evidence: list[list[int]]  # per multi-turn, one-session question: its evidence exchanges


# ------------------------------------------------------------------------------ inputs
def embed_turns_cached(convs, model: str) -> list[np.ndarray]:
    """Turn embeddings per conversation, computed once and cached (keyed by texts and model)."""
    texts = [[t.text for t in c.turns] for c in convs]
    key = hashlib.sha256(repr((model, texts)).encode()).hexdigest()[:16]
    cache = RESULTS / f"turn_embeddings_{key}.npz"
    if cache.exists():
        data = np.load(cache)
        return [data[f"c{i}"] for i in range(len(convs))]
    from lychee_ray.config_sections import EmbeddingConfig
    from lychee_ray.embedding import Embedder

    vecs = Embedder(EmbeddingConfig(model=model)).encode_groups(texts)
    RESULTS.mkdir(parents=True, exist_ok=True)
    np.savez(cache, **{f"c{i}": v for i, v in enumerate(vecs)})
    return vecs


def evidence_exchanges(conv, exchange_of_turn: list[int]) -> list[list[int]]:
    """Evidence exchanges of the questions whose gold evidence is 2+ known turns of ONE
    session: the questions a within-session segment could keep together."""
    turn_index = {t.turn_id: i for i, t in enumerate(conv.turns)}
    out = []
    for q in conv.questions:
        turns = sorted({turn_index[t] for t in q.evidence_turn_ids if t in turn_index})
        if len(turns) >= 2 and len({conv.turns[i].session_id for i in turns}) == 1:
            out.append(sorted({exchange_of_turn[i] for i in turns}))
    return out


def load_dev(src: Path, max_conversations: int | None = None, part: str = "tune") -> list[DevConversation]:
    cfg = load_config(LOCAL_CONFIG)
    ids = set(PARTS[part])
    convs = [c for c in read_file(str(src), cfg.read_settings) if c.status == "ok" and c.exchanges and c.conversation_id in ids]
    convs = convs[:max_conversations] if max_conversations else convs
    out = []
    for conv, turn_emb in zip(convs, embed_turns_cached(convs, cfg.embedding.model)):
        tok = count_many([t.text for t in conv.turns])
        exchange_of_turn = [0] * len(conv.turns)
        for x, ex in enumerate(conv.exchanges):
            for i in ex:
                exchange_of_turn[i] = x
        out.append(
            DevConversation(
                conversation_id=conv.conversation_id,
                embeddings=exchange_embeddings(turn_emb, conv.exchanges),
                tokens=[sum(tok[i] for i in ex) for ex in conv.exchanges],
                sessions=[conv.turns[ex[0]].session_id for ex in conv.exchanges],
                turns_per_exchange=np.array([len(ex) for ex in conv.exchanges]),
                evidence=evidence_exchanges(conv, exchange_of_turn),
            )
        )
    return out


# ------------------------------------------------------------------------------ metrics
def semantic_bounds(conv: DevConversation, cfg: SegmenterConfig) -> list[Boundary]:
    return segment_exchanges(conv.embeddings, conv.tokens, conv.sessions, cfg)[0]


def session_windows(conv: DevConversation, size: int) -> list[Boundary]:
    """The content-blind baseline: fixed windows of `size` exchanges, restarted per session."""
    bounds, start = [], 0
    for t in range(1, len(conv.sessions) + 1):
        if t == len(conv.sessions) or conv.sessions[t] != conv.sessions[start]:
            bounds += [Boundary(start + b.start, start + b.end, 1.0, "window") for b in fixed_windows(t - start, size)]
            start = t
    return bounds


def measure(dev: list[DevConversation], bounds_of) -> dict:
    """Segment-length distribution and evidence locality for one way of cutting."""
    ex_lens, turn_lens, together, multi = [], [], 0, 0
    for conv in dev:
        bounds = bounds_of(conv)
        seg_of = np.empty(len(conv.sessions), dtype=np.int64)
        for k, b in enumerate(bounds):
            seg_of[b.start : b.end] = k
            ex_lens.append(b.end - b.start)
            turn_lens.append(int(conv.turns_per_exchange[b.start : b.end].sum()))
        for ev in conv.evidence:
            multi += 1
            together += len(set(seg_of[ev].tolist())) == 1
    ex, tu = np.array(ex_lens), np.array(turn_lens)
    return {
        "segments": len(ex),
        "mean": float(ex.mean()),
        "median": float(np.median(ex)),
        "p10": float(np.percentile(ex, 10)),
        "p90": float(np.percentile(ex, 90)),
        "max": int(ex.max()),
        "single_share": float((ex == 1).mean()),
        "mean_turns": float(tu.mean()),
        "median_turns": float(np.median(tu)),
        "evidence_together": together / max(1, multi),
        "multi_evidence_questions": multi,
        "lengths": ex,
        "turn_lengths": tu,
    }


# ------------------------------------------------------------------------------ grid
GRID = {
    "bias": [-4.0, -3.5, -3.0, -2.5],
    "w_surprise": [2.0, 4.0, 6.0],
    "w_cohesion": [0.0, 6.0, 12.0],
    "w_length": [0.5, 0.75, 1.0],
    "w_turns": [0.3, 0.6, 1.2],
    "surprise_center": [0.45, 0.55, 0.65],
}
QUICK_GRID = {"bias": [-3.5, -3.0], "w_surprise": [4.0], "w_cohesion": [6.0], "w_length": [0.75, 1.0], "w_turns": [0.6, 1.2], "surprise_center": [0.55]}


def run_grid(dev, base: SegmenterConfig, grid: dict) -> list[tuple[dict, dict]]:
    rows = []
    for values in itertools.product(*grid.values()):
        params = dict(zip(grid, values))
        rows.append((params, measure(dev, lambda c, cfg=base.model_copy(update=params): semantic_bounds(c, cfg))))
    return rows


def admissible(m: dict) -> bool:
    return abs(m["mean"] - TARGET_MEAN) <= 0.3 and m["single_share"] <= 0.02


def rank(rows):
    """Admissible configs first, by evidence locality, ties by distance to the target mean;
    the rest by distance to the target mean."""
    def key(row):
        m = row[1]
        gap = abs(m["mean"] - TARGET_MEAN)
        return (0, -m["evidence_together"], gap) if admissible(m) else (1, gap, 0.0)

    return sorted(rows, key=key)


# ------------------------------------------------------------------------------ report
def histogram_png(lengths: np.ndarray, turn_lengths: np.ndarray, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, values, unit in ((axes[0], lengths, "exchanges"), (axes[1], turn_lengths, "turns")):
        ax.hist(values, bins=np.arange(0.5, values.max() + 1.5, 1.0), color="#4a7", edgecolor="white")
        ax.axvline(values.mean(), color="k", ls="--", lw=1, label=f"mean {values.mean():.2f}")
        ax.set_xlabel(f"{unit} per segment")
        ax.legend()
    axes[0].set_ylabel("segments")
    fig.suptitle("LoCoMo dev: segment lengths under the default segmenter")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(m: dict) -> str:
    return (
        f"{m['mean']:.2f} | {m['median']:.0f} | {m['p10']:.0f} / {m['p90']:.0f} | {m['max']} | "
        f"{100 * m['single_share']:.1f}% | {m['mean_turns']:.2f} | {100 * m['evidence_together']:.1f}%"
    )


HEADER = "| mean ex | median | p10 / p90 | max | 1-exchange | mean turns | evidence together |"
SEPARATOR = "|---|" + "---:|" * 7


def render(dev, cfg: SegmenterConfig, ranked, src: Path, seconds: float) -> list[str]:
    n_ex = sum(len(c.sessions) for c in dev)
    n_turns = sum(int(c.turns_per_exchange.sum()) for c in dev)
    default = measure(dev, lambda c: semantic_bounds(c, cfg))
    no_merge = measure(dev, lambda c: semantic_bounds(c, cfg.model_copy(update={"merge_short_tails": False})))
    # window sizes whose mean length (shortened by session tails) is near the semantic mean
    windows = {k: measure(dev, lambda c, k=k: session_windows(c, k)) for k in range(2, 16)}
    windows = {k: m for k, m in windows.items() if abs(m["mean"] - default["mean"]) <= 0.8}
    hist = np.bincount(default["lengths"])
    lines = [
        "# Segmenter tuning on LoCoMo dev (tune part)",
        "",
        f"Source `{src.name}`: {len(dev)} conversations, {n_turns} turns, {n_ex} exchanges "
        f"({n_turns / n_ex:.2f} turns per exchange under the `pair` rule), "
        f"{sum(len(c.evidence) for c in dev)} questions with 2+ evidence turns in one session.",
        "",
        "## Defaults (lychee_ray.config.SegmenterConfig + configs/local.yaml)",
        "",
        "`" + ", ".join(f"{k}={getattr(cfg, k)}" for k in ("delta", "bias", "w_surprise", "w_cohesion", "w_length", "w_turns", "surprise_center", "length_scale_tokens", "turn_scale", "token_cap", "min_exchanges", "merge_short_tails", "session_policy")) + "`",
        "",
        f"- **{default['mean']:.2f} exchanges per segment = {default['mean_turns']:.2f} turns** "
        f"(target ~{TARGET_MEAN} exchanges); {default['segments']} segments",
        f"- exchanges: median {default['median']:.0f}, p10 {default['p10']:.0f}, p90 {default['p90']:.0f}, max {default['max']}; "
        f"turns: median {default['median_turns']:.0f}",
        f"- single-exchange segments: {100 * default['single_share']:.1f}% "
        f"({100 * no_merge['single_share']:.1f}% without merge_short_tails, mean {no_merge['mean']:.2f})",
        f"- evidence locality: {100 * default['evidence_together']:.1f}% of multi-turn one-session questions have all their evidence in one segment",
        f"- histogram: `segmenter_hist.png`; {len(ranked)} grid points in {seconds:.1f} s",
        "",
        "| cut " + HEADER,
        SEPARATOR,
        f"| semantic (defaults) | {fmt(default)} |",
        f"| same, merge_short_tails=false | {fmt(no_merge)} |",
        *[f"| fixed {k}-exchange windows per session | {fmt(m)} |" for k, m in windows.items()],
        "",
        "| exchanges | segments |",
        "|---:|---:|",
        *[f"| {k} | {int(v)} |" for k, v in enumerate(hist) if v],
        "",
        "## Grid (best 15; admissible = mean within 5.8 ± 0.3 and <= 2% single-exchange, ranked by evidence locality)",
        "",
        "| params " + HEADER,
        SEPARATOR,
        *[f"| {'✓' if admissible(m) else ' '} `{p}` | {fmt(m)} |" for p, m in ranked[:15]],
    ]
    histogram_png(default["lengths"], default["turn_lengths"], RESULTS / "segmenter_hist.png")
    return lines


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--src", default=str(DEFAULT_SRC))
    p.add_argument("--quick", action="store_true", help="2 conversations and an 8-point grid")
    args = p.parse_args(argv)
    src = Path(args.src)
    dev = load_dev(src, 2 if args.quick else None, "tune")  # the grid sees the tune part only
    check = load_dev(src, None, "check")
    cfg = load_config(LOCAL_CONFIG).segmenter
    start = time.perf_counter()
    ranked = rank(run_grid(dev, cfg, QUICK_GRID if args.quick else GRID))
    seconds = time.perf_counter() - start
    out = RESULTS / "segmenter_tuning.md"
    lines = render(dev, cfg, ranked, src, seconds)
    lines[1:1] = ["", f"Tuned on the tune part ({', '.join(TUNE)}); the check part ({', '.join(CHECK)}) is measured, never tuned on:", "",
                  "| defaults on " + HEADER, SEPARATOR,
                  f"| tune | {fmt(measure(dev, lambda c: semantic_bounds(c, cfg)))} |",
                  f"| check | {fmt(measure(check, lambda c: semantic_bounds(c, cfg)))} |"]
    out.write_text("\n".join(lines) + "\n")
    print(out.read_text())
    return out


if __name__ == "__main__":
    main()
