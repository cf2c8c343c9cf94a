"""The segment encoder on the `openai` backend against the fake OpenAI-compatible server.

Real parts: the LoCoMo reader (on a generated LoCoMo-format archive of 3 conversations, chit-chat
and work, 2 sessions each: tests/support/generated.py), the MiniLM embedder, the online
segmenter, the EncodeStage with its LLMClient over HTTP, and (in the last test) the whole Ray
ingest writing Parquet read back through DuckDB. Only the model is fake, and it is honest: each reply restates the prompt's
turns as schema-valid records (tests/support/fake_openai.py), so what is checked is what the
pipeline carries, never what the server knows.

Requests are mapped back to (conversation, segment) by their SEGMENT text, which is exactly
`render_turns` of that segment's turns.
"""

from __future__ import annotations

import copy
import json

import pytest

from lychee_ray.config import load_config
from lychee_ray.config_sections import EncoderConfig
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.readers.files import read_file
from lychee_ray.llm.prompts import LINK_CANDIDATES_HEADER, render_turns
from tests.support.generated import generate

from .conftest import REPO

FIRST_SEGMENT_CONTEXT = "(none: this is the first segment)"


def llm_cfg(server, *overrides):
    return load_config(
        REPO / "configs" / "local.yaml",
        [
            "ray.progress_bars=false",
            "llm.backend=openai",
            f"llm.base_url={server.base_url}",
            "llm.model=fake-model",
            # The injected hang must time out, but an ordinary reply on a loaded 2-core box must
            # not: a reply the client gave up on is billed by the server yet never counted.
            "llm.timeout_s=5.0",
            "llm.max_retries=2",
            # The fake restates every turn verbatim as a record, which is wordier than a model's
            # consolidation: give it room so only the injected faults truncate a reply.
            "encoder.max_tokens=6000",
            *overrides,
        ],
    )


@pytest.fixture(scope="module")
def cut_file(tmp_path_factory):
    """A LoCoMo-format file of 3 generated conversations (chit-chat, work, chit-chat), 2 sessions
    of 20 turns each (about a LoCoMo session). The work one's long replies fill segments to the
    token cap, so it has the most segments (6): the fault-schedule tests take it."""
    return generate(tmp_path_factory.mktemp("cut"), "locomo", conversations=3, sessions=2, turns_per_session=20).archive / "locomo.json"


@pytest.fixture(scope="module")
def segmented(cut_file):
    """conversation mode -> conversations read, embedded and cut (segment and eager units)."""
    cfg = load_config(REPO / "configs" / "local.yaml")
    convs = list(read_file(str(cut_file), cfg.read_settings))
    embed = EmbedTurnsStage(cfg)
    embed.setup()
    convs = embed.process_batch(convs)
    out = {}
    for mode in ("segment", "eager"):
        out[mode] = SegmentStage(cfg.with_overrides({"encoder": {"mode": mode}})).process_batch(copy.deepcopy(convs))
    return out


def encode(convs, cfg):
    stage = EncodeStage(cfg)
    stage.setup()
    return stage.process_batch(copy.deepcopy(convs))


def segment_turns(conv, seg):
    return [conv.turns[i] for i in seg.turn_idxs]


def request_index(convs):
    """SEGMENT text -> (conversation_id, segment_idx)."""
    index = {}
    for conv in convs:
        for seg in conv.segments:
            index[render_turns(segment_turns(conv, seg))] = (conv.conversation_id, seg.segment_idx)
    assert len(index) == sum(len(c.segments) for c in convs), "two segments render the same text"
    return index


def split_prompt(request):
    user = request["messages"][1]["content"]  # the original prompt (repairs append after it)
    head, segment = user.split("\n\nSEGMENT\n", 1)
    return head.removeprefix("REFERENCE CONTEXT\n"), segment


def requests_by_segment(server, convs):
    """(conversation_id, segment_idx) -> the server's requests for it, in arrival order."""
    index = request_index(convs)
    out: dict[tuple[str, int], list[dict]] = {}
    for req in server.requests:
        _, segment = split_prompt(req)
        out.setdefault(index[segment], []).append(req)
    return out


def assert_build_stats_match_server(convs, server):
    usage = server.total_usage()
    for key in ("prompt_tokens", "completion_tokens", "cached_tokens"):
        assert sum(getattr(c.stats, key) for c in convs) == usage[key], key
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0


def assert_every_turn_in_one_segment(conv):
    idxs = sorted(i for s in conv.segments for i in s.turn_idxs)
    assert idxs == list(range(len(conv.turns)))


# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["segment", "eager"])
def test_one_call_per_encode_unit_and_tokens_equal_server_usage(segmented, fake_openai, mode):
    convs = segmented[mode]
    if mode == "eager":  # eager: the units are the exchanges, one call each
        assert all(len(c.segments) == len(c.exchanges) for c in convs)
    else:
        assert all(len(c.segments) < len(c.exchanges) for c in convs)
    out = encode(convs, llm_cfg(fake_openai))
    per_segment = requests_by_segment(fake_openai, out)
    for conv in out:
        assert conv.status == "ok", conv.error
        n_units = len(conv.exchanges) if mode == "eager" else len(conv.segments)
        assert conv.stats.llm_calls == n_units == conv.stats.encode_units
        assert sorted(k[1] for k in per_segment if k[0] == conv.conversation_id) == list(range(n_units))
        assert all(len(reqs) == 1 for key, reqs in per_segment.items() if key[0] == conv.conversation_id)
        assert conv.records and not any(r.degraded for r in conv.records)
        assert {r.backend for r in conv.records} == {"fake-model"}
    assert len(fake_openai.requests) == sum(len(c.segments) for c in out)
    assert_build_stats_match_server(out, fake_openai)


def test_reference_context_carries_the_previous_state_and_records_in_order(segmented, fake_openai):
    fake_openai.set_faults(latency_s=0.05)  # keeps the conversations visibly overlapping
    out = encode(segmented["segment"], llm_cfg(fake_openai))
    per_segment = requests_by_segment(fake_openai, out)
    assert fake_openai.max_concurrency >= 2, "conversations were encoded one after another"
    for conv in out:
        chain = [per_segment[(conv.conversation_id, k)][0] for k in range(len(conv.segments))]
        assert split_prompt(chain[0])[0] == FIRST_SEGMENT_CONTEXT
        for prev, nxt in zip(chain, chain[1:]):
            assert nxt["t_start"] >= prev["t_end"], "segment k+1 was sent before segment k's reply"
            reply = json.loads(prev["reply"])
            context, _ = split_prompt(nxt)
            state_line, _, recent = context.partition("\nrecent records:\n")
            assert json.loads(state_line.removeprefix("state: ")) == reply["state"]  # d_k
            recent = recent.split("\n" + LINK_CANDIDATES_HEADER)[0]  # older records offered for links follow
            last = reply["records"][-1]
            assert recent.splitlines()[-1].startswith(f"- [{last['type']}] {last['text']}")


def test_scheduled_faults_end_encoded_or_degraded_and_the_chain_goes_on(segmented, fake_openai):
    conv = next(c for c in segmented["segment"] if len(c.segments) >= 5)
    fake_openai.set_faults(
        schedule=[
            "429", "ok",  # seg 0: transport retry, then success (1 call)
            "invalid", "ok",  # seg 1: schema-invalid, repaired (2 calls)
            "truncate", "invalid",  # seg 2: truncated, repair invalid -> degraded (2 calls)
            "500", "500", "500",  # seg 3: retries exhausted -> degraded (1 call)
            "hang", "ok",  # seg 4: timeout, retried, success (1 call)
        ]
    )
    (out,) = encode([conv], llm_cfg(fake_openai))
    degraded_segments = {r.segment_id for r in out.records if r.degraded}
    assert degraded_segments == {"seg-00002", "seg-00003"}
    after_schedule = len(out.segments) - 5  # segments after the schedule: answered at the first call
    for seg in out.segments:
        recs = [r for r in out.records if r.segment_id == seg.segment_id]
        assert recs, f"{seg.segment_id} has no records"
        expect_degraded = seg.segment_id in degraded_segments
        assert all(r.degraded == expect_degraded for r in recs)
        assert {r.backend for r in recs} == {"rules" if expect_degraded else "fake-model"}
    assert (out.stats.llm_calls, out.stats.llm_failures, out.stats.degraded_segments) == (7 + after_schedule, 2, 2)
    assert out.status == "degraded" and "2 of" in out.error
    assert_every_turn_in_one_segment(out)
    assert_build_stats_match_server([out], fake_openai)
    # The degraded segment's fallback records became rho of the next segment.
    per_segment = requests_by_segment(fake_openai, [out])
    after = split_prompt(per_segment[(out.conversation_id, 4)][-1])[0]
    fallback = [r for r in out.records if r.segment_id == "seg-00003"]
    assert f"- [{fallback[-1].type}] {fallback[-1].text}" in after


def test_random_faults_never_lose_a_segment(segmented, fake_openai):
    fake_openai.set_faults(p_429=0.1, p_500=0.1, p_truncate=0.15, p_invalid=0.15, p_hang=0.03, seed=7)
    out = encode(segmented["segment"], llm_cfg(fake_openai))
    assert any(r["fault"] != "ok" for r in fake_openai.requests)
    for conv in out:
        assert conv.status in ("ok", "degraded"), conv.error
        assert_every_turn_in_one_segment(conv)
        degraded = set()
        for seg in conv.segments:
            recs = [r for r in conv.records if r.segment_id == seg.segment_id]
            assert recs, f"{conv.conversation_id}/{seg.segment_id} has no records"
            assert len({r.degraded for r in recs}) == 1
            if recs[0].degraded:
                degraded.add(seg.segment_id)
            else:  # the fake restates every turn, up to the schema's maxItems on records
                cited = {t for r in recs for t in r.source_turn_ids}
                turn_ids = [t.turn_id for t in segment_turns(conv, seg)]
                cap = EncoderConfig().max_records_per_call
                assert cited == set(turn_ids[:cap]) and len(recs) == min(len(turn_ids), cap)
        assert conv.stats.degraded_segments == conv.stats.llm_failures == len(degraded)
        assert (conv.status == "degraded") == bool(degraded)
        assert conv.stats.llm_calls >= len(conv.segments)
    assert_build_stats_match_server(out, fake_openai)


def test_record_ids_are_stable_across_reruns_and_concurrency(segmented, fake_openai):
    first = encode(segmented["segment"], llm_cfg(fake_openai))
    fake_openai.reset()
    again = encode(segmented["segment"], llm_cfg(fake_openai, "encoder.conversations_in_flight=1"))
    ids = [[r.record_id for r in c.records] for c in first]
    assert ids == [[r.record_id for r in c.records] for c in again]
    flat = [i for c in ids for i in c]
    assert len(set(flat)) == len(flat), "record ids collide"


def test_ray_ingest_writes_complete_tables_under_faults(cut_file, fake_openai, ray_local, tmp_path):
    from lychee_ray.ingest.job import run_ingest
    from lychee_ray.store.reader import open_store

    fake_openai.set_faults(p_429=0.05, p_500=0.05, p_truncate=0.15, p_invalid=0.15, seed=3)
    cfg = llm_cfg(fake_openai)
    summary = run_ingest(cfg, str(cut_file), str(tmp_path / "store"))
    assert summary.conversations == 3
    con = open_store(str(tmp_path / "store")).con
    no_records = con.execute(
        "select count(*) from segments s anti join records r using (conversation_id, segment_id)"
    ).fetchall()[0][0]
    assert no_records == 0
    mixed = con.execute(
        "select count(*) from (select conversation_id, segment_id from records group by 1, 2 having count(distinct degraded) > 1)"
    ).fetchall()[0][0]
    assert mixed == 0
    rows = con.execute(
        """select b.conversation_id, b.llm_calls, b.encode_units, b.degraded_segments, s.n, d.n, c.status
           from build_stats b join conversations c using (conversation_id)
           join (select conversation_id, count(*) n from segments group by 1) s using (conversation_id)
           left join (select conversation_id, count(distinct segment_id) n from records where degraded group by 1) d
           using (conversation_id)"""
    ).fetchall()
    assert len(rows) == 3
    for cid, calls, units, n_degraded, n_segments, n_degraded_records, status in rows:
        assert units == n_segments and calls >= n_segments, cid
        assert n_degraded == (n_degraded_records or 0), cid
        assert status == ("degraded" if n_degraded else "ok"), cid
    # each degraded segment's reason is one llm_failure row naming it
    failures = dict(con.execute(
        "select conversation_id, count(distinct field) from errors where kind = 'llm_failure' group by 1").fetchall())
    assert {cid: n for cid, _, _, n, _, _, _ in rows if n} == failures
    sums = con.execute("select sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens) from build_stats").fetchall()[0]
    usage = fake_openai.total_usage()
    assert tuple(sums) == (usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"])
    # A rerun over the same output finds everything complete and asks the server nothing.
    n_requests = len(fake_openai.requests)
    again = run_ingest(cfg, str(cut_file), str(tmp_path / "store"))
    assert again.resumed == 3 and len(fake_openai.requests) == n_requests


# ------------------------------------------------------------------ degraded reasons and deadlines
def llm_failures(conv):
    return [e for e in conv.errors if e["kind"] == "llm_failure"]


def test_each_degraded_segment_has_an_llm_failure_row_with_its_redacted_reason(segmented, fake_openai, monkeypatch):
    key = "sk-test-0123456789abcdefXYZ"
    monkeypatch.setenv("LYCHEE_TEST_KEY", key)
    conv = next(c for c in segmented["segment"] if len(c.segments) >= 3)
    conv = copy.deepcopy(conv)
    conv.segments = conv.segments[:3]
    # seg 0 ok; seg 1: the server echoes the key in a 401; seg 2: invalid twice (repair fails)
    fake_openai.set_faults(schedule=["ok", "auth", "invalid", "invalid"])
    (out,) = encode([conv], llm_cfg(fake_openai, "llm.api_key_env=LYCHEE_TEST_KEY"))
    rows = llm_failures(out)
    assert [r["field"] for r in rows] == ["seg-00001", "seg-00002"]
    assert {r["conversation_id"] for r in rows} == {out.conversation_id}
    assert "401" in rows[0]["message"] and key not in rows[0]["message"] and "***" in rows[0]["message"]
    assert "does not match the schema" in rows[1]["message"] or "not valid JSON" in rows[1]["message"]
    assert all(r["message"].startswith(f"segment {r['field']} fell back to rules records") for r in rows)
    assert out.stats.degraded_segments == len(rows) == 2


def hang_cfg(server, *overrides):
    # A request timeout far beyond the test: only the deadlines can end the wait.
    return llm_cfg(server, "llm.timeout_s=120", "llm.max_retries=4", *overrides)


def test_the_call_deadline_bounds_every_retry_of_a_hanging_call(segmented, fake_openai):
    import time

    conv = copy.deepcopy(next(c for c in segmented["segment"] if len(c.segments) >= 3))
    conv.segments = conv.segments[:3]
    fake_openai.set_faults(p_hang=1.0)
    start = time.monotonic()
    (out,) = encode([conv], hang_cfg(fake_openai, "llm.call_deadline_s=1.5", "llm.conversation_deadline_s=600"))
    wall = time.monotonic() - start
    assert 3 * 1.5 * 0.9 <= wall < 3 * 1.5 + 30, wall  # each segment waited its deadline, no more
    rows = llm_failures(out)
    assert [r["field"] for r in rows] == [s.segment_id for s in out.segments]
    assert all("llm.call_deadline_s=1.5 s" in r["message"] for r in rows), rows
    assert all(r.degraded for r in out.records) and out.status == "degraded"


def test_past_the_conversation_deadline_the_remaining_segments_degrade_at_once(segmented, fake_openai):
    import time

    conv = copy.deepcopy(next(c for c in segmented["segment"] if len(c.segments) >= 4))
    fake_openai.set_faults(p_hang=1.0)
    start = time.monotonic()
    (out,) = encode([conv], hang_cfg(fake_openai, "llm.call_deadline_s=300", "llm.conversation_deadline_s=2"))
    wall = time.monotonic() - start
    assert 2 * 0.9 <= wall < 2 + 30, wall
    assert len(fake_openai.requests) == 1  # the first segment's call; the rest were never sent
    rows = llm_failures(out)
    assert [r["field"] for r in rows] == [s.segment_id for s in out.segments]
    assert all("conversation_deadline_s" in r["message"] for r in rows), rows
    assert all("passed before this segment was sent" in r["message"] for r in rows[1:])
    assert out.stats.degraded_segments == out.stats.llm_failures == len(out.segments)
    assert all(r.degraded for r in out.records) and out.status == "degraded"
