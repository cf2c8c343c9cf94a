"""Plan, answer and judge prompts (lychee_ray.llm.prompts)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.llm.prompts import (
    ANSWER_SYSTEM,
    BENCHMARKS,
    LONGMEMEVAL_TYPES,
    PLAN_SYSTEM,
    EvidenceItem,
    answer_messages,
    format_evidence,
    locomo_judge_messages,
    longmemeval_judge_messages,
    plan_messages,
)
from lychee_ray.schemas import AnswerOutput, JudgeOutput, QueryPlan
from lychee_ray.tokens import count_tokens


def _assert_well_formed(messages):
    assert isinstance(messages, list) and len(messages) == 2
    assert [m["role"] for m in messages] == ["system", "user"]
    for m in messages:
        assert set(m) == {"role", "content"}
        assert isinstance(m["content"], str) and m["content"].strip()
    json.dumps(messages)  # serializable as a request body


def _user(messages) -> str:
    return messages[-1]["content"]


# -------------------------------------------------------------------------- LongMemEval judge
RULE_MARKERS = {
    "base": "only contains a subset of the information required",
    "temporal": "do not penalize off-by-one errors",
    "update": "as long as the updated answer is the required answer",
    "preference": "recalls and utilizes the user's personal information correctly",
    "abstention": "correctly identifies the question as unanswerable",
}
EXPECTED = {
    "single-session-user": {"base"},
    "single-session-assistant": {"base"},
    "multi-session": {"base"},
    "temporal-reasoning": {"base", "temporal"},
    "knowledge-update": {"update"},
    "single-session-preference": {"preference"},
}


@pytest.mark.parametrize("qtype", LONGMEMEVAL_TYPES)
def test_longmemeval_judge_has_exactly_the_rules_of_its_type(qtype):
    msgs = longmemeval_judge_messages(qtype, "Q?", "GOLD", "PRED", abstention=False)
    _assert_well_formed(msgs)
    text = _user(msgs)
    present = {name for name, marker in RULE_MARKERS.items() if marker in text}
    assert present == EXPECTED[qtype]
    assert "Question: Q?" in text and "Model Response: PRED" in text
    gold_label = "Rubric" if qtype == "single-session-preference" else "Correct Answer"
    assert f"{gold_label}: GOLD" in text


@pytest.mark.parametrize("qtype", LONGMEMEVAL_TYPES)
def test_longmemeval_abstention_overrides_the_type(qtype):
    text = _user(
        longmemeval_judge_messages(qtype, "Q?", "not in the history", "I don't know", abstention=True)
    )
    present = {name for name, marker in RULE_MARKERS.items() if marker in text}
    assert present == {"abstention"}
    assert "Explanation: not in the history" in text


def test_longmemeval_judge_maps_yes_to_correct_and_rejects_unknown_types():
    text = _user(longmemeval_judge_messages("multi-session", "q", "a", "r", abstention=False))
    assert '{"label": "CORRECT"} for yes' in text and '{"label": "WRONG"} for no' in text
    with pytest.raises(ValueError):
        longmemeval_judge_messages("multi_session", "q", "a", "r", abstention=False)


# ------------------------------------------------------------------------------- LoCoMo judge
def test_locomo_judge_is_generous_on_format_and_dates():
    msgs = locomo_judge_messages("When did Ysolde go to the pottery club?", "12 March 2023", "March 12th")
    _assert_well_formed(msgs)
    system = msgs[0]["content"]
    assert "'CORRECT' or 'WRONG'" in system
    assert "generous" in system and "same date or time period" in system
    assert "relative time references" in system
    assert _user(msgs) == (
        "Question: When did Ysolde go to the pottery club?\nGold answer: 12 March 2023\nGenerated answer: March 12th"
    )
    assert "Gold answer: 2022" in _user(locomo_judge_messages("Which year?", 2022, "2022"))


# ----------------------------------------------------------------------------- stable prefixes
def test_system_prefix_is_identical_across_questions():
    pairs = [
        (plan_messages("Where did Bran go?", "2023-05-08", ["Bran"]), plan_messages("What?", None, [])),
        (
            locomo_judge_messages("q1", "g1", "p1"),
            locomo_judge_messages("another question", "other gold", "other prediction"),
        ),
        (
            longmemeval_judge_messages("temporal-reasoning", "q1", "g1", "p1", False),
            longmemeval_judge_messages("single-session-preference", "q2", "g2", "p2", True),
        ),
    ]
    pairs += [
        (answer_messages(b, "q1", "2023-01-01", "- m1"), answer_messages(b, "q2", None, "- m2\n- m3"))
        for b in BENCHMARKS
    ]
    for first, second in pairs:
        _assert_well_formed(first)
        _assert_well_formed(second)
        assert first[0] == second[0]
        assert first[1] != second[1]


def test_per_question_text_is_never_in_the_system_prefix():
    msgs = answer_messages("locomo", "UNIQUE_QUESTION", "UNIQUE_DATE", "UNIQUE_EVIDENCE")
    assert "UNIQUE" not in msgs[0]["content"]
    user = _user(msgs)
    # evidence first, question last
    assert user.index("UNIQUE_EVIDENCE") < user.index("UNIQUE_DATE") < user.index("UNIQUE_QUESTION")
    assert user.rstrip().endswith("UNIQUE_QUESTION")


# ------------------------------------------------------------------------------------ answers
def test_answer_prompts_follow_benchmark_conventions():
    locomo = answer_messages("locomo", "q", None, "- m")[0]["content"]
    assert "date" in locomo and "short phrase" in locomo and "Not mentioned" in locomo
    lme = answer_messages("longmemeval", "q", "2024/03/14 (Thu) 08:30", "- m")
    assert "assistant" in lme[0]["content"] and "do not know" in lme[0]["content"]
    assert "Current date: 2024/03/14 (Thu) 08:30" in _user(lme)
    assert "Question date: unknown" in _user(answer_messages("locomo", "q", None, "- m"))
    with pytest.raises(ValueError):
        answer_messages("squad", "q", None, "- m")


def test_format_evidence_shows_type_time_and_sources_in_time_order():
    items = [
        EvidenceItem("Bran paints.", "preference", None, "2023-06-02", ("D4:1",)),
        EvidenceItem("Ysolde went to a\npottery club.", "event", "2023-03-12", "2023-03-13", ("D1:3", "D1:4")),
        EvidenceItem("Tavik: hi there", None, None, None, ("D9:1",)),
    ]
    block = format_evidence(items)
    assert block == (
        "- [event | 2023-03-12 | src D1:3,D1:4] Ysolde went to a pottery club.\n"
        "- [preference | said 2023-06-02 | src D4:1] Bran paints.\n"
        "- [turn | src D9:1] Tavik: hi there\n"
    )
    assert format_evidence([]) == "(no memories found)\n"


def test_evidence_sources_are_capped():
    line = EvidenceItem("x", "fact", sources=tuple(f"D1:{k}" for k in range(9))).line()
    assert "src D1:0,D1:1,D1:2,D1:3]" in line


_line_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_line_text, st.sampled_from([None, "fact", "event"]), st.sampled_from([None, "2023-05-07", "2023-05-07..2023-06-01"]),
                          st.sampled_from([None, "2023-05-08"])), max_size=6))
def test_block_tokens_are_the_sum_of_line_tokens(raw):
    """The budget charges each item the tokens of its line; the context section sent must cost
    exactly their sum (o200k splits at every line start), whatever the texts hold."""
    items = [EvidenceItem(text, typ, time, said, ("D1:1",)) for text, typ, time, said in raw]
    if items:
        assert count_tokens(format_evidence(items)) == sum(count_tokens(e.line()) for e in items)


# ------------------------------------------------------------------------------------ planner
def test_plan_messages_carry_date_and_deduplicated_capped_entities():
    msgs = plan_messages(
        "What did Bran paint last month?",
        "2023-08-25",
        ["Bran", "Ysolde", "Bran", " ", "Quenby"],
        max_entities=2,
    )
    _assert_well_formed(msgs)
    user = _user(msgs)
    assert "Question date: 2023-08-25" in user
    assert "Known entities: Bran, Ysolde\n" in user
    assert user.endswith("Question: What did Bran paint last month?")
    system = msgs[0]["content"]
    for field in QueryPlan.model_fields["routes"].annotation.__args__[0].model_fields:
        assert field in system  # every Route field is explained
    assert "question date" in system
    assert "Known entities: none" in _user(plan_messages("q", None, []))


# ------------------------------------------------------------------------------ schemas, size


def test_json_examples_in_prompts_validate():
    texts = [locomo_judge_messages("q", "g", "p")[0]["content"]]
    texts.append(_user(longmemeval_judge_messages("knowledge-update", "q", "g", "p", False)))
    examples = [m for t in texts for m in re.findall(r'\{"label": "[A-Z]+"\}', t)]
    assert len(examples) >= 4
    for example in examples:
        JudgeOutput.model_validate_json(example)
    plan_example = next(line for line in PLAN_SYSTEM.splitlines() if line.startswith('{"routes"'))
    QueryPlan.model_validate_json(plan_example)
    for system in ANSWER_SYSTEM.values():
        AnswerOutput.model_validate_json(re.search(r'\{"answer": "\.\.\."\}', system).group(0))


def test_prompt_overhead_leaves_the_token_budget_to_evidence():
    """Plan + answer prompts without evidence stay small next to the ~4K tokens per question."""
    plan = plan_messages("What did Bran paint last month?", "2023-08-25", [f"Entity{i}" for i in range(40)])
    for benchmark in BENCHMARKS:
        answer = answer_messages(benchmark, "What did Bran paint last month?", "2023-08-25", "")
        overhead = sum(count_tokens(m["content"]) for m in plan + answer)
        assert overhead < 800, (benchmark, overhead)


# ------------------------------------------------------------------------------ reply parsing


