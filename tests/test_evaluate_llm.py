"""The evaluate stage on the `openai` backend against the fake OpenAI-compatible server.

A real store (the session's generated store, tests/support/generated.py: Ray ingest, rules
records, MiniLM embeddings) is queried by the real planner / retrieval / answer / judge stages;
only the model is the fake,
whose replies are derived from each prompt (the plan restates the question, the answer quotes
the first evidence line, the judge checks word overlap), never from the gold answers.

Requests are matched to questions by their `Question:` line and schema name, so each
question's token columns in `answers` can be checked against the usage the server returned.
"""

from __future__ import annotations

import json
import re

import duckdb
import pytest

from lychee_ray.config import load_config
from lychee_ray.schemas import QueryPlan
from lychee_ray.tokens import count_tokens
from .conftest import REPO


N_QUESTIONS = 12


def cfg_for(server, *overrides):
    return load_config(
        REPO / "configs" / "local.yaml",
        [
            "ray.progress_bars=false",
            "llm.backend=openai",
            f"llm.base_url={server.base_url}",
            "llm.model=fake-model",
            "llm.timeout_s=30",
            "llm.max_retries=2",
            "evaluate.judge=true",
            f"evaluate.max_questions={N_QUESTIONS}",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def store_dir(synth_store_dir):
    """The shared store, built under the rules backend: only the query side asks the model."""
    return str(synth_store_dir)


def question_of(request) -> str:
    user = request["messages"][1]["content"]
    return re.search(r"(?m)^Question: (.*)$", user).group(1)


def requests_by_question(server) -> dict[tuple[str, str], list[dict]]:
    out: dict[tuple[str, str], list[dict]] = {}
    for req in server.requests:
        out.setdefault((req["schema_name"], question_of(req)), []).append(req)
    return out


_EVIDENCE_LINE = re.compile(r"^- \[(\w+)( \| (said )?[\d.-]+)?( \| src [^\]]+)?\] \S")


def context_section(request) -> str:
    user = request["messages"][1]["content"]
    return re.search(r"Memories:\n(.*?\n)(?:Question date|Current date): ", user, re.S).group(1)


def _when(line: str) -> str:
    m = re.match(r"- \[\w+ \| (?:said )?([\d-]{10})", line)
    return m.group(1) if m else "~"


def answers_rows(out_dir) -> list[dict]:
    rel = duckdb.read_parquet(f"{out_dir}/answers/*.parquet")
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def test_plan_answer_judge_go_through_the_llm_and_land_in_answers(store_dir, fake_openai, tmp_path):
    from lychee_ray.evaluate.job import run_evaluate

    result = run_evaluate(cfg_for(fake_openai), store_dir, str(tmp_path / "eval"))
    rows = answers_rows(tmp_path / "eval")
    assert result.asked == len(rows) == N_QUESTIONS
    by_q = requests_by_question(fake_openai)
    assert len({r["question"] for r in rows}) == N_QUESTIONS, "questions must be distinct to match requests"
    for row in rows:
        assert row["status"] == "ok" and not row["llm_errors"], row
        (plan_req,) = by_q[("QueryPlan", row["question"])]
        (answer_req,) = by_q[("AnswerOutput", row["question"])]
        (judge_req,) = by_q[("JudgeOutput", row["question"])]
        plan = QueryPlan.model_validate_json(row["plan"])
        assert plan.model_dump() == QueryPlan.model_validate_json(plan_req["reply"]).model_dump()
        assert plan.routes[0].goal == row["question"]  # the fake restates the question
        # The answer is the model's reply, and its prompt carried the retrieved evidence.
        assert row["prediction"] == json.loads(answer_req["reply"])["answer"] != ""
        assert "Memories:\n- " in answer_req["messages"][1]["content"] and row["context_tokens"] > 0
        # The budget was charged on exactly the context section the model got.
        section = context_section(answer_req)
        assert count_tokens(section) == row["context_tokens"]
        lines = section.rstrip("\n").split("\n")
        assert len(lines) == len(set(row["retrieved_record_ids"])) + sum(1 for ln in lines if ln.startswith("- [turn |"))
        assert all(_EVIDENCE_LINE.match(ln) for ln in lines), lines
        whens = [_when(ln) for ln in lines]
        assert whens == sorted(whens), "evidence reaches the prompt in time order"
        assert any(" | said " in ln or re.match(r"- \[\w+ \| \d{4}-", ln) for ln in lines), "items carry a time"
        assert f"Generated answer: {row['prediction']}" in judge_req["messages"][1]["content"]
        assert row["judge_label"] == json.loads(judge_req["reply"])["label"]
        u_plan, u_answer, u_judge = plan_req["usage"], answer_req["usage"], judge_req["usage"]
        assert row["plan_prompt_tokens"] == u_plan["prompt_tokens"]
        assert row["answer_prompt_tokens"] == u_answer["prompt_tokens"]
        assert row["prompt_tokens"] == u_plan["prompt_tokens"] + u_answer["prompt_tokens"]
        assert row["completion_tokens"] == u_plan["completion_tokens"] + u_answer["completion_tokens"]
        assert (row["judge_prompt_tokens"], row["judge_completion_tokens"]) == (u_judge["prompt_tokens"], u_judge["completion_tokens"])
        assert row["llm_calls"] == 2
    assert len(fake_openai.requests) == 3 * N_QUESTIONS
    labels = [r["judge_label"] for r in rows]
    assert set(labels) <= {"CORRECT", "WRONG"}

    report = (tmp_path / "eval" / "report.md").read_text()
    accuracy = sum(lab == "CORRECT" for lab in labels) / len(labels)
    overall = next(line for line in report.splitlines() if line.startswith("| overall"))
    assert f"{accuracy:.3f}" in overall
    query_tokens = sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / len(rows)
    assert f"Query tokens per question (planner + answer, prompt + completion): **{query_tokens:.0f}**" in report
    assert "LLM fake-model" in report

    # A rerun over the same output re-asks nothing.
    n = len(fake_openai.requests)
    again = run_evaluate(cfg_for(fake_openai), store_dir, str(tmp_path / "eval"))
    assert again.asked == 0 and again.skipped == N_QUESTIONS and len(fake_openai.requests) == n


def test_llm_failures_fall_back_and_are_recorded_per_question(store_dir, fake_openai):
    from lychee_ray.evaluate.job import evaluate_in_process
    from lychee_ray.evaluate.questions import load_questions
    from lychee_ray.store.reader import open_store

    cfg = cfg_for(fake_openai, "evaluate.max_questions=1")
    items = load_questions(open_store(store_dir, cfg), cfg, None)
    # plan: invalid, repair truncated -> rules plan; answer ok; judge: invalid twice -> no label
    fake_openai.set_faults(schedule=["invalid", "truncate", "ok", "invalid", "invalid"])
    (item,) = evaluate_in_process(cfg, store_dir, items)
    assert item.status == "ok"
    assert [e.split(":")[0] for e in item.llm_errors] == ["plan", "judge"]
    assert item.plan.routes and item.prediction
    assert item.judge_label is None
    usage = [r["usage"] for r in fake_openai.requests]
    assert item.plan_usage.prompt_tokens == usage[0]["prompt_tokens"] + usage[1]["prompt_tokens"]
    assert item.answer_usage.prompt_tokens == usage[2]["prompt_tokens"]
    assert item.judge_usage.prompt_tokens == usage[3]["prompt_tokens"] + usage[4]["prompt_tokens"]
    assert item.plan_usage.calls + item.answer_usage.calls == 3


def overall_accuracy(report: str) -> float:
    header = next(line for line in report.splitlines() if line.startswith("| category"))
    overall = next(line for line in report.splitlines() if line.startswith("| overall"))
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in overall.split("|")]))
    return float(cells["judge_acc"])


def test_the_judge_is_its_own_model_and_a_failing_judge_lowers_the_accuracy(store_dir, fake_openai, tmp_path):
    """`judge:` sends every judge call to its own endpoint and model; the answering server gets
    none. When every judge call fails, those questions count as wrong, not as not asked (that a
    failed judgement lowers an accuracy above 0 is pinned in tests/test_accuracy_counts.py)."""
    from lychee_ray.evaluate.job import run_evaluate
    from tests.support.fake_openai import FakeOpenAIServer

    n = 6
    with FakeOpenAIServer(model="judge-model") as judge_server:
        cfg = cfg_for(fake_openai, f"evaluate.max_questions={n}", "judge.model=judge-model", f"judge.base_url={judge_server.base_url}")
        run_evaluate(cfg, store_dir, str(tmp_path / "judged"))
        assert {r["schema_name"] for r in fake_openai.requests} == {"QueryPlan", "AnswerOutput"}
        assert [(r["schema_name"], r["model"]) for r in judge_server.requests] == [("JudgeOutput", "judge-model")] * n
        report = (tmp_path / "judged" / "report.md").read_text()
        labels = [r["judge_label"] for r in answers_rows(tmp_path / "judged")]
        assert overall_accuracy(report) == pytest.approx(round(labels.count("CORRECT") / n, 3)) and None not in labels
        assert "judge-model via http://127.0.0.1" in report and "grades its own answers" not in report

        judge_server.set_faults(p_invalid=1.0)  # every judge reply is schema-invalid, repair included
        run_evaluate(cfg, store_dir, str(tmp_path / "judge-failed"))
        report = (tmp_path / "judge-failed" / "report.md").read_text()
        assert all(r["judge_label"] is None for r in answers_rows(tmp_path / "judge-failed"))
        assert overall_accuracy(report) == 0.0
        assert f"{n} judge calls with no label" in report

    same = (tmp_path / "judged-by-itself")
    run_evaluate(cfg_for(fake_openai, "evaluate.max_questions=2"), store_dir, str(same))
    assert "**fake-model via http://127.0.0.1" in (same / "report.md").read_text() and "grades its own answers" in (same / "report.md").read_text()
