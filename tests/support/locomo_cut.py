"""The first sessions of a few conversations of a LoCoMo-format file, in the same format.

Tests cut a generated archive (tests/support/generated.py) to grow a conversation session by
session (tests/test_incremental.py); benchmarks (benchmarks/bench_encode.py --quick) cut the
shared dev file, read at run time and never committed. A cut keeps the original format, so the
real reader reads it. Questions are kept only when all their evidence turns survive the cut, so
evidence recall stays meaningful.
"""

from __future__ import annotations

import json
import re
from pathlib import Path


def cut_locomo(src: str | Path, dst: str | Path, *, conversations: int = 3, sessions: int = 2, questions: int | None = None) -> Path:
    """Write the first `conversations` samples of `src`, each cut to its first `sessions`
    sessions, as a LoCoMo JSON array at `dst`; returns `dst`."""
    samples = json.loads(Path(src).read_text())[:conversations]
    out = []
    for sample in samples:
        body = {k: v for k, v in sample["conversation"].items() if _session_number(k) is None or _session_number(k) <= sessions}
        kept_ids = {t["dia_id"] for k, v in body.items() if isinstance(v, list) for t in v if "dia_id" in t}
        qa = [q for q in sample.get("qa", []) if q.get("evidence") and set(q["evidence"]) <= kept_ids and "answer" in q]
        out.append({**sample, "conversation": body, "qa": qa[:questions] if questions else qa})
    dst = Path(dst)
    dst.write_text(json.dumps(out))
    return dst


def _session_number(key: str) -> int | None:
    m = re.fullmatch(r"session_(\d+)(?:_date_time)?", key)
    return int(m.group(1)) if m else None
