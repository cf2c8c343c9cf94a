"""`lychee-ray query` as a person runs it (a subprocess on the generated store, asked questions built
from the generator's labels; tests/support/generated.py): it prints
records with type, time, entities and source turns; `--answer` adds the answer and its usage,
`--json` prints one JSON object; bad input is one sentence and exit code 2. The command is a thin
wrapper over `lychee_ray.Memory` (tests/test_memory.py tests the API itself)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from lychee_ray import Memory
from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.tables import RECORD_TYPES

from .conftest import REPO
from .support.asked import chitchat_ids, month_question


LOCAL = str(REPO / "configs" / "local.yaml")


@pytest.fixture(scope="module")
def asked(generated_locomo):
    """A question about the first conversation between friends that the planner routes through a
    month's window, and the day of that conversation's last turn (the day it is asked on)."""
    return month_question(generated_locomo, chitchat_ids(generated_locomo)[0])


def last_day(store, cid: str) -> str:
    return max(t["timestamp"] for t in turns_of(store, cid).values()).date().isoformat()


def turns_of(store, cid: str) -> dict[str, dict]:
    return {t["turn_id"]: t for t in pq.read_table(store / "turns").to_pylist() if t["conversation_id"] == cid}


def run_query(store, conversation: str, question: str, *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lychee_ray.cli", "query", "--config", LOCAL, "--store", str(store),
           "--conversation", conversation, "-k", "5", *flags, question]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    return subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def assert_one_sentence(proc: subprocess.CompletedProcess, *must_contain: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("lychee-ray query: ") and err.endswith("."), err
    for text in must_contain:
        assert text in err, err
    assert proc.stdout == ""


def test_missing_store_path(tmp_path):
    missing = tmp_path / "no-such-store"
    assert_one_sentence(run_query(missing, "any-conversation", "Where did the parcel go?"), str(missing), "does not exist")


def test_store_of_another_schema_version(synth_store_dir, asked, tmp_path):
    copy = tmp_path / "old-store"
    shutil.copytree(synth_store_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["schema_version"] = 0
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert_one_sentence(run_query(copy, asked.conversation_id, asked.question), "schema version 0", str(copy))


def test_unknown_conversation(synth_store_dir, generated_locomo, asked):
    proc = run_query(synth_store_dir, "no-such-conversation", asked.question)
    # names the id and lists the known ones
    assert_one_sentence(proc, "'no-such-conversation'", *generated_locomo.conversation_ids())


def test_query_prints_records_with_type_time_entities_and_source_turns(synth_store_dir, asked):
    cid, question = asked.conversation_id, asked.question
    proc = run_query(synth_store_dir, cid, question)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == f"{cid}: {question}"
    assert out[1] == f"asked at: {last_day(synth_store_dir, cid)}"  # "in <Month>" is that month before it
    assert f'"time_window":{{"start":"{asked.start}","end":"{asked.end}"}}' in out[2]
    items = [line for line in out if line[:1].isdigit() and ". [" in line]
    assert 1 <= len(items) <= 5
    assert all(line.split(". [", 1)[1].split("]")[0] in RECORD_TYPES + ("raw turn",) for line in items)
    times = [line.strip().removeprefix("time: ") for line in out if line.strip().startswith("time: ")]
    # the time-routed question keeps to its window: every shown time overlaps the month
    assert times and all(t.split("..")[0] <= asked.end and t.split("..")[-1] >= asked.start for t in times), times
    assert any(line.strip().startswith("entities: ") and asked.subject in line for line in out)
    # each "<-" line is a real turn of the conversation, quoted from the store; the turn that
    # tells of the event is one of them
    turns = turns_of(synth_store_dir, cid)
    sources = [line.strip()[3:] for line in out if line.strip().startswith("<- ")]
    assert asked.evidence_turn_id in {src.split(" ", 1)[0] for src in sources}
    for src in sources:
        tid, speaker, text = src.split(" ", 1)[0], src.split(" ", 2)[1].rstrip(":"), src.split(": ", 1)[1]
        assert turns[tid]["speaker"] == speaker and turns[tid]["text"].startswith(text)


def test_query_json_is_one_object_with_the_items(synth_store_dir, asked):
    cid, question = asked.conversation_id, asked.question
    proc = run_query(synth_store_dir, cid, question, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # the whole stdout is one JSON object
    assert (out["question"], out["conversation_id"], out["asked_at"]) == (question, cid, last_day(synth_store_dir, cid))
    assert out["plan"]["routes"][0]["time_window"] == {"start": asked.start, "end": asked.end}
    assert "answer" not in out and "usage" not in out
    items = out["items"]
    assert 1 <= len(items) <= 5 and any(asked.evidence_turn_id in i["source_turn_ids"] for i in items)
    turns = turns_of(synth_store_dir, cid)
    for i in items:
        assert set(i) == {"text", "type", "time", "said", "entities", "source_turn_ids", "score", "kind", "key",
                          "valid_from", "valid_until", "superseded_by", "conflicts_with", "note"}
        assert i["kind"] in ("record", "turn") and i["score"] > 0
        assert i["source_turn_ids"] and all(t in turns for t in i["source_turn_ids"])
    # the same items Memory gives an agent, in the same order
    with Memory.open(synth_store_dir, load_config(LOCAL)) as memory:
        assert [i.key for i in memory.search(cid, question, budget_tokens=None, k=5)] == [i["key"] for i in items]


def test_query_answer_prints_the_answer_and_its_usage(synth_store_dir, generated_locomo, asked):
    single_hop = generated_locomo.asked("single_hop", asked.conversation_id)[0]
    proc = run_query(synth_store_dir, asked.conversation_id, single_hop["question"], "--answer")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    answer = [line.removeprefix("answer: ") for line in lines if line.startswith("answer: ")]
    assert len(answer) == 1 and answer[0].strip()
    assert "usage: 0 prompt + 0 completion tokens in 0 LLM calls" in lines  # rules backend
    assert any(line[:1].isdigit() and ". [" in line for line in lines)  # the items are still shown
    assert not any(line.startswith("llm error") for line in lines)


def test_query_answer_json_in_process(synth_store_dir, generated_locomo, capsys):
    # the other conversation between friends, and its multi-hop question
    cid = chitchat_ids(generated_locomo)[1]
    question = generated_locomo.asked("multi_hop", cid)[0]["question"]
    rc = main(["query", "--config", LOCAL, "--store", str(synth_store_dir), "--conversation", cid,
               "-k", "3", "--answer", "--json", question])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"].strip() and 1 <= len(out["items"]) <= 3
    assert out["usage"]["calls"] == 0 and out["errors"] == []
