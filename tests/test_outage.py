"""An LLM outage is transient, not a model failure (issue 13): the client's circuit breaker stops
sending, the conversations it touched are `pending` with nothing of them committed and nothing
degraded, the run exits non-zero with one sentence naming the endpoint and the count, and the
next run against a live endpoint completes them.

Real parts: the LoCoMo reader (on the generated archive of test_encode_llm.cut_file), MiniLM,
the segmenter, the encoder over HTTP, a local Ray and the store read back through DuckDB. The endpoint is the fake server with
its outage fault: after N requests it closes connections without a reply, or stops listening.
"""

from __future__ import annotations

import copy
import json
import re

from lychee_ray.cli import main
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import conversation_rows, turns_in

from .conftest import REPO
from .test_encode_llm import (  # noqa: F401  (fixtures)
    cut_file,
    encode,
    llm_cfg,
    requests_by_segment,
    segmented,
)

LOCAL = REPO / "configs" / "local.yaml"
TABLES_OF_WORK = ("turns", "segments", "records", "nodes", "record_nodes", "build_stats", "questions")
LINE = re.compile(r"turns: (\d+) in (=|!=) (\d+) stored \+ (\d+) recorded in errors \+ (\d+) in duplicate rows \+ (\d+) pending$")


# --------------------------------------------------------------------------------------------
# The encoder alone: an outage inside one conversation
# --------------------------------------------------------------------------------------------
def test_an_outage_inside_a_conversation_leaves_it_pending_with_nothing_kept(segmented, fake_openai):
    conv = copy.deepcopy(next(c for c in segmented["segment"] if len(c.segments) >= 4))
    cid = conv.conversation_id
    cfg = llm_cfg(fake_openai, "llm.max_retries=1", "llm.breaker_failures=2", "llm.breaker_cooldown_s=3600")
    # seg 0 is answered; seg 1 gets a 500 on its try and on its retry: one transient failure, the
    # breaker stays closed and the segment degrades for now; then the endpoint goes away: seg 2's
    # try and retry are dropped, the second failure in a row opens the breaker
    fake_openai.set_faults(schedule=["ok", "500", "500"], outage_after=3)
    (out,) = encode([conv], cfg)
    assert out.status == "pending", out.error
    assert out.error.startswith(f"encode: TransientError: the LLM endpoint {fake_openai.base_url} became unavailable")
    per_segment = requests_by_segment(fake_openai, [out])
    assert sorted(per_segment) == [(cid, 0), (cid, 1), (cid, 2)], "a segment was sent after the breaker opened"
    assert [r["status"] for r in per_segment[(cid, 2)]] == ["dropped", "dropped"]
    assert out.stats.llm_calls == 3
    # what the writer commits of it: its conversations row and no work at all
    rows = conversation_rows(out, cfg.embedding.dim)
    assert {table for table, r in rows.items() if r} <= {"conversations", "errors"}
    assert not [e for e in rows["errors"] if e["kind"] == "llm_failure"]  # seg 1's degradation is not kept
    (row,) = rows["conversations"]
    assert (row["status"], row["n_segments"], row["n_records"], row["n_turns"]) == ("pending", 0, 0, len(out.turns))
    assert turns_in(out) == len(out.turns)  # the generated file drops no turn: its turns are all counted in


def test_a_transient_failure_that_opens_no_breaker_still_degrades(segmented, fake_openai):
    """The control: below llm.breaker_failures a failure is the segment's, as before."""
    conv = copy.deepcopy(next(c for c in segmented["segment"] if len(c.segments) >= 3))
    fake_openai.set_faults(schedule=["ok", "500", "500"])
    (out,) = encode([conv], llm_cfg(fake_openai, "llm.max_retries=1", "llm.breaker_failures=2"))
    assert out.status == "degraded" and out.stats.degraded_segments == 1
    assert [e["field"] for e in out.errors if e["kind"] == "llm_failure"] == ["seg-00001"]


# --------------------------------------------------------------------------------------------
# The job: an outage mid-run, then a rerun against the live endpoint
# --------------------------------------------------------------------------------------------
def ingest(capsys, server, cut, out) -> tuple[int, str, list[str]]:
    """`lychee-ray ingest` against the fake server: (rc, the summary, the failure sentences)."""
    sets = [
        "ray.progress_bars=false", "llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=fake-model",
        "llm.timeout_s=5", "llm.max_retries=1", "encoder.max_tokens=6000",
        # 1: every transient failure then finds the breaker open, so which conversations end pending
        # does not depend on the order in which the actor's conversations see their failures (with
        # N > 1, a conversation whose last segment fails before the N-th failure stays degraded)
        "llm.breaker_failures=1", "llm.breaker_cooldown_s=3600",
    ]
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(cut), "--out", str(out), *[a for s in sets for a in ("--set", s)]])
    captured = capsys.readouterr()
    failures = [line.removeprefix("lychee-ray ingest: ") for line in captured.err.splitlines() if line.startswith("lychee-ray ingest: ")]
    return rc, captured.out, failures


def conservation(summary: str) -> tuple[int, ...]:
    last = summary.strip().splitlines()[-1].strip()
    m = LINE.fullmatch(last)
    assert m, f"the summary does not end with the conservation line: {last!r}"
    assert m.group(2) == "=", last
    return tuple(int(m.group(i)) for i in (1, 3, 4, 5, 6))


def conversation_of_request(request: dict, speakers: dict[str, str]) -> str:
    """The LoCoMo conversation a request encodes, by the speakers of its SEGMENT lines."""
    segment = request["messages"][1]["content"].split("\n\nSEGMENT\n", 1)[1]
    found = {speakers[m.group(1)] for m in re.finditer(r"^\[[^\]]+\] ([^(:]+?) \(", segment, re.M)}
    assert len(found) == 1, found
    return found.pop()


def per_conversation(con, table: str) -> dict[str, int]:
    return dict(con.execute(f"select conversation_id, count(*) from {table} group by 1").fetchall())


def test_an_outage_mid_run_leaves_pending_conversations_that_a_rerun_completes(cut_file, fake_openai, ray_local, tmp_path, capsys):
    samples = json.loads(cut_file.read_text())
    speakers = {s["conversation"][k]: s["sample_id"] for s in samples for k in ("speaker_a", "speaker_b")}
    assert len(speakers) == 2 * len(samples)
    out = tmp_path / "store"
    # every conversation has two sessions, so at least two segments: 3 requests cannot finish them all
    fake_openai.set_faults(outage_after=3, outage="refuse")
    rc, summary, failures = ingest(capsys, fake_openai, cut_file, out)

    con = open_store(str(out)).con
    status = dict(con.execute("select conversation_id, status from conversations").fetchall())
    pending = sorted(c for c, s in status.items() if s == "pending")
    done = sorted(c for c, s in status.items() if s == "ok")
    assert sorted(status) == sorted(s["sample_id"] for s in samples) and sorted(pending + done) == sorted(status)
    assert pending, "the outage left no conversation pending"
    assert rc == 1
    assert failures == [
        f"{len(pending)} conversation{'s are' if len(pending) > 1 else ' is'} pending because the LLM endpoint {fake_openai.base_url} "
        f"(llm.base_url) failed transiently and the circuit breaker stopped calls; rerun the same command, or pass --redo pending, "
        f"to complete {'them' if len(pending) > 1 else 'it'}."
    ]
    # nothing degraded anywhere, nothing of a pending conversation but its row
    assert con.execute("select count(*) from records where degraded").fetchone()[0] == 0
    assert con.execute("select count(*) from errors where kind = 'llm_failure'").fetchone()[0] == 0
    assert con.execute("select count(*) from build_stats where degraded_segments > 0").fetchone()[0] == 0
    for table in TABLES_OF_WORK:
        assert not set(per_conversation(con, table)) & set(pending), table
    rows = {r[0]: r[1:] for r in con.execute("select conversation_id, n_turns, n_segments, n_records from conversations").fetchall()}
    input_turns = {s["sample_id"]: sum(len(v) for k, v in s["conversation"].items() if re.fullmatch(r"session_\d+", k)) for s in samples}
    for cid in pending:
        assert rows[cid] == (input_turns[cid], 0, 0)
    # a conversation that is ok had every segment answered; every dropped request was a pending one's
    segments = per_conversation(con, "segments")
    answered: dict[str, int] = {}
    for r in fake_openai.requests:
        owner = conversation_of_request(r, speakers)
        if r["status"] == 200:
            answered[owner] = answered.get(owner, 0) + 1
        else:
            assert r["status"] == "dropped" and owner in pending, (owner, r["status"])
    assert {c: answered.get(c, 0) for c in done} == {c: segments[c] for c in done}
    assert per_conversation(con, "turns") == {c: input_turns[c] for c in done}
    total, stored, errors, dups, in_pending = conservation(summary)
    assert (total, stored, errors, dups, in_pending) == (
        sum(input_turns.values()), sum(input_turns[c] for c in done), 0, 0, sum(input_turns[c] for c in pending))

    # the endpoint is back: a plain rerun completes the pending conversations, and only them
    fake_openai.set_faults(outage_after=None)
    fake_openai.reset()
    rc, summary, failures = ingest(capsys, fake_openai, cut_file, out)
    assert (rc, failures) == (0, [])
    assert f"already complete: {len(done)}" in summary
    con = open_store(str(out)).con
    assert dict(con.execute("select conversation_id, status from conversations").fetchall()) == {c: "ok" for c in status}
    assert con.execute("select count(*) from records where degraded").fetchone()[0] == 0
    assert con.execute("select sum(degraded_segments) from build_stats").fetchone()[0] == 0
    segments = per_conversation(con, "segments")
    asked: dict[str, int] = {}
    for r in fake_openai.requests:
        assert r["status"] == 200
        owner = conversation_of_request(r, speakers)
        asked[owner] = asked.get(owner, 0) + 1
    assert asked == {c: segments[c] for c in pending}
    assert per_conversation(con, "turns") == input_turns
    assert per_conversation(con, "records").keys() == set(status)
    n_pending = sum(input_turns[c] for c in pending)
    assert conservation(summary) == (n_pending, n_pending, 0, 0, 0)
