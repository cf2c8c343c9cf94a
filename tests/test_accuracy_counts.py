"""Every question asked counts in the judge accuracy: a pipeline error, a judge call that gave no
label and the rules fallback after a failed answer call are wrong, and the report says how many
of each there were. Checked on real Parquet answer parts read by the report's DuckDB queries."""

from __future__ import annotations

import duckdb
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.config import load_config
from lychee_ray.evaluate.answers import ANSWERS_SCHEMA, answer_row
from lychee_ray.evaluate.metrics import counts_as_correct
from lychee_ray.evaluate.questions import QAItem
from lychee_ray.evaluate.report import (
    CORRECT_SQL,
    _category_rows,
    _not_counted_as_correct,
    longmemeval_lines,
)

from .conftest import REPO


def item(qid: str, status="ok", label=None, fallback=False, category="single_hop", f1=1.0) -> QAItem:
    it = QAItem("c1", qid, "q?", "gold", category, ["D1:1"], None, benchmark="locomo", status=status)
    it.judge_label, it.answer_fallback = label, fallback
    it.f1 = f1 if status == "ok" else None
    it.evidence_recall = 1.0 if status == "ok" else None
    return it


def answers_con(items: list[QAItem]) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    table = pa.Table.from_pylist([answer_row(i) for i in items], schema=ANSWERS_SCHEMA)
    con.register("answers", table)
    return con


def test_failed_judge_error_and_fallback_count_as_wrong_and_are_counted():
    items = [
        item("ok-correct", label="CORRECT"),
        item("ok-wrong", label="WRONG"),
        item("judge-failed", label=None),
        item("pipeline-error", status="error"),
        item("fallback-judged-correct", label="CORRECT", fallback=True),
    ]
    con = answers_con(items)
    overall = next(r for r in _category_rows(con, has_judge=True) if r["category"] == "overall")
    assert overall["n"] == 5 and overall["n_ok"] == 4
    assert overall["judge_acc"] == 1 / 5  # the old rule (ok rows with a label) gave 2/3
    assert overall["f1"] == 4 / 5  # the errored question scores 0, not "not counted"
    assert _not_counted_as_correct(con, has_judge=True) == {"pipeline_errors": 1, "answer_fallbacks": 1, "judge_failures": 1}


def test_a_judged_run_whose_every_judge_call_failed_has_accuracy_zero_not_none():
    con = answers_con([item("a"), item("b")])
    overall = next(r for r in _category_rows(con, has_judge=True) if r["category"] == "overall")
    assert overall["judge_acc"] == 0.0
    assert _not_counted_as_correct(con, has_judge=True)["judge_failures"] == 2


def test_whether_a_run_is_judged_comes_from_the_config():
    local = REPO / "configs" / "local.yaml"
    assert not load_config(local, ["llm.backend=rules", "evaluate.judge=true"]).asks_judge
    assert load_config(local, ["llm.backend=openai", "llm.model=m", "evaluate.judge=true"]).asks_judge
    assert not load_config(local, ["llm.backend=openai", "llm.model=m", "evaluate.judge=false"]).asks_judge


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["ok", "error"]), st.booleans(), st.sampled_from([None, "CORRECT", "WRONG"]))
def test_the_python_rule_and_the_report_sql_agree(status, fallback, label):
    con = answers_con([item("q", status=status, label=label, fallback=fallback)])
    sql = con.execute(f"select {CORRECT_SQL} from answers").fetchone()[0]
    assert sql == (1.0 if counts_as_correct(status, fallback, label) else 0.0)


def test_longmemeval_summary_is_accuracy_task_average_and_abstention_as_the_official_scoring():
    def lme(qid, category, label):
        it = item(qid, label=label, category=category)
        it.benchmark = "longmemeval"
        return it

    items = [
        lme("a1", "knowledge-update", "CORRECT"),
        lme("a2", "knowledge-update", "WRONG"),
        lme("a3_abs", "knowledge-update_abs", "CORRECT"),  # counts in its type, and as abstention
        lme("b1", "temporal-reasoning", "CORRECT"),
        lme("b2_abs", "temporal-reasoning_abs", None),  # judge failed: wrong
        item("locomo-q", label="CORRECT"),  # another benchmark: not in the LongMemEval line
    ]
    (line,) = longmemeval_lines(answers_con(items), has_judge=True)
    # overall 3/5; types: knowledge-update 2/3, temporal-reasoning 1/2 -> (0.667 + 0.5) / 2
    assert line == (
        "- **LongMemEval** (5 questions): accuracy 0.600; task-averaged accuracy 0.583 over 2 question types; "
        "abstention accuracy 0.500 (2 questions)."
    )
    assert longmemeval_lines(answers_con([item("locomo-q", label="CORRECT")]), has_judge=True) == []
