"""The run summary of ingest: what the driver adds up from the write sink's rows, the sentence per
reason the run counts as failed, and the text the CLI prints.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from lychee_ray.config import LycheeConfig
from lychee_ray.llm.client import endpoint_name
from lychee_ray.store.rows import WITHHOLDING_KINDS


@dataclass
class IngestSummary:
    out_dir: str
    files: int = 0
    resumed: int = 0  # input conversations the store already held exactly (no work done)
    by_status: Counter = field(default_factory=Counter)
    turns: int = 0
    segments: int = 0
    records: int = 0
    degraded_segments: int = 0  # of `segments`: rules fallback records after an LLM failure
    turns_in: int = 0  # input turns the read stage saw (`lychee_ray.store.rows.turns_in`): a split turn counts once
    split_turns: int = 0  # of `turns_in`: turns longer than read.max_turn_tokens, split into parts
    split_parts: int = 0  # the parts those became (each a turn row)
    held_turns: int = 0  # turns of grown conversations left pending and not written (the store keeps their old rows)
    batch_ids: set[str] = field(default_factory=set)  # the commits this run made
    # where the store put this run's turns (`turn_accounts`); None until counted
    turn_accounts: dict[str, int] | None = None
    # one sentence per reason the run counts as failed (pending conversations, too many degraded
    # segments, turns that do not add up); the CLI prints them and exits non-zero
    failures: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the run stopped before its input was done (a stage made no progress)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    stage_seconds: Counter = field(default_factory=Counter)  # summed over conversations
    problems: list[str] = field(default_factory=list)  # first few non-ok conversations
    mean_exchanges_per_segment: str = "n/a"
    tokenizer: str = "o200k_base"  # what the segment cap and context budget counted with

    @property
    def conversations(self) -> int:
        return sum(self.by_status.values())

    def add(self, row: dict) -> None:
        self.by_status[row["status"]] += 1
        self.turns += int(row["n_turns"] or 0)
        self.segments += int(row["n_segments"] or 0)
        self.records += int(row["n_records"] or 0)
        self.degraded_segments += int(row.get("degraded_segments") or 0)
        self.turns_in += int(row.get("turns_in") or 0)
        self.split_turns += int(row.get("split_turns") or 0)
        self.split_parts += int(row.get("split_parts") or 0)
        self.held_turns += int(row.get("held_turns") or 0)
        if row.get("batch_id"):
            self.batch_ids.add(row["batch_id"])
        self.llm_calls += int(row["llm_calls"] or 0)
        self.prompt_tokens += int(row["prompt_tokens"] or 0)
        self.completion_tokens += int(row["completion_tokens"] or 0)
        self.stage_seconds.update(json.loads(row["stage_seconds"]))
        if row["status"] not in ("ok",) and len(self.problems) < 20:
            self.problems.append(f"{row['conversation_id']}: {row['status']}")

    def render(self) -> str:
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.by_status.items()))
        lines = [
            f"ingest -> {self.out_dir}",
            f"  files: {self.files}; conversations written: {self.conversations} ({statuses or 'none'}); already complete: {self.resumed}",
            f"  turns: {self.turns}; segments: {self.segments}; exchanges/segment: {self.mean_exchanges_per_segment}",
            f"  records: {self.records}; LLM calls: {self.llm_calls}; tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion",
            f"  tokenizer for the segment cap and context budget: {self.tokenizer}",
            f"  time: {self.wall_s:.1f} s; stage seconds summed over conversations: "
            + (", ".join(f"{k} {v:.1f}" for k, v in self.stage_seconds.items()) or "none"),
        ]
        if self.problems:
            lines.append("  not ok: " + "; ".join(self.problems[:10]))
        if self.turn_accounts is not None:
            lines.append("  " + self.conservation_line())
        return "\n".join(lines)

    @property
    def turn_rows_in(self) -> int:
        """The turn rows the read stage made: input turns, a split turn counted as its parts
        (what the store's side of the conservation line counts)."""
        return self.turns_in - self.split_turns + self.split_parts

    @property
    def turns_accounted(self) -> int | None:
        return None if self.turn_accounts is None else sum(self.turn_accounts.values())

    def conservation_line(self) -> str:
        """`turns: N in = S stored + E recorded in errors + D in duplicate rows + P pending`
        (+ changed-history rows when there are any); `!=` when the two sides differ. N counts
        input turns; when some were split, `N in (K split into P parts: R turn rows)`, and the
        store's side adds up to R, the rows it holds."""
        acc = self.turn_accounts or {}
        parts = [f"{acc.get('stored', 0)} stored", f"{acc.get('errors', 0)} recorded in errors"]
        parts += [f"{acc.get(kind, 0)} {words}" for kind, words in WITHHOLDING_KINDS.items() if kind == "duplicate_id" or acc.get(kind)]
        parts.append(f"{acc.get('pending', 0)} pending")
        sign = "=" if self.turns_accounted == self.turn_rows_in else "!="
        split = ""
        if self.split_turns:
            split = f" ({self.split_turns} split into {self.split_parts} parts: {self.turn_rows_in} turn rows)"
        return f"turns: {self.turns_in} in{split} {sign} " + " + ".join(parts)

    def assess(self, cfg: LycheeConfig) -> list[str]:
        """The run's failures, one sentence each (also kept in `failures`)."""
        out = [self.stopped] if self.stopped else []
        pending = self.by_status.get("pending", 0)
        if pending:
            out.append(
                f"{pending} conversation{'s are' if pending != 1 else ' is'} pending because the LLM endpoint "
                f"{endpoint_name(cfg.llm.base_url)} (llm.base_url) failed transiently and the circuit breaker stopped calls; "
                f"rerun the same command, or pass --redo pending, to complete {'them' if pending != 1 else 'it'}."
            )
        limit = cfg.ingest.max_degraded_fraction
        if self.segments and self.degraded_segments / self.segments > limit:
            out.append(
                f"{self.degraded_segments} of {self.segments} segments ({self.degraded_segments / self.segments:.0%}) fell back to "
                f"rules records (degraded), more than ingest.max_degraded_fraction={limit:g}; the errors table (kind llm_failure) "
                f"says why, and --redo degraded re-encodes them."
            )
        if self.turn_accounts is not None and self.turns_accounted != self.turn_rows_in:
            out.append(
                f"turns do not add up: the read stage saw {self.turn_rows_in} (turn rows) but the store accounts for {self.turns_accounted} "
                f"({self.conservation_line()}); the store in {self.out_dir} is missing rows or holds extra ones."
            )
        self.failures = out
        return out
