"""Stage 3, encode: one LLM call per segment turns it into self-contained memory records.

For segment k the call sees a stable instruction prefix (identical on every call, so vLLM's
prefix cache serves it), then the reference context rho_k = (d_{k-1}; the m most recent
records) truncated to a fixed token budget, then the segment's turns with ids, speakers and
session times. It returns records plus the resolution state d_k, which becomes part of
rho_{k+1}. Segments of one conversation are therefore encoded strictly in order; many
conversations are in flight at once (see `lychee_ray.runtime.stage.AsyncStage`).

The same call also says which earlier records each new one supersedes or contradicts (the
candidates ride in rho_k with short ids: ingest/links.py), and the rules slot detector adds its
links; they become `record_links` rows. No call is added for them.

A call that still fails after the client's retries and one repair gets `rules` records marked
`degraded=true`; the failure is counted in build_stats, its reason is an `errors` row (kind
`llm_failure`), and encoding goes on. Nothing is lost. One conversation's encode is bounded by
`llm.conversation_deadline_s`: past it, the remaining segments degrade the same way at once.
An outage is different: when the client's circuit breaker opens while a conversation is encoded
(`llm.breaker_failures` transient failures in a row), that conversation stops, keeps nothing and
is `pending`, to be encoded whole by the next run; it is not degraded.
"""

from __future__ import annotations

import hashlib
import logging
import time

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.links import ConversationLinks
from lychee_ray.ingest.reference_context import LinkCandidate, ReferenceContext
from lychee_ray.ingest.resume import prior_cost, resume_point
from lychee_ray.io.readers.common import ErrorEntry
from lychee_ray.llm.client import LLMClient, run_closing
from lychee_ray.llm.prompts import encode_messages
from lychee_ray.llm.schema import json_schema_for
from lychee_ray.redact import redact
from lychee_ray.rules.encoder import RulesEncoder
from lychee_ray.runtime.stage import AsyncStage, Resources, TransientError
from lychee_ray.schemas import Conversation, EncodeOutput, Segment
from lychee_ray.tables import BuildStats, Record, Turn
from lychee_ray.tokens import TokenCounter, count_tokens, token_counter

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------
def record_id(conversation_id: str, segment_id: str, index: int, text: str) -> str:
    """Stable: the same conversation, segment, position and text give the same id on a rerun."""
    return hashlib.sha1(f"{conversation_id}|{segment_id}|{index}|{text}".encode()).hexdigest()[:20]


def to_records(conv_id: str, seg: Segment, out: EncodeOutput, valid_turn_ids: list[str], backend: str, degraded: bool) -> list[Record]:
    """The reply's records as rows: every column the reply carries (`Record.llm_columns`, by its
    path in the reply), names and topics once each, and sources cut to this segment's turns
    (all of them when none is left)."""
    valid = set(valid_turn_ids)
    records = []
    for i, r in enumerate(out.records):
        carried = {col.name: _reply_value(r, col.reply_path) for col in Record.llm_columns()}
        carried["entities"] = list(dict.fromkeys(r.entities))
        carried["topics"] = list(dict.fromkeys(r.topics))
        carried["source_turn_ids"] = [t for t in r.source_turn_ids if t in valid] or list(valid_turn_ids)
        records.append(Record(conversation_id=conv_id, record_id=record_id(conv_id, seg.segment_id, i, r.text),
                              segment_id=seg.segment_id, backend=backend, degraded=degraded, **carried))
    return records


def _reply_value(reply, path: str):
    for part in path.split("."):
        reply = getattr(reply, part)
    return reply


def check_sources(valid_turn_ids: list[str]):
    """Semantic validation beyond the schema: records must cite turns of this segment."""
    valid = set(valid_turn_ids)

    def validate(out: EncodeOutput) -> None:
        for i, r in enumerate(out.records):
            bad = [t for t in r.source_turn_ids if t not in valid]
            if bad or not r.source_turn_ids:
                raise ValueError(f"records[{i}].source_turn_ids must be non-empty and drawn from {sorted(valid)}; got {r.source_turn_ids}")
            if not r.text.strip():
                raise ValueError(f"records[{i}].text is empty")

    return validate


def add_prior_cost(totals: BuildStats, prior: dict) -> None:
    """build_stats is what a conversation cost in all: a grown one adds the stored prefix's cost."""
    for name in ("llm_calls", "llm_failures", "prompt_tokens", "completion_tokens", "cached_tokens", "est_prompt_tokens", "est_completion_tokens",
                 "link_ids_dropped"):
        setattr(totals, name, getattr(totals, name) + int(prior.get(name) or 0))


def llm_failure_row(conv: Conversation, seg: Segment, error: str) -> dict:
    """The `errors` row that says why a segment was degraded (kind llm_failure)."""
    message = redact(f"segment {seg.segment_id} fell back to rules records (degraded): {error}")
    return ErrorEntry(conv.source_file, None, seg.segment_id, "llm_failure", message, conv.conversation_id).as_row()


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------
class EncodeStage(AsyncStage[Conversation]):
    name = "encode"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        # mostly waiting on the LLM: little CPU, many conversations in flight per actor
        self.resources = Resources(num_cpus=0.5, num_actors=cfg.encoder.num_actors, batch_size=cfg.encoder.conversations_in_flight)
        self.max_in_flight = cfg.encoder.conversations_in_flight
        self.rules = None
        self.client = None
        self._counter: TokenCounter | None = None

    @property
    def counter(self) -> TokenCounter:
        """What the context budget rho_k counts with (`cfg.tokenizer_spec`), loaded once per worker."""
        if self._counter is None:
            self._counter = token_counter(self.cfg.tokenizer_spec)
        return self._counter

    def setup(self) -> None:
        self.rules = RulesEncoder()
        self.counter  # a tokenizer that cannot load fails here, before any call
        if self.cfg.llm.backend == "openai":
            self.client = LLMClient(self.cfg.llm)

    def process_batch(self, convs: list[Conversation]) -> list[Conversation]:
        return run_closing(self.process_batch_async(convs), self.client)

    def work_estimate(self, conv: Conversation) -> float:
        return len(conv.segments)  # one sequential call per segment

    @property
    def backend_label(self) -> str:
        return "rules" if self.client is None else self.cfg.llm.model

    async def process_async(self, conv: Conversation) -> None:
        enc = self.cfg.encoder
        # a grown conversation resumes after the segments the store already holds unchanged
        start, ctx, conv.records, aliases, reused_degraded = resume_point(conv)
        links = ConversationLinks(conv, enc)
        conv.links = links.resume(conv, conv.records)
        totals = BuildStats(encode_units=len(conv.segments), backend=self.cfg.llm.backend, model=self.backend_label, encode_mode=enc.mode)
        totals.degraded_segments = reused_degraded
        deadline = time.monotonic() + self.cfg.llm.conversation_deadline_s
        trips = self.client.breaker.trips if self.client is not None else 0
        for seg in conv.segments[start:]:
            turns = [conv.turns[i] for i in seg.turn_idxs]
            use_ctx = ctx if enc.use_context else ReferenceContext()
            # what the prompt offers for links (under rules only the token estimate needs it)
            citable = (links.candidates(conv, seg), links.recent_ids(use_ctx.recent)) if self.client is not None or enc.estimate_tokens else ([], None)
            out, failure, shown = await self._encode_segment(conv.conversation_id, seg, turns, use_ctx, citable, totals, deadline)
            degraded = failure is not None
            if degraded and self._outage_since(trips):
                break  # the endpoint is down: the rest would fail at once; pending below
            if degraded:
                conv.errors.append(llm_failure_row(conv, seg, failure))
            new = to_records(conv.conversation_id, seg, out, [t.turn_id for t in turns], "rules" if degraded else self.backend_label, degraded)
            conv.records.extend(new)
            conv.links.extend(links.add_segment(new, out, shown, from_llm=self.client is not None and not degraded))
            for ent in out.state.entities:
                for alias in ent.aliases:
                    aliases[alias.lower()] = ent.name
            ctx = ctx.advance(out, enc.context_records)
            seg.context_json = ctx.to_json()
        totals.link_ids_dropped = links.dropped
        self._pending_on_outage(conv, totals, trips)
        add_prior_cost(totals, prior_cost(conv))
        conv.stats = totals
        conv.entity_aliases = aliases
        if totals.degraded_segments and conv.status == "ok":
            conv.status = "degraded"
            conv.error = f"{totals.degraded_segments} of {len(conv.segments)} segments fell back to rules records"

    def _outage_since(self, trips: int) -> bool:
        """Whether the client's circuit breaker is open, or opened since it had `trips` openings."""
        return self.client is not None and (self.client.breaker.is_open or self.client.breaker.trips != trips)

    def _pending_on_outage(self, conv: Conversation, totals: BuildStats, trips: int) -> None:
        """An outage is no fault of the conversation: if the breaker opened while it was encoded
        and a segment failed, none of it is kept (its failures may be the outage's too). The
        conversation is `pending` (the writer commits no segments or records of it), the next run
        encodes it whole, and nothing is marked degraded."""
        if not (totals.llm_failures and self._outage_since(trips)):
            return
        conv.stats = totals  # the calls it made are still counted in the run summary
        breaker = self.client.breaker
        raise TransientError(
            f"the LLM endpoint {breaker.endpoint} became unavailable while this conversation was encoded "
            f"({breaker.consecutive} transient failures in a row, last: {breaker.last_error}); pending, the next run encodes it whole"
        )

    async def _encode_segment(
        self, conv_id: str, seg: Segment, turns: list[Turn], ctx: ReferenceContext, citable: tuple[list[LinkCandidate], list[str] | None],
        totals: BuildStats, deadline: float,
    ) -> tuple[EncodeOutput, str | None, list[LinkCandidate]]:
        """(the segment's reply, None, the records its prompt offered for links) or (rules
        fallback records, why the LLM path failed, those records). `citable`: the link candidates
        and the ids of rho's recent records (ingest/links.py)."""
        enc = self.cfg.encoder
        if self.client is None:
            out = self._rules(turns, ctx)
            if enc.estimate_tokens:  # the estimate is o200k (compared with the paper); the budget is not
                context_text, _ = ctx.render_with(enc.context_token_budget, self.counter, *citable)
                totals.est_prompt_tokens += sum(count_tokens(m["content"]) for m in encode_messages(context_text, turns, enc.summary_records))
                totals.est_completion_tokens += count_tokens(out.model_dump_json())
            return out, None, []
        context_text, shown = ctx.render_with(enc.context_token_budget, self.counter, *citable)
        messages = encode_messages(context_text, turns, enc.summary_records)
        tag = f"{conv_id}/{seg.segment_id}"
        if time.monotonic() >= deadline:
            error = f"the conversation deadline (llm.conversation_deadline_s={self.cfg.llm.conversation_deadline_s:g} s) passed before this segment was sent"
            return *self._degrade(tag, turns, ctx, totals, error), shown

        turn_ids = [t.turn_id for t in turns]
        refs = [c.ref for c in shown]
        schema = json_schema_for(
            EncodeOutput,
            self.cfg.llm.schema_dialect,
            # only the ids this prompt shows may be cited; none shown: the lists stay empty
            enums={"source_turn_ids": turn_ids, **({"supersedes": refs, "contradicts": refs} if refs else {})},
            max_items={"records": 1 if enc.summary_records else enc.max_records_per_call, "*": enc.max_list_items,
                       **({} if refs else {"supersedes": 0, "contradicts": 0})},
            max_length={"text": enc.max_record_chars, "*": enc.max_field_chars},
        )
        result = await self.client.structured(
            messages, EncodeOutput, schema=schema, max_tokens=enc.max_tokens, validate=check_sources(turn_ids), tag=tag, deadline=deadline
        )
        u = result.usage
        totals.llm_calls += u.calls
        totals.prompt_tokens += u.prompt_tokens
        totals.completion_tokens += u.completion_tokens
        totals.cached_tokens += u.cached_tokens
        if result.parsed is not None:
            return result.parsed, None, shown
        return *self._degrade(tag, turns, ctx, totals, result.error or "no reply"), shown

    def _degrade(self, tag: str, turns: list[Turn], ctx: ReferenceContext, totals: BuildStats, error: str) -> tuple[EncodeOutput, str]:
        totals.llm_failures += 1
        totals.degraded_segments += 1
        log.warning("%s: encode failed (%s); using degraded rules records", tag, error)
        return self._rules(turns, ctx), error

    def _rules(self, turns: list[Turn], ctx: ReferenceContext) -> EncodeOutput:
        return self.rules.encode(turns, ctx.state, ctx.recent, summary=self.cfg.encoder.summary_records)
