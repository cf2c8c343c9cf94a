"""Evidence: one retrieval candidate (a memory record, or a raw turn no record covers), and the
pool a question's channels fill.

An `Evidence` holds its row as the store declares it (`tables.Record` or `tables.Turn`), so a new
column reaches retrieval, the public `MemoryItem` and the answer prompt without being copied
field by field; what the prompt shows of it is `prompt_item()` (llm/prompts.py renders the line).
Its source turn ids stay on the row (evaluate's recall and `MemoryItem.source_turn_ids` read them)
whether or not the line cites them: the answer step has no use for them, and citing them costs
about a sixth of a line's tokens (`retrieval.evidence_sources`).
Keys are `record_id`s, `turn:<turn_id>` for raw turns, or `turn:<turn_id>#<k>` for passage k of a
long turn (query/turn_docs.py: its row is the turn's with the passage's text and vector).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from lychee_ray.llm.prompts import EvidenceItem, ValidityNote
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.tables import Record, Turn

TURN_PREFIX = "turn:"


@dataclass
class Evidence:
    key: str
    row: Record | Turn
    tokens: int = 0  # of `render()`, the line the answer prompt gets: what the budget charges
    note: ValidityNote | None = None  # what its links say, when retrieval.validity marks it (validity_rank.py)
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

    @property
    def memo_key(self) -> str:
        """What its line's token count is remembered under: a marked line differs from the plain one."""
        return self.key if self.note is None else f"{self.key}\x1f{self.note!r}"

    def prompt_item(self) -> EvidenceItem:
        sources = tuple(self.source_turn_ids) if self.show_sources else ()
        return EvidenceItem(self.text, self.type, self.time, self.said, sources, self.note)

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

    def add_docs(self, positions: list[int]) -> list[str]:
        """Keys of the turn documents at `positions` (conv.docs) as raw evidence: a whole turn,
        or a passage of a long one."""
        docs, keys = self.conv.docs, []
        for d in positions:
            t, span = int(docs.turn_of[d]), docs.span(d)
            if span is None:
                keys += self.add_turns([t])
                continue
            turn = self.conv.turns.row(t)
            key = f"{TURN_PREFIX}{turn.turn_id}#{int(docs.part[d])}"
            if key not in self:
                self[key] = Evidence(key, dataclasses.replace(turn, text=docs.text(d), embedding=docs.vector(d)))
            keys.append(key)
        return keys

    def add_turn_hits(self, positions: list[int], in_scope: np.ndarray | None = None) -> list[str]:
        """Turn-document hits (conv.docs) -> the records citing each hit's turn (in hit order;
        only records in `in_scope` when given); a turn that no such record cites stays as raw
        evidence (the passage that was hit, for a long turn), so nothing said is unreachable."""
        keys: list[str] = []
        for d in positions:
            recs = self._citing(int(self.conv.docs.turn_of[d]), in_scope)
            keys.extend(self.add_records(recs) if recs else self.add_docs([d]))
        return list(dict.fromkeys(keys))

    def add_turn_evidence(self, turns: list[int], in_scope: np.ndarray | None = None) -> list[str]:
        """Turns (positions) -> the records citing each, as `add_turn_hits` maps a hit; a turn no
        such record cites comes as the whole raw turn."""
        keys: list[str] = []
        for t in turns:
            recs = self._citing(t, in_scope)
            keys.extend(self.add_records(recs) if recs else self.add_turns([t]))
        return list(dict.fromkeys(keys))

    def _citing(self, turn: int, in_scope: np.ndarray | None) -> list[int]:
        """The records citing the turn at position `turn` (only those in `in_scope`, when given)."""
        return [i for i in self.conv.covering(self.conv.turns.ids[turn]) if in_scope is None or in_scope[i]]
