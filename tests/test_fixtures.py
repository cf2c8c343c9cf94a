"""The benchmark fixtures (tests/fixtures/): what tests/fixtures/README.md says they hold, and
the cut rule of tests/fixtures/make_fixtures.py, checked on the committed files (the source they
are cut from is not beside a fresh clone)."""

from __future__ import annotations

import json
import re

from lychee_ray.io.readers.locomo import normalize_evidence

from .conftest import FIXTURES, LME_PATH, LOCOMO_PATH
from .fixtures.make_fixtures import LOCOMO_CUT, cut_conversation, render


def session_numbers(sample: dict) -> list[int]:
    return sorted(int(m.group(1)) for k in sample["conversation"] if (m := re.fullmatch(r"session_(\d+)", k)))


def test_locomo_fixture_is_the_documented_cut():
    raw = json.loads(LOCOMO_PATH.read_text())
    assert {s["sample_id"]: len(session_numbers(s)) for s in raw} == LOCOMO_CUT
    assert LOCOMO_PATH.stat().st_size < 1_000_000
    for sample in raw:
        n = LOCOMO_CUT[sample["sample_id"]]
        assert session_numbers(sample) == list(range(1, n + 1))
        body = sample["conversation"]
        stamps = sorted(int(m.group(1)) for k in body if (m := re.fullmatch(r"session_(\d+)_date_time", k)))
        assert stamps == list(range(1, n + 1))  # no stamp of a session that was cut
        assert set(sample["event_summary"]) == {f"events_session_{i}" for i in range(1, n + 1)}
        assert set(sample["observation"]) == {f"session_{i}_observation" for i in range(1, n + 1)}
        assert set(sample["session_summary"]) == {f"session_{i}_summary" for i in range(1, n + 1)}
        # every question points only at turns that are there, adversarial ones included
        turn_ids = {t["dia_id"] for i in range(1, n + 1) for t in body[f"session_{i}"]}
        for qa in sample["qa"]:
            ids = normalize_evidence(qa["evidence"])
            assert ids and set(ids) <= turn_ids, qa
        assert any(qa["category"] == 5 and "answer" not in qa for qa in sample["qa"])
        # cutting the cut again changes nothing: the rule keeps every question it kept
        assert cut_conversation(sample, n) == sample
    assert LOCOMO_PATH.read_text() == render(raw)  # the source's serialisation, as the script writes it


def test_cut_keeps_exactly_the_questions_whose_evidence_survives():
    sample = json.loads(LOCOMO_PATH.read_text())[0]
    cut = cut_conversation(sample, 2)
    kept = {t["dia_id"] for i in (1, 2) for t in cut["conversation"][f"session_{i}"]}
    assert session_numbers(cut) == [1, 2] and "session_3_date_time" not in cut["conversation"]
    expected = [q for q in sample["qa"] if set(normalize_evidence(q["evidence"])) <= kept]
    assert cut["qa"] == expected and 0 < len(expected) < len(sample["qa"])
    assert any(q["category"] == 5 for q in expected)
    broken = {**sample, "qa": [{"question": "?", "evidence": ["D"], "category": 4, "answer": "x"},
                               {"question": "?", "evidence": [], "category": 4, "answer": "x"},
                               {"question": "?", "evidence": ["D1:999"], "category": 5, "adversarial_answer": "x"}]}
    assert cut_conversation(broken, 2)["qa"] == []  # no id, no evidence, a turn that does not exist


def test_longmemeval_fixture_is_one_small_instance():
    (inst,) = json.loads(LME_PATH.read_text())
    assert inst["question_id"] == "6a1eabeb" and inst["question_type"] == "knowledge-update"
    assert len(inst["haystack_sessions"]) == len(inst["haystack_dates"]) == len(inst["haystack_session_ids"]) == 2
    assert LME_PATH.stat().st_size < 100_000


def test_fixture_folder_holds_what_its_readme_lists():
    names = {p.name for p in FIXTURES.iterdir() if not p.name.startswith((".", "__"))}
    assert names == {"README.md", "make_fixtures.py", "locomo_fixture.json", "longmemeval_fixture.json", "formats"}
    readme = (FIXTURES / "README.md").read_text()
    assert "CC BY-NC 4.0" in readme and "snap-research/locomo" in readme
