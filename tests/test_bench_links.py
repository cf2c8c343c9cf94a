"""The link benchmarks' scoring on invented links, changes and contexts: what bench_links counts
as a true link (per kind and per finder), and what bench_links_beam counts per question (the
abilities' flags and evidence recall over every question, a split message counted as its
message), and how bench_links_lme tells LongMemEval's old evidence turn from its new one."""

from __future__ import annotations

from benchmarks.bench_links import score
from benchmarks.bench_links_beam import judged, pair_figures, part_of, summarize
from benchmarks.bench_links_lme import linked, roles_by_time
from lychee_ray.llm.prompts import ValidityNote
from lychee_ray.query.memory import MemoryItem

CHANGES = [  # two planted changes in one invented conversation
    {"conversation_id": "c1", "kind": "supersedes", "old_turn_id": "D1:2", "new_turn_id": "D3:4"},
    {"conversation_id": "c1", "kind": "contradicts", "old_turn_id": "D1:5", "new_turn_id": "D2:7"},
]


def link(kind: str, old: list[str], new: list[str], found_by: str, conv: str = "c1") -> dict:
    return {"conversation_id": conv, "kind": kind, "old_turns": old, "new_turns": new, "found_by": found_by}


def test_score_counts_true_links_per_kind_and_per_finder():
    links = [
        link("supersedes", ["D1:2"], ["D3:4"], "rules"),  # true
        link("supersedes", ["D1:2", "D1:3"], ["D3:4"], "llm"),  # true (its old record cites the old turn among others)
        link("supersedes", ["D1:5"], ["D2:7"], "llm"),  # right turns, wrong kind: false
        link("contradicts", ["D1:5"], ["D2:7"], "llm", conv="c2"),  # another conversation: false
    ]
    out = score(links, CHANGES)
    assert out["all"] == {"links": 4, "true_links": 2, "changes": 2, "changes_found": 1, "precision": 0.5, "recall": 0.5}
    assert out["supersedes"]["precision"] == round(2 / 3, 3) and out["supersedes"]["recall"] == 1.0
    assert out["contradicts"] == {"links": 1, "true_links": 0, "changes": 1, "changes_found": 0, "precision": 0.0, "recall": 0.0}
    assert out["by_finder"]["rules"] == {"links": 1, "true_links": 1, "changes": 2, "changes_found": 1, "precision": 1.0, "recall": 0.5}
    assert out["by_finder"]["llm"]["precision"] == round(1 / 3, 3) and out["by_finder"]["llm"]["recall"] == 0.5
    assert out["found_by"] == {"rules": 1, "llm": 3} and len(out["false_links"]) == 2


def item(turns: tuple[str, ...], note: ValidityNote | None = None) -> MemoryItem:
    return MemoryItem(text="an invented memory", type="fact", time=None, entities=(), source_turn_ids=turns, score=1.0,
                      kind="record", key="r-" + "-".join(turns), note=note)


def question(qid: str, category: str, evidence: list[str], roles: list[str] | None = None, conv: str = "beam-100K-3") -> dict:
    return {"question_id": qid, "conversation_id": conv, "category": category, "evidence_turn_ids": evidence, "evidence_roles": roles or []}


def test_beam_rows_judge_the_abilities_and_measure_recall_on_every_question():
    marked_old = item(("10",), ValidityNote(until="2025-03-01", now="the later value"))
    update = question("q1", "knowledge_update", ["10", "42"], ["original_info", "updated_info"])
    ok = judged(update, [marked_old, item(("42#p2",))])  # a passage of message 42 counts as 42
    assert ok["ok"] and ok["old_in_context"] and ok["evidence_recall"] == 1.0
    unmarked = judged(update, [item(("10",)), item(("42",))])
    assert not unmarked["ok"] and unmarked["new_in_context"] and not unmarked["old_absent_or_marked"]

    conflict = question("q2", "contradiction_resolution", ["5", "9"], ["first_statement", "second_statement"])
    partner = ValidityNote(conflicts=("said 2025-01-02: the other statement",))
    assert judged(conflict, [item(("5",), partner), item(("9",), partner)])["ok"]
    one_marked = judged(conflict, [item(("5",), partner), item(("9",))])
    assert one_marked["both_in_context"] and not one_marked["marked_conflicting"] and not one_marked["ok"]

    other = judged(question("q3", "event_ordering", ["1", "2", "3", "4"]), [item(("2",)), item(("3", "7"))])
    assert other["evidence_recall"] == 0.5 and "ok" not in other
    no_evidence = judged(question("q4", "abstention", []), [item(("2",))])
    assert no_evidence["evidence_recall"] is None

    summary = summarize([ok, unmarked, other, no_evidence])
    assert summary["knowledge_update"]["n"] == 2 and summary["knowledge_update"]["ok"] == 0.5
    assert summary["contradiction_resolution"] == {"n": 0}
    assert summary["evidence_recall"] == {"n": 3, "mean": round((1.0 + 1.0 + 0.5) / 3, 3)}


def test_longmemeval_update_roles_come_from_the_evidence_turns_times_and_a_link_must_join_old_to_new():
    assert roles_by_time(["2023-05-25", "2023-05-27"]) == ["original_info", "updated_info"]
    assert roles_by_time(["2023-05-27", "2023-05-25", "2023-05-27"]) == ["updated_info", "original_info", "updated_info"]
    assert roles_by_time([None, "2023-05-25"]) == ["original_info", "updated_info"]  # an unknown time is never the new one
    q = {"conversation_id": "c1", "evidence_turn_ids": ["s1:4", "s2:0"], "evidence_roles": ["original_info", "updated_info"]}
    assert linked(q, [link("supersedes", ["s1:4"], ["s2:0", "s2:1"], "rules")])
    assert not linked(q, [link("supersedes", ["s2:0"], ["s1:4"], "rules")])  # the wrong way round
    assert not linked(q, [link("contradicts", ["s1:4"], ["s2:0"], "rules")])  # not an update
    assert not linked(q, [link("supersedes", ["s1:4"], ["s2:0"], "rules", conv="c2")])


def test_beam_pairs_count_a_link_only_between_the_labelled_messages_and_split_tune_from_check():
    update = question("q1", "knowledge_update", ["10", "42"], ["original_info", "updated_info"])  # folder 3: tune
    conflict = question("q2", "contradiction_resolution", ["5", "9"], ["first_statement", "second_statement"], conv="beam-100K-14")
    links = [
        link("supersedes", ["10"], ["42#p2"], "rules", conv="beam-100K-3"),  # joins q1 (a part of message 42 is 42)
        link("supersedes", ["42"], ["10"], "rules", conv="beam-100K-3"),  # the wrong way round
        link("contradicts", ["9"], ["5"], "rules", conv="beam-100K-14"),  # joins q2: a contradiction either way
        link("supersedes", ["5"], ["9"], "rules", conv="beam-100K-14"),  # right messages, wrong kind
        link("contradicts", ["5"], ["9"], "rules", conv="beam-100K-3"),  # another conversation
    ]
    figures = pair_figures([update, conflict, question("q3", "event_ordering", ["1", "2"])], links)
    assert figures["all"]["links"] == 5 and figures["all"]["links_on_a_labelled_pair"] == 2
    assert figures["tune"]["knowledge_update"] == {"n": 1, "pair_linked": 1} and figures["tune"]["links"] == 3
    assert figures["check"]["contradiction_resolution"] == {"n": 1, "pair_linked": 1} and figures["check"]["knowledge_update"]["n"] == 0
    assert (part_of("beam-100K-10"), part_of("beam-100K-11"), part_of("beam-100K-1")) == ("tune", "check", "tune")
