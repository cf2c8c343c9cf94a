"""The reference context rho_k of segment encoding: (d_{k-1}; the m most recent records).

Pure and small: `encode` advances it after every segment, whether the LLM or the rules fallback
produced the output, and renders it into the prompt within a fixed token budget (the state first,
since it resolves references, then the earlier records offered as link candidates with their ids
(ingest/links.py picks them), then as many of the newest records as fit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lychee_ray.llm.prompts import LINK_CANDIDATES_HEADER, candidate_line
from lychee_ray.schemas import EncodedRecord, EncodeOutput, ResolutionState
from lychee_ray.tokens import TokenCounter, token_counter


@dataclass(frozen=True)
class LinkCandidate:
    """An earlier record offered to one encode call, under a short id the reply may cite in a
    record's `supersedes` / `contradicts` (a stored record id would cost ~12 tokens each)."""

    ref: str  # "m1", ... within the call that shows it ("" before it is shown)
    record_id: str
    text: str
    said: str | None  # the day it was said

    def line(self) -> str:
        return candidate_line(self.ref, self.text, self.said)


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

    def to_json(self) -> str:
        """Stored with each segment (`Segment.context_json`) so a later run that finds the
        conversation grown resumes from here instead of re-encoding what came before."""
        return json.dumps(
            {
                "state": None if self.state is None else self.state.model_dump(mode="json"),
                "recent": [r.model_dump(mode="json") for r in self.recent],
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str | None) -> "ReferenceContext":
        if not text:
            return cls()
        data = json.loads(text)
        state = data.get("state")
        return cls(
            state=None if state is None else ResolutionState.model_validate(state),
            recent=[EncodedRecord.model_validate(r) for r in data.get("recent", [])],
        )

    def render(self, budget_tokens: int, counter: TokenCounter | None = None) -> str:
        """Text of rho_k within `budget_tokens` as `counter` counts them (the configured
        tokenizer; None: o200k): the state first (it resolves references), then as many of the
        most recent records as fit, newest kept."""
        return self.render_with(budget_tokens, counter)[0]

    def render_with(self, budget_tokens: int, counter: TokenCounter | None = None, candidates: list[LinkCandidate] | tuple = (),
                    recent_ids: list[str] | None = None) -> tuple[str, list[LinkCandidate]]:
        """`render`, plus the earlier records a reply may cite as superseded or contradicted. With
        `recent_ids` (the record id of each recent record) every recent record shown carries an
        id; then as many `candidates` (best first) as the budget has left follow under
        LINK_CANDIDATES_HEADER, in the order they were said. Ids m1, m2, ... follow the text's
        order. Returns the text and what it offers (only those ids may be cited). With no ids and
        no candidates the text is exactly `render`'s."""
        if self.state is None and not self.recent and not candidates:
            return FIRST_SEGMENT, []
        counter = counter or token_counter(None)
        parts = []
        if self.state is not None:
            state_text = "state: " + json.dumps(self.state.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
            parts.append(counter.truncate(state_text, budget_tokens))
        used = sum(counter.count(p) for p in parts)
        ids = recent_ids if recent_ids is not None and len(recent_ids) == len(self.recent) else None
        kept: list[int] = []
        for n in range(len(self.recent) - 1, -1, -1):
            cost = counter.count(_recent_line(self.recent[n], ID_WIDTH if ids else None)) + 1
            if used + cost > budget_tokens:
                break
            kept.append(n)
            used += cost
        offered: list[LinkCandidate] = []
        lines = []
        for n in reversed(kept):
            rec, ref = self.recent[n], None
            if ids:
                ref = f"m{len(offered) + 1}"
                offered.append(LinkCandidate(ref, ids[n], rec.text, None))
            lines.append(_recent_line(rec, ref))
        if lines:
            parts.append("recent records:\n" + "\n".join(lines))
        block = self._candidate_block(budget_tokens - used, counter, candidates, offered)
        if block:
            parts.append(block)
        return "\n".join(parts), offered

    @staticmethod
    def _candidate_block(room: int, counter: TokenCounter, candidates, offered: list[LinkCandidate]) -> str:
        """The candidates not offered already, as many as fit in `room` tokens (best first),
        shown in the order they were said; appended to `offered` with their ids."""
        seen = {c.record_id for c in offered}
        rest = [c for c in candidates if c.record_id not in seen]
        room -= counter.count(LINK_CANDIDATES_HEADER) + 1
        chosen = []
        for cand in rest:
            cost = counter.count(candidate_line(ID_WIDTH, cand.text, cand.said)) + 1
            if cost <= room:
                chosen.append(cand)
                room -= cost
        if not chosen:
            return ""
        rank = {c.record_id: i for i, c in enumerate(rest)}
        chosen.sort(key=lambda c: (c.said or "", rank[c.record_id]))
        lines = []
        for cand in chosen:
            shown = LinkCandidate(f"m{len(offered) + 1}", cand.record_id, cand.text, cand.said)
            offered.append(shown)
            lines.append(shown.line())
        return LINK_CANDIDATES_HEADER + "\n" + "\n".join(lines)


FIRST_SEGMENT = "(none: this is the first segment)"
ID_WIDTH = "m99"  # an id as the budget counts it (the widest a call shows)


def _recent_line(rec: EncodedRecord, ref: str | None) -> str:
    line = f"- [{rec.type}] {rec.text}" + (f" ({rec.time.start})" if rec.time.start else "")
    return line + (f" [{ref}]" if ref else "")
