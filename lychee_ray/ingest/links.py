"""Links at encode time: which later records supersede or contradict earlier ones, with no call
beyond the one per segment.

- LLM path: rho's recent records carry short ids ("m1"...), and after them, in what is left of
  the context's token budget, the earlier records most likely about the same things, picked with
  no model (`ConversationLinks.candidates`: the cosine between the segment's turn vectors and each
  record's source-turn vectors, both there before encode, plus a bonus for a record whose names
  the segment says). The reply's per-record `supersedes` / `contradicts` lists cite those ids
  (the JSON schema's enum allows only the ids shown). An id the call was not shown is dropped and
  counted (build_stats.link_ids_dropped).
- Rules path: the slot detector (rules/links.py) reads every new record against the earlier ones
  (`encoder.rule_links`); it is the rules backend's only source of links, and under an LLM it adds
  what the model did not say. A link both found is kept once, as the model's.
- A grown conversation keeps the stored links of the segments it reuses and primes the detector
  with their records, so the new segments link to stored records as a fresh run would.
"""

from __future__ import annotations

import re

import numpy as np

from lychee_ray.config_sections import EncoderConfig
from lychee_ray.ingest.reference_context import LinkCandidate
from lychee_ray.rules.encoder import is_assistant
from lychee_ray.rules.links import LinkDetector
from lychee_ray.schemas import Conversation, EncodeOutput, Segment
from lychee_ray.store.stored_state import StoredState
from lychee_ray.tables import LINK_KINDS, Record, RecordLink

NAME_BONUS = 0.1  # per name of the record the segment says (at most two): a shared entity is a strong cue


class ConversationLinks:
    """One conversation's link finding during encode (records arrive segment by segment)."""

    def __init__(self, conv: Conversation, enc: EncoderConfig):
        self.k = enc.link_candidates if enc.use_context else 0
        self.turns = {t.turn_id: (i, t) for i, t in enumerate(conv.turns)}
        vectors = conv.turn_embeddings
        self.turn_vectors = None if vectors is None else np.asarray(vectors, dtype=np.float32)
        self.detector = LinkDetector(self.speaker_of) if enc.rule_links else None
        self.said = {t.turn_id: t.timestamp[:10] for t in conv.turns if t.timestamp}
        self.records: list[Record] = []  # what a later segment may link to, in conversation order
        self._vecs: list[np.ndarray] = []  # each record's source-turn vector (zeros: none)
        self._names: list[list[str]] = []  # each record's entity names, lower case
        self._matrix: np.ndarray | None = None
        self.dropped = 0

    # ---- records as they come --------------------------------------------------------------
    def speaker_of(self, rec: Record) -> str | None:
        """Who said a record: the speaker of its first source turn that is not an assistant's."""
        for tid in rec.source_turn_ids:
            hit = self.turns.get(tid)
            if hit is not None and not is_assistant(hit[1]):
                return hit[1].speaker or ""
        return None

    def resume(self, conv: Conversation, reused: list[Record]) -> list[RecordLink]:
        """The stored links among the reused records (a grown conversation); they become what later
        segments may link to, and prime the detector without linking them again."""
        self._remember(reused)
        if self.detector is not None:
            self.detector.add(reused, emit=False)
        prior = conv.prior
        if not isinstance(prior, StoredState) or not reused:
            return []
        kept = {r.record_id for r in reused}
        return [link for link in prior.links if link.record_id in kept and link.other_record_id in kept]

    def add_segment(self, records: list[Record], out: EncodeOutput | None, shown: list[LinkCandidate], from_llm: bool) -> list[RecordLink]:
        """The links of one encoded segment: those its reply cites (from_llm), then the detector's."""
        links = reply_links(records, out, shown) if from_llm and out is not None else []
        if from_llm and out is not None:
            self.dropped += dropped_ids(out, shown)
        if self.detector is not None:
            have = {(x.record_id, x.other_record_id, x.kind) for x in links}
            for rid, oid, kind in self.detector.add(records):
                if (rid, oid, kind) not in have:
                    links.append(RecordLink(record_id=rid, other_record_id=oid, kind=kind, found_by="rules"))
        self._remember(records)
        return links

    def _remember(self, records: list[Record]) -> None:
        for rec in records:
            self.records.append(rec)
            self._vecs.append(self._record_vector(rec))
            self._names.append([e.strip().lower() for e in rec.entities if len(e.strip()) > 2])
        self._matrix = None

    # ---- candidates ------------------------------------------------------------------------
    def recent_ids(self, recent: list) -> list[str] | None:
        """The record ids of rho's recent records (the last ones encoded), so the prompt can show
        them citable; None when links are off or they do not line up."""
        if not self.k or not recent or len(recent) > len(self.records):
            return None
        tail = self.records[-len(recent):]
        return [r.record_id for r in tail] if all(r.text == e.text for r, e in zip(tail, recent)) else None

    def _record_vector(self, rec: Record) -> np.ndarray:
        """The mean of its source turns' vectors, unit length (zeros without vectors)."""
        if self.turn_vectors is None:
            return np.zeros(1, np.float32)
        rows = [self.turns[t][0] for t in rec.source_turn_ids if t in self.turns]
        return _unit(self.turn_vectors[rows].mean(axis=0)) if rows else np.zeros(self.turn_vectors.shape[1], np.float32)

    def candidates(self, conv: Conversation, seg: Segment) -> list[LinkCandidate]:
        """The k earlier records most likely about what this segment says, best first."""
        if not self.k or not self.records:
            return []
        text = " ".join(conv.turns[i].text for i in seg.turn_idxs).lower()
        score = np.zeros(len(self.records), dtype=np.float64)
        if self.turn_vectors is not None and seg.turn_idxs:
            if self._matrix is None:
                self._matrix = np.stack(self._vecs)
            score += self._matrix @ _unit(self.turn_vectors[seg.turn_idxs].mean(axis=0))
        speakers = {conv.turns[i].speaker.lower() for i in seg.turn_idxs if conv.turns[i].speaker}
        for i, names in enumerate(self._names):
            named = [e for e in names if e not in speakers and e in text and _says(text, e)]
            score[i] += NAME_BONUS * min(2, len(named))
        # best first; ties: the later record (more likely the current value)
        order = sorted(range(len(self.records)), key=lambda i: (-score[i], -i))[: self.k]
        return [LinkCandidate("", self.records[i].record_id, self.records[i].text, self._said(self.records[i])) for i in order]

    def _said(self, rec: Record) -> str | None:
        days = [self.said[t] for t in rec.source_turn_ids if t in self.said]
        return max(days) if days else None


def reply_links(records: list[Record], out: EncodeOutput, shown: list[LinkCandidate]) -> list[RecordLink]:
    """The links the reply's records cite, by the ids the call was shown (others are dropped)."""
    by_ref = {c.ref: c.record_id for c in shown}
    links: dict[tuple[str, str, str], RecordLink] = {}
    for rec, reply in zip(records, out.records):
        for kind in LINK_KINDS:
            for ref in getattr(reply, kind):
                other = by_ref.get(ref)
                if other is not None and other != rec.record_id:
                    links.setdefault((rec.record_id, other, kind), RecordLink(record_id=rec.record_id, other_record_id=other, kind=kind, found_by="llm"))
    return list(links.values())


def dropped_ids(out: EncodeOutput, shown: list[LinkCandidate]) -> int:
    """How many ids the reply cites that the call was not shown."""
    refs = {c.ref for c in shown}
    return sum(1 for reply in out.records for kind in LINK_KINDS for ref in getattr(reply, kind) if ref not in refs)


def _unit(vec: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vec))
    return vec / norm if norm > 0 else vec


def _says(text: str, name: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None
