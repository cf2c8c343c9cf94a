"""The reference context rho_k of segment encoding: (d_{k-1}; the m most recent records).

Pure and small: `encode` advances it after every segment, whether the LLM or the rules fallback
produced the output, and renders it into the prompt within a fixed token budget (the state first,
since it resolves references, then as many of the newest records as fit).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lychee_ray.schemas import (
    EncodedRecord,
    EncodeOutput,
    ResolutionState,
)
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
