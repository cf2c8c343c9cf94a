"""The tune/check split of the LoCoMo dev conversations.

Anything chosen by looking at results (the segmenter's defaults, the rules backend's methods)
is chosen on TUNE only; CHECK is what we report as held out. Both parts are reported side by side
so that a gap between them is visible.

conv-30 is in CHECK because `make demo` reports on it. The other three check conversations are
the last three of the file, so the split is fixed by position, not picked by score. TUNE:
1,711 turns and 503 questions without category 5; CHECK: 2,413 turns and 532 questions.

    python -m benchmarks.dev_split            # print both parts' sizes
"""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCOMO_DEV = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"

TUNE = ("conv-26", "conv-41", "conv-42")
CHECK = ("conv-30", "conv-43", "conv-44", "conv-47")
PARTS = {"tune": TUNE, "check": CHECK, "all": TUNE + CHECK}


def conversations(part: str, src: Path = LOCOMO_DEV) -> list[dict]:
    """The part's LoCoMo objects, in file order."""
    ids = set(PARTS[part])
    return [c for c in json.loads(src.read_text()) if c.get("sample_id") in ids]


def write_part(part: str, dst: Path, src: Path = LOCOMO_DEV) -> Path:
    """The part as a LoCoMo file (a JSON list), for ingest."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.write_text(json.dumps(conversations(part, src), indent=2))
    return dst


def main() -> None:
    for part in ("tune", "check"):
        convs = conversations(part)
        turns = sum(len(v) for c in convs for k, v in c["conversation"].items() if k.startswith("session_") and isinstance(v, list))
        qa = [q for c in convs for q in c["qa"]]
        print(f"{part}: {', '.join(c['sample_id'] for c in convs)}: {turns} turns, {len(qa)} QA, {sum(q['category'] != 5 for q in qa)} without category 5")


if __name__ == "__main__":
    main()
