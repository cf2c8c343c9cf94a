"""Embedding runtimes side by side: a raw encode of the same texts by torch and by each other
`embedding.runtime` that is installed (onnx, openvino), in the same run, and how far each one's
vectors are from torch's.

Every runtime is loaded first (an export, if its cache has none, is timed apart and excluded; the
check at load runs as in production). Then `--rounds` rounds each encode all texts once with the
model's own `encode` (the config's batch size, normalized vectors, no de-duplication): torch,
then the others, the others' order reversed every other round, so torch alternates with each
and a neighbour's burst of load hits both sides. A runtime's ratio is the median over rounds of
torch's seconds in that round over its own (above 1: faster than torch). The cosines compare each
runtime's vectors with torch's, text by text (float64).

Texts: generated (default) from this module's own templates in a realistic length mix for
ingest: chat turns (most), record sentences, node names (1 to 4 words) and a few long texts past
the model's 256-word-piece cut; or `--input`: a conversation file any lychee-ray reader takes
(its turn texts) or a .txt file with one text per line.

    python -m benchmarks.bench_embed_runtime [--quick] [--texts N] [--rounds R] [--input PATH] [--set key=value ...]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import add_set_option, machine_load, write_markdown
from lychee_ray import embedding_runtime
from lychee_ray.config import load_config
from lychee_ray.embedding import Embedder, EmbeddingError
from lychee_ray.io.readers.files import read_file

REPO = Path(__file__).resolve().parents[1]
LOCAL_CONFIG = REPO / "configs" / "local.yaml"

_PEOPLE = ["Avi", "Bettina", "Kofi", "Lumi", "Marisol", "Oskar", "Priya", "Tavita", "Yusuf", "Zhen"]
_THINGS = ["the sourdough starter", "a second-hand cello", "the allotment shed", "my cousin's wedding", "the night shift",
           "a half-marathon", "the pottery wheel", "our landlord", "the chess club", "a rescue greyhound", "the bike repair",
           "Grandma's recipe box", "the museum job", "a road trip to the coast", "the broken dishwasher", "tax forms"]
_WHEN = ["yesterday", "last weekend", "on Tuesday", "two years ago", "this morning", "in March", "after work", "next Friday"]
_FEEL = ["honestly exhausting", "way more fun than I expected", "a bit of a disaster", "oddly calming", "so worth it", "still undecided"]
_TURN = [
    "Hey {p}! {w} I finally sorted out {t}, and it was {f}.",
    "Did you ever hear back about {t}? I keep thinking about it.",
    "lol yes 😂 {t} again... {f} tbh",
    "{w} {p} and I talked for ages about {t}. They think I should just go for it, but I'm {f2} about it.",
    "That sounds {f}! How long did {t} take in the end?",
    "I've been meaning to ask: what happened with {t}? Last time you said it was {f}, and {p} mentioned something about it {w}.",
    "Thanks so much, really. {t} would not have happened without you.",
    "ok ok 👍 see you {w}",
]
_RECORD = [
    "{p} mentioned {t} {w} and described it as {f}.",
    "{p} plans to revisit {t} {w}, after talking it over with a friend.",
    "{p} said that {t} started {w} and has been {f} since then.",
]


def _fill(rng: random.Random, template: str) -> str:
    return template.format(p=rng.choice(_PEOPLE), t=rng.choice(_THINGS), w=rng.choice(_WHEN),
                           f=rng.choice(_FEEL), f2=rng.choice(_FEEL)).strip()


def chat_turn(rng: random.Random) -> str:
    """One invented chat turn of one to three sentences (benchmarks/gpu_check.py's chats too)."""
    return " ".join(_fill(rng, rng.choice(_TURN)) for _ in range(rng.choice([1, 1, 1, 2, 3])))


def generate_texts(n: int, seed: int = 0) -> list[str]:
    """`n` texts: ~60% chat turns, ~25% record sentences, ~12% node names, ~3% long notes."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        kind = rng.random()
        if kind < 0.60:
            texts.append(chat_turn(rng))
        elif kind < 0.85:
            texts.append(_fill(rng, rng.choice(_RECORD)))
        elif kind < 0.97:
            texts.append(" ".join(rng.sample(_PEOPLE + [t.split()[-1] for t in _THINGS], rng.randint(1, 4))))
        else:
            texts.append(" ".join(_fill(rng, rng.choice(_TURN + _RECORD)) for _ in range(rng.randint(15, 30))))
    return texts


def read_texts(path: Path, cfg) -> list[str]:
    if path.suffix == ".txt":
        return [line for line in path.read_text().splitlines() if line.strip()]
    return [t.text for conv in read_file(str(path), cfg.read) for t in conv.turns]


def load(emb_cfg, runtime: str, cache_dir: str) -> tuple[Embedder, float]:
    start = time.perf_counter()
    emb = Embedder(emb_cfg.model_copy(update={"runtime": runtime, "cache_dir": cache_dir}))
    return emb, time.perf_counter() - start


def encode(emb: Embedder, texts: list[str]) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    vecs = emb.model.encode(texts, batch_size=emb.cfg.batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    return vecs, time.perf_counter() - start


def measure(models: dict[str, Embedder], texts: list[str], rounds: int) -> tuple[dict[str, list[float]], dict[str, np.ndarray]]:
    for emb in models.values():
        encode(emb, texts[:32])  # first-call set-up (allocators, kernels) is not throughput
    others = [r for r in models if r != "torch"]
    seconds: dict[str, list[float]] = {r: [] for r in models}
    vectors: dict[str, np.ndarray] = {}
    for i in range(rounds):
        for runtime in ["torch", *(others if i % 2 == 0 else others[::-1])]:
            vectors[runtime], s = encode(models[runtime], texts)
            seconds[runtime].append(s)
            print(f"round {i + 1}/{rounds}: {runtime} {s:.2f} s", file=sys.stderr, flush=True)
    return seconds, vectors


def render(args, texts, threads, loads, seconds, vectors, skipped) -> list[str]:
    words = [len(t.split()) for t in texts]
    source = f"`{args.input}`" if args.input else "generated (this module's templates, seed 0)"
    lines = [
        "# Embedding runtimes: raw encode, side by side",
        "",
        f"Command: `python -m benchmarks.bench_embed_runtime{args.typed}`",
        "",
        f"- {machine_load()}; {threads} threads per runtime",
        f"- texts: {len(texts)} from {source}; words per text median {statistics.median(words):.0f}, "
        f"max {max(words)}, {sum(w > 200 for w in words)} over 200 words",
        f"- batch size {args.batch_size}; {args.rounds} rounds, torch first in each, the others alternating order",
        "- load time (s, once, before timing; an export included if the cache had none): "
        + ", ".join(f"{r} {s:.1f}" for r, s in loads.items()),
        f"- auto's order (lychee_ray/embedding_runtime.py AUTO_ORDER): {' > '.join(embedding_runtime.AUTO_ORDER)} > torch",
        "",
        "| runtime | median s | texts/s | ratio to torch (median of rounds) | min cosine to torch | mean cosine to torch | seconds per round |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    torch_s = seconds["torch"]
    for runtime, secs in seconds.items():
        med = statistics.median(secs)
        ratio = statistics.median(t / s for t, s in zip(torch_s, secs))
        cos = np.asarray(embedding_runtime.probe_cosines(vectors["torch"], vectors[runtime]))
        lines.append(f"| {runtime} | {med:.2f} | {len(texts) / med:.0f} | {ratio:.2f}x | {cos.min():.8f} | {cos.mean():.8f} | "
                     + ", ".join(f"{s:.2f}" for s in secs) + " |")
    lines += ["", *(f"- not measured: {r}: {why}" for r, why in skipped.items())]
    return lines


def main(argv: list[str] | None = None) -> Path:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="400 texts, 2 rounds")
    p.add_argument("--texts", type=int, default=3000, help="generated texts (default 3000)")
    p.add_argument("--rounds", type=int, default=5, help="alternations (default 5)")
    p.add_argument("--input", type=Path, help="a conversation file (its turns) or a .txt (one text per line)")
    p.add_argument("--cache-dir", help="export cache (default: a fresh temporary folder, so exports are timed as load)")
    add_set_option(p)
    args = p.parse_args(argv)
    args.typed = "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    if args.quick:
        args.texts, args.rounds = 400, 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = load_config(LOCAL_CONFIG, args.sets)
    args.batch_size = cfg.embedding.batch_size
    texts = read_texts(args.input, cfg) if args.input else generate_texts(args.texts)
    threads = cfg.embedding.num_threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="bench_embed_runtime_") as tmp:
        cache = args.cache_dir or tmp
        models, loads, skipped = {}, {}, {}
        for runtime in ["torch", *[r for r in embedding_runtime.RUNTIMES if r != "torch"]]:
            missing = embedding_runtime.missing_modules(runtime) if runtime != "torch" else []
            if missing:
                skipped[runtime] = f"needs `{embedding_runtime.install_line(runtime)}`"
                continue
            try:
                models[runtime], loads[runtime] = load(cfg.embedding, runtime, cache)
            except EmbeddingError as exc:  # refused by its check on this machine: say so, time the rest
                skipped[runtime] = str(exc)
        seconds, vectors = measure(models, texts, args.rounds)
    return write_markdown("bench_embed_runtime", render(args, texts, threads, loads, seconds, vectors, skipped))


if __name__ == "__main__":
    main()
