"""`lychee-ray query` as a person runs it (a subprocess on a real store of the LoCoMo fixture): it prints
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

from lychee_ray import Memory
from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.tables import RECORD_TYPES

from .conftest import REPO

LOCAL = str(REPO / "configs" / "local.yaml")


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
    assert_one_sentence(run_query(missing, "conv-26", "Where did Caroline move from?"), str(missing), "does not exist")


def test_store_of_another_schema_version(locomo_dev_store, tmp_path):
    copy = tmp_path / "old-store"
    shutil.copytree(locomo_dev_store, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["schema_version"] = 0
    (copy / "manifest.json").write_text(json.dumps(manifest))
    assert_one_sentence(run_query(copy, "conv-26", "Where did Caroline move from?"), "schema version 0", str(copy))


def test_unknown_conversation(locomo_dev_store):
    proc = run_query(locomo_dev_store, "conv-999", "Where did Caroline move from?")
    assert_one_sentence(proc, "'conv-999'", "conv-26")  # names the id and lists the known ones


def test_query_prints_records_with_type_time_entities_and_source_turns(locomo_dev_store):
    question = "When did Melanie go camping in June?"
    proc = run_query(locomo_dev_store, "conv-26", question)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == f"conv-26: {question}"
    assert out[1] == "asked at: 2023-07-06"  # the fixture's last session of conv-26: "June" is June 2023
    assert '"time_window":{"start":"2023-06-01","end":"2023-06-30"}' in out[2]
    items = [line for line in out if line[:1].isdigit() and ". [" in line]
    assert 1 <= len(items) <= 5 and any("camping" in line for line in items)
    assert all(line.split(". [", 1)[1].split("]")[0] in RECORD_TYPES + ("raw turn",) for line in items)
    times = [line.strip().removeprefix("time: ") for line in out if line.strip().startswith("time: ")]
    # the time-routed question keeps to its window: every shown time overlaps June 2023
    assert times and all(t.split("..")[0] <= "2023-06-30" and t.split("..")[-1] >= "2023-06-01" for t in times), times
    assert any(line.strip().startswith("entities: ") and "Melanie" in line for line in out)
    # each "<-" line is a real turn of conv-26, quoted from the store
    turns = {t["turn_id"]: t for t in pq.read_table(locomo_dev_store / "turns").to_pylist() if t["conversation_id"] == "conv-26"}
    sources = [line.strip()[3:] for line in out if line.strip().startswith("<- ")]
    assert sources
    for src in sources:
        tid, speaker, text = src.split(" ", 1)[0], src.split(" ", 2)[1].rstrip(":"), src.split(": ", 1)[1]
        assert turns[tid]["speaker"] == speaker and turns[tid]["text"].startswith(text)


def conv26_turns(store) -> dict[str, dict]:
    return {t["turn_id"]: t for t in pq.read_table(store / "turns").to_pylist() if t["conversation_id"] == "conv-26"}


def test_query_json_is_one_object_with_the_items(locomo_dev_store):
    question = "When did Melanie go camping in June?"
    proc = run_query(locomo_dev_store, "conv-26", question, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # the whole stdout is one JSON object
    assert (out["question"], out["conversation_id"], out["asked_at"]) == (question, "conv-26", "2023-07-06")
    assert out["plan"]["routes"][0]["time_window"] == {"start": "2023-06-01", "end": "2023-06-30"}
    assert "answer" not in out and "usage" not in out
    items = out["items"]
    assert 1 <= len(items) <= 5 and any("camping" in i["text"] for i in items)
    turns = conv26_turns(locomo_dev_store)
    for i in items:
        assert set(i) == {"text", "type", "time", "said", "entities", "source_turn_ids", "score", "kind", "key",
                          "valid_from", "valid_until", "superseded_by", "conflicts_with", "note"}
        assert i["kind"] in ("record", "turn") and i["score"] > 0
        assert i["source_turn_ids"] and all(t in turns for t in i["source_turn_ids"])
    # the same items Memory gives an agent, in the same order
    with Memory.open(locomo_dev_store, load_config(LOCAL)) as memory:
        assert [i.key for i in memory.search("conv-26", question, budget_tokens=None, k=5)] == [i["key"] for i in items]


def test_query_answer_prints_the_answer_and_its_usage(locomo_dev_store):
    proc = run_query(locomo_dev_store, "conv-26", "What did Caroline research?", "--answer")
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    answer = [line.removeprefix("answer: ") for line in lines if line.startswith("answer: ")]
    assert len(answer) == 1 and answer[0].strip()
    assert "usage: 0 prompt + 0 completion tokens in 0 LLM calls" in lines  # rules backend
    assert any(line[:1].isdigit() and ". [" in line for line in lines)  # the items are still shown
    assert not any(line.startswith("llm error") for line in lines)


def test_query_answer_json_in_process(locomo_dev_store, capsys):
    rc = main(["query", "--config", LOCAL, "--store", str(locomo_dev_store), "--conversation", "conv-30",
               "-k", "3", "--answer", "--json", "Why did Jon decide to start his dance studio?"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["answer"].strip() and 1 <= len(out["items"]) <= 3
    assert out["usage"]["calls"] == 0 and out["errors"] == []
