"""The LLM client of the `openai` backend: one structured-output call, made robust.

The four LLM calls of the pipeline (segment encode, planner, answer, judge) all go through
`LLMClient.structured`. It talks to any OpenAI-compatible endpoint (vLLM in production,
OpenAI's own API, or the fake server of the tests) with `openai.AsyncOpenAI` and:

- asks for JSON-schema structured output (`response_format` json_schema, strict), with a
  schema made by `json_schema_for` from the pydantic reply model;
- bounds the requests in flight per process (a semaphore per event loop), so one actor can
  keep many conversations in flight without flooding the server;
- leaves retries on 429/5xx/timeouts/connection errors to the openai client (exponential
  backoff with jitter, honouring Retry-After);
- parses leniently (`json.loads(strict=False)`: constrained decoding has produced raw control
  characters inside strings), validates with pydantic and an optional semantic check, and on
  failure re-asks the model `repair_retries` times with the exact error;
- sums `usage` over every call it makes, repairs and failed ones included;
- bounds each call, its retries and repairs included, by `llm.call_deadline_s`, and by an
  optional absolute deadline of the caller (the encoder's per-conversation deadline);
- never raises for a model or server fault: it returns `LLMResult(parsed=None, error=...)` so
  the caller can degrade (the encoder then writes rule-based fallback records);
- keeps a circuit breaker (`CircuitBreaker`): after `llm.breaker_failures` transient failures in
  a row it stops sending, and every call fails at once (`transient=True`, no request) until a
  probe after `llm.breaker_cooldown_s` gets an answer. The encoder then records the conversation
  `pending` (redone by the next run) instead of degrading what is left of the archive.

The API key is read from the environment variable that the config names and is never logged
or put into an error message.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from dataclasses import dataclass, fields
from typing import Any, Callable

import openai
from pydantic import BaseModel, ValidationError

from lychee_ray.config_sections import LLMConfig
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.redact import mask_url, redact

log = logging.getLogger(__name__)
_ERROR_CHARS = 400  # error strings end up in Parquet and logs; keep them short


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------
@dataclass
class Usage:
    """Token accounting of one or more calls.

    `calls` counts chat-completion requests issued (repairs included; the openai client's own
    transport retries are invisible and not counted); `failures` counts `structured()` results
    that ended with no parsed reply.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0
    failures: int = 0

    def add(self, other: "Usage") -> "Usage":
        """In-place sum; returns self so it chains."""
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
        return self

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass
class LLMResult:
    parsed: BaseModel | None  # an instance of the requested output model, or None on failure
    usage: Usage
    error: str | None  # short reason when parsed is None (the last one when repairs also failed)
    raw: str | None  # text of the last reply, when there was one
    # the failure may pass by itself: the endpoint was unreachable, timed out or throttled after
    # the openai client's retries, or the circuit breaker was open (then no request was sent)
    transient: bool = False

    @property
    def ok(self) -> bool:
        return self.parsed is not None


class CircuitBreaker:
    """Stops calls to an endpoint that keeps failing transiently (closed -> open -> half-open).

    Closed: every request goes out; `failure()` counts transient failures in a row, `success()`
    (any answer from the server, even an invalid reply or a 401) resets the count. At `limit`
    it opens: `allow()` refuses every request. After `cooldown_s` one probe is allowed (half-open):
    an answer closes the breaker, a failure opens it for another `cooldown_s`. State lives in
    one client on one event loop at a time, so no lock. `trips` counts the openings, so a caller
    can tell that the breaker opened while its own work was under way.
    """

    def __init__(self, limit: int, cooldown_s: float, endpoint: str, clock: Callable[[], float] = time.monotonic):
        self.limit, self.cooldown_s, self.endpoint = limit, cooldown_s, endpoint
        self.clock = clock  # a test passes its own, so the cooldown needs no sleeping
        self.consecutive = 0
        self.trips = 0
        self.last_error = ""
        self._opened_at: float | None = None
        self._probing = False

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def allow(self) -> bool:
        """Whether a request may be sent now (claims the probe when one is due)."""
        if self._opened_at is None:
            return True
        if self._probing or self.clock() - self._opened_at < self.cooldown_s:
            return False
        self._probing = True
        return True

    def success(self) -> None:
        if self._opened_at is not None:
            log.warning("LLM endpoint %s answered again: circuit breaker closed", self.endpoint)
        self.consecutive, self._opened_at, self._probing = 0, None, False

    def failure(self, reason: str) -> None:
        self.consecutive += 1
        self.last_error = reason
        if self._probing or (self._opened_at is None and self.consecutive >= self.limit):
            if self._opened_at is None:
                self.trips += 1
                log.error("LLM endpoint %s: circuit breaker open after %d transient failures in a row (last: %s); "
                          "calls fail at once, next probe in %g s", self.endpoint, self.consecutive, reason, self.cooldown_s)
            self._opened_at = self.clock()
        self._probing = False

    def refusal(self) -> str:
        """The error of a call refused while open: one sentence naming the endpoint and why."""
        wait = max(0.0, self.cooldown_s - (self.clock() - (self._opened_at or self.clock())))
        return (
            f"circuit breaker open: the LLM endpoint {self.endpoint} failed {self.consecutive} times in a row "
            f"(last: {self.last_error}); no request sent, next probe in {wait:.0f} s "
            f"(llm.breaker_failures={self.limit}, llm.breaker_cooldown_s={self.cooldown_s:g})"
        )[:_ERROR_CHARS]


# --------------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------------
def llm_client(cfg: LLMConfig) -> "LLMClient | None":
    """A client for `cfg`'s endpoint, or None under the rules backend (no LLM is asked)."""
    return LLMClient(cfg) if cfg.backend == "openai" else None


def run_closing(coro, client: "LLMClient | None"):
    """asyncio.run(coro), closing the client's HTTP pool on that loop before the loop ends
    (a pool collected after its loop closed logs "Event loop is closed" tracebacks)."""

    async def main():
        try:
            return await coro
        finally:
            if client is not None:
                await client.aclose()

    return asyncio.run(main())


class LLMClient:
    """Structured-output calls against one OpenAI-compatible endpoint (`llm.backend: openai`).

    Build it where it is used (inside the Ray actor): the underlying HTTP client and the
    concurrency semaphore belong to an event loop, so they are made lazily for the running loop
    (and remade if a later call runs on another loop, e.g. successive `asyncio.run`s in tests).
    """

    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg
        self._api_key = cfg.api_key("llm")
        # one breaker per client, across event loops: an endpoint that is down stays down
        self.breaker = CircuitBreaker(cfg.breaker_failures, cfg.breaker_cooldown_s, endpoint_name(cfg.base_url))
        self._loop_ref: weakref.ref | None = None
        self._client: openai.AsyncOpenAI | None = None
        self._semaphore: asyncio.Semaphore | None = None

    def __repr__(self) -> str:  # never shows the key
        return f"LLMClient(model={self.cfg.model!r}, base_url={mask_url(self.cfg.base_url)!r})"

    def _bound(self) -> tuple[openai.AsyncOpenAI, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        if self._loop_ref is None or self._loop_ref() is not loop:
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.cfg.base_url,
                timeout=self.cfg.timeout_s,
                max_retries=self.cfg.max_retries,
            )
            self._semaphore = asyncio.Semaphore(self.cfg.max_in_flight)
            self._loop_ref = weakref.ref(loop)
        return self._client, self._semaphore

    async def aclose(self) -> None:
        """Close the HTTP client of the current loop (idempotent)."""
        if self._client is not None and self._loop_ref is not None and self._loop_ref() is asyncio.get_running_loop():
            await self._client.close()
        self._client = self._semaphore = self._loop_ref = None

    async def structured(
        self,
        messages: list[dict],
        output_model: type[BaseModel],
        *,
        schema: dict | None = None,
        max_tokens: int,
        validate: Callable[[BaseModel], None] | None = None,
        tag: str = "",
        deadline: float | None = None,
    ) -> LLMResult:
        """One structured reply of type `output_model`, repaired up to `cfg.repair_retries` times.

        `validate` is a semantic check that raises ValueError (e.g. "source turn id X is not in
        this segment"); its message is shown to the model in the repair call. `deadline` (a
        `time.monotonic()` value) ends the call early if it comes before `cfg.call_deadline_s`.
        Never raises for a model or server fault: `parsed` is None and `error` says why.
        """
        if schema is None:
            schema = json_schema_for(output_model, self.cfg.schema_dialect)
        response_format = {
            "type": "json_schema",
            "json_schema": {"name": output_model.__name__, "schema": schema, "strict": True},
        }
        usage = Usage()
        convo = list(messages)
        raw: str | None = None
        error = "no call made"
        transient = False
        end, which = self._call_end(deadline)
        for attempt in range(1 + self.cfg.repair_retries):
            try:
                remaining = end - time.monotonic()
                if remaining <= 0:
                    raise asyncio.TimeoutError
                reply = await asyncio.wait_for(
                    self._complete(convo, response_format, max_tokens, usage, tag, attempt), remaining
                )
            except asyncio.TimeoutError:
                error, transient = f"{which} passed before a usable reply (attempt {attempt + 1})", True
                break
            if reply.error is not None:  # transport/server fault: openai already retried it
                error, transient = reply.error, reply.transient
                break
            raw = reply.text
            parsed, error = _parse(reply.text, reply.finish_reason, output_model, validate)
            if parsed is not None:
                if attempt:
                    log.info("llm[%s] repaired on attempt %d", tag, attempt + 1)
                return LLMResult(parsed=parsed, usage=usage, error=None, raw=raw)
            log.warning("llm[%s] invalid reply (attempt %d): %s", tag, attempt + 1, error)
            convo = list(messages) + _repair_messages(reply.text, error)
        usage.failures += 1
        log.warning("llm[%s] giving up: %s", tag, error)
        return LLMResult(parsed=None, usage=usage, error=error, raw=raw, transient=transient)

    def _call_end(self, deadline: float | None) -> tuple[float, str]:
        """(monotonic end of this call, the deadline's name for the error message)."""
        end = time.monotonic() + self.cfg.call_deadline_s
        if deadline is not None and deadline < end:
            return deadline, "the caller's deadline (llm.conversation_deadline_s for an encode)"
        return end, f"the call deadline (llm.call_deadline_s={self.cfg.call_deadline_s:g} s)"

    async def _complete(
        self, convo: list[dict], response_format: dict, max_tokens: int, usage: Usage, tag: str, attempt: int
    ) -> "_Reply":
        client, semaphore = self._bound()
        if not self.breaker.allow():
            return _Reply(text="", finish_reason=None, error=self.breaker.refusal(), transient=True)
        usage.calls += 1
        try:
            async with semaphore:
                resp = await client.chat.completions.create(
                    model=self.cfg.model,
                    messages=convo,
                    response_format=response_format,
                    max_completion_tokens=max_tokens,
                    temperature=self.cfg.temperature,
                    extra_body=self.cfg.extra_body or None,
                )
        except openai.OpenAIError as exc:
            reason = self._redact(_describe_api_error(exc, self.cfg.max_retries))
            log.warning("llm[%s] request failed (attempt %d): %s", tag, attempt + 1, reason)
            transient = is_transient(exc)
            if transient:
                self.breaker.failure(reason)
            else:  # the server answered (a 400, a 401): it is up, the request was wrong
                self.breaker.success()
            return _Reply(text="", finish_reason=None, error=reason, transient=transient)
        except BaseException:  # a deadline cancelled the wait (or a bug): no answer came
            self.breaker.failure("no reply before the deadline")
            raise
        self.breaker.success()
        _add_usage(usage, getattr(resp, "usage", None))
        choices = getattr(resp, "choices", None) or []
        if not choices or choices[0].message is None:
            return _Reply(text="", finish_reason=None, error="server returned no choices")
        message = choices[0].message
        if message.content is None:
            refusal = getattr(message, "refusal", None)
            return _Reply(text="", finish_reason=choices[0].finish_reason, error=f"no content (refusal: {refusal})"[:_ERROR_CHARS])
        log.debug("llm[%s] attempt %d: finish=%s chars=%d", tag, attempt + 1, choices[0].finish_reason, len(message.content))
        return _Reply(text=message.content, finish_reason=choices[0].finish_reason, error=None)

    def _redact(self, text: str) -> str:
        # A server may echo the key in an error body; it must not reach our logs or tables.
        return redact(text, [self._api_key] if self._api_key != "EMPTY" else [])


@dataclass
class _Reply:
    text: str
    finish_reason: str | None
    error: str | None
    transient: bool = False


def endpoint_name(base_url: str | None) -> str:
    """The endpoint as errors name it: `llm.base_url` with any credentials masked."""
    return mask_url(base_url) if base_url else "https://api.openai.com/v1 (llm.base_url unset)"


def is_transient(exc: openai.OpenAIError) -> bool:
    """A failure that may pass by itself: what the openai client retries (connection errors,
    timeouts, 408/409/429/5xx), still failing after its retries. 4xx errors are permanent."""
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one too
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in (408, 409, 429) or exc.status_code >= 500
    return False


def _add_usage(usage: Usage, raw_usage: Any) -> None:
    if raw_usage is None:
        return
    usage.prompt_tokens += raw_usage.prompt_tokens or 0
    usage.completion_tokens += raw_usage.completion_tokens or 0
    details = getattr(raw_usage, "prompt_tokens_details", None)
    if details is not None:
        usage.cached_tokens += getattr(details, "cached_tokens", None) or 0


def _parse(
    text: str, finish_reason: str | None, output_model: type[BaseModel], validate: Callable[[BaseModel], None] | None
) -> tuple[BaseModel | None, str]:
    """(instance, "") or (None, the reason in words the repair prompt can show the model)."""
    try:
        data = json.loads(text, strict=False)
    except json.JSONDecodeError as exc:
        if finish_reason == "length":
            return None, f"the reply was cut off at the token limit before the JSON was complete ({exc})"
        return None, f"the reply is not valid JSON: {exc}"
    try:
        obj = output_model.model_validate(data)
    except ValidationError as exc:
        return None, _short_validation_error(exc)
    if validate is not None:
        try:
            validate(obj)
        except ValueError as exc:
            return None, f"the reply is inconsistent with the input: {exc}"[:_ERROR_CHARS]
    return obj, ""


def _short_validation_error(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors()[:5]:
        where = ".".join(str(p) for p in err["loc"]) or "(root)"
        parts.append(f"{where}: {err['msg']}")
    more = f" (+{exc.error_count() - 5} more)" if exc.error_count() > 5 else ""
    return ("the JSON does not match the schema: " + "; ".join(parts) + more)[:_ERROR_CHARS]


def _repair_messages(bad_reply: str, error: str) -> list[dict]:
    return [
        {"role": "assistant", "content": bad_reply},
        {
            "role": "user",
            "content": (
                f"Your previous reply could not be used: {error}. "
                "Reply again with the corrected JSON object only: it must match the schema exactly, "
                "with no text before or after it. Keep it short enough to finish."
            ),
        },
    ]


def _describe_api_error(exc: openai.OpenAIError, max_retries: int) -> str:
    kind = type(exc).__name__
    if isinstance(exc, openai.APITimeoutError):
        return f"{kind}: request timed out (after {max_retries} retries)"
    if isinstance(exc, openai.APIConnectionError):
        return f"{kind}: cannot reach the server (after {max_retries} retries)"
    if isinstance(exc, openai.APIStatusError):
        retried = f" (after {max_retries} retries)" if is_transient(exc) else ""
        return f"{kind}: HTTP {exc.status_code}{retried}: {exc.message}"[:_ERROR_CHARS]
    return f"{kind}: {exc}"[:_ERROR_CHARS]
