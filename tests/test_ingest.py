"""The ingest job end to end on a real local Ray, the real MiniLM model and DuckDB over the
Parquet it writes: the session's generated archive (tests/support/generated.py: LoCoMo's
format, chit-chat and work conversations) with the rules backend, bad input, and kill -9 + resume."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from lychee_ray.config import load_config
from lychee_ray.ingest.job import run_ingest
from lychee_ray.store.reader import open_store
from lychee_ray.synth import SynthParams, write_archive

from .conftest import REPO
from .support.generated import generate
from .support.kill import kill_session, session_pids


LOCAL = REPO / "configs" / "local.yaml"


def local_cfg(*overrides):
    return load_config(LOCAL, ["ray.progress_bars=false", *overrides])


@pytest.fixture(scope="module")
def counts(generated_locomo) -> tuple[int, int, int]:
    """(conversations, turns, questions) the generator wrote, from its labels."""
    labels = generated_locomo.labels["conversations"]
    return len(labels), sum(c["turns"] for c in labels), len(generated_locomo.questions)


def test_every_input_turn_is_in_turns_and_in_exactly_one_segment(synth_store_dir, generated_locomo, counts):
    out = synth_store_dir
    n_conversations, n_turns, _ = counts
    raw = json.loads((generated_locomo.archive / "locomo.json").read_text())
    assert len(raw) == n_conversations and sum(len(v) for s in raw for k, v in s["conversation"].items() if isinstance(v, list)) == n_turns
    n = duckdb.sql(f"select count(*) from read_parquet('{out}/turns/**/*.parquet')").fetchall()[0][0]
    assert n == n_turns
    con = open_store(str(out)).con
    assert con.execute("select count(*), sum(n_turns) from conversations where status = 'ok'").fetchone() == (n_conversations, n_turns)
    # each turn id listed in exactly one segment, and that segment is the turn's segment_id
    dup = con.execute(
        "select count(*) from (select conversation_id, t, count(*) c from (select conversation_id, unnest(turn_ids) t from segments) group by 1, 2 having c != 1)"
    ).fetchone()[0]
    assert dup == 0
    covered = con.execute("select count(*) from (select conversation_id, unnest(turn_ids) t from segments)").fetchone()[0]
    assert covered == n_turns
    mismatch = con.execute(
        """select count(*) from turns t join (select conversation_id, segment_id, unnest(turn_ids) turn_id from segments) s
           using (conversation_id, turn_id) where t.segment_id != s.segment_id"""
    ).fetchone()[0]
    assert mismatch == 0


def test_segments_span_several_exchanges_without_fragmentation(synth_store_dir):
    """The paper's ~5.8 exchanges per segment is a LoCoMo figure (benchmarks/dev_recall.py
    measures it there); generated sessions here hold 6 exchanges each, so here: segments of
    several exchanges on average, almost no single-exchange ones, none over the token cap."""
    con = open_store(str(synth_store_dir)).con
    mean, singles, n = con.execute(
        "select avg(n_exchanges), avg(case when n_exchanges = 1 then 1.0 else 0 end), count(*) from segments"
    ).fetchone()
    print(f"\nsegments: {n}, mean {mean:.2f} exchanges, singles {singles:.3f}")
    assert 3.0 <= mean <= 8.0, mean
    assert singles < 0.12, singles
    assert con.execute("select max(n_tokens) from segments").fetchone()[0] <= 2 * 1024


def test_records_cite_real_turns_and_carry_embeddings(synth_store_dir, counts):
    n_conversations, _, n_questions = counts
    con = open_store(str(synth_store_dir)).con
    orphans = con.execute(
        """select count(*) from (select conversation_id, unnest(source_turn_ids) turn_id from records) r
           anti join turns t using (conversation_id, turn_id)"""
    ).fetchone()[0]
    assert orphans == 0
    assert con.execute("select count(*) from records where embedding is null").fetchone()[0] == 0
    assert con.execute("select count(distinct backend) , any_value(backend) from records").fetchone() == (1, "rules")
    kinds = dict(con.execute("select kind, count(*) from nodes group by 1").fetchall())
    assert set(kinds) == {"entity", "topic", "entity_topic", "time", "event_frame"}
    # build_stats: one row per conversation, rules = no LLM calls but estimated tokens
    stats = con.execute("select count(*), sum(llm_calls), min(encode_units), min(est_prompt_tokens) from build_stats").fetchone()
    assert stats[0] == n_conversations and stats[1] == 0 and stats[2] > 0 and stats[3] > 0
    assert con.execute("select count(*) from questions").fetchone()[0] == n_questions


def test_rerun_skips_complete_conversations(synth_store_dir, generated_locomo, counts, ray_local, tmp_path):
    out = tmp_path / "store"
    shutil.copytree(synth_store_dir, out)  # the session's store stays as it was built
    before = open_store(str(out)).con.execute("select count(*) from records").fetchone()[0]
    again = run_ingest(local_cfg(), str(generated_locomo.archive), str(out))
    assert again.resumed == counts[0] and again.conversations == 0
    assert open_store(str(out)).con.execute("select count(*) from records").fetchone()[0] == before


def write_jsonl(path: Path, objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))


def test_bad_input_is_recorded_and_the_rest_ingested(tmp_path, ray_local):
    inp = tmp_path / "in"
    inp.mkdir()
    conv = lambda cid, n=4: {"conversation_id": cid, "turns": [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i} about gardening and tomatoes."} for i in range(n)]}
    (inp / "a.jsonl").write_text(json.dumps(conv("c1")) + "\n{broken line\n" + json.dumps({"conversation_id": "empty", "turns": []}) + "\n")
    write_jsonl(inp / "b.jsonl", [conv("c1", 6), conv("c2")])  # c1 again: a duplicate id
    (inp / "c.json").write_text("not json at all")
    (inp / "d.jsonl").write_bytes(json.dumps(conv("c3")).encode().replace(b"gardening", b"garden\xffing") + b"\n")
    out = tmp_path / "out"
    summary = run_ingest(local_cfg("store.conversations_per_file=2"), str(inp), str(out))
    store = open_store(str(out))
    rows = dict(store.con.execute("select conversation_id, status from conversations").fetchall())
    assert rows["c1"] == "ok" and rows["c2"] == "ok" and rows["c3"] == "ok" and rows["empty"] == "empty"
    dups = [cid for cid, st in rows.items() if st == "duplicate"]
    assert len(dups) == 1 and dups[0].startswith("c1#dup-")
    errors = store.con.execute("select kind, source_file, line from errors").fetchall()
    kinds = {k for k, _, _ in errors}
    assert {"bad_json", "duplicate_id", "bad_utf8"} <= kinds
    assert (("bad_json", str(inp / "a.jsonl"), 2) in errors) and any(k == "bad_json" and f.endswith("c.json") for k, f, _ in errors)
    # nothing silently dropped: the duplicate's turns are counted on its row, not ingested twice
    kept = store.con.execute("select count(*) from turns where conversation_id = 'c1'").fetchone()[0]
    dup_turns = store.con.execute("select n_turns from conversations where status = 'duplicate'").fetchone()[0]
    assert {kept, dup_turns} == {4, 6}  # whichever copy won, both copies' turns are accounted for
    assert summary.by_status["error"] == 2


def test_kill_minus_9_then_resume_gives_complete_duplicate_free_tables(tmp_path, ray_local):
    """A driver killed mid-run, rerun: complete tables, no duplicate rows, the same record ids as
    a run that was never interrupted.

    The input is 8 generated conversations (LoCoMo's format, 3 sessions each), one file each. A
    local run commits its conversations in one burst near its end, 0.05-0.1 s apart when they are
    this short (measured on 3 short conversations: all committed within 0.17 s), so 3
    conversations leave too small a window to kill the driver between two commits."""
    inp = tmp_path / "in"
    inp.mkdir()
    generated = generate(tmp_path / "generated", "locomo", conversations=8, sessions=3)
    convs = json.loads((generated.archive / "locomo.json").read_text())
    assert len({c["sample_id"] for c in convs}) == 8
    for conv in convs:
        (inp / f"{conv['sample_id']}.json").write_text(json.dumps([conv]))
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "lychee_ray.cli", "ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(killed),
           "--set", "store.conversations_per_file=1", "--set", "ray.progress_bars=false", "--set", "ray.num_cpus=2"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    log_path = tmp_path / "killed-run.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, stdout=log_file, stderr=subprocess.STDOUT)
    commits = killed / "_commits"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if commits.exists() and any(commits.glob("*.json")):
            break
        time.sleep(0.02)
    assert proc.poll() is None, "ingest ended before it could be killed: " + log_path.read_text(errors="replace")[-3000:]
    kill_session(proc)  # the driver and every Ray process it started: an orphan could still commit
    committed_before = len(list((killed / "_commits").glob("*.json")))
    assert 1 <= committed_before < len(convs)

    resumed = run_ingest(local_cfg("store.conversations_per_file=1"), str(inp), str(killed))
    assert resumed.resumed == committed_before
    clean = tmp_path / "clean"
    run_ingest(local_cfg("store.conversations_per_file=1"), str(inp), str(clean))

    a, b = open_store(str(killed)).con, open_store(str(clean)).con
    for table, key in (("conversations", "conversation_id"), ("turns", "conversation_id, turn_id"), ("segments", "conversation_id, segment_id"), ("records", "record_id"), ("nodes", "node_id")):
        n, distinct = a.execute(f"select count(*), count(distinct ({key})) from {table}").fetchone()
        assert n == distinct, f"duplicate rows in {table}"
        assert n == b.execute(f"select count(*) from {table}").fetchone()[0], table
    ids_a = {r[0] for r in a.execute("select record_id from records").fetchall()}
    ids_b = {r[0] for r in b.execute("select record_id from records").fetchall()}
    assert ids_a == ids_b
    # no debris of the killed run is visible as data
    n_files = duckdb.sql(f"select count(*) from read_parquet('{killed}/turns/*.parquet')").fetchall()[0][0]
    assert n_files == b.execute("select count(*) from turns").fetchone()[0]


def test_a_killed_drivers_workers_stop_committing_and_its_ray_goes_with_it(tmp_path, ray_local):
    """kill -9 of the driver alone, in the middle of the writes (issue 31): its workers made no
    more than the commits already under way (they had gone from 6 to 24 within 30 s), and no
    process of its local Ray is left; a rerun then completes the store."""
    n = 40
    archive = write_archive(tmp_path / "synth", SynthParams(conversations=n, sessions=2, turns_per_session=6, style="chitchat"))
    inp, out = archive.out / "archive", tmp_path / "killed"
    cmd = [sys.executable, "-m", "lychee_ray.cli", "ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(out),
           "--set", "store.conversations_per_file=1", "--set", "ray.progress_bars=false", "--set", "ray.num_cpus=2"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    log_path = tmp_path / "killed-run.log"
    commits = out / "_commits"
    count = lambda: len(list(commits.glob("*.json"))) if commits.exists() else 0  # noqa: E731
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, start_new_session=True, stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 600
        while time.time() < deadline and proc.poll() is None and count() < 2:
            time.sleep(0.02)
        assert proc.poll() is None, "ingest ended before it could be killed: " + log_path.read_text(errors="replace")[-3000:]
        os.kill(proc.pid, 9)  # the driver only, as an operator's kill -9 of the job does
        proc.wait()
        at_kill = count()
        assert at_kill < n, "every batch was committed before the kill"
        deadline = time.time() + 30
        while time.time() < deadline and session_pids(proc.pid):
            time.sleep(0.5)
        left = session_pids(proc.pid)
        time.sleep(10)  # what an orphaned worker would still commit
        after = count()
    finally:
        kill_session(proc)
    assert after - at_kill <= 2, f"{after - at_kill} commits after the driver died ({at_kill} -> {after})"
    assert left == [], f"{len(left)} processes of the killed run are still alive 30 s later"
    rerun = run_ingest(local_cfg("store.conversations_per_file=1"), str(inp), str(out))
    assert rerun.resumed == after and rerun.conversations == n - after
    con = open_store(str(out)).con
    assert con.execute("select count(*), count(distinct conversation_id) from conversations").fetchone() == (n, n)
