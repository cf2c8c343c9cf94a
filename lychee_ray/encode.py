"""Stage 3, encode: one LLM call per segment turns it into self-contained memory records.

For segment k the call sees a stable instruction prefix (identical on every call, so vLLM's
prefix cache serves it), then the reference context rho_k = (d_{k-1}; the m most recent
records) truncated to a fixed token budget, then the segment's turns with ids, speakers and
session times. It returns records plus the resolution state d_k, which becomes part of
rho_{k+1}. Segments of one conversation are therefore encoded strictly in order; many
conversations are in flight at once (see `stages.AsyncStage`).

A call that still fails after the client's retries and one repair gets `rules` records marked
`degraded=true`; the failure is counted in build_stats and encoding goes on. Nothing is lost.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass, field

from .config import LycheeConfig
from .schemas import (
    Conversation,
    EncodedRecord,
    EncodeOutput,
    MemoryRecord,
    ResolutionState,
    Segment,
    Turn,
)
from .stages import AsyncStage
from .tokens import count_tokens

log = logging.getLogger("lychee_ray.encode")

ENCODE_SYSTEM_PROMPT = """You turn one segment of a long conversation into long-term memory records.

Return JSON only, matching the schema.
records: atomic, self-contained statements worth remembering later.
- type: fact | preference | event | constraint | procedure | failure_pattern | tool_affordance.
- text: one statement that is understandable with no other context. Use names, never pronouns
  ("I", "you", "she", "they" become the person's name). Replace relative dates ("yesterday",
  "last week") with absolute dates computed from the turn's session date.
- entities: people, places, organizations, objects named in the record.
- topics: 1-3 short topic labels.
- time: when the event happened (ISO dates YYYY-MM-DD; granularity day|week|month|year|none),
  with the original expression; time is null when the turns say nothing about when.
- source_turn_ids: the ids of the turns the record comes from.
Skip greetings and small talk. Do not invent facts that are not in the turns.
state: the resolution state for the next segment: entities with aliases and who/what they
refer to, the current date anchor (ISO date), and open threads (unresolved questions or plans).
The REFERENCE CONTEXT holds the previous state and recent records: use it to resolve who
"he", "she", "it" or "that" refers to. Never copy it into new records."""

SUMMARY_INSTRUCTION = "Return exactly ONE record: a summary of the whole segment (type fact)."


# --------------------------------------------------------------------------------------------
# The reference context rho_k
# --------------------------------------------------------------------------------------------
@dataclass
class ReferenceContext:
    state: ResolutionState | None = None
    recent: list[EncodedRecord] = field(default_factory=list)

    def advance(self, out: EncodeOutput, m: int) -> "ReferenceContext":
        """rho_{k+1} = (d_k; the m most recent records)."""
        return ReferenceContext(state=out.state, recent=(self.recent + list(out.records))[-m:] if m else [])

    def render(self, budget_tokens: int) -> str:
        """Text of rho_k within `budget_tokens`: the state first (it resolves references), then
        as many of the most recent records as fit, newest kept."""
        if self.state is None and not self.recent:
            return "(none: this is the first segment)"
        parts = []
        if self.state is not None:
            state_text = "state: " + json.dumps(self.state.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
            parts.append(_truncate(state_text, budget_tokens))
        used = sum(count_tokens(p) for p in parts)
        lines = []
        for rec in reversed(self.recent):
            line = f"- [{rec.type}] {rec.text}" + (f" ({rec.time.start})" if rec.time.start else "")
            cost = count_tokens(line) + 1
            if used + cost > budget_tokens:
                break
            lines.append(line)
            used += cost
        if lines:
            parts.append("recent records:\n" + "\n".join(reversed(lines)))
        return "\n".join(parts)


def _truncate(text: str, budget: int) -> str:
    from .tokens import truncate_to_tokens

    return truncate_to_tokens(text, budget)


def render_turns(turns: list[Turn]) -> str:
    """Turn lines as the model sees them: `[D1:3] Caroline (2023-05-08 13:56): text`."""
    lines = []
    for t in turns:
        when = f" ({t.timestamp.replace('T', ' ')[:16]})" if t.timestamp else ""
        lines.append(f"[{t.turn_id}] {t.speaker}{when}: {t.text}")
    return "\n".join(lines)


def encode_messages(context_text: str, turns: list[Turn], summary: bool = False) -> list[dict]:
    user = f"REFERENCE CONTEXT\n{context_text}\n\nSEGMENT\n{render_turns(turns)}"
    if summary:
        user += f"\n\n{SUMMARY_INSTRUCTION}"
    return [{"role": "system", "content": ENCODE_SYSTEM_PROMPT}, {"role": "user", "content": user}]


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------
def record_id(conversation_id: str, segment_id: str, index: int, text: str) -> str:
    """Stable: the same conversation, segment, position and text give the same id on a rerun."""
    return hashlib.sha1(f"{conversation_id}|{segment_id}|{index}|{text}".encode()).hexdigest()[:20]


def to_memory_records(conv_id: str, seg: Segment, out: EncodeOutput, valid_turn_ids: list[str], backend: str, degraded: bool) -> list[MemoryRecord]:
    valid = set(valid_turn_ids)
    records = []
    for i, r in enumerate(out.records):
        sources = [t for t in r.source_turn_ids if t in valid] or list(valid_turn_ids)
        records.append(
            MemoryRecord(
                record_id=record_id(conv_id, seg.segment_id, i, r.text),
                segment_id=seg.segment_id,
                type=r.type,
                text=r.text,
                entities=list(dict.fromkeys(r.entities)),
                topics=list(dict.fromkeys(r.topics)),
                time_start=r.time.start,
                time_end=r.time.end,
                time_granularity=r.time.granularity,
                time_expression=r.time.expression,
                source_turn_ids=sources,
                backend=backend,
                degraded=degraded,
            )
        )
    return records


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


# --------------------------------------------------------------------------------------------
# The stage
# --------------------------------------------------------------------------------------------
class EncodeStage(AsyncStage):
    name = "encode"

    def __init__(self, cfg: LycheeConfig):
        self.cfg = cfg
        self.max_in_flight = cfg.encoder.conversations_in_flight
        self.rules = None
        self.client = None

    def setup(self) -> None:
        from .rules import RulesEncoder

        self.rules = RulesEncoder()
        if self.cfg.llm.backend == "openai":
            from .llm import LLMClient

            self.client = LLMClient(self.cfg.llm)

    def process_batch(self, convs: list[Conversation]) -> list[Conversation]:
        from .llm import run_closing

        return run_closing(self.process_batch_async(convs), self.client)

    def work_estimate(self, conv: Conversation) -> float:
        return len(conv.segments)  # one sequential call per segment

    @property
    def backend_label(self) -> str:
        return "rules" if self.client is None else self.cfg.llm.model

    async def process_async(self, conv: Conversation) -> None:
        enc = self.cfg.encoder
        ctx = ReferenceContext()
        totals = dict(encode_units=len(conv.segments), llm_calls=0, llm_failures=0, degraded_segments=0, prompt_tokens=0, completion_tokens=0, cached_tokens=0, est_prompt_tokens=0, est_completion_tokens=0)
        aliases: dict[str, str] = {}
        conv.records = []
        for seg in conv.segments:
            turns = [conv.turns[i] for i in seg.turn_idxs]
            use_ctx = ctx if enc.use_context else ReferenceContext()
            out, degraded = await self._encode_segment(conv.conversation_id, seg, turns, use_ctx, totals)
            conv.records.extend(
                to_memory_records(conv.conversation_id, seg, out, [t.turn_id for t in turns], "rules" if degraded else self.backend_label, degraded)
            )
            for ent in out.state.entities:
                for alias in ent.aliases:
                    aliases[alias.lower()] = ent.name
            ctx = ctx.advance(out, enc.context_records)
        conv.stats.update(totals)
        conv.stats["entity_aliases"] = aliases
        conv.stats["backend"] = self.cfg.llm.backend
        conv.stats["model"] = self.backend_label
        conv.stats["encode_mode"] = enc.mode
        if totals["degraded_segments"] and conv.status == "ok":
            conv.status = "degraded"
            conv.error = f"{totals['degraded_segments']} of {len(conv.segments)} segments fell back to rules records"

    async def _encode_segment(self, conv_id: str, seg: Segment, turns: list[Turn], ctx: ReferenceContext, totals: dict) -> tuple[EncodeOutput, bool]:
        enc = self.cfg.encoder
        if self.client is None:
            out = self._rules(turns, ctx)
            if enc.estimate_tokens:
                messages = encode_messages(ctx.render(enc.context_token_budget), turns, enc.summary_records)
                totals["est_prompt_tokens"] += sum(count_tokens(m["content"]) for m in messages)
                totals["est_completion_tokens"] += count_tokens(out.model_dump_json())
            return out, False
        from .llm import json_schema_for

        turn_ids = [t.turn_id for t in turns]
        messages = encode_messages(ctx.render(enc.context_token_budget), turns, enc.summary_records)
        schema = json_schema_for(
            EncodeOutput,
            self.cfg.llm.schema_dialect,
            enums={"source_turn_ids": turn_ids},
            max_items={"records": 1 if enc.summary_records else enc.max_records_per_call, "*": enc.max_list_items},
            max_length={"text": enc.max_record_chars, "*": enc.max_field_chars},
        )
        tag = f"{conv_id}/{seg.segment_id}"
        result = await self.client.structured(
            messages, EncodeOutput, schema=schema, max_tokens=enc.max_tokens, validate=check_sources(turn_ids), tag=tag
        )
        u = result.usage
        totals["llm_calls"] += u.calls
        totals["prompt_tokens"] += u.prompt_tokens
        totals["completion_tokens"] += u.completion_tokens
        totals["cached_tokens"] += u.cached_tokens
        if result.parsed is not None:
            return result.parsed, False
        totals["llm_failures"] += 1
        totals["degraded_segments"] += 1
        log.warning("%s: encode failed (%s); using degraded rules records", tag, result.error)
        return self._rules(turns, ctx), True

    def _rules(self, turns: list[Turn], ctx: ReferenceContext) -> EncodeOutput:
        return self.rules.encode(turns, ctx.state, ctx.recent, summary=self.cfg.encoder.summary_records)
