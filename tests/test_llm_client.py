"""LLMClient against the fake OpenAI-compatible server: success, retries, repair, degradation,
bounded concurrency, usage accounting, and that the API key never leaks. Also checks of the
fake server itself (its hooks, prefix-cache simulation, seeded faults, subprocess mode),
since the pipeline tests lean on it."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.error
import urllib.request

import jsonschema
import pytest

from lychee_ray.config_sections import LLMConfig
from lychee_ray.llm.client import LLMClient, LLMResult, Usage
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.schemas import AnswerOutput, EncodeOutput, JudgeOutput, QueryPlan
from lychee_ray.tokens import count_tokens
from tests.support.fake_openai import (
    FakeOpenAIServer,
    Faults,
    reply_for,
    spawn_fake_server,
)
from tests.support.tiny_vllm import free_port

SYSTEM = "You turn a conversation segment into self-contained memory records. " * 5
SEGMENT = (
    "Session date: 2023-03-13\n"
    "[D1:1] Ysolde (2023-03-13): I went to the Wrenfield pottery club yesterday.\n"
    "[D1:2] Brannoc (2023-03-13): That sounds great, Ysolde!\n"
    "[D1:3] Ysolde (2023-03-13): It was so much fun."
)
ENCODE_MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": SEGMENT}]


def _cfg(server, **kw) -> LLMConfig:
    base = dict(backend="openai", base_url=server.base_url, model="fake-model", api_key_env="LYCHEE_TEST_NO_KEY",
                timeout_s=5.0, max_retries=2)
    return LLMConfig(**{**base, **kw})


def _encode(client: LLMClient, **kw) -> LLMResult:
    return asyncio.run(client.structured(ENCODE_MESSAGES, EncodeOutput, max_tokens=512, **kw))


# --------------------------------------------------------------------------------------------
# success and accounting
# --------------------------------------------------------------------------------------------
def test_success_sends_strict_schema_and_counts_usage(fake_openai):
    result = _encode(LLMClient(_cfg(fake_openai)), tag="conv-1/seg-0000")
    assert result.ok and result.error is None
    assert [r.source_turn_ids for r in result.parsed.records] == [["D1:1"], ["D1:2"], ["D1:3"]]
    assert json.loads(result.raw) == result.parsed.model_dump(mode="json")
    (req,) = fake_openai.requests
    assert req["schema_name"] == "EncodeOutput" and req["max_tokens"] == 512 and req["model"] == "fake-model"
    assert req["schema"] == json_schema_for(EncodeOutput, "vllm")  # the config's dialect by default
    assert req["messages"] == ENCODE_MESSAGES
    server_usage = req["usage"]
    assert server_usage["prompt_tokens"] == count_tokens(SYSTEM) + count_tokens(SEGMENT)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.calls, result.usage.failures) == (
        server_usage["prompt_tokens"], server_usage["completion_tokens"], 1, 0)


def test_usage_summed_over_calls_equals_the_servers_total(fake_openai):
    client = LLMClient(_cfg(fake_openai))
    # ok, a truncated reply + its repair, a 500 retried by the transport, an invalid reply + repair
    fake_openai.set_faults(schedule=["ok", "truncate", "ok", "500", "ok", "invalid", "ok"])

    async def run():
        total = Usage()
        for _ in range(4):
            total.add((await client.structured(ENCODE_MESSAGES, EncodeOutput, max_tokens=512)).usage)
        return total

    total = asyncio.run(run())
    server = fake_openai.total_usage()
    assert server["requests"] == 7 and server["ok"] == 6
    assert (total.prompt_tokens, total.completion_tokens, total.cached_tokens) == (
        server["prompt_tokens"], server["completion_tokens"], server["cached_tokens"])
    assert total.calls == 6 and total.failures == 0
    assert total.cached_tokens > 0  # same system prompt every time


def test_cached_tokens_come_from_prompt_tokens_details(fake_openai):
    client = LLMClient(_cfg(fake_openai))
    first, second = _encode(client), _encode(client)
    assert first.usage.cached_tokens == 0
    assert second.usage.cached_tokens == count_tokens(SYSTEM)


def test_usage_addition():
    a, b = Usage(1, 2, 3, 4, 5), Usage(10, 20, 30, 40, 50)
    assert a + b == Usage(11, 22, 33, 44, 55) and a == Usage(1, 2, 3, 4, 5)
    assert a.add(b) is a and a == Usage(11, 22, 33, 44, 55) and a.total_tokens == 33


def test_one_client_serves_successive_event_loops(fake_openai):
    client = LLMClient(_cfg(fake_openai))
    assert _encode(client).ok and _encode(client).ok  # two asyncio.run()s, two loops


# --------------------------------------------------------------------------------------------
# transport faults: the openai client's retries
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fault", ["429", "500"])
def test_retryable_status_then_success(fake_openai, fault):
    fake_openai.set_faults(schedule=[fault])
    result = _encode(LLMClient(_cfg(fake_openai)))
    assert result.ok
    assert [r["status"] for r in fake_openai.requests] == [int(fault), 200]
    assert result.usage.calls == 1  # transport retries are the openai client's, not ours


def test_hang_times_out_and_is_retried(fake_openai):
    fake_openai.set_faults(schedule=["hang"])
    result = _encode(LLMClient(_cfg(fake_openai, timeout_s=0.5, max_retries=1)))
    assert result.ok
    assert [r["fault"] for r in fake_openai.requests] == ["hang", "ok"]


def test_retries_exhausted_degrade_without_raising(fake_openai):
    fake_openai.set_faults(schedule=["500"] * 3)
    result = _encode(LLMClient(_cfg(fake_openai, max_retries=2)))
    assert result.parsed is None and result.raw is None
    assert "InternalServerError" in result.error and "HTTP 500" in result.error
    assert len(fake_openai.requests) == 3
    assert (result.usage.calls, result.usage.failures, result.usage.prompt_tokens) == (1, 1, 0)


def test_timeouts_exhausted_degrade_without_raising(fake_openai):
    fake_openai.set_faults(schedule=["hang", "hang"])
    result = _encode(LLMClient(_cfg(fake_openai, timeout_s=0.3, max_retries=1)))
    assert result.parsed is None and result.error.startswith("APITimeoutError")


def test_unreachable_server_degrades_without_raising():
    cfg = LLMConfig(backend="openai", base_url=f"http://127.0.0.1:{free_port()}/v1", model="m",
                    api_key_env="LYCHEE_TEST_NO_KEY", max_retries=0, timeout_s=2)
    result = _encode(LLMClient(cfg))
    assert result.parsed is None and result.error.startswith("APIConnectionError")


# --------------------------------------------------------------------------------------------
# the circuit breaker
# --------------------------------------------------------------------------------------------
def _encode_n(client: LLMClient, n: int) -> list[LLMResult]:
    async def run():
        return [await client.structured(ENCODE_MESSAGES, EncodeOutput, max_tokens=512) for _ in range(n)]

    return asyncio.run(run())


class _Clock:
    """A monotonic clock the test moves by hand, so a cooldown passes without sleeping."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_consecutive_transient_failures_open_the_breaker_and_no_request_follows(fake_openai):
    client = LLMClient(_cfg(fake_openai, max_retries=1, breaker_failures=3, breaker_cooldown_s=600))
    fake_openai.set_faults(schedule=["500"] * 6)  # three calls, each 500 on its try and its retry
    failed = _encode_n(client, 2)
    assert [r.transient for r in failed] == [True, True] and not client.breaker.is_open
    assert len(fake_openai.requests) == 4  # below the limit every call still goes out
    third = _encode_n(client, 1)[0]
    assert third.transient and "HTTP 500" in third.error and client.breaker.is_open and client.breaker.trips == 1
    assert len(fake_openai.requests) == 6
    refused = _encode_n(client, 5)
    assert len(fake_openai.requests) == 6, "a request reached the server while the breaker was open"
    for r in refused:
        assert r.parsed is None and r.transient and r.usage.calls == 0
        assert r.error.startswith(f"circuit breaker open: the LLM endpoint {fake_openai.base_url} failed 3 times in a row")
        assert "HTTP 500" in r.error and "llm.breaker_failures=3" in r.error


@pytest.mark.parametrize("outage", ["close", "refuse"])
def test_an_outage_opens_the_breaker_and_further_calls_send_nothing(fake_openai, outage):
    client = LLMClient(_cfg(fake_openai, max_retries=1, breaker_failures=2, breaker_cooldown_s=600))
    fake_openai.set_faults(outage_after=1, outage=outage)
    first, *failed = _encode_n(client, 3)
    assert first.ok
    assert [r.transient for r in failed] == [True, True] and all(r.error.startswith("APIConnectionError") for r in failed)
    assert client.breaker.is_open
    seen = len(fake_openai.requests)
    assert [r["status"] for r in fake_openai.requests][:2] == [200, "dropped"]
    later = _encode_n(client, 4)
    assert all(r.error.startswith("circuit breaker open") and r.usage.calls == 0 for r in later)
    assert len(fake_openai.requests) == seen


def test_any_answer_resets_the_count_and_permanent_errors_never_open_it(fake_openai):
    client = LLMClient(_cfg(fake_openai, max_retries=0, breaker_failures=2, breaker_cooldown_s=600))
    # 500, answered, 500, 401 (permanent: the server is up), 500, invalid twice (answered), 500, 500
    fake_openai.set_faults(schedule=["500", "ok", "500", "auth", "500", "invalid", "invalid", "500", "500"])
    results = _encode_n(client, 6)
    assert [r.ok for r in results] == [False, True, False, False, False, False]
    assert [r.transient for r in results] == [True, False, True, False, True, False]
    assert client.breaker.trips == 0 and not client.breaker.is_open
    assert _encode_n(client, 1)[0].transient and not client.breaker.is_open  # one 500 since the last answer
    assert _encode_n(client, 1)[0].transient and client.breaker.is_open  # two in a row
    assert len(fake_openai.requests) == 9


def test_after_the_cooldown_one_probe_goes_out_and_an_answer_closes_the_breaker(fake_openai):
    client = LLMClient(_cfg(fake_openai, max_retries=0, breaker_failures=1, breaker_cooldown_s=60))
    clock = client.breaker.clock = _Clock()
    fake_openai.set_faults(schedule=["500", "500"])
    assert _encode_n(client, 1)[0].transient and client.breaker.is_open
    clock.now += 59
    assert _encode_n(client, 1)[0].error.startswith("circuit breaker open") and len(fake_openai.requests) == 1
    clock.now += 1  # the cooldown has passed: the next call is the probe, and it fails
    probe = _encode_n(client, 1)[0]
    assert "HTTP 500" in probe.error and len(fake_openai.requests) == 2 and client.breaker.is_open
    assert client.breaker.trips == 1  # still the same opening
    assert _encode_n(client, 1)[0].error.startswith("circuit breaker open")  # open for another cooldown
    clock.now += 60
    assert _encode_n(client, 1)[0].ok and not client.breaker.is_open  # the probe is answered
    assert all(r.ok for r in _encode_n(client, 2)) and len(fake_openai.requests) == 5


def test_a_half_open_breaker_lets_only_one_probe_through_at_a_time(fake_openai):
    client = LLMClient(_cfg(fake_openai, max_retries=0, breaker_failures=1, breaker_cooldown_s=60))
    clock = client.breaker.clock = _Clock()
    fake_openai.set_faults(schedule=["500"])
    _encode_n(client, 1)
    clock.now += 60
    fake_openai.set_faults(latency_s=0.3)  # the probe is still in flight when the others ask

    async def run():
        return await asyncio.gather(*[client.structured(ENCODE_MESSAGES, EncodeOutput, max_tokens=512) for _ in range(5)])

    results = asyncio.run(run())
    assert sum(r.ok for r in results) == 1 and len(fake_openai.requests) == 2
    assert sum(r.error is not None and r.error.startswith("circuit breaker open") for r in results) == 4


def test_breaker_settings_are_validated():
    with pytest.raises(ValueError, match="breaker_failures"):
        LLMConfig(breaker_failures=0)
    with pytest.raises(ValueError, match="breaker_cooldown_s"):
        LLMConfig(breaker_cooldown_s=0)


# --------------------------------------------------------------------------------------------
# parse, validate, repair
# --------------------------------------------------------------------------------------------
def test_truncated_json_is_repaired(fake_openai):
    fake_openai.set_faults(schedule=["truncate"])
    result = _encode(LLMClient(_cfg(fake_openai)))
    assert result.ok and result.usage.calls == 2
    first, repair = fake_openai.requests
    assert repair["messages"][: len(ENCODE_MESSAGES)] == ENCODE_MESSAGES
    assert repair["messages"][-2] == {"role": "assistant", "content": first["reply"]}
    assert repair["messages"][-1]["role"] == "user"
    assert "cut off at the token limit" in repair["messages"][-1]["content"]
    assert "JSON object only" in repair["messages"][-1]["content"]


def test_schema_invalid_twice_returns_none_with_error(fake_openai, caplog):
    fake_openai.set_faults(schedule=["invalid", "invalid"])
    with caplog.at_level(logging.WARNING, logger="lychee_ray.llm"):
        result = _encode(LLMClient(_cfg(fake_openai, repair_retries=1)), tag="chat-7/seg-0003")
    assert result.parsed is None
    assert "records" in result.error and "Field required" in result.error
    assert result.raw == fake_openai.requests[-1]["reply"]
    assert (result.usage.calls, result.usage.failures) == (2, 1)
    assert result.usage.prompt_tokens == fake_openai.total_usage()["prompt_tokens"]  # failed calls count too
    # the repair call shows the model the exact validation error
    assert "records: Field required" in fake_openai.requests[1]["messages"][-1]["content"]
    assert "chat-7/seg-0003" in caplog.text


def test_no_repair_when_repair_retries_is_zero(fake_openai):
    fake_openai.set_faults(schedule=["invalid"])
    result = _encode(LLMClient(_cfg(fake_openai, repair_retries=0)))
    assert result.parsed is None and len(fake_openai.requests) == 1


def test_semantic_validation_failure_is_shown_in_the_repair(fake_openai):
    seen = []

    def validate(out: EncodeOutput):
        seen.append(out)
        if len(seen) == 1:
            raise ValueError("source turn id D1:1 is cited by no record text")

    result = _encode(LLMClient(_cfg(fake_openai)), validate=validate)
    assert result.ok and len(seen) == 2
    assert "cited by no record text" in fake_openai.requests[1]["messages"][-1]["content"]

    def always_bad(_out):
        raise ValueError("never good enough")

    result = _encode(LLMClient(_cfg(fake_openai)), validate=always_bad)
    assert result.parsed is None and "never good enough" in result.error


def test_raw_control_characters_inside_strings_are_accepted(fake_openai, monkeypatch):
    # vLLM's constrained decoding has emitted a raw control character inside a JSON string.
    import tests.support.fake_openai as fake

    raw_tab = '{"answer": "a\tb"}'  # a literal tab inside the string: invalid for strict JSON
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw_tab)
    monkeypatch.setattr(fake.FakeOpenAIServer, "_reply_text", lambda self, m, js, f: (raw_tab, "stop"))
    result = asyncio.run(LLMClient(_cfg(fake_openai)).structured(
        [{"role": "user", "content": "q"}], AnswerOutput, max_tokens=16))
    assert result.ok and result.parsed.answer == "a\tb" and result.usage.calls == 1


# --------------------------------------------------------------------------------------------
# concurrency
# --------------------------------------------------------------------------------------------
def _max_concurrency(server, max_in_flight: int, n_calls: int) -> int:
    server.reset()
    client = LLMClient(_cfg(server, max_in_flight=max_in_flight))

    async def run():
        return await asyncio.gather(*[
            client.structured([{"role": "user", "content": f"Question: q{i}?"}], QueryPlan, max_tokens=64)
            for i in range(n_calls)
        ])

    results = asyncio.run(run())
    assert all(r.ok for r in results)
    assert [r.parsed.routes[0].goal for r in results] == [f"q{i}?" for i in range(n_calls)]
    return server.max_concurrency


def test_in_flight_requests_are_bounded(fake_openai):
    fake_openai.set_faults(latency_s=0.3)
    assert _max_concurrency(fake_openai, max_in_flight=4, n_calls=16) == 4
    # control: the same load without the bound does overlap more, so the check above can fail
    assert _max_concurrency(fake_openai, max_in_flight=16, n_calls=16) > 4


# --------------------------------------------------------------------------------------------
# the API key
# --------------------------------------------------------------------------------------------
SECRET = "sk-lychee-test-0123456789abcdef"


def test_api_key_is_sent_but_never_logged_or_returned(fake_openai, monkeypatch, caplog):
    monkeypatch.setenv("LYCHEE_TEST_KEY", SECRET)
    client = LLMClient(_cfg(fake_openai, api_key_env="LYCHEE_TEST_KEY", max_retries=1))
    fake_openai.set_faults(schedule=["429", "ok", "invalid", "invalid", "auth"])
    with caplog.at_level(logging.DEBUG):  # every logger, openai's and httpx's included
        ok = _encode(client)
        bad = _encode(client)
        auth = _encode(client)
    assert {r["authorization"] for r in fake_openai.requests} == {f"Bearer {SECRET}"}
    assert ok.ok and bad.parsed is None and auth.parsed is None
    assert "AuthenticationError" in auth.error and "***" in auth.error  # the echoed key, redacted
    for text in (caplog.text, ok.error or "", bad.error, auth.error, repr(client)):
        assert SECRET not in text


def test_missing_key_without_base_url_fails_at_construction(monkeypatch):
    monkeypatch.delenv("LYCHEE_TEST_NO_KEY", raising=False)
    with pytest.raises(ValueError, match="LYCHEE_TEST_NO_KEY"):
        LLMClient(LLMConfig(backend="openai", model="gpt-4.1-mini", api_key_env="LYCHEE_TEST_NO_KEY"))


def test_local_server_without_key_gets_empty(fake_openai, monkeypatch):
    monkeypatch.delenv("LYCHEE_TEST_NO_KEY", raising=False)
    assert _encode(LLMClient(_cfg(fake_openai))).ok
    assert fake_openai.requests[0]["authorization"] == "Bearer EMPTY"


# --------------------------------------------------------------------------------------------
# the fake server itself
# --------------------------------------------------------------------------------------------
def test_encode_hook_follows_the_prompt_and_carries_state():
    schema = json_schema_for(EncodeOutput, "vllm")
    out = EncodeOutput.model_validate(reply_for(ENCODE_MESSAGES, "EncodeOutput", schema))
    assert [r.type for r in out.records] == ["fact"] * 3
    assert out.records[0].text == "Ysolde: I went to the Wrenfield pottery club yesterday."
    assert out.records[0].time.start == "2023-03-13" and out.records[0].entities == ["Ysolde"]
    assert out.state.open_threads == ["after D1:3"]
    assert [e.name for e in out.state.entities][:4] == ["Session", "Ysolde", "Wrenfield", "Brannoc"]
    # enums and bounds of the request are honoured even when the prompt disagrees
    tight = json_schema_for(EncodeOutput, "vllm", enums={"source_turn_ids": ["D1:2"]},
                            max_items={"records": 2}, max_length={"text": 12})
    out = reply_for(ENCODE_MESSAGES, "EncodeOutput-v2", tight)
    jsonschema.validate(out, tight)
    assert [r["source_turn_ids"] for r in out["records"]] == [["D1:2"], ["D1:2"]]
    assert out["records"][0]["text"] == "Ysolde: I we"  # cut to 12 characters
    # no turn lines: the generic generator, still valid
    plain = reply_for([{"role": "user", "content": "nothing here"}], "EncodeOutput", schema)
    EncodeOutput.model_validate(plain)


def test_plan_answer_judge_hooks():
    plan = reply_for([{"role": "user", "content": "Context\nQuestion: When did Ysolde go to the club?"}],
                     "QueryPlan", json_schema_for(QueryPlan, "vllm"))
    assert plan["routes"][0]["goal"] == "When did Ysolde go to the club?"
    answer = reply_for([{"role": "user", "content": "Evidence:\n[1] [D1:1] Ysolde (2023-03-13): went to the Wrenfield pottery club on Sunday\nQuestion: x"}],
                       "AnswerOutput", json_schema_for(AnswerOutput, "vllm"))
    assert answer == {"answer": "went to the Wrenfield pottery club"}
    judge = json_schema_for(JudgeOutput, "vllm")
    same = [{"role": "user", "content": "Question: q\nGold answer: 12 March 2023\nGenerated answer: March 12"}]
    diff = [{"role": "user", "content": "Question: q\nGold answer: Paris\nGenerated answer: London"}]
    assert reply_for(same, "JudgeOutput", judge) == {"label": "CORRECT"}
    assert reply_for(diff, "JudgeOutput", judge) == {"label": "WRONG"}


def _post_chat(base_url: str) -> int:
    req = urllib.request.Request(base_url + "/chat/completions", data=json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_seeded_fault_probabilities_are_reproducible():
    with FakeOpenAIServer(faults=Faults(p_500=0.3, p_429=0.2, seed=7, retry_after_ms=None)) as server:
        first = [_post_chat(server.base_url) for _ in range(20)]
        server.set_faults(seed=7)  # reseeds
        second = [_post_chat(server.base_url) for _ in range(20)]
    assert first == second
    assert {200, 429, 500} <= set(first)


def test_the_outage_fault_closes_or_refuses_after_n_requests_until_lifted():
    import http.client

    with FakeOpenAIServer(faults=Faults(outage_after=1, outage="close")) as server:
        assert _post_chat(server.base_url) == 200
        for _ in range(2):  # connections are accepted, then closed without a reply
            with pytest.raises(http.client.RemoteDisconnected):
                _post_chat(server.base_url)
        server.set_faults(outage_after=None)
        assert _post_chat(server.base_url) == 200
        assert [(r["status"], r["fault"]) for r in server.requests] == [(200, "ok"), ("dropped", "outage"), ("dropped", "outage"), (200, "ok")]
    with FakeOpenAIServer(faults=Faults(outage_after=1, outage="refuse")) as server:
        assert _post_chat(server.base_url) == 200
        with pytest.raises(http.client.RemoteDisconnected):  # the request that began the outage
            _post_chat(server.base_url)
        with pytest.raises(urllib.error.URLError) as refused:  # the port no longer listens
            _post_chat(server.base_url)
        assert isinstance(refused.value.reason, ConnectionRefusedError)
        server.set_faults(outage_after=None)  # listens again, on the same port
        assert _post_chat(server.base_url) == 200 and len(server.requests) == 3
    with pytest.raises(ValueError, match="outage"):
        Faults(outage="explode")


def test_subprocess_server_with_admin_api():
    with spawn_fake_server(latency_s=0.0) as server:
        server.set_faults(schedule=["500", "ok"])
        assert [_post_chat(server.base_url), _post_chat(server.base_url)] == [500, 200]
        assert [r["fault"] for r in server.requests] == ["500", "ok"]
        usage = server.total_usage()
        assert usage["requests"] == 2 and usage["ok"] == 1 and usage["prompt_tokens"] == count_tokens("hi")
        server.reset()
        assert server.requests == []
