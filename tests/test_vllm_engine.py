"""The LLM path against the real vLLM engine on CPU (tiny random-weight model, xgrammar).

`vllm_server` (tests/support/tiny_vllm.py) starts `lychee-ray serve` for a 2-layer random
Llama. Its words are nonsense, but constrained decoding makes every reply valid JSON for the
schema we send, so this is the real wire format, the real structured-output path and real
`usage` accounting. The schema bounds and max_tokens are set small so a random model finishes
its JSON inside the cap (a model that runs on would be truncated and degraded, which the fake
server tests cover).

Token sums in build_stats are checked against vLLM's own Prometheus counters.
"""

from __future__ import annotations

import re
import urllib.request

import duckdb
import pytest

from lychee_ray.config import load_config
from lychee_ray.schemas import EncodeOutput, QueryPlan
from tests.support.generated import generate

from .conftest import REPO

pytestmark = pytest.mark.vllm

TINY_BOUNDS = [
    "encoder.max_tokens=400",
    "encoder.max_records_per_call=1",
    "encoder.max_record_chars=40",
    "encoder.max_field_chars=8",
    "encoder.max_list_items=1",
    "encoder.context_token_budget=200",
    "segmenter.token_cap=256",  # short prompts: the tiny tokenizer is far finer than o200k
    "query.max_plan_tokens=900",
    "query.plan_max_items=1",
    "query.plan_goal_chars=24",
    "query.plan_field_chars=8",
    "query.max_answer_tokens=200",
    "query.max_answer_chars=24",
    "evaluate.max_questions=4",
    "evaluate.judge=true",
]


def vllm_cfg(server):
    return load_config(
        REPO / "configs" / "local.yaml",
        [
            "ray.progress_bars=false",
            "llm.backend=openai",
            f"llm.base_url={server.base_url}",
            f"llm.model={server.model}",
            "llm.timeout_s=300",
            *TINY_BOUNDS,
        ],
    )


def vllm_counters(server) -> dict[str, float]:
    """vLLM's cumulative prompt/generation token counters from /metrics."""
    text = urllib.request.urlopen(server.base_url.removesuffix("/v1") + "/metrics", timeout=10).read().decode()
    out = {}
    for name in ("prompt_tokens_total", "generation_tokens_total"):
        out[name] = sum(float(v) for v in re.findall(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", text, re.M))
    return out


@pytest.fixture(scope="module")
def vllm_store(vllm_server, ray_local, tmp_path_factory):
    from lychee_ray.ingest.job import run_ingest

    tmp = tmp_path_factory.mktemp("vllm_store")
    generated = generate(tmp / "generated", "locomo", conversations=2, sessions=1)  # chit-chat and work
    before = vllm_counters(vllm_server)
    summary = run_ingest(vllm_cfg(vllm_server), str(generated.archive), str(tmp / "store"))
    after = vllm_counters(vllm_server)
    delta = {k: after[k] - before[k] for k in after}
    return tmp / "store", summary, delta


def test_ingest_against_vllm_writes_complete_tables_with_real_usage(vllm_store, vllm_server):
    from lychee_ray.store.reader import open_store

    store, summary, delta = vllm_store
    assert summary.conversations == 2
    con = open_store(str(store)).con
    statuses = dict(con.execute("select conversation_id, status from conversations").fetchall())
    assert len(statuses) == 2 and set(statuses.values()) <= {"ok", "degraded"}, statuses
    # every segment encoded (no failure counted) or covered by degraded fallback records
    rows = con.execute(
        """select b.conversation_id, b.encode_units, b.llm_calls, b.degraded_segments, s.n,
                  coalesce(d.n, 0), b.model
           from build_stats b
           join (select conversation_id, count(*) n from segments group by 1) s using (conversation_id)
           left join (select conversation_id, count(distinct segment_id) n from records where degraded group by 1) d
           using (conversation_id)"""
    ).fetchall()
    assert len(rows) == 2
    for cid, units, calls, n_degraded, n_segments, degraded_with_records, model in rows:
        assert units == n_segments and calls >= n_segments, cid
        assert n_degraded == degraded_with_records, cid
        assert model == vllm_server.model
    n_llm_records = con.execute("select count(*) from records where backend = ? and not degraded", [vllm_server.model]).fetchall()[0][0]
    assert n_llm_records > 0, "no segment was encoded by the engine"
    # schema-valid: the engine's records cite turns of their own segment, with a known type
    bad_cites = con.execute(
        """select count(*) from (select conversation_id, segment_id, unnest(source_turn_ids) t from records where not degraded) r
           anti join (select conversation_id, segment_id, unnest(turn_ids) t from segments) s using (conversation_id, segment_id, t)"""
    ).fetchall()[0][0]
    assert bad_cites == 0
    types = {t for (t,) in con.execute("select distinct type from records").fetchall()}
    assert types <= set(EncodeOutput.model_json_schema()["$defs"]["EncodedRecord"]["properties"]["type"]["enum"])
    prompt, completion = con.execute("select sum(prompt_tokens), sum(completion_tokens) from build_stats").fetchall()[0]
    assert prompt > 0 and completion > 0
    assert (prompt, completion) == (delta["prompt_tokens_total"], delta["generation_tokens_total"])


def test_evaluate_against_vllm_parses_plans_and_answers(vllm_store, vllm_server, tmp_path):
    from lychee_ray.evaluate.job import run_evaluate

    store, _, _ = vllm_store
    result = run_evaluate(vllm_cfg(vllm_server), str(store), str(tmp_path / "eval"))
    rel = duckdb.read_parquet(f"{tmp_path}/eval/answers/*.parquet")
    rows = [dict(zip(rel.columns, r)) for r in rel.fetchall()]
    assert result.asked == len(rows) == 4
    for row in rows:
        assert row["status"] == "ok", row["error"]
        QueryPlan.model_validate_json(row["plan"])
        assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0 and row["llm_calls"] >= 2
        assert row["judge_prompt_tokens"] > 0
    # The engine's own replies (not only fallbacks) made it into the table.
    errors = [r["llm_errors"] for r in rows]
    assert sum(not any(e.startswith("plan") for e in errs) for errs in errors) >= 1, errors
    assert sum(r["judge_label"] in ("CORRECT", "WRONG") for r in rows) >= 1
    assert "Query tokens per question" in (tmp_path / "eval" / "report.md").read_text()
