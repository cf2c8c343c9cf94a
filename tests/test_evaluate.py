"""`evaluate` on the rules path, as Ray Data over the generated store (tests/support/generated.py): bad question rows
become per-question error rows while the rest is answered, a store without records gives error
rows and a report, and a run killed with -9 resumes without re-asking anything answered."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lychee_ray.evaluate.job import run_evaluate
from lychee_ray.io.fs import is_temp_name

from .conftest import REPO
from .support.kill import kill_session
from .support.generated import LOCAL_CONFIG, local_config



def answers(out_dir: Path) -> dict[str, dict]:
    rows = pq.read_table(out_dir / "answers").to_pylist()
    assert len({r["question_id"] for r in rows}) == len(rows), "a question answered twice"
    return {r["question_id"]: r for r in rows}


def store_questions(store_dir: Path, cid: str, n: int) -> list[dict]:
    rows = pq.read_table(store_dir / "questions").to_pylist()
    picked = [r for r in rows if r["conversation_id"] == cid and r["category"] != "adversarial"][:n]
    return [{**r, "question_date": str(r["question_date"])} for r in picked]


def test_bad_question_rows_are_error_rows_and_the_rest_is_answered(synth_store_dir, generated_locomo, tmp_path, caplog, ray_local):
    good = store_questions(synth_store_dir, generated_locomo.conversation_ids()[0], 4)
    assert len(good) == 4
    bad = [
        {**good[0], "question_id": "bad-unknown-conv", "conversation_id": "no-such-conversation"},
        {**good[1], "question_id": "bad-empty", "question": "   "},
    ]
    qfile = tmp_path / "questions.jsonl"
    lines = [json.dumps(q) for q in bad[:1] + good[:2] + bad[1:] + good[2:]]
    lines += ["42", json.dumps({**good[3], "question": "A second question under a used id?"})]  # lines 7 and 8
    qfile.write_text("".join(line + "\n" for line in lines))
    out = tmp_path / "eval"
    with caplog.at_level(logging.WARNING, logger="lychee_ray.evaluate"):
        result = run_evaluate(local_config(), str(synth_store_dir), str(out), questions_path=str(qfile))
    assert result.asked == 8
    rows = answers(out)
    dup_id = f"{good[3]['question_id']}#dup2"
    assert set(rows) == {q["question_id"] for q in good + bad} | {"questions.jsonl:line7", dup_id}
    assert rows["questions.jsonl:line7"]["status"] == "error" and "expected a JSON object" in rows["questions.jsonl:line7"]["error"]
    assert rows[dup_id]["status"] == "error" and "appears more than once" in rows[dup_id]["error"]
    unknown, empty = rows["bad-unknown-conv"], rows["bad-empty"]
    assert unknown["status"] == "error" and "'no-such-conversation'" in unknown["error"] and "not in the store" in unknown["error"]
    assert empty["status"] == "error" and "is empty" in empty["error"]
    assert unknown["prediction"] == "" and unknown["retrieved_turn_ids"] == []
    for q in good:
        row = rows[q["question_id"]]
        assert row["status"] == "ok" and row["error"] is None, row
        assert row["prediction"] and row["f1"] is not None and 0 < row["context_tokens"] <= 1500
        assert row["evidence_recall"] is not None and row["naive_rag_recall"] is not None
        assert row["evidence_turn_ids"] == q["evidence_turn_ids"]
    logged = [r.getMessage() for r in caplog.records if r.name.startswith("lychee_ray.evaluate")]
    assert sum("bad-unknown-conv" in m for m in logged) == 1 and sum("bad-empty" in m for m in logged) == 1
    assert all(str(qfile) in m for m in logged)
    report = (out / "report.md").read_text()
    assert "8 asked, 4 answered ok, 4 with errors" in report and "bad-unknown-conv" in report


def test_store_without_records_gives_error_rows_and_a_report(synth_store_dir, tmp_path, ray_local):
    empty = tmp_path / "no-records"
    shutil.copytree(synth_store_dir, empty)
    for table in ("records", "record_nodes"):  # the committed files stay, holding zero rows
        for part in (empty / table).glob("part-*.parquet"):
            pq.write_table(pq.read_schema(part).empty_table(), part)
    out = tmp_path / "eval"
    result = run_evaluate(local_config("evaluate.max_questions=5"), str(empty), str(out))
    rows = answers(out)
    assert result.asked == 5 and len(rows) == 5
    for row in rows.values():
        assert row["status"] == "error" and "has no records for conversation" in row["error"], row
    report = (out / "report.md").read_text()
    assert "0 answered ok, 5 with errors" in report


def test_kill_minus_9_then_resume_reasks_nothing_already_answered(synth_store_dir, tmp_path, ray_local):
    out = tmp_path / "eval"
    sets = ["--set", "evaluate.max_questions=40", "--set", "evaluate.questions_per_batch=4", "--set", "ray.num_cpus=2",
            "--set", "ray.progress_bars=false"]
    cmd = [sys.executable, "-m", "lychee_ray.cli", "evaluate", "--config", str(LOCAL_CONFIG),
           "--store", str(synth_store_dir), "--out", str(out), *sets]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    env.pop("RAY_ADDRESS", None)
    log_path = tmp_path / "killed-run.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, stdout=log_file, stderr=subprocess.STDOUT)
    parts = out / "answers"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None and not list(parts.glob("part-*.parquet")):
        time.sleep(0.1)
    assert proc.poll() is None, "evaluate ended before it could be killed: " + log_path.read_text()[-3000:]
    kill_session(proc)
    before = {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in parts.glob("part-*.parquet")}
    answered_before = sum(pq.read_metadata(parts / name).num_rows for name in before)
    assert 1 <= answered_before < 40

    result = run_evaluate(local_config("evaluate.max_questions=40", "evaluate.questions_per_batch=4"),
                          str(synth_store_dir), str(out))
    assert (result.asked, result.skipped) == (40 - answered_before, answered_before)
    # the parts answered before the kill were not rewritten: nothing in them was asked again
    assert {name: ((parts / name).stat().st_mtime_ns, (parts / name).stat().st_size) for name in before} == before
    rows = answers(out)
    assert len(rows) == 40 and all(r["status"] == "ok" for r in rows.values())
    assert not [p.name for p in parts.iterdir() if is_temp_name(p.name)]  # no writer debris left
    # a third run has nothing left to ask
    assert run_evaluate(local_config("evaluate.max_questions=40"), str(synth_store_dir), str(out)).asked == 0


def test_answers_table_has_the_design_columns():
    from lychee_ray.evaluate.answers import ANSWERS_SCHEMA

    design = ["question_id", "prediction", "retrieved_record_ids", "context_tokens", "plan", "judge_label", "f1",
              "bleu1", "evidence_recall", "prompt_tokens", "completion_tokens"]
    assert all(ANSWERS_SCHEMA.field(c) is not None for c in design)
    assert ANSWERS_SCHEMA.field("retrieved_record_ids").type == pa.list_(pa.string())
