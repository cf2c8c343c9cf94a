"""Tests for benchmarks.synth_archive: format, determinism and id/evidence consistency.

The tool recombines the sessions of any LoCoMo-format file; the benchmarks draw from the shared
dev file. Here the source is a generated LoCoMo-format archive (tests/support/generated.py: 3
conversations of 5 sessions) given LoCoMo's side annotations (`event_summary`, `observation`,
`session_summary`, built here from the generated turns and dates) and two of its quirks: a
session date with no session, and questions with malformed or empty evidence."""

from __future__ import annotations

import json
import re

import pytest

from benchmarks import synth_archive as sa

from .support.generated import generate

SESSION_RE = re.compile(r"^session_(\d+)$")
DIA_RE = re.compile(r"^D(\d+):(\d+)$")
STAMP_RE = re.compile(r"^(1[0-2]|[1-9]):[0-5]\d (am|pm) on ([1-9]|[12]\d|3[01]) [A-Z][a-z]+, \d{4}$")


def _day(stamp: str) -> str:
    day = sa.parse_stamp(stamp)
    return f"{day.day} {sa.MONTHS[day.month - 1]}, {day.year}"


def with_side_annotations(sample: dict) -> dict:
    """A generated LoCoMo sample as the LoCoMo file holds one: side annotations of every session
    (a dated event list per speaker, observations citing turns, a summary naming the date), a
    session date with no session, and two questions whose evidence the tool must drop."""
    body = sample["conversation"]
    speakers = (body["speaker_a"], body["speaker_b"])
    numbers = _sessions(sample)
    events, observations, summaries = {}, {}, {}
    for n in numbers:
        turns, day = body[f"session_{n}"], _day(body[f"session_{n}_date_time"])
        said = {sp: [t for t in turns if t["speaker"] == sp] for sp in speakers}
        events[f"events_session_{n}"] = {**{sp: [t["text"][:60] for t in ts[:1]] for sp, ts in said.items()}, "date": day}
        observations[f"session_{n}_observation"] = {sp: [[t["text"][:60], t["dia_id"]] for t in ts[:2]] for sp, ts in said.items()}
        summaries[f"session_{n}_summary"] = f"On {day}, {speakers[0]} and {speakers[1]} caught up."
    last = numbers[-1]
    body[f"session_{last + 1}_date_time"] = body[f"session_{last}_date_time"]  # a date with no session list
    qa = [*sample["qa"], {"question": "Which two turns?", "answer": "both", "evidence": ["D1:1; D1:2"], "category": 1},
          {"question": "Which turn?", "answer": "none", "evidence": [], "category": 4}]
    return {"qa": qa, "conversation": body, "event_summary": events, "observation": observations,
            "session_summary": summaries, "sample_id": sample["sample_id"]}


@pytest.fixture(scope="module")
def src_path(tmp_path_factory):
    generated = generate(tmp_path_factory.mktemp("generated"), "locomo")
    path = generated.root / "source.json"
    path.write_text(json.dumps([with_side_annotations(s) for s in json.loads((generated.archive / "locomo.json").read_text())]))
    return path


@pytest.fixture(scope="module")
def source(src_path) -> list[dict]:
    return json.loads(src_path.read_text())


@pytest.fixture(scope="module")
def archive(src_path) -> list[dict]:
    return sa.make_archive(src_path, 60, seed=7, sessions_per_conversation=(2, 5))


def _sessions(conv: dict) -> list[int]:
    return sorted(int(m.group(1)) for k in conv["conversation"] if (m := SESSION_RE.match(k)))


def test_n_honored_and_ids_unique(archive):
    assert len(archive) == 60
    ids = [c["sample_id"] for c in archive]
    assert len(set(ids)) == 60
    assert ids[42] == "synth-000042"


def test_original_format_keys(archive, source):
    assert set(archive[0]) == set(source[0])  # same top-level keys as the LoCoMo file
    for conv in archive:
        c = conv["conversation"]
        n = _sessions(conv)
        assert n == list(range(1, len(n) + 1)), "sessions must be numbered 1..k without gaps"
        assert 2 <= len(n) <= 5
        expected = {"speaker_a", "speaker_b"} | {f"session_{i}" for i in n} | {f"session_{i}_date_time" for i in n}
        assert set(c) == expected
        for i in n:
            assert STAMP_RE.match(c[f"session_{i}_date_time"]), c[f"session_{i}_date_time"]
            for turn in c[f"session_{i}"]:
                assert turn["speaker"] in (c["speaker_a"], c["speaker_b"])


def test_deterministic_for_a_seed_and_seed_matters(src_path, archive):
    again = sa.make_archive(src_path, 60, seed=7, sessions_per_conversation=(2, 5))
    assert json.dumps(again, sort_keys=True) == json.dumps(archive, sort_keys=True)
    other = sa.make_archive(src_path, 60, seed=8, sessions_per_conversation=(2, 5))
    assert json.dumps(other, sort_keys=True) != json.dumps(archive, sort_keys=True)


def test_prefix_stable_in_n(src_path, archive):
    # Conversation i depends on (seed, i) only, so a small archive is a prefix of a large one.
    small = sa.make_archive(src_path, 10, seed=7, sessions_per_conversation=(2, 5))
    assert small == archive[:10]


def test_dia_ids_renumbered_consistently_and_unique(archive):
    for conv in archive:
        c = conv["conversation"]
        seen = set()
        for i in _sessions(conv):
            for k, turn in enumerate(c[f"session_{i}"], start=1):
                assert turn["dia_id"] == f"D{i}:{k}"
                assert turn["dia_id"] not in seen
                seen.add(turn["dia_id"])


def test_turns_are_the_source_sessions(src_path, archive, source):
    by_id = {c["sample_id"]: c for c in source}
    plans = sa.plan_archive(src_path, 60, seed=7, sessions_per_conversation=(2, 5))
    for conv, plan in zip(archive, plans):
        assert conv["sample_id"] == plan.sample_id
        src = by_id[plan.source_id]["conversation"]
        assert (conv["conversation"]["speaker_a"], conv["conversation"]["speaker_b"]) == (
            src["speaker_a"], src["speaker_b"])
        assert list(plan.source_sessions) == sorted(plan.source_sessions)
        for new_n, old_n in enumerate(plan.source_sessions, start=1):
            new_turns = conv["conversation"][f"session_{new_n}"]
            old_turns = src[f"session_{old_n}"]
            strip = lambda ts: [{k: v for k, v in t.items() if k != "dia_id"} for t in ts]  # noqa: E731
            assert strip(new_turns) == strip(old_turns)


def test_session_dates_increase_and_are_shifted_by_whole_weeks(src_path, archive, source):
    by_id = {c["sample_id"]: c for c in source}
    plans = sa.plan_archive(src_path, 60, seed=7, sessions_per_conversation=(2, 5))
    moved = 0
    for conv, plan in zip(archive, plans):
        c = conv["conversation"]
        dates = [sa.parse_stamp(c[f"session_{i}_date_time"]) for i in _sessions(conv)]
        assert all(a < b for a, b in zip(dates, dates[1:])), dates
        assert plan.shift_days % 7 == 0
        src = by_id[plan.source_id]["conversation"]
        for new_n, old_n in enumerate(plan.source_sessions, start=1):
            old = sa.parse_stamp(src[f"session_{old_n}_date_time"])
            new = dates[new_n - 1]
            assert (new - old).days == plan.shift_days and new.time() == old.time()
            assert new.weekday() == old.weekday()
        moved += plan.shift_days != 0
    assert moved > 50  # dates really are new


def test_evidence_remapped_and_exists(src_path, archive, source):
    by_id = {c["sample_id"]: c for c in source}
    plans = sa.plan_archive(src_path, 60, seed=7, sessions_per_conversation=(2, 5))
    total = 0
    for conv, plan in zip(archive, plans):
        c = conv["conversation"]
        text_of = {t["dia_id"]: t["text"] for i in _sessions(conv) for t in c[f"session_{i}"]}
        src = by_id[plan.source_id]
        src_text = {t["dia_id"]: t["text"] for k, v in src["conversation"].items()
                    if SESSION_RE.match(k) for t in v}
        # Every source QA whose evidence lies in the chosen sessions is kept, and only those.
        chosen = set(plan.source_sessions)

        def in_chosen(ev):
            ms = [DIA_RE.match(e) for e in ev]
            return bool(ev) and all(m and int(m.group(1)) in chosen and e in src_text for m, e in zip(ms, ev))

        expected = [q for q in src["qa"] if in_chosen(q.get("evidence") or [])]
        assert len(conv["qa"]) == len(expected)
        for q, q_src in zip(conv["qa"], expected):
            assert q["question"] == q_src["question"] and q["category"] == q_src["category"]
            assert q.get("answer") == q_src.get("answer")
            assert q.get("adversarial_answer") == q_src.get("adversarial_answer")
            assert q["evidence"], "empty evidence is never carried over"
            for new_id, old_id in zip(q["evidence"], q_src["evidence"]):
                assert new_id in text_of
                assert text_of[new_id] == src_text[old_id]  # remap points at the same turn
        total += len(conv["qa"])
    assert total > 0


def test_side_annotations_remapped(archive):
    for conv in archive:
        c = conv["conversation"]
        ids = {t["dia_id"] for i in _sessions(conv) for t in c[f"session_{i}"]}
        k = len(_sessions(conv))
        assert set(conv["session_summary"]) == {f"session_{i}_summary" for i in range(1, k + 1)}
        assert set(conv["observation"]) == {f"session_{i}_observation" for i in range(1, k + 1)}
        for i in range(1, k + 1):
            assert conv["event_summary"][f"events_session_{i}"]["date"] == _day(c[f"session_{i}_date_time"])
            assert _day(c[f"session_{i}_date_time"]) in conv["session_summary"][f"session_{i}_summary"]  # the date rewritten
        for obs in conv["observation"].values():
            for facts in obs.values():
                for _, ref in facts:
                    refs = ref if isinstance(ref, list) else [ref]
                    assert refs and all(r in ids for r in refs)


def test_stamp_roundtrip_and_summary_date_rewrite():
    for stamp in ("4:27 pm on 2 April, 2024", "12:03 am on 2 December, 2024", "12:30 pm on 1 June, 2020"):
        assert sa.format_stamp(sa.parse_stamp(stamp)) == stamp
    old, new = sa.parse_stamp("4:27 pm on 2 April, 2024"), sa.parse_stamp("4:27 pm on 21 June, 2025")
    text = "They met on 2 April, 2024. Later, on 2nd April 2024, and April 2, 2024 again; 9 May, 2023 stays."
    assert sa._rewrite_dates(text, old, new) == (
        "They met on 21 June, 2025. Later, on 21st June 2025, and June 21, 2025 again; 9 May, 2023 stays.")


def test_bad_arguments(source):
    with pytest.raises(ValueError):
        sa.make_archive(source, -1, seed=0)
    with pytest.raises(ValueError):
        sa.make_archive(source, 1, seed=0, sessions_per_conversation=(4, 3))
    with pytest.raises(ValueError, match="no source conversation"):
        sa.make_archive(source, 1, seed=0, sessions_per_conversation=(99, 100))
    assert sa.make_archive(source, 0, seed=0) == []


def test_cli_json_and_jsonl(src_path, tmp_path):
    out_json, out_jsonl = tmp_path / "a.json", tmp_path / "b.jsonl"
    assert sa.main(["--src", str(src_path), "--n", "5", "--seed", "3", "--out", str(out_json), "--sessions", "3", "4"]) == 0
    assert sa.main(["--src", str(src_path), "--n", "5", "--seed", "3", "--out", str(out_jsonl), "--sessions", "3", "4"]) == 0
    as_list = json.loads(out_json.read_text())
    lines = out_jsonl.read_text().splitlines()
    assert len(lines) == 5 and [json.loads(line) for line in lines] == as_list
    assert as_list == sa.make_archive(src_path, 5, seed=3, sessions_per_conversation=(3, 4))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temp files left behind"
    assert sa.main(["--src", str(tmp_path / "missing.json"), "--n", "1", "--out", str(tmp_path / "x.json")]) == 2
