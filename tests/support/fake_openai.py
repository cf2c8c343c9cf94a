"""A small OpenAI-compatible server for tests and benchmarks of the LLM path.

It answers `GET /v1/models` and `POST /v1/chat/completions` on 127.0.0.1 with replies that are
valid for the request's `response_format` JSON schema, and `POST /v1/embeddings` (see
`embedding_for`: deterministic bag-of-words vectors, `dimensions` and `encoding_format` honoured,
empty strings rejected with a 400 as OpenAI does). The content is derived mechanically
from the prompt, never "the right answer", so a pipeline test passes only because the pipeline
carries the prompt's data through, not because the server knows the benchmark:

- a generic JSON-schema instance generator (objects, arrays, enums, const, strings with
  min/maxLength, nullable unions, $ref) fills whatever a hook does not;
- hooks keyed by schema name shape the content (`EncodeOutput*`, `QueryPlan`, `AnswerOutput`,
  `JudgeOutput`, `RubricGrade`; see each `_hook_*` for the prompt lines it reads);
- every reply is checked against the request schema with `jsonschema` before it is sent.

`usage` is honest too: o200k token counts of the messages and the reply, and `cached_tokens`
equal to the tokens of the longest common prefix of this request's system message with the
previous request's (a stand-in for vLLM's prefix cache). A reply longer than the request's
`max_tokens` is cut there with finish_reason "length", as a real server does.

Faults (latency, 429, 500, hang past the client's timeout, truncated JSON, schema-invalid
JSON, 401 echoing the key; for embeddings "invalid" drops the reply's last vector) come from a deterministic schedule or seeded probabilities, set at
start and changeable at runtime (`server.set_faults(...)` or `POST /admin/faults`). An outage
(`outage_after`) stops all answers after N requests: connections closed without a reply, or
refused (the server stops listening) until the outage is lifted. Every request that reaches the
server is recorded (`server.requests`, `server.total_usage()`, `server.max_concurrency`).

In a test: `with FakeOpenAIServer() as server: LLMConfig(base_url=server.base_url, ...)`; the
server runs on its own loop in a background thread and is reachable from other processes
(Ray workers) while the `with` block lasts. For benchmarks, a separate process:
`python -m tests.support.fake_openai --port 8011 --latency 0.05`, or `spawn_fake_server()`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import functools
import hashlib
import json
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

import jsonschema
import numpy as np
from aiohttp import web

from lychee_ray.tokens import count_tokens, truncate_to_tokens

FAULT_KINDS = ("ok", "429", "500", "hang", "truncate", "invalid", "auth")
OUTAGE_KINDS = ("close", "refuse")
_TURN_LINE = re.compile(r"^\s*\[(?P<tid>[^\]\s]+)\]\s+(?P<speaker>[^:\n(]+?)\s*(?:\((?P<when>[^)\n]*)\))?\s*:\s*(?P<text>.+?)\s*$")
_ISO_DATE = re.compile(r"\b(\d{4}-\d{2}-\d{2})")
_CAPITALIZED = re.compile(r"\b[A-Z][a-zA-Z]+\b")
_WORD = re.compile(r"[A-Za-z0-9]+")


# --------------------------------------------------------------------------------------------
# Faults
# --------------------------------------------------------------------------------------------
@dataclass
class Faults:
    """What goes wrong, per chat-completion or embeddings request (one shared schedule).

    `schedule` is consumed first, one entry per request (FAULT_KINDS); once it is empty each
    request draws from the probabilities with a generator seeded by `seed`.
    """

    latency_s: float = 0.0  # added to every chat and embeddings request
    schedule: list[str] = field(default_factory=list)
    p_429: float = 0.0
    p_500: float = 0.0
    p_hang: float = 0.0
    p_truncate: float = 0.0
    p_invalid: float = 0.0
    seed: int = 0
    hang_s: float = 600.0  # a hang sleeps this long (the client's timeout fires first)
    retry_after_ms: int | None = 20  # sent with 429/500 so the client's backoff stays short in tests
    # Outage: after this many chat/embeddings requests (counted from when the faults were last
    # set) nothing is answered. "close": each later request's connection is closed without a
    # reply (recorded with status "dropped"); "refuse": the same, and the server stops listening,
    # so new connections are refused. None: no outage; setting it back to None ends one (and the
    # server listens again on the same port).
    outage_after: int | None = None
    outage: str = "close"

    def __post_init__(self):
        bad = [k for k in self.schedule if k not in FAULT_KINDS]
        if bad:
            raise ValueError(f"unknown fault kinds {bad}; expected {FAULT_KINDS}")
        if self.outage not in OUTAGE_KINDS:
            raise ValueError(f"unknown outage kind {self.outage!r}; expected one of {OUTAGE_KINDS}")
        if self.outage_after is not None and self.outage_after < 0:
            raise ValueError(f"outage_after must be >= 0 or None, got {self.outage_after}")


# --------------------------------------------------------------------------------------------
# Schema instances
# --------------------------------------------------------------------------------------------
def _resolve(schema: dict, root: dict) -> dict:
    seen = 0
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/"):
            raise ValueError(f"only local $refs are supported, got {ref!r}")
        node: Any = root
        for part in ref[2:].split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
        seen += 1
        if seen > 64:
            raise ValueError(f"$ref cycle at {ref!r}")
    return schema


def _branches(schema: dict) -> list[dict] | None:
    return schema.get("anyOf") or schema.get("oneOf")


def _types(schema: dict) -> list[str]:
    t = schema.get("type")
    if isinstance(t, list):
        return t
    if t is not None:
        return [t]
    if "properties" in schema:
        return ["object"]
    if "items" in schema:
        return ["array"]
    return ["string"]


def generate(schema: dict, root: dict | None = None, words: list[str] | None = None, _name: str = "") -> Any:
    """A deterministic instance of `schema`; strings are made of `words` (from the prompt)."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    words = words or ["text"]
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    branches = _branches(schema)
    if branches:
        non_null = [b for b in branches if _types(_resolve(b, root)) != ["null"]]
        return generate((non_null or branches)[0], root, words, _name)
    kinds = [t for t in _types(schema) if t != "null"] or ["null"]
    kind = kinds[0]
    if kind == "object":
        return {
            name: generate(sub, root, words, name)
            for name, sub in schema.get("properties", {}).items()
        }
    if kind == "array":
        n = max(schema.get("minItems", 0), min(1, schema.get("maxItems", 1)))
        return [generate(schema.get("items", {}), root, words[i:] + words[:i], _name) for i in range(n)]
    if kind == "string":
        return fit_string(" ".join(words[:4]) or _name or "x", schema)
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    return None


def validator(schema: dict) -> jsonschema.protocols.Validator:
    """A validator for `schema`, the schema itself checked once per distinct schema.

    `jsonschema.validate` re-checks the schema against its metaschema on every call; that was
    ~90% of the server's CPU per reply (60 ms), enough to serialize concurrent requests and
    make the concurrency benchmark measure the fake server instead of the client."""
    return _cached_validator(json.dumps(schema, sort_keys=True))


@functools.lru_cache(maxsize=512)
def _cached_validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def fit_string(text: str, schema: dict) -> str:
    if "maxLength" in schema:
        text = text[: schema["maxLength"]]
    if len(text) < schema.get("minLength", 0):
        text = text + "x" * (schema["minLength"] - len(text))
    return text


def conform(value: Any, schema: dict, root: dict | None = None, words: list[str] | None = None) -> Any:
    """Make a hook's draft valid for `schema`: cut strings and arrays to their bounds, replace
    values outside an enum by the enum's first value, fill missing properties, drop extra ones."""
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return value if value in schema["enum"] else schema["enum"][0]
    branches = _branches(schema)
    if branches:
        for branch in branches:  # keep the draft if some branch accepts it as is
            if validator({**_resolve(branch, root), "$defs": root.get("$defs", {})}).is_valid(value):
                return value
        if value is None:
            return generate(schema, root, words)
        non_null = [b for b in branches if _types(_resolve(b, root)) != ["null"]]
        return conform(value, (non_null or branches)[0], root, words)
    kinds = _types(schema)
    if value is None and "null" in kinds:
        return None
    kind = next((k for k in kinds if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        draft = value if isinstance(value, dict) else {}
        return {
            name: conform(draft[name], sub, root, words) if name in draft else generate(sub, root, words, name)
            for name, sub in props.items()
        }
    if kind == "array":
        items = value if isinstance(value, list) else []
        items = items[: schema.get("maxItems", len(items))]
        out = [conform(v, schema.get("items", {}), root, words) for v in items]
        while len(out) < schema.get("minItems", 0):
            out.append(generate(schema.get("items", {}), root, words))
        return out
    if kind == "string":
        return fit_string(value if isinstance(value, str) else str(value), schema)
    if kind == "integer":
        return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else 0
    if kind == "boolean":
        return bool(value)
    return None


# --------------------------------------------------------------------------------------------
# Content hooks (keyed by json_schema name)
# --------------------------------------------------------------------------------------------
def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def _user_text(messages: list[dict]) -> str:
    return "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "user")


def _capitalized(text: str) -> list[str]:
    return list(dict.fromkeys(_CAPITALIZED.findall(text)))


def _hook_encode(messages: list[dict]) -> dict | None:
    """One `fact` per turn line `[<turn_id>] <speaker> (<date>): <text>` of the SEGMENT part of the
    user messages (all of them when there is no SEGMENT header); state.entities = capitalized words
    of the prompt, open_threads = ["after <last turn id>"]. Links, mechanically: a record cites an
    offered earlier record (a recent record ending in `[m<k>]`, or a line `[m<k>] ...` of the older
    records) that shares two words of six letters or more with its turn, in `contradicts` when that
    record says "never", else in `supersedes`."""
    prompt = _user_text(messages)
    head, _, segment = prompt.partition("\nSEGMENT\n")
    turns = [m for m in map(_TURN_LINE.match, (segment or head).splitlines()) if m]
    if not turns:
        return None
    offered = _offered(head if segment else "")
    records = []
    dates = []
    for m in turns:
        date = _ISO_DATE.search(m["when"] or "")
        if date:
            dates.append(date.group(1))
        speaker = m["speaker"].strip()
        long_words = {w.lower() for w in _WORD.findall(m["text"]) if len(w) > 5}
        cited = [(ref, text) for ref, text in offered if len(long_words & {w.lower() for w in _WORD.findall(text) if len(w) > 5}) >= 2]
        records.append(
            {
                "type": "fact",
                "text": f"{speaker}: {m['text']}",
                "entities": [speaker],
                "topics": [w.lower() for w in _WORD.findall(m["text"]) if len(w) > 5][:2],
                "time": {"start": date.group(1), "end": date.group(1), "granularity": "day", "expression": None} if date else None,
                "source_turn_ids": [m["tid"]],
                "supersedes": [ref for ref, text in cited if not _NEVER.search(text)],
                "contradicts": [ref for ref, text in cited if _NEVER.search(text)],
            }
        )
    state = {
        "entities": [{"name": w, "aliases": [], "referent": w} for w in _capitalized(prompt)[:8]],
        "date_anchor": dates[-1] if dates else None,
        "open_threads": [f"after {turns[-1]['tid']}"],
    }
    return {"records": records, "state": state}


_OFFERED_LINE = re.compile(r"^\[(?P<ref>m\d+)\]\s+(?:\([^)\n]*\)\s+)?(?P<text>.+)$")
_RECENT_WITH_ID = re.compile(r"^- \[[^\]\n]+\] (?P<text>.+?) \[(?P<ref>m\d+)\]$")
_NEVER = re.compile(r"(?i)\bnever\b")


def _offered(context: str) -> list[tuple[str, str]]:
    """(id, text) of the earlier records an encode prompt offers for links."""
    found = [(m["ref"], m["text"]) for m in map(_RECENT_WITH_ID.match, context.splitlines()) if m]
    return found + [(m["ref"], m["text"]) for m in map(_OFFERED_LINE.match, context.splitlines()) if m]


def _question(messages: list[dict]) -> str:
    prompt = _user_text(messages)
    m = re.search(r"(?im)^\s*question\s*:\s*(.+?)\s*$", prompt)
    return m.group(1) if m else prompt.strip().splitlines()[-1] if prompt.strip() else ""


def _hook_plan(messages: list[dict]) -> dict:
    """One route whose goal is the `Question: ...` line (else the last user line)."""
    q = _question(messages)
    return {
        "routes": [
            {
                "goal": q,
                "search_terms": [w for w in _WORD.findall(q) if len(w) > 3][:6],
                "entities": _capitalized(q)[:4],
                "topics": [],
                "time_window": None,
            }
        ]
    }


_EVIDENCE_LINE = re.compile(r"^\s*(?:[-*\u2022]\s+|\d+[.)]\s+|\[[^\]\n]+\]\s*)+(?P<text>\S.*)$")


def _hook_answer(messages: list[dict]) -> dict:
    """The first six words of the first evidence line: a line starting with `- `, `* `, `1. `
    or `[...]` (markers and leading [tags] stripped); else of the question."""
    for line in _user_text(messages).splitlines():
        m = _EVIDENCE_LINE.match(line)
        if m:
            text = re.sub(r"^[^:]{1,40}:\s+", "", m["text"])  # drop a "Speaker (date):" prefix
            return {"answer": " ".join(text.split()[:6])}
    return {"answer": " ".join(_question(messages).split()[:6])}


_ABSTAINS = re.compile(r"(?i)\b(?:not|no|never|unknown|unanswerable|cannot|can't|don't|didn't|isn't|wasn't)\b")


def _hook_judge(messages: list[dict]) -> dict:
    """CORRECT when the reference line and the answer line share a word, else WRONG. Reads
    LoCoMo's prompt (`Gold answer:` / `Generated answer:`) and LongMemEval's (`Correct Answer:`,
    `Rubric:` or `Explanation:` / `Model Response:`). LongMemEval's abstention prompt asks whether
    the model declined: CORRECT when the response has a word of refusal (no, not, unknown...)."""
    prompt = _user_text(messages)
    gold_key = r"gold(?:\s+answer)?|reference(?:\s+answer)?|ground truth|correct answer|rubric|explanation"
    gold = re.search(rf"(?im)^\s*(?:{gold_key})\s*:\s*(.*)$", prompt)
    pred = re.search(r"(?im)^\s*(?:generated answer|predicted answer|prediction|model response|response|answer)\s*:\s*(.*)$", prompt)
    if not gold or not pred:
        return {"label": "WRONG"}
    if re.search(r"(?i)identify the question as unanswerable", prompt):
        return {"label": "CORRECT" if _ABSTAINS.search(pred.group(1)) else "WRONG"}
    shared = {w.lower() for w in _WORD.findall(gold.group(1))} & {w.lower() for w in _WORD.findall(pred.group(1))}
    return {"label": "CORRECT" if shared else "WRONG"}


def _hook_rubric(messages: list[dict]) -> dict:
    """A rubric nugget's grade: 1 when the answer has every word of four letters or more of the
    criterion, 0.5 when it has some, else 0 (reads `Rubric criterion:` / `Answer to grade:`)."""
    prompt = _user_text(messages)
    crit = re.search(r"(?im)^\s*rubric criterion\s*:\s*(.*)$", prompt)
    pred = re.search(r"(?im)^\s*answer to grade\s*:\s*(.*)$", prompt)
    if not crit or not pred:
        return {"score": 0}
    want = {w.lower() for w in _WORD.findall(crit.group(1)) if len(w) >= 4}
    have = {w.lower() for w in _WORD.findall(pred.group(1))}
    if not want or not want & have:
        return {"score": 0}
    return {"score": 1 if want <= have else 0.5}


def hook_for(schema_name: str) -> Callable[[list[dict]], dict | None] | None:
    if schema_name.startswith("EncodeOutput"):
        return _hook_encode
    return {"QueryPlan": _hook_plan, "AnswerOutput": _hook_answer, "JudgeOutput": _hook_judge,
            "RubricGrade": _hook_rubric}.get(schema_name)


def reply_for(messages: list[dict], schema_name: str, schema: dict) -> Any:
    """A schema-valid reply object: hook draft (if any) conformed to the schema."""
    words = _WORD.findall(_user_text(messages)) or ["text"]
    hook = hook_for(schema_name)
    draft = hook(messages) if hook else None
    value = generate(schema, schema, words) if draft is None else conform(draft, schema, schema, words)
    validator(schema).validate(value)  # a bug here must fail loudly, not reach the client
    return value


# --------------------------------------------------------------------------------------------
# Embeddings
# --------------------------------------------------------------------------------------------
EMBEDDING_DIM = 384  # the width without `dimensions`: MiniLM's, so configs need no change


@functools.lru_cache(maxsize=65536)
def _seeded_vector(key: str, dim: int) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "little")
    vec = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    vec.setflags(write=False)
    return vec


def embedding_for(text: str, dim: int = EMBEDDING_DIM) -> np.ndarray:
    """A deterministic vector for `text`: the sum of one seeded random vector per lowercased
    word (so texts sharing words are close, and retrieval over it means something) plus a
    smaller one for the whole text (so different texts never coincide). Not unit length, on
    purpose: the client must normalize."""
    words = [w.lower() for w in _WORD.findall(text)]
    vec = 0.5 * _seeded_vector("text:" + text, dim)
    for w in words:
        vec = vec + _seeded_vector("word:" + w, dim)
    return vec.astype(np.float32)


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------
def _common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class FakeOpenAIServer:
    """The aiohttp app on its own event loop in a daemon thread; use as a context manager."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, model: str = "fake-model", faults: Faults | None = None,
                 embedding_dim: int = EMBEDDING_DIM):
        self.host = host
        self.port = port
        self.model = model
        self.embedding_dim = embedding_dim  # width of /v1/embeddings vectors when a request sets no `dimensions`
        self._faults = faults or Faults()
        self._rng = random.Random(self._faults.seed)
        self._lock = threading.Lock()
        self._requests: list[dict] = []
        self._in_flight = 0
        self._max_concurrency = 0
        self._last_system = ""
        self._answered = 0  # requests let through since the faults were set (the outage counts them)
        self._site: web.SockSite | None = None  # None while a "refuse" outage keeps the port closed
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # ---- lifecycle -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def __enter__(self) -> "FakeOpenAIServer":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "FakeOpenAIServer":
        count_tokens("warm up")  # load o200k now, not inside the first timed request (~1.3 s)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=self._run, args=(sock,), name="fake-openai", daemon=True)
        self._thread.start()
        self._started.wait(30)
        if self._start_error is not None:
            raise RuntimeError("fake OpenAI server failed to start") from self._start_error
        return self

    def _run(self, sock: socket.socket) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve(sock))
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            self._start_error = exc
            self._started.set()
            return
        self._loop.run_forever()
        self._loop.close()

    async def _serve(self, sock: socket.socket) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.get("/v1/models", self._models),
                web.post("/v1/chat/completions", self._chat),
                web.post("/v1/embeddings", self._embeddings),
                web.post("/admin/faults", self._admin_faults),
                web.post("/admin/reset", self._admin_reset),
                web.get("/admin/requests", self._admin_requests),
                web.get("/admin/usage", self._admin_usage),
            ]
        )
        # handler_cancellation: a hung handler ends when the client gives up on it.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()
        self._started.set()

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return

        async def shutdown():
            await self._runner.cleanup()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop = self._thread = None

    # ---- test API --------------------------------------------------------------------------
    def set_faults(self, faults: Faults | None = None, **changes) -> Faults:
        """Replace the faults (`faults`) or change some fields (`latency_s=0.2`, `schedule=[...]`).
        The probability generator is reseeded, so a run is reproducible from this point."""
        with self._lock:
            new = faults if faults is not None else Faults(**{**asdict(self._faults), **changes})
            self._faults = new
            self._rng = random.Random(new.seed)
            self._answered = 0
        self._sync_listening()
        return copy.deepcopy(new)

    @property
    def faults(self) -> Faults:
        with self._lock:
            return copy.deepcopy(self._faults)

    def reset(self) -> None:
        """Forget recorded requests, concurrency and the prefix-cache state (faults stay)."""
        with self._lock:
            self._requests.clear()
            self._max_concurrency = 0
            self._last_system = ""

    @property
    def requests(self) -> list[dict]:
        """One dict per request, in arrival order: endpoint ("chat" or "embeddings"), messages,
        schema_name, schema, max_tokens, fault, status, usage (None unless status 200), reply,
        authorization, t_start, t_end. An embeddings request has messages [] and adds input,
        dimensions and encoding_format (its reply: the number of vectors sent)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def max_concurrency(self) -> int:
        with self._lock:
            return self._max_concurrency

    def total_usage(self) -> dict[str, int]:
        """Sums over the replies sent with status 200 (the ones a client is billed for)."""
        with self._lock:
            return _sum_usage(self._requests)

    # ---- handlers --------------------------------------------------------------------------
    async def _models(self, _request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": self.model, "object": "model", "created": 0, "owned_by": "fake"}]}
        )

    # ---- outage ------------------------------------------------------------------------------
    def _outage(self) -> Faults | None:
        """None when this request may be answered (it is counted), else the outage's faults."""
        with self._lock:
            f = self._faults
            if f.outage_after is None or self._answered < f.outage_after:
                self._answered += 1
                return None
            return copy.deepcopy(f)

    async def _drop(self, request: web.Request, faults: Faults, record: dict) -> web.Response:
        """No reply at all: the connection is closed under the client (which sees it end without
        a response); under "refuse" the server also stops listening."""
        record.update(fault="outage", status="dropped", t_end=time.time())
        with self._lock:
            self._requests.append(record)
        if faults.outage == "refuse":
            await self._listen(False)
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=503)  # never sent: the connection is gone

    async def _listen(self, on: bool) -> None:
        """Start or stop accepting connections on the server's port (runs on the server loop)."""
        if on == (self._site is not None):
            return
        if not on:
            site, self._site = self._site, None
            await site.stop()  # closes the listening socket; open connections stay until dropped
            return
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.port))
        self._site = web.SockSite(self._runner, sock)
        await self._site.start()

    def _sync_listening(self) -> None:
        """After the faults change: listen unless a "refuse" outage has already begun."""
        if self._loop is None:
            return
        with self._lock:
            f = self._faults
            on = not (f.outage == "refuse" and f.outage_after is not None and self._answered >= f.outage_after)
        done = asyncio.run_coroutine_threadsafe(self._listen(on), self._loop)
        if threading.current_thread() is not self._thread:  # from /admin/faults it runs on the loop: no wait
            done.result(timeout=10)

    def _next_fault(self) -> tuple[str, Faults]:
        with self._lock:
            f = self._faults
            if f.schedule:
                return f.schedule.pop(0), copy.deepcopy(f)
            r = self._rng.random()
            for kind, p in (("429", f.p_429), ("500", f.p_500), ("hang", f.p_hang), ("truncate", f.p_truncate), ("invalid", f.p_invalid)):
                if r < p:
                    return kind, copy.deepcopy(f)
                r -= p
            return "ok", copy.deepcopy(f)

    async def _chat(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            messages = body["messages"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "invalid_request_error", "body must be JSON with a messages list")
        outage = self._outage()
        fault, faults = ("outage", outage) if outage is not None else self._next_fault()
        rf = body.get("response_format") or {}
        js = rf.get("json_schema") or {}
        record = {
            "endpoint": "chat",
            "messages": messages,
            "schema_name": js.get("name"),
            "schema": js.get("schema"),
            "max_tokens": body.get("max_completion_tokens", body.get("max_tokens")),
            "model": body.get("model"),
            "fault": fault,
            "status": None,
            "usage": None,
            "reply": None,
            "authorization": request.headers.get("Authorization"),
            "t_start": time.time(),
            "t_end": None,
        }
        if outage is not None:
            return await self._drop(request, outage, record)
        return await self._tracked(record, faults, lambda: self._respond(body, messages, js, fault, faults, record))

    async def _respond(self, body: dict, messages: list[dict], js: dict, fault: str, faults: Faults, record: dict) -> web.Response:
        headers = {"retry-after-ms": str(faults.retry_after_ms)} if faults.retry_after_ms is not None else {}
        if fault == "429":
            return _error(429, "rate_limit_exceeded", "Rate limit reached (injected)", headers)
        if fault == "500":
            return _error(500, "server_error", "Internal error (injected)", headers)
        if fault == "auth":  # the worst case: a server that echoes the key it was given
            return _error(401, "invalid_api_key", f"Incorrect API key provided: {record['authorization']}")
        if fault == "hang":
            await asyncio.sleep(faults.hang_s)
            return _error(504, "timeout", "hung (injected)")
        text, finish = self._reply_text(messages, js, fault)
        text, finish = _cap_at_max_tokens(text, finish, record["max_tokens"])
        usage = self._usage(messages, text)
        with self._lock:
            record["usage"] = usage
            record["reply"] = text
        return web.json_response(
            {
                "id": f"chatcmpl-fake-{len(self._requests)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or self.model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {
                    "prompt_tokens": usage["prompt_tokens"],
                    "completion_tokens": usage["completion_tokens"],
                    "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"],
                    "prompt_tokens_details": {"cached_tokens": usage["cached_tokens"]},
                },
            }
        )

    def _reply_text(self, messages: list[dict], js: dict, fault: str) -> tuple[str, str]:
        schema = js.get("schema")
        if not schema:  # plain chat: echo the start of the prompt
            return " ".join(_user_text(messages).split()[:12]), "stop"
        value = reply_for(messages, js.get("name") or "", schema)
        if fault == "invalid" and isinstance(value, dict) and schema.get("required"):
            value = {k: v for k, v in value.items() if k != schema["required"][0]}
        text = json.dumps(value, ensure_ascii=False)
        if fault == "truncate":
            return text[: max(1, len(text) // 2)], "length"
        return text, "stop"

    def _usage(self, messages: list[dict], reply: str) -> dict[str, int]:
        system = "\n".join(_text(m.get("content")) for m in messages if m.get("role") == "system")
        with self._lock:
            prefix = system[: _common_prefix_len(system, self._last_system)]
            self._last_system = system
        return {
            "prompt_tokens": sum(count_tokens(_text(m.get("content"))) for m in messages),
            "completion_tokens": count_tokens(reply),
            "cached_tokens": count_tokens(prefix) if prefix else 0,
        }

    # ---- embeddings ------------------------------------------------------------------------
    async def _embeddings(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
            inputs = body["input"]
        except (ValueError, KeyError, TypeError):
            return _error(400, "invalid_request_error", "body must be JSON with an input")
        inputs = [inputs] if isinstance(inputs, str) else inputs
        if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
            return _error(400, "invalid_request_error", "input must be a string or a non-empty list of strings (token arrays are not supported here)")
        if len(inputs) > 2048:
            return _error(400, "invalid_request_error", f"'$.input' has {len(inputs)} items; at most 2048")
        if any(t == "" for t in inputs):  # as OpenAI: the whole request is refused
            return _error(400, "invalid_request_error", "'$.input' is invalid: input cannot be an empty string")
        dim = body.get("dimensions") or self.embedding_dim
        if not isinstance(dim, int) or dim <= 0:
            return _error(400, "invalid_request_error", f"dimensions must be a positive integer, got {dim!r}")
        outage = self._outage()
        fault, faults = ("outage", outage) if outage is not None else self._next_fault()
        record = {
            "endpoint": "embeddings",
            "messages": [],
            "schema_name": None,
            "schema": None,
            "max_tokens": None,
            "model": body.get("model"),
            "input": inputs,
            "dimensions": body.get("dimensions"),
            "encoding_format": body.get("encoding_format"),
            "fault": fault,
            "status": None,
            "usage": None,
            "reply": None,
            "authorization": request.headers.get("Authorization"),
            "t_start": time.time(),
            "t_end": None,
        }
        if outage is not None:
            return await self._drop(request, outage, record)

        async def respond() -> web.Response:
            if fault in ("429", "500", "auth", "hang"):  # the same error replies as chat
                return await self._respond(body, [], {}, fault, faults, record)
            return self._embedding_reply(body, inputs, dim, fault, record)

        return await self._tracked(record, faults, respond)

    async def _tracked(self, record: dict, faults: Faults, respond) -> web.Response:
        """Record one request (concurrency, latency, status, end time) around `respond()`, the
        same for every endpoint."""
        with self._lock:
            self._requests.append(record)
            self._in_flight += 1
            self._max_concurrency = max(self._max_concurrency, self._in_flight)
        try:
            if faults.latency_s:
                await asyncio.sleep(faults.latency_s)
            response = await respond()
            with self._lock:
                record["status"] = response.status
            return response
        except asyncio.CancelledError:  # the client hung up (a hang past its timeout)
            with self._lock:
                record["status"] = "client_disconnected"
            raise
        finally:
            with self._lock:
                self._in_flight -= 1
                record["t_end"] = time.time()

    def _embedding_reply(self, body: dict, inputs: list[str], dim: int, fault: str, record: dict) -> web.Response:
        as_base64 = body.get("encoding_format") == "base64"  # the openai client's default
        data = []
        for i, text in enumerate(inputs):
            vec = embedding_for(text, dim)
            value = base64.b64encode(vec.astype("<f4").tobytes()).decode() if as_base64 else [float(x) for x in vec]
            data.append({"object": "embedding", "index": i, "embedding": value})
        if fault == "invalid":  # one vector short: a client must notice, not shift rows
            data = data[:-1]
        # out of order on purpose (reversed): a client must place vectors by `index`
        data.reverse()
        usage = {"prompt_tokens": sum(count_tokens(t) for t in inputs), "completion_tokens": 0, "cached_tokens": 0}
        with self._lock:
            record["usage"] = usage
            record["reply"] = len(data)
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model") or self.model,
            "usage": {"prompt_tokens": usage["prompt_tokens"], "total_tokens": usage["prompt_tokens"]},
        }
        if fault == "truncate":  # a body cut off mid-way (a proxy dropping the connection)
            text = json.dumps(payload)
            return web.Response(text=text[: len(text) // 2], content_type="application/json")
        return web.json_response(payload)

    # ---- admin (for a server in another process) --------------------------------------------
    async def _admin_faults(self, request: web.Request) -> web.Response:
        try:
            changes = await request.json()
            faults = self.set_faults(**changes)
        except (ValueError, TypeError) as exc:
            return _error(400, "invalid_request_error", str(exc))
        return web.json_response(asdict(faults))

    async def _admin_reset(self, _request: web.Request) -> web.Response:
        self.reset()
        return web.json_response({"ok": True})

    async def _admin_requests(self, _request: web.Request) -> web.Response:
        return web.json_response({"requests": self.requests, "max_concurrency": self.max_concurrency})

    async def _admin_usage(self, _request: web.Request) -> web.Response:
        return web.json_response({**self.total_usage(), "max_concurrency": self.max_concurrency})


def _cap_at_max_tokens(text: str, finish: str, max_tokens: int | None) -> tuple[str, str]:
    """A real server stops at the completion limit: cut the reply there, finish_reason=length
    (so a too-small max_tokens shows up as truncated JSON, as it would against vLLM)."""
    if max_tokens is None or count_tokens(text) <= max_tokens:
        return text, finish
    return truncate_to_tokens(text, max_tokens), "length"


def _error(status: int, code: str, message: str, headers: dict | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": code, "code": code}}, status=status, headers=headers)


def _sum_usage(requests: list[dict]) -> dict[str, int]:
    total = {"prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0, "requests": len(requests), "ok": 0}
    for r in requests:
        if r["status"] == 200 and r["usage"]:
            total["ok"] += 1
            for k in ("prompt_tokens", "completion_tokens", "cached_tokens"):
                total[k] += r["usage"][k]
    return total


# --------------------------------------------------------------------------------------------
# A server in its own process (benchmarks): same admin API over HTTP
# --------------------------------------------------------------------------------------------
class RemoteFakeServer:
    """Handle on a fake server in another process, with the test API over /admin."""

    def __init__(self, host: str, port: int, process: subprocess.Popen | None = None):
        self.host, self.port, self.process = host, port, process

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _call(self, path: str, payload: dict | None = None) -> dict:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            f"http://{self.host}:{self.port}{path}", data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read())

    def set_faults(self, **changes) -> dict:
        return self._call("/admin/faults", changes)

    def reset(self) -> None:
        self._call("/admin/reset", {})

    @property
    def requests(self) -> list[dict]:
        return self._call("/admin/requests")["requests"]

    @property
    def max_concurrency(self) -> int:
        return self._call("/admin/usage")["max_concurrency"]

    def total_usage(self) -> dict[str, int]:
        usage = self._call("/admin/usage")
        usage.pop("max_concurrency", None)
        return usage


@contextlib.contextmanager
def spawn_fake_server(port: int = 0, *, python: str | None = None, ready_timeout_s: float = 30, **faults) -> Iterator[RemoteFakeServer]:
    """`python -m tests.support.fake_openai` in a subprocess (own GIL, like a real server)."""
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    repo = Path(__file__).resolve().parents[2]
    argv = [python or sys.executable, "-m", "tests.support.fake_openai", "--port", str(port), "--faults", json.dumps(faults)]
    proc = subprocess.Popen(argv, cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    handle = RemoteFakeServer("127.0.0.1", port, proc)
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"fake server exited with {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(OSError):
                handle._call("/v1/models")
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"fake server did not answer on port {port} within {ready_timeout_s} s")
            time.sleep(0.1)
        yield handle
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.fake_openai", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--model", default="fake-model")
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every chat request")
    parser.add_argument("--faults", default="{}", help='JSON of Faults fields, e.g. \'{"p_429": 0.1, "seed": 1}\'')
    args = parser.parse_args(argv)
    known = {f.name for f in fields(Faults)}
    spec = json.loads(args.faults)
    unknown = set(spec) - known
    if unknown:
        parser.error(f"unknown fault fields {sorted(unknown)}; known: {sorted(known)}")
    spec.setdefault("latency_s", args.latency)
    server = FakeOpenAIServer(host=args.host, port=args.port, model=args.model, faults=Faults(**spec))
    server.start()
    print(f"fake OpenAI server on {server.base_url}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(0.5):
        pass
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
