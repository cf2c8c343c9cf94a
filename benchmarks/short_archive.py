"""Short synthetic conversations for cluster tests and benchmarks.

`synth_archive` recombines whole LoCoMo sessions (about 20 turns each). Scale tests need many
conversations but not long ones: on a 2-core machine, 200 conversations of full sessions take
minutes to embed. This keeps the first few turns of each session and only the QA items whose
evidence lies in the kept turns, so every question still points at turns that exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from .synth_archive import iter_archive, write_archive

_SESSION_KEY_RE = re.compile(r"^session_\d+$")


def shorten(conv: dict, turns_per_session: int) -> dict:
    """A copy of one LoCoMo conversation with at most `turns_per_session` turns per session."""
    body = dict(conv["conversation"])
    kept: set[str] = set()
    for key in [k for k in body if _SESSION_KEY_RE.match(k)]:
        body[key] = body[key][:turns_per_session]
        kept.update(t["dia_id"] for t in body[key])
    qa = [q for q in conv.get("qa", []) if q.get("evidence") and set(q["evidence"]) <= kept]
    return {**conv, "conversation": body, "qa": qa}


def iter_short_archive(src: str | Path, n: int, seed: int = 0, turns_per_session: int = 6, sessions: tuple[int, int] = (1, 1)) -> Iterator[dict]:
    for conv in iter_archive(src, n, seed, sessions):
        yield shorten(conv, turns_per_session)


def write_short_archive(src: str | Path, out: str | Path, n: int, seed: int = 0, turns_per_session: int = 6,
                        sessions: tuple[int, int] = (1, 1)) -> dict[str, int]:
    """Write N short conversations as JSONL; returns the counts a store built from it must hold."""
    counts = {"conversations": 0, "turns": 0, "questions": 0}

    def counted() -> Iterator[dict]:
        for conv in iter_short_archive(src, n, seed, turns_per_session, sessions):
            body = conv["conversation"]
            counts["conversations"] += 1
            counts["turns"] += sum(len(body[k]) for k in body if _SESSION_KEY_RE.match(k))
            counts["questions"] += len(conv["qa"])
            yield conv

    write_archive(counted(), out)
    return counts
