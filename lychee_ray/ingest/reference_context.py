"""The reference context rho_k of segment encoding: (d_{k-1}; the m most recent records).

Pure and small: `encode` advances it after every segment, whether the LLM or the rules fallback
produced the output, and renders it into the prompt within a fixed token budget (the state first,
since it resolves references, then as many of the newest records as fit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lychee_ray.schemas import EncodedRecord, EncodeOutput, ResolutionState
from lychee_ray.tokens import TokenCounter, token_counter


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
        if self.state is None and not self.recent:
            return "(none: this is the first segment)"
        counter = counter or token_counter(None)
        parts = []
        if self.state is not None:
            state_text = "state: " + json.dumps(self.state.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
            parts.append(counter.truncate(state_text, budget_tokens))
        used = sum(counter.count(p) for p in parts)
        lines = []
        for rec in reversed(self.recent):
            line = f"- [{rec.type}] {rec.text}" + (f" ({rec.time.start})" if rec.time.start else "")
            cost = counter.count(line) + 1
            if used + cost > budget_tokens:
                break
            lines.append(line)
            used += cost
        if lines:
            parts.append("recent records:\n" + "\n".join(reversed(lines)))
        return "\n".join(parts)
