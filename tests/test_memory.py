"""`Memory`, the public API for agents, on the generated store (rules backend, real MiniLM;
tests/support/generated.py), asked questions built from the generator's labels:

- the README example, extracted from README.md and run as written (only the store and questions
  paths changed: the demo's chat archive and this LoCoMo-format one are the same generator's);
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

from .conftest import REPO
from .support.asked import chitchat_ids, month_question


README_SECTION = "## Use the memory from Python (agents)"
README_STORE = '"out/demo/store"'
README_QUESTIONS = '"out/demo/synth/questions.jsonl"'
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


def last_day(store_dir, conversation_id: str) -> str:
    """The day of the conversation's last turn, read straight from Parquet: the day `Memory`
    asks its questions on."""
    return duckdb.sql(
        f"select cast(max(timestamp) as date)::varchar from read_parquet('{store_dir}/turns/*.parquet') where conversation_id = ?",
        params=[conversation_id],
    ).fetchall()[0][0]


@pytest.fixture(scope="module")
def memory(synth_store_dir):
    with Memory.open(synth_store_dir) as m:  # no config: LycheeConfig() defaults, rules backend
        yield m


@pytest.fixture(scope="module")
def cid(generated_locomo) -> str:
    """The first conversation between two friends."""
    return chitchat_ids(generated_locomo)[0]


@pytest.fixture(scope="module")
def asked(generated_locomo, cid) -> list[str]:
    """Three questions about `cid`: one routed through a month's window, a single-hop and a
    multi-hop one."""
    return [month_question(generated_locomo, cid).question, generated_locomo.asked("single_hop", cid)[0]["question"],
            generated_locomo.asked("multi_hop", cid)[0]["question"]]


# --------------------------------------------------------------------------------------------
# The README example
# --------------------------------------------------------------------------------------------
def test_readme_example_runs_against_a_real_store(synth_store_dir, generated_locomo, capsys):
    code = readme_example()
    assert code.count(README_STORE) == 1, "the example must open exactly one store path"
    assert code.count(README_QUESTIONS) == 1, "the example must read exactly one questions file"
    ns: dict = {}
    code = code.replace(README_STORE, repr(str(synth_store_dir))).replace(README_QUESTIONS, repr(str(generated_locomo.questions_file)))
    exec(compile(code, "README.md", "exec"), ns)  # noqa: S102  (the README example, run as written)
    out = capsys.readouterr().out
    # the example asks the first single-hop question the generator planted in the first conversation
    cid = generated_locomo.conversation_ids()[0]
    asked = generated_locomo.asked("single_hop", cid)[0]
    assert (ns["conversation"], ns["question"]) == (cid, asked["question"])
    assert f"{cid} {asked['question']}" in out

    items = ns["items"]
    assert 1 <= len(items) <= 5 and all(isinstance(i, MemoryItem) for i in items)
    known = turn_ids_of(synth_store_dir, cid)
    assert all(i.source_turn_ids and set(i.source_turn_ids) <= known for i in items)
    # the turn that states the answer is among the evidence, and so is the answer
    assert set(asked["evidence_turn_ids"]) <= {t for i in items for t in i.source_turn_ids}
    assert any(asked["answer"].lower() in i.text.lower() for i in items)

    reply = ns["reply"]
    assert isinstance(reply, MemoryAnswer)
    assert reply.answer.strip() and reply.evidence
    assert reply.usage.calls == 0 and reply.errors == []  # rules backend: no LLM, no fallback
    assert reply.answer in out and f"expected: {asked['answer']}" in out
    assert reply.asked_at == last_day(synth_store_dir, cid)

    events = ns["events"]
    assert isinstance(events, pa.Table) and "embedding" not in events.column_names
    assert events.num_rows > 0 and set(events.column("type").to_pylist()) == {"event"}
    assert f"{events.num_rows} events in the 30 days up to {reply.asked_at}" in out


# --------------------------------------------------------------------------------------------
# The openai backend, against the fake server
# --------------------------------------------------------------------------------------------
def llm_config(server) -> LycheeConfig:
    return load_config(
        REPO / "configs" / "local.yaml",
        ["llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model", "llm.timeout_s=30", "llm.max_retries=0"],
    )


def test_answer_through_the_llm_is_two_calls_and_reports_their_usage(synth_store_dir, generated_locomo, cid, fake_openai):
    question = month_question(generated_locomo, cid).question  # "When did <person> <event> in <Month>?"
    asked_at = last_day(synth_store_dir, cid)
    with Memory.open(synth_store_dir, llm_config(fake_openai)) as m:
        reply = m.answer(cid, question)
        reqs = fake_openai.requests
        assert [r["schema_name"] for r in reqs] == ["QueryPlan", "AnswerOutput"]
        total = fake_openai.total_usage()
        assert (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (total["prompt_tokens"], total["completion_tokens"])
        assert reply.usage.prompt_tokens > 0 and reply.usage.completion_tokens > 0
        assert reply.usage.calls == 2 and reply.errors == []
        # the plan and the answer are the model's, and both prompts are dated after the conversation
        assert reply.plan.model_dump() == QueryPlan.model_validate_json(reqs[0]["reply"]).model_dump()
        assert reply.answer == json.loads(reqs[1]["reply"])["answer"] != ""
        # asked on the day of the conversation's last turn
        assert f"Question date: {asked_at}" in reqs[0]["messages"][1]["content"]
        answer_prompt = reqs[1]["messages"][1]["content"]
        assert f"Question date: {asked_at}" in answer_prompt  # a LoCoMo-format archive: LoCoMo's answer prompt
        assert reply.evidence and " ".join(reply.evidence[0].text.split()) in answer_prompt

        # A failed plan falls back to rules and says so; a second call on the same Memory works
        # (each call had its own loop and client), and usage still matches the server.
        fake_openai.reset()
        fake_openai.set_faults(schedule=["invalid", "invalid"])  # plan + its repair: both invalid
        again = m.answer(cid, question)
        assert [r["schema_name"] for r in fake_openai.requests] == ["QueryPlan", "QueryPlan", "AnswerOutput"]
        assert len(again.errors) == 1 and again.errors[0].startswith("plan: ")
        assert again.plan.routes and again.plan.routes[0].time_window is not None  # the rules plan
        total = fake_openai.total_usage()
        assert (again.usage.prompt_tokens, again.usage.completion_tokens) == (total["prompt_tokens"], total["completion_tokens"])
        assert again.usage.calls == 3


# --------------------------------------------------------------------------------------------
# records(): filters and parameter binding
# --------------------------------------------------------------------------------------------
def month_bounds(day: dt.date) -> tuple[dt.date, dt.date]:
    first = day.replace(day=1)
    return first, (first + dt.timedelta(days=32)).replace(day=1) - dt.timedelta(days=1)


@pytest.fixture(scope="module")
def stored(synth_store_dir, cid):
    """`cid`'s records straight from Parquet, the day each turn was said, and a calendar month
    holding records with a time, records without one (in it by a source turn said in it), and
    not every record: (rows, said, first day, last day)."""
    rows = duckdb.sql(
        f"select record_id, type, time_start, time_end, source_turn_ids from read_parquet('{synth_store_dir}/records/*.parquet') "
        "where conversation_id = ?", params=[cid]
    ).fetchall()
    said = dict(duckdb.sql(
        f"select turn_id, cast(timestamp as date) from read_parquet('{synth_store_dir}/turns/*.parquet') where conversation_id = ?",
        params=[cid],
    ).fetchall())
    for lo, hi in sorted({month_bounds(d) for d in said.values()}):
        timed, untimed = in_window(rows, said, lo, hi)
        if timed and untimed and len(timed | untimed) < len(rows):
            return rows, said, lo, hi
    raise AssertionError(f"no month of {cid} holds timed and untimed records and not all of them")


def in_window(rows, said, lo: dt.date, hi: dt.date) -> tuple[set[str], set[str]]:
    """Retrieval's window rule, in plain Python: [time_start, time_end] overlaps [lo, hi], or,
    for a record that states no time, one of its source turns was said in it."""
    timed = {r[0] for r in rows if (r[2] or r[3]) is not None and (r[2] or r[3]) <= hi and (r[3] or r[2]) >= lo}
    untimed = {r[0] for r in rows if (r[2] or r[3]) is None and any(lo <= said[t] <= hi for t in r[4])}
    return timed, untimed


def test_records_filter_by_type_and_time_like_a_direct_query(memory, cid, stored):
    rows, said, lo, hi = stored
    everything = memory.records(cid)
    assert everything.num_rows == len(rows) > 0
    assert set(everything.column("record_id").to_pylist()) == {r[0] for r in rows}

    events = memory.records(cid, type="event")
    expected = {r[0] for r in rows if r[1] == "event"}
    assert 0 < len(expected) < len(rows)
    assert set(events.column("record_id").to_pylist()) == expected and events.num_rows == len(expected)

    month = memory.records(cid, since=lo.isoformat(), until=hi.isoformat())
    timed, untimed = in_window(rows, said, lo, hi)
    in_month = timed | untimed
    assert set(month.column("record_id").to_pylist()) == in_month
    # month shorthand and date objects mean the same window; type and window combine
    ym = lo.isoformat()[:7]
    assert memory.records(cid, since=ym, until=ym).column("record_id").to_pylist() == month.column("record_id").to_pylist()
    by_dates = memory.records(cid, since=lo, until=dt.datetime(hi.year, hi.month, hi.day, 12))
    assert by_dates.column("record_id").to_pylist() == month.column("record_id").to_pylist()
    month_events = memory.records(cid, type="event", since=lo.isoformat(), until=hi.isoformat())
    assert set(month_events.column("record_id").to_pylist()) == in_month & expected
    with pytest.raises(ValueError, match="is after until"):
        memory.records(cid, since=(hi + dt.timedelta(days=1)).isoformat(), until=lo.isoformat())


def test_hostile_input_is_bound_never_formatted(memory, cid, stored):
    _, _, lo, hi = stored
    with pytest.raises(StoreError, match=re.escape(repr(HOSTILE))):
        memory.records(HOSTILE)
    with pytest.raises(StoreError):
        memory.search(HOSTILE, "anything")
    # below the known-id check the id is a bound parameter: it matches no row, not every row
    assert select_records(memory.store, HOSTILE).num_rows == 0
    assert select_records(memory.store, cid).num_rows > 0
    with pytest.raises(ValueError, match="type must be one of"):
        memory.records(cid, type="event' OR 1=1 --")
    with pytest.raises(ValueError, match="since must be an ISO date"):
        memory.records(cid, since="June' OR 1=1 --")
    # only the parsed date is bound: a trailing payload after an ISO date is ignored, not run
    tail = memory.records(cid, since=f"{lo.isoformat()}' OR 1=1 --", until=hi.isoformat())
    assert tail.column("record_id").to_pylist() == memory.records(cid, since=lo.isoformat(), until=hi.isoformat()).column("record_id").to_pylist()
    assert 0 < tail.num_rows < memory.records(cid).num_rows


def test_unknown_conversation_names_the_store_and_known_ids(memory, synth_store_dir, generated_locomo):
    (archive,) = generated_locomo.files
    archive_ids = [s["sample_id"] for s in json.loads(archive.read_text())]
    assert memory.conversations() == archive_ids == generated_locomo.conversation_ids() and len(archive_ids) == 3
    with pytest.raises(StoreError) as err:
        memory.answer("no-such-conversation", generated_locomo.questions[0]["question"])
    msg = str(err.value)
    assert "'no-such-conversation'" in msg and str(synth_store_dir) in msg and archive_ids[0] in msg and len(msg.splitlines()) == 1


# --------------------------------------------------------------------------------------------
# The same path as evaluate
# --------------------------------------------------------------------------------------------
def test_search_selects_what_evaluate_selects(memory, synth_store_dir, cid, asked):
    cfg = LycheeConfig()
    asked_at = last_day(synth_store_dir, cid)
    items = [
        QAItem(conversation_id=cid, question_id=f"q{i}", question=q, gold="", category="single_hop",
               evidence_turn_ids=[], question_date=asked_at)
        for i, q in enumerate(asked)
    ]
    plan_stage = PlanStage(cfg, str(synth_store_dir))
    plan_stage.setup()
    plan_stage.process_batch(items)
    assert items[0].plan.routes[0].time_window is not None  # the month question is time-routed
    embedder = Embedder(cfg.embedding)
    retrieve_stage = RetrieveStage(cfg.with_overrides({"evaluate": {"baselines": []}}), str(synth_store_dir), embedder)
    retrieve_stage.setup()
    retrieve_stage.process_batch(items)
    retriever = Retriever(retrieve_stage.store, cfg.retrieval, embedder.encode)
    for item in items:
        assert item.status == "ok", item.error
        found = memory.recall(cid, item.question)
        assert found.asked_at == asked_at
        assert found.plan.model_dump() == item.plan.model_dump()
        assert [i.key for i in found.items if i.kind == "record"] == item.retrieved_record_ids != []
        assert list(dict.fromkeys(t for i in found.items for t in i.source_turn_ids)) == item.retrieved_turn_ids
        # search is that selection (default budget = the config's), cut to k
        keys = [i.key for i in found.items]
        assert [i.key for i in memory.search(cid, item.question)] == keys
        assert [i.key for i in memory.search(cid, item.question, k=2)] == keys[:2]
        # each item's score is its fused score
        fused = dict(retriever.retrieve(cid, item.plan, item.question).fused)
        assert all(i.score == pytest.approx(fused[i.key]) and i.score > 0 for i in found.items)
    # a smaller budget selects less
    small = memory.search(cid, asked[1], budget_tokens=200)
    assert 0 < len(small) < len(memory.search(cid, asked[1]))


def test_sync_api_works_from_inside_an_event_loop(memory, cid, asked):
    """An async agent (or a notebook) calls the sync API from a running loop: no nested
    asyncio.run error, and the same selection as a plain call."""
    question = asked[1]
    plain = [i.key for i in memory.search(cid, question)]

    async def agent_step():
        return memory.search(cid, question), memory.answer(cid, question)

    items, reply = asyncio.run(agent_step())
    assert [i.key for i in items] == plain and reply.answer.strip()


def test_a_closed_memory_says_so(synth_store_dir, cid):
    m = Memory.open(synth_store_dir)
    m.close()
    m.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        m.search(cid, "anything")
