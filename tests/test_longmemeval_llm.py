"""LongMemEval end to end on the LLM path: Ray ingest of a generated LongMemEval instance whose
sessions are named the way LongMemEval names them (tests/support/generated_lme.py), encoded by
the fake OpenAI server, then plan, answer and judge. No label of the benchmark reaches a model:
the evidence sessions are named answer_<hash>_<n> in LongMemEval, and neither a stored id nor any
prompt sent may carry such a name. The judge reads LongMemEval's own prompt."""

from __future__ import annotations

import json

import duckdb

from lychee_ray.config import load_config
from lychee_ray.evaluate.job import run_evaluate
from lychee_ray.ingest.job import run_ingest
from lychee_ray.store.reader import open_store

from .conftest import REPO
from .support.generated_lme import LABEL_MARKERS, labelled_instance


def test_no_session_label_reaches_a_prompt_or_an_id_and_the_judge_reads_the_longmemeval_prompt(fake_openai, tmp_path, ray_local):
    lme = labelled_instance(tmp_path / "input")
    labels = set(lme.instance["haystack_session_ids"])
    assert any(s.startswith("answer_") for s in labels) and any(s.startswith("sharegpt_") for s in labels)
    overrides = ["ray.progress_bars=false", "llm.backend=openai", f"llm.base_url={fake_openai.base_url}", "llm.model=fake-model", "evaluate.judge=true"]
    cfg = load_config(REPO / "configs" / "local.yaml", overrides)
    store = tmp_path / "store"
    run_ingest(cfg, str(lme.path), str(store))
    run_evaluate(cfg, str(store), str(tmp_path / "eval"))

    con = open_store(str(store)).con
    ids = con.execute("select turn_id, session_id, segment_id, source_session_id from turns").fetchall()
    n_turns = sum(len(s) for s in lme.instance["haystack_sessions"])
    assert len({r[0].split("#")[0] for r in ids}) == n_turns  # long turns are split into parts (#p2, ...)
    for turn_id, session_id, segment_id, _ in ids:
        assert not any(m in f"{turn_id} {session_id} {segment_id}" for m in LABEL_MARKERS)
    assert {r[3] for r in ids} == labels  # kept for audit only
    record_ids = [r[0] for r in con.execute("select record_id from records").fetchall()]
    assert record_ids and not any(m in r for r in record_ids for m in LABEL_MARKERS)

    schemas = {r["schema_name"].split("_")[0] for r in fake_openai.requests}
    assert {"QueryPlan", "AnswerOutput", "JudgeOutput"} <= schemas and any(s.startswith("EncodeOutput") for s in schemas)
    for req in fake_openai.requests:
        text = " ".join(str(m.get("content")) for m in req["messages"])
        assert not any(m in text for m in LABEL_MARKERS), (req["schema_name"], text[:300])

    (judge_req,) = [r for r in fake_openai.requests if r["schema_name"] == "JudgeOutput"]
    assert "Model Response:" in judge_req["messages"][1]["content"]
    (row,) = duckdb.read_parquet(f"{tmp_path}/eval/answers/*.parquet").project("judge_label, benchmark").fetchall()
    assert row == (json.loads(judge_req["reply"])["label"], "longmemeval")
    report = (tmp_path / "eval" / "report.md").read_text()
    assert "- **LongMemEval** (1 questions): accuracy" in report and "task-averaged accuracy" in report
