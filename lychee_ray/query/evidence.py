"""Evidence: one retrieval candidate (a memory record, or a raw turn no record covers), and the
pool a question's channels fill.

An `Evidence` holds its row as the store declares it (`tables.Record` or `tables.Turn`), so a new
column reaches retrieval, the public `MemoryItem` and the answer prompt without being copied
field by field; what the prompt shows of it is `prompt_item()` (llm/prompts.py renders the line).
Its source turn ids stay on the row (evaluate's recall and `MemoryItem.source_turn_ids` read them)
whether or not the line cites them: the answer step has no use for them, and citing them costs
about a sixth of a line's tokens (`retrieval.evidence_sources`).
Keys are `record_id`s, or `turn:<turn_id>` for raw turns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lychee_ray.llm.prompts import EvidenceItem
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.tables import Record, Turn

TURN_PREFIX = "turn:"


@dataclass
class Evidence:
    key: str
    row: Record | Turn
    tokens: int = 0  # of `render()`, the line the answer prompt gets: what the budget charges
    show_sources: bool = True  # whether the line cites its source turn ids (`retrieval.evidence_sources`)

    @property
    def kind(self) -> str:
        return "record" if isinstance(self.row, Record) else "turn"

    @property
    def text(self) -> str:
        row = self.row
        return row.text if isinstance(row, Record) else f"{row.speaker}: {row.text}"

    @property
    def type(self) -> str | None:
        return self.row.type if isinstance(self.row, Record) else None

    @property
    def time(self) -> str | None:
        """The event's normalized time, "YYYY-MM-DD" or "start..end"; a turn has none of its own."""
        row = self.row
        if not isinstance(row, Record) or row.time_start is None:
            return None
        return row.time_start if row.time_end in (None, row.time_start) else f"{row.time_start}..{row.time_end}"

    @property
    def said(self) -> str | None:
        """The day it was said: a record's stated_at, a turn's day."""
        value = self.row.stated_at if isinstance(self.row, Record) else self.row.timestamp
        return value[:10] if value else None

    @property
    def source_turn_ids(self) -> list[str]:
        return list(self.row.source_turn_ids or []) if isinstance(self.row, Record) else [self.row.turn_id]

    @property
    def entities(self) -> list[str]:
        return list(self.row.entities or []) if isinstance(self.row, Record) else []

    @property
    def embedding(self) -> np.ndarray | None:
        return self.row.embedding

    def prompt_item(self) -> EvidenceItem:
        sources = tuple(self.source_turn_ids) if self.show_sources else ()
        return EvidenceItem(self.text, self.type, self.time, self.said, sources)

    def render(self) -> str:
        return self.prompt_item().line()


class CandidatePool(dict):
    """evidence key -> Evidence for one question over one loaded conversation: what the
    channels found, each candidate made once however many channels find it. `show_sources`:
    whether its lines cite their source turns (what each line costs depends on it)."""

    def __init__(self, conv: LoadedConversation, show_sources: bool = True):
        super().__init__()
        self.conv = conv
        self.show_sources = show_sources

    def add_records(self, positions: list[int]) -> list[str]:
        """Keys of the records at `positions` (in order), adding each to the pool."""
        keys = []
        for i in positions:
            key = self.conv.records.ids[i]
            if key not in self:
                self[key] = Evidence(key, self.conv.records.row(i), show_sources=self.show_sources)
            keys.append(key)
        return keys

    def add_turns(self, positions: list[int]) -> list[str]:
        """Keys of the turns at `positions` as raw-turn evidence (in order)."""
        keys = []
        for t in positions:
            key = TURN_PREFIX + self.conv.turns.ids[t]
            if key not in self:
                self[key] = Evidence(key, self.conv.turns.row(t), show_sources=self.show_sources)
            keys.append(key)
        return keys

    def add_turn_hits(self, positions: list[int], in_scope: np.ndarray | None = None) -> list[str]:
        """Turn hits -> the records citing each (in hit order; only records in `in_scope` when
        given); a turn that no such record cites stays as raw-turn evidence, so nothing said is
        unreachable."""
        keys: list[str] = []
        for t in positions:
            tid = self.conv.turns.ids[t]
            recs = [i for i in self.conv.covering(tid) if in_scope is None or in_scope[i]]
            keys.extend(self.add_records(recs) if recs else self.add_turns([t]))
        return list(dict.fromkeys(keys))
