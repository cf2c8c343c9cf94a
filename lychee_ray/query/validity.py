"""When each record of a loaded conversation held, derived from its `record_links` rows.

The store is append-only: a record that a later one superseded is never rewritten. Its validity
is derived, here for retrieval (a loaded conversation) and in the store's `record_validity` view
for SQL (store/reader.py), by the same rule:
- valid_from: the day it was said (its stated_at);
- superseded_by: of the records that supersede it, the one said first (ties: the lowest id), and
  valid_until: the day that one was said;
- conflicts: the records it contradicts or that contradict it.
A record holds at a time when it was said by then and not yet superseded; "now" it holds when
nothing superseded it. Records are addressed by their position in the loaded conversation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Validity:
    valid_from: list[str | None]  # per record: the day it was said
    superseded_by: dict[int, int] = field(default_factory=dict)
    valid_until: dict[int, str | None] = field(default_factory=dict)
    predecessors: dict[int, list[int]] = field(default_factory=dict)  # the records each one superseded
    conflicts: dict[int, list[int]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.superseded_by or self.conflicts)

    def current(self, i: int) -> int:
        """The end of i's chain of successors (i itself when nothing superseded it)."""
        seen = {i}
        while i in self.superseded_by and self.superseded_by[i] not in seen:
            i = self.superseded_by[i]
            seen.add(i)
        return i

    def holds(self, i: int, start: str | None = None, end: str | None = None) -> bool:
        """Whether record i held at some time in [start, end] (ISO days, either open); with no
        window, whether it holds now. A record superseded on an unknown day held until then."""
        if start is None and end is None:
            return i not in self.superseded_by
        said, until = self.valid_from[i], self.valid_until.get(i)
        if end is not None and said is not None and said > end:
            return False
        return not (start is not None and i in self.superseded_by and until is not None and until < start)

    def chain(self, i: int) -> list[int]:
        """Every record linked to i by supersession (before and after it), i included."""
        todo, seen = [i], {i}
        while todo:
            j = todo.pop()
            for k in [*self.predecessors.get(j, []), *([self.superseded_by[j]] if j in self.superseded_by else [])]:
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        return sorted(seen, key=lambda k: (self.valid_from[k] or "", k))


def derive_validity(record_ids: Sequence[str], stated_at: Sequence, links: Sequence[dict]) -> Validity:
    """`links`: record_links rows (record_id, other_record_id, kind, stated_at); a link to a record
    not among `record_ids` is ignored."""
    pos = {rid: i for i, rid in enumerate(record_ids)}
    validity = Validity([_day(s) for s in stated_at])
    successors: dict[int, list[tuple[str, str, int]]] = {}
    for link in links:
        later, earlier = pos.get(link["record_id"]), pos.get(link["other_record_id"])
        if later is None or earlier is None or later == earlier:
            continue
        if link["kind"] == "supersedes":
            day = _day(link.get("stated_at"))
            successors.setdefault(earlier, []).append((day or "\uffff", link["record_id"], later))
            validity.predecessors.setdefault(later, []).append(earlier)
        elif link["kind"] == "contradicts":
            for a, b in ((later, earlier), (earlier, later)):
                if b not in validity.conflicts.setdefault(a, []):
                    validity.conflicts[a].append(b)
    for earlier, found in successors.items():
        day, _, later = min(found)  # said first (no day: last), then the lowest id: as the view
        validity.superseded_by[earlier] = later
        validity.valid_until[earlier] = None if day == "\uffff" else day
    for others in validity.conflicts.values():
        others.sort(key=lambda k: record_ids[k])
    return validity


def _day(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()[:10]
    return str(value)[:10] or None
