"""`Memory`, the public API for agents, on a real store of the LoCoMo fixture (rules backend, real
MiniLM; tests/fixtures/locomo_fixture.json):

- the README example, extracted from README.md and run as written (only the store path changed);
- the openai backend against the fake server: plan + answer are exactly two calls, and the
  usage `Memory` reports is what the server counted;
- `records()` filters by type and time like a direct DuckDB query, and binds its inputs;
- `search` selects what evaluate's PlanStage + RetrieveStage select for the same question.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re

import duckdb
import pyarrow as pa
import pytest

from lychee_ray import Memory, MemoryAnswer, MemoryItem
from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.questions import QAItem
from lychee_ray.evaluate.stages import PlanStage, RetrieveStage
from lychee_ray.query.memory import select_records
from lychee_ray.query.retrieve import Retriever
from lychee_ray.schemas import QueryPlan
from lychee_ray.store.manifest import StoreError

from .conftest import LOCOMO_PATH, REPO

README_SECTION = "## Use the memory from Python (agents)"
README_STORE = '"out/demo/store"'
HOSTILE = "x' OR 1=1 --"


def readme_example() -> str:
    """The first ```python block of the README's agents section."""
    text = (REPO / "README.md").read_text()
    assert README_SECTION in text, "the README lost its agents section"
    section = text.split(README_SECTION, 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert m, "no python example in the README's agents section"
    return m.group(1)


def turn_ids_of(store_dir, conversation_id: str) -> set[str]:
    rows = duckdb.sql(
        f"select turn_id from read_parquet('{store_dir}/turns/*.parquet') where conversation_id = ?",
        params=[conversation_id],
    ).fetchall()
    return {r[0] for r in rows}


@pytest.fixture(scope="module")
def memory(locomo_dev_store):
    with Memory.open(locomo_dev_store) as m:  # no config: LycheeConfig() defaults, rules backend
        yield m


# --------------------------------------------------------------------------------------------
# The README example
# --------------------------------------------------------------------------------------------
def test_readme_example_runs_against_a_real_store(locomo_dev_store, capsys):
    code = readme_example()
    assert code.count(README_STORE) == 1, "the example must open exactly one store path"
    ns: dict = {}
    exec(compile(  # noqa: S102  (the README example, run as written)
        code.replace(README_STORE, repr(str(locomo_dev_store))), "README.md", "exec"), ns)
    out = capsys.readouterr().out
    assert "conv-30" in out

    items = ns["items"]
    assert 1 <= len(items) <= 5 and all(isinstance(i, MemoryItem) for i in items)
    known = turn_ids_of(locomo_dev_store, "conv-30")
    assert all(i.source_turn_ids and set(i.source_turn_ids) <= known for i in items)
    assert any("dance" in i.text.lower() for i in items)

    reply = ns["reply"]
    assert isinstance(reply, MemoryAnswer)
    assert reply.answer.strip() and reply.evidence
    assert reply.usage.calls == 0 and reply.errors == []  # rules backend: no LLM, no fallback
    assert reply.answer in out

    events = ns["events"]
    assert isinstance(events, pa.Table) and "embedding" not in events.column_names
    assert set(events.column("type").to_pylist()) <= {"event"}


# --------------------------------------------------------------------------------------------
# The openai backend, against the fake server
# --------------------------------------------------------------------------------------------
def llm_config(server) -> LycheeConfig:
    return load_config(
        REPO / "configs" / "local.yaml",
        ["llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model", "llm.timeout_s=30", "llm.max_retries=0"],
    )


def test_answer_through_the_llm_is_two_calls_and_reports_their_usage(locomo_dev_store, fake_openai):
    question = "When did Melanie go camping in June?"
    with Memory.open(locomo_dev_store, llm_config(fake_openai)) as m:
        reply = m.answer("conv-26", question)
        reqs = fake_openai.requests
        assert [r["schema_name"] for r in reqs] == ["QueryPlan", "AnswerOutput"]
        total = fake_openai.total_usage()
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (total["prompt_tokens"], total["completion_tokens"])
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
        assert reply.usage.calls == 2 and reply.errors == []
        # the plan and the answer are the model's, and both prompts are dated after the conversation
        assert reply.plan.model_dump() == QueryPlan.model_validate_json(reqs[0]["reply"]).model_dump()
        assert reply.answer == json.loads(reqs[1]["reply"])["answer"] != ""
        # 2023-07-06: session 6, the last the fixture keeps of conv-26
        assert "Question date: 2023-07-06" in reqs[0]["messages"][1]["content"]
        answer_prompt = reqs[1]["messages"][1]["content"]
        assert "Question date: 2023-07-06" in answer_prompt  # conv-26 is LoCoMo: its answer prompt
        assert reply.evidence and " ".join(reply.evidence[0].text.split()) in answer_prompt

        # A failed plan falls back to rules and says so; a second call on the same Memory works
        # (each call had its own loop and client), and usage still matches the server.
        fake_openai.reset()
        fake_openai.set_faults(schedule=["invalid", "invalid"])  # plan + its repair: both invalid
        again = m.answer("conv-26", question)
        assert [r["schema_name"] for r in fake_openai.requests] == ["QueryPlan", "QueryPlan", "AnswerOutput"]
        assert len(again.errors) == 1 and again.errors[0].startswith("plan: ")
        assert again.plan.routes and again.plan.routes[0].time_window is not None  # the rules plan
        total = fake_openai.total_usage()
        assert (again.usage.prompt_tokens, again.usage.completion_tokens) == (total["prompt_tokens"], total["completion_tokens"])
        assert again.usage.calls == 3


# --------------------------------------------------------------------------------------------
# records(): filters and parameter binding
# --------------------------------------------------------------------------------------------
def test_records_filter_by_type_and_time_like_a_direct_query(memory, locomo_dev_store):
    rows = duckdb.sql(
        f"select record_id, type, time_start, time_end, source_turn_ids from read_parquet('{locomo_dev_store}/records/*.parquet') "
        "where conversation_id = 'conv-26'"
    ).fetchall()
    said = dict(duckdb.sql(
        f"select turn_id, cast(timestamp as date) from read_parquet('{locomo_dev_store}/turns/*.parquet') "
        "where conversation_id = 'conv-26'"
    ).fetchall())
    everything = memory.records("conv-26")
    assert everything.num_rows == len(rows) > 0
    assert set(everything.column("record_id").to_pylist()) == {r[0] for r in rows}

    events = memory.records("conv-26", type="event")
    expected = {r[0] for r in rows if r[1] == "event"}
    assert 0 < len(expected) < len(rows)
    assert set(events.column("record_id").to_pylist()) == expected and events.num_rows == len(expected)

    # retrieval's window rule: [time_start, time_end] overlaps June 2023, or, for a record that
    # states no time, one of its source turns was said in June
    june = memory.records("conv-26", since="2023-06-01", until="2023-06-30")
    lo, hi = dt.date(2023, 6, 1), dt.date(2023, 6, 30)
    timed = {r[0] for r in rows if (r[2] or r[3]) is not None and (r[2] or r[3]) <= hi and (r[3] or r[2]) >= lo}
    untimed = {r[0] for r in rows if (r[2] or r[3]) is None and any(lo <= said[t] <= hi for t in r[4])}
    in_june = timed | untimed
    assert timed and untimed and len(in_june) < len(rows)
    assert set(june.column("record_id").to_pylist()) == in_june
    # month shorthand and date objects mean the same window; type and window combine
    assert memory.records("conv-26", since="2023-06", until="2023-06").column("record_id").to_pylist() == june.column("record_id").to_pylist()
    by_dates = memory.records("conv-26", since=dt.date(2023, 6, 1), until=dt.datetime(2023, 6, 30, 12))
    assert by_dates.column("record_id").to_pylist() == june.column("record_id").to_pylist()
    june_events = memory.records("conv-26", type="event", since="2023-06-01", until="2023-06-30")
    assert set(june_events.column("record_id").to_pylist()) == in_june & expected
    with pytest.raises(ValueError, match="is after until"):
        memory.records("conv-26", since="2023-07-01", until="2023-06-01")


def test_hostile_input_is_bound_never_formatted(memory):
    with pytest.raises(StoreError, match=re.escape(repr(HOSTILE))):
        memory.records(HOSTILE)
    with pytest.raises(StoreError):
        memory.search(HOSTILE, "anything")
    # below the known-id check the id is a bound parameter: it matches no row, not every row
    assert select_records(memory.store, HOSTILE).num_rows == 0
    assert select_records(memory.store, "conv-26").num_rows > 0
    with pytest.raises(ValueError, match="type must be one of"):
        memory.records("conv-26", type="event' OR 1=1 --")
    with pytest.raises(ValueError, match="since must be an ISO date"):
        memory.records("conv-26", since="June' OR 1=1 --")
    # only the parsed date is bound: a trailing payload after an ISO date is ignored, not run
    tail = memory.records("conv-26", since="2023-06-01' OR 1=1 --", until="2023-06-30")
    assert tail.column("record_id").to_pylist() == memory.records("conv-26", since="2023-06-01", until="2023-06-30").column("record_id").to_pylist()
    assert 0 < tail.num_rows < memory.records("conv-26").num_rows


def test_unknown_conversation_names_the_store_and_known_ids(memory, locomo_dev_store):
    fixture_ids = [s["sample_id"] for s in json.loads(LOCOMO_PATH.read_text())]
    assert memory.conversations() == fixture_ids == ["conv-26", "conv-30", "conv-41"]
    with pytest.raises(StoreError) as err:
        memory.answer("conv-999", "Where did Caroline move from?")
    msg = str(err.value)
    assert "'conv-999'" in msg and str(locomo_dev_store) in msg and "conv-26" in msg and len(msg.splitlines()) == 1


# --------------------------------------------------------------------------------------------
# The same path as evaluate
# --------------------------------------------------------------------------------------------
QUESTIONS = [
    "When did Melanie go camping in June?",  # a time-windowed route
    "What did Caroline research?",
    "What are Melanie's hobbies?",
]


def test_search_selects_what_evaluate_selects(memory, locomo_dev_store):
    cfg = LycheeConfig()
    asked_at = duckdb.sql(
        f"select cast(max(timestamp) as date)::varchar from read_parquet('{locomo_dev_store}/turns/*.parquet') "
        "where conversation_id = 'conv-26'"
    ).fetchall()[0][0]
    items = [
        QAItem(conversation_id="conv-26", question_id=f"q{i}", question=q, gold="", category="single_hop",
               evidence_turn_ids=[], question_date=asked_at)
        for i, q in enumerate(QUESTIONS)
    ]
    plan_stage = PlanStage(cfg, str(locomo_dev_store))
    plan_stage.setup()
    plan_stage.process_batch(items)
    embedder = Embedder(cfg.embedding)
    retrieve_stage = RetrieveStage(cfg.with_overrides({"evaluate": {"baselines": []}}), str(locomo_dev_store), embedder)
    retrieve_stage.setup()
    retrieve_stage.process_batch(items)
    retriever = Retriever(retrieve_stage.store, cfg.retrieval, embedder.encode)
    for item in items:
        assert item.status == "ok", item.error
        found = memory.recall("conv-26", item.question)
        assert found.asked_at == asked_at
        assert found.plan.model_dump() == item.plan.model_dump()
        assert [i.key for i in found.items if i.kind == "record"] == item.retrieved_record_ids != []
        assert list(dict.fromkeys(t for i in found.items for t in i.source_turn_ids)) == item.retrieved_turn_ids
        # search is that selection (default budget = the config's), cut to k
        keys = [i.key for i in found.items]
        assert [i.key for i in memory.search("conv-26", item.question)] == keys
        assert [i.key for i in memory.search("conv-26", item.question, k=2)] == keys[:2]
        # each item's score is its fused score
        fused = dict(retriever.retrieve("conv-26", item.plan, item.question).fused)
        assert all(i.score == pytest.approx(fused[i.key]) and i.score > 0 for i in found.items)
    # a smaller budget selects less
    small = memory.search("conv-26", QUESTIONS[1], budget_tokens=200)
    assert 0 < len(small) < len(memory.search("conv-26", QUESTIONS[1]))


def test_sync_api_works_from_inside_an_event_loop(memory):
    """An async agent (or a notebook) calls the sync API from a running loop: no nested
    asyncio.run error, and the same selection as a plain call."""
    question = QUESTIONS[1]
    plain = [i.key for i in memory.search("conv-26", question)]

    async def agent_step():
        return memory.search("conv-26", question), memory.answer("conv-26", question)

    items, reply = asyncio.run(agent_step())
    assert [i.key for i in items] == plain and reply.answer.strip()


def test_a_closed_memory_says_so(locomo_dev_store):
    m = Memory.open(locomo_dev_store)
    m.close()
    m.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        m.search("conv-26", "anything")
