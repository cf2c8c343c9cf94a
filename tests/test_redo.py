"""`--redo error,degraded,pending` (issue 13): conversations that ended in those states are
processed again and their old rows are replaced; without it only `pending` ones are redone; an
unknown status is one sentence; a run with too many degraded segments exits non-zero.

Real parts: the chat reader, MiniLM, the segmenter, the encoder over HTTP (the fake server), a
local Ray, and the store read back through DuckDB. The `error` state is made by committing an
error row for a stored conversation, as a run that crashed on it would have.
"""

from __future__ import annotations

import json
import re

from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.ingest.job import run_ingest
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter

from .conftest import REPO

LOCAL = REPO / "configs" / "local.yaml"
TOPICS = {"a": "tomatoes in the garden", "b": "a trip to Oslo", "c": "learning the cello"}
N_TURNS = 6


def write_archive(folder):
    folder.mkdir()
    for cid, topic in TOPICS.items():
        turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i} of {cid.upper()} about {topic}, day {i}."} for i in range(N_TURNS)]
        (folder / f"{cid}.jsonl").write_text(json.dumps({"conversation_id": cid, "turns": turns}) + "\n")
    return folder


def overrides(server, *more):
    return ["ray.progress_bars=false", "llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model",
            "llm.timeout_s=5", "llm.max_retries=1", "llm.breaker_failures=1", "llm.breaker_cooldown_s=3600",
            "encoder.max_tokens=6000", *more]


def cli(capsys, server, inp, out, *args) -> tuple[int, str, list[str]]:
    sets = [a for s in overrides(server) for a in ("--set", s)]
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(out), *sets, *args])
    captured = capsys.readouterr()
    return rc, captured.out, [line for line in captured.err.splitlines() if line.startswith("lychee-ray ingest: ")]


def table(con, sql):
    return con.execute(sql).fetchall()


def statuses(out) -> dict[str, str]:
    return dict(table(open_store(str(out)).con, "select conversation_id, status from conversations"))


def asked(server) -> set[str]:
    """The conversations the server was asked to encode (the letter in each turn line)."""
    return {m.group(1).lower() for r in server.requests for m in re.finditer(r"Message \d+ of ([ABC]) ", r["messages"][1]["content"])}


def test_redo_replaces_the_rows_of_error_degraded_and_pending_conversations(fake_openai, ray_local, tmp_path, capsys):
    inp, out = write_archive(tmp_path / "in"), tmp_path / "store"

    # 1. every reply is invalid, and so is its repair: every segment degrades, the run fails
    fake_openai.set_faults(p_invalid=1.0)
    rc, _, failures = cli(capsys, fake_openai, inp, out)
    assert statuses(out) == {"a": "degraded", "b": "degraded", "c": "degraded"}
    assert rc == 1 and len(failures) == 1
    assert re.fullmatch(r"lychee-ray ingest: (\d+) of \1 segments \(100%\) fell back to rules records \(degraded\), more than "
                        r"ingest\.max_degraded_fraction=0\.2; .*--redo degraded re-encodes them\.", failures[0]), failures
    degraded_before = dict(table(open_store(str(out)).con, "select conversation_id, count(*) from records where degraded group by 1"))
    assert set(degraded_before) == set(TOPICS)

    # 2. a plain rerun redoes nothing: degraded conversations stay as they are
    fake_openai.set_faults(p_invalid=0.0)
    fake_openai.reset()
    rc, summary, failures = cli(capsys, fake_openai, inp, out)
    assert fake_openai.requests == [] and "already complete: 3" in summary
    assert statuses(out) == {"a": "degraded", "b": "degraded", "c": "degraded"}

    # 3. c is redone while the endpoint is down: pending, and its degraded rows are gone
    fake_openai.set_faults(outage_after=0, outage="refuse")
    cfg = load_config(LOCAL, overrides(fake_openai))
    summary = run_ingest(cfg, str(inp / "c.jsonl"), str(out), redo=("degraded",))
    assert summary.by_status == {"pending": 1}
    assert [f for f in summary.failures if "1 conversation is pending" in f and fake_openai.base_url in f]
    # 4. b ends in error, as a run that crashed on it would have recorded it
    StoreWriter(str(out), cfg).write_batch([
        Conversation(conversation_id="b", source="chat", source_file=str(inp / "b.jsonl"), status="error", error="organize: RuntimeError: crashed")
    ])
    assert statuses(out) == {"a": "degraded", "b": "error", "c": "pending"}
    con = open_store(str(out)).con
    assert table(con, "select conversation_id, count(*) from records where degraded group by 1 order by 1") == [("a", degraded_before["a"])]
    assert table(con, "select distinct conversation_id from turns order by 1") == [("a",)]
    assert table(con, "select distinct conversation_id from errors where kind = 'llm_failure' order by 1") == [("a",)]

    # 5. --redo error,degraded,pending against the live endpoint: all three again, rows replaced
    fake_openai.set_faults(outage_after=None)
    fake_openai.reset()
    rc, summary, failures = cli(capsys, fake_openai, inp, out, "--redo", "error,degraded,pending")
    assert (rc, failures) == (0, [])
    assert asked(fake_openai) == set(TOPICS) and all(r["status"] == 200 for r in fake_openai.requests)
    assert statuses(out) == {"a": "ok", "b": "ok", "c": "ok"}
    con = open_store(str(out)).con
    assert table(con, "select conversation_id, count(*) from conversations group by 1 order by 1") == [(c, 1) for c in sorted(TOPICS)]
    assert table(con, "select conversation_id, count(*), count(distinct turn_id) from turns group by 1 order by 1") == [
        (c, N_TURNS, N_TURNS) for c in sorted(TOPICS)]
    assert table(con, "select count(*) from records where degraded or backend = 'rules'") == [(0,)]
    assert table(con, "select count(*) from errors") == [(0,)]
    assert table(con, "select conversation_id, degraded_segments from build_stats order by 1") == [(c, 0) for c in sorted(TOPICS)]
    segments = dict(table(con, "select conversation_id, count(*) from segments group by 1"))
    assert len(fake_openai.requests) == sum(segments.values())  # one call per segment: nothing else was redone
    assert summary.strip().splitlines()[-1].strip() == f"turns: {3 * N_TURNS} in = {3 * N_TURNS} stored + 0 recorded in errors + 0 in duplicate rows + 0 pending"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["n_conversations_by_status"] == {"ok": 3}


def test_an_unknown_redo_status_is_one_sentence_listing_the_allowed_ones(tmp_path, capsys):
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(tmp_path), "--out", str(tmp_path / "out"), "--redo", "error,broken,ok"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err == ("lychee-ray ingest: --redo: unknown status 'broken', 'ok'; the statuses that can be redone are "
                   "error, degraded, pending.")
    assert not (tmp_path / "out").exists()  # refused before any work
