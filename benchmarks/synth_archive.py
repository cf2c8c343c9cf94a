"""Synthetic LoCoMo-format archives for scale and cost benchmarks.

Role: the dev set has 7 conversations; measuring how ingest scales (throughput, tokens, dollars
per conversation, resume behaviour) needs hundreds or thousands. This module builds them by
recombining real dev-data sessions, so every turn is real dialogue, written in the ORIGINAL
LoCoMo JSON format (a list of objects with `sample_id`, `conversation` (speaker_a/b,
session_<N>, session_<N>_date_time), `qa`, `event_summary`, `observation`,
`session_summary`), which any LoCoMo reader accepts unchanged.

How one synthetic conversation is made (deterministic from `seed` and its index):
- pick one source conversation and `k` of its sessions (k drawn from
  `sessions_per_conversation`, capped at the source's session count), kept in source order so
  that later sessions still follow the earlier ones they refer back to;
- speakers stay those of the source. Renaming people would also require rewriting every
  mention of a name or nickname in the text (a nickname such as "Tess" for Tessaly), the QA and the summaries, and
  a half-renamed conversation is incoherent, so sessions are only recombined within one source;
- sessions are renumbered 1..k and every dia_id becomes `D<N>:<k>` of the new order;
- dates: the whole conversation is shifted by a random whole number of weeks (first session
  landing between 2019 and mid-2025). Intervals between the chosen sessions and the time of
  day are the source's, and whole weeks keep weekdays, so "last Saturday" in a turn still
  points to a Saturday. Stamps keep the source format ("4:27 pm on 2 April, 2024");
- QA items are kept only if their evidence is non-empty and lies entirely in the chosen
  sessions; evidence ids are remapped, `category` and all other fields are copied as they are.
  Items with malformed or dangling evidence ids (see the data README) are dropped;
- `observation` ids are remapped the same way, `event_summary` dates are rewritten, and
  `session_summary` texts get their date mentions of that session rewritten where they match
  the session stamp ("2 April, 2024", "2nd April 2024", "April 2, 2024", ...).

Caveat: answers stay exactly as in the source. Temporal answers ("7 May 2023") no longer match
the shifted dates, and multi-hop answers may lean on sessions that were left out; evidence
filtering keeps most QA answerable but not all. Synthetic archives are for scale and cost
tests, never for accuracy numbers.

CLI:
    python -m benchmarks.synth_archive --src ../shared/data/locomo/locomo_dev.json \
        --n 200 --seed 0 --out out/synth_200.json [--sessions 3 6]
An output name ending in `.jsonl` gets one conversation object per line (for streaming reads).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import re
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Iterator, Sequence

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)
_MONTH_INDEX = {m: i + 1 for i, m in enumerate(MONTHS)}
_STAMP_RE = re.compile(r"^\s*(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$", re.I)
_SESSION_KEY_RE = re.compile(r"^session_(\d+)$")

# First synthetic session lands in this window (before the week rounding of the shift).
_START_WINDOW = (datetime(2019, 1, 1), datetime(2025, 6, 30))
DEFAULT_SESSIONS = (3, 6)


def parse_stamp(stamp: str) -> datetime:
    """"4:27 pm on 2 April, 2024" -> datetime(2024, 4, 2, 16, 27). Locale-independent."""
    m = _STAMP_RE.match(stamp)
    if not m:
        raise ValueError(f"unrecognised LoCoMo session stamp {stamp!r}")
    hour, minute, ampm, day, month, year = m.groups()
    month_idx = _MONTH_INDEX.get(month.capitalize())
    if month_idx is None:
        raise ValueError(f"unrecognised month in LoCoMo session stamp {stamp!r}")
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    return datetime(int(year), month_idx, int(day), h, int(minute))


def format_stamp(dt: datetime) -> str:
    """datetime -> "4:27 pm on 2 April, 2024" (no leading zeros on hour and day, as LoCoMo)."""
    hour12 = dt.hour % 12 or 12
    ampm = "am" if dt.hour < 12 else "pm"
    return f"{hour12}:{dt.minute:02d} {ampm} on {dt.day} {MONTHS[dt.month - 1]}, {dt.year}"


def _format_day(dt: datetime) -> str:
    """The `event_summary` date format: "2 April, 2024"."""
    return f"{dt.day} {MONTHS[dt.month - 1]}, {dt.year}"


@dataclass(frozen=True)
class _Source:
    obj: dict[str, Any]
    sessions: tuple[int, ...]  # source session numbers, ascending
    dates: dict[int, datetime]  # session number -> parsed stamp


@dataclass(frozen=True)
class ConversationPlan:
    """What one synthetic conversation is built from (exposed for tests and reports)."""

    sample_id: str
    source_id: str
    source_sessions: tuple[int, ...]  # source session numbers; new session N is the N-th
    shift_days: int  # whole weeks, added to every source stamp


def _load_sources(src: str | Path | Sequence[dict]) -> list[_Source]:
    data = json.loads(Path(src).read_text()) if isinstance(src, (str, Path)) else src
    if not isinstance(data, list) or not data:
        raise ValueError("source must be a non-empty LoCoMo JSON list of conversations")
    sources = []
    for obj in data:
        conv = obj["conversation"]
        # conv-26 has session_<N>_date_time keys without a session list: count the lists only.
        numbers = sorted(int(m.group(1)) for k in conv if (m := _SESSION_KEY_RE.match(k)))
        dates = {n: parse_stamp(conv[f"session_{n}_date_time"]) for n in numbers}
        sources.append(_Source(obj=obj, sessions=tuple(numbers), dates=dates))
    return sources


def _plan(sources: list[_Source], seed: int, index: int, lo: int, hi: int) -> ConversationPlan:
    # One RNG per conversation, seeded by (seed, index): conversation i is the same whatever
    # n is, so a 200-conversation archive is a prefix of the 2,000 one. String seeds are
    # hashed with SHA-512 by `random`, independent of PYTHONHASHSEED.
    rng = random.Random(f"lychee-synth:{seed}:{index}")
    eligible = [s for s in sources if len(s.sessions) >= lo]
    src = rng.choice(eligible)
    k = rng.randint(lo, min(hi, len(src.sessions)))
    chosen = tuple(sorted(rng.sample(src.sessions, k)))
    first = src.dates[chosen[0]]
    span_days = (_START_WINDOW[1] - _START_WINDOW[0]).days
    target = _START_WINDOW[0] + timedelta(days=rng.randrange(span_days + 1))
    shift_days = round((target - first).days / 7) * 7
    return ConversationPlan(
        sample_id=f"synth-{index:06d}",
        source_id=str(src.obj.get("sample_id")),
        source_sessions=chosen,
        shift_days=shift_days,
    )


def _ordinal(day: int) -> str:
    if 10 <= day % 100 <= 20:
        return "th"
    return {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def _rewrite_dates(text: str, old: datetime, new: datetime) -> str:
    """Replace mentions of `old`'s calendar day in a summary by `new`'s, keeping the style."""
    month = MONTHS[old.month - 1]
    new_month = MONTHS[new.month - 1]

    def day_first(m: re.Match) -> str:
        suffix = _ordinal(new.day) if m.group("ord") else ""
        return f"{new.day}{suffix} {new_month}{m.group('sep')}{new.year}"

    def month_first(m: re.Match) -> str:
        suffix = _ordinal(new.day) if m.group("ord") else ""
        return f"{new_month} {new.day}{suffix}{m.group('sep')}{new.year}"

    text = re.sub(
        rf"\b{old.day}(?P<ord>st|nd|rd|th)?\s+(?:of\s+)?{month}(?P<sep>,?\s+){old.year}\b", day_first, text
    )
    text = re.sub(rf"\b{month}\s+{old.day}(?P<ord>st|nd|rd|th)?(?P<sep>,?\s+){old.year}\b", month_first, text)
    return text


def _remap_ids(value: Any, idmap: dict[str, str]) -> Any | None:
    """A dia_id or list of dia_ids -> remapped; None when any id is outside the chosen sessions."""
    if isinstance(value, str):
        return idmap.get(value)
    if isinstance(value, list):
        out = [idmap.get(v) if isinstance(v, str) else None for v in value]
        return out if out and all(o is not None for o in out) else None
    return None


def build_conversation(source: dict[str, Any], plan: ConversationPlan) -> dict[str, Any]:
    """Materialize one synthetic conversation from its source object and plan."""
    conv_src = source["conversation"]
    shift = timedelta(days=plan.shift_days)
    conversation: dict[str, Any] = {
        "speaker_a": conv_src["speaker_a"],
        "speaker_b": conv_src["speaker_b"],
    }
    idmap: dict[str, str] = {}
    new_dates: dict[int, datetime] = {}
    old_dates: dict[int, datetime] = {}
    previous: datetime | None = None
    for new_n, old_n in enumerate(plan.source_sessions, start=1):
        old_dt = parse_stamp(conv_src[f"session_{old_n}_date_time"])
        new_dt = old_dt + shift
        if previous is not None and new_dt <= previous:
            # Sources are strictly increasing; this only guards a malformed source.
            new_dt = previous + timedelta(minutes=1)
        previous = new_dt
        old_dates[old_n], new_dates[old_n] = old_dt, new_dt
        turns = []
        for k, turn in enumerate(conv_src[f"session_{old_n}"], start=1):
            new_turn = copy.deepcopy(turn)
            new_id = f"D{new_n}:{k}"
            if turn["dia_id"] in idmap:
                raise ValueError(f"duplicate dia_id {turn['dia_id']!r} in source {plan.source_id}")
            idmap[turn["dia_id"]] = new_id
            new_turn["dia_id"] = new_id
            turns.append(new_turn)
        conversation[f"session_{new_n}_date_time"] = format_stamp(new_dt)
        conversation[f"session_{new_n}"] = turns

    qa = []
    for item in source.get("qa", []):
        evidence = item.get("evidence") or []
        mapped = _remap_ids(list(evidence), idmap) if evidence else None
        if mapped is None:
            continue
        new_item = copy.deepcopy(item)
        new_item["evidence"] = mapped
        qa.append(new_item)

    event_summary: dict[str, Any] = {}
    observation: dict[str, Any] = {}
    session_summary: dict[str, Any] = {}
    for new_n, old_n in enumerate(plan.source_sessions, start=1):
        events = source.get("event_summary", {}).get(f"events_session_{old_n}")
        if events is not None:
            events = copy.deepcopy(events)
            if "date" in events:
                events["date"] = _format_day(new_dates[old_n])
            event_summary[f"events_session_{new_n}"] = events
        obs = source.get("observation", {}).get(f"session_{old_n}_observation")
        if obs is not None:
            new_obs: dict[str, list] = {}
            for speaker, items in obs.items():
                kept = []
                for fact in items:
                    if isinstance(fact, list) and len(fact) == 2:
                        ids = _remap_ids(fact[1], idmap)
                        if ids is not None:
                            kept.append([fact[0], ids])
                new_obs[speaker] = kept
            observation[f"session_{new_n}_observation"] = new_obs
        summary = source.get("session_summary", {}).get(f"session_{old_n}_summary")
        if summary is not None:
            session_summary[f"session_{new_n}_summary"] = _rewrite_dates(
                summary, old_dates[old_n], new_dates[old_n]
            )

    # Same key order as the source file.
    return {
        "qa": qa,
        "conversation": conversation,
        "event_summary": event_summary,
        "observation": observation,
        "session_summary": session_summary,
        "sample_id": plan.sample_id,
    }


def _check_args(n_conversations: int, sessions_per_conversation: tuple[int, int]) -> tuple[int, int]:
    if n_conversations < 0:
        raise ValueError(f"n_conversations must be >= 0, got {n_conversations}")
    lo, hi = sessions_per_conversation
    if lo < 1 or hi < lo:
        raise ValueError(f"sessions_per_conversation must satisfy 1 <= min <= max, got {(lo, hi)}")
    return lo, hi


def plan_archive(
    src_locomo_json: str | Path | Sequence[dict],
    n_conversations: int,
    seed: int,
    sessions_per_conversation: tuple[int, int] = DEFAULT_SESSIONS,
) -> list[ConversationPlan]:
    """The plans `make_archive` would follow, without materializing any conversation."""
    lo, hi = _check_args(n_conversations, sessions_per_conversation)
    sources = _load_sources(src_locomo_json)
    _require_eligible(sources, lo)
    return [_plan(sources, seed, i, lo, hi) for i in range(n_conversations)]


def _require_eligible(sources: list[_Source], lo: int) -> None:
    if not any(len(s.sessions) >= lo for s in sources):
        most = max(len(s.sessions) for s in sources)
        raise ValueError(f"no source conversation has {lo} sessions (the longest has {most})")


def iter_archive(
    src_locomo_json: str | Path | Sequence[dict],
    n_conversations: int,
    seed: int,
    sessions_per_conversation: tuple[int, int] = DEFAULT_SESSIONS,
) -> Iterator[dict[str, Any]]:
    """Yield synthetic conversations one at a time (flat memory for very large archives)."""
    lo, hi = _check_args(n_conversations, sessions_per_conversation)
    sources = _load_sources(src_locomo_json)
    _require_eligible(sources, lo)
    by_id = {}
    for s in sources:
        by_id.setdefault(str(s.obj.get("sample_id")), s)
    for i in range(n_conversations):
        plan = _plan(sources, seed, i, lo, hi)
        yield build_conversation(by_id[plan.source_id].obj, plan)


def make_archive(
    src_locomo_json: str | Path | Sequence[dict],
    n_conversations: int,
    seed: int,
    sessions_per_conversation: tuple[int, int] = DEFAULT_SESSIONS,
) -> list[dict[str, Any]]:
    """N synthetic conversations in the original LoCoMo format, deterministic from `seed`.

    `sessions_per_conversation` is an inclusive (min, max) range, capped per conversation at
    the chosen source's session count. See the module docstring for how conversations are
    built and why answers (temporal ones above all) are not ground truth for accuracy.
    """
    return list(iter_archive(src_locomo_json, n_conversations, seed, sessions_per_conversation))


def write_archive(conversations: Iterator[dict] | list[dict], out: str | Path) -> int:
    """Write to `out` atomically: JSONL (one object a line) for *.jsonl, else a JSON list."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    count = 0
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual file mode
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            if out.suffix == ".jsonl":
                for conv in conversations:
                    f.write(json.dumps(conv, ensure_ascii=False))
                    f.write("\n")
                    count += 1
            else:
                items = list(conversations)
                count = len(items)
                json.dump(items, f, indent=2, ensure_ascii=False)  # the source's serialisation
        os.replace(tmp, out)  # a killed run never leaves a truncated archive behind
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.synth_archive",
        description="Build a synthetic LoCoMo-format archive from real dev sessions (scale tests only).",
    )
    parser.add_argument("--src", required=True, help="LoCoMo JSON file to draw sessions from")
    parser.add_argument("--n", type=int, required=True, help="number of conversations")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="output file; *.jsonl writes one conversation per line")
    parser.add_argument(
        "--sessions", type=int, nargs=2, metavar=("MIN", "MAX"), default=list(DEFAULT_SESSIONS),
        help="inclusive range of sessions per conversation (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    try:
        stats = {"sessions": 0, "turns": 0, "qa": 0}

        def counted() -> Iterator[dict]:
            for conv in iter_archive(args.src, args.n, args.seed, tuple(args.sessions)):
                c = conv["conversation"]
                sessions = [k for k in c if _SESSION_KEY_RE.match(k)]
                stats["sessions"] += len(sessions)
                stats["turns"] += sum(len(c[k]) for k in sessions)
                stats["qa"] += len(conv["qa"])
                yield conv

        n = write_archive(counted(), args.out)
    except (OSError, ValueError, KeyError) as exc:
        print(f"synth_archive: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"wrote {n} conversations ({stats['sessions']} sessions, {stats['turns']} turns, "
        f"{stats['qa']} QA) to {args.out}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
