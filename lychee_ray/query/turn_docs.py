"""What the raw-turn channels rank: each turn whole, or, for a turn longer than the embedding
model reads, each of its passages (the `passages` table, ingest/passages.py).

A 2,000-token reply has one vector of its first 254 word pieces; its passages have one each, so
it is found by its best passage, by vector and by BM25 alike, and the raw evidence it gives is
that passage, not the whole turn (a budget of 1,500 tokens would otherwise hold one or two
replies). A hit is reported once per turn (its best document), so `k` hits are `k` turns.
A conversation without passages (every LoCoMo one) ranks exactly as its turns.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from lychee_ray.store.search import Bm25Index, bm25_order, build_bm25


class TurnDocs:
    """Documents over one conversation's turns: `turn_of[d]` is document d's turn position,
    `span(d)` its character span of that turn's text (None: the whole turn)."""

    def __init__(self, turns, passages: pa.Table, passage_vectors: tuple[np.ndarray, np.ndarray], turn_bm25: Bm25Index, dim: int):
        """`turns`: the conversation's TableRows of Turn; `passages` its passages table (no
        embedding column needed) and `passage_vectors` (row positions with a vector, their
        matrix); `turn_bm25` the turns' BM25 index."""
        self.turns = turns
        by_turn = _passages_by_turn(turns.ids, passages)
        turn_of, part, starts, ends, vecs = [], [], [], [], []
        p_vecs: list[np.ndarray | None] = [None] * passages.num_rows
        for r, v in zip(*passage_vectors):
            p_vecs[r] = v
        for t in range(turns.n):
            for idx, start, end, row in by_turn.get(t, ()):
                turn_of.append(t), part.append(idx), starts.append(start), ends.append(end), vecs.append(p_vecs[row])
            if t not in by_turn:
                turn_of.append(t), part.append(-1), starts.append(0), ends.append(-1), vecs.append(turns.vector(t))
        self.turn_of = np.asarray(turn_of, np.int64)
        self.part = np.asarray(part, np.int64)  # the passage's index in its turn, -1: whole
        self.starts, self.ends = np.asarray(starts, np.int64), np.asarray(ends, np.int64)
        self.vec_rows = np.asarray([d for d, v in enumerate(vecs) if v is not None], np.int64)
        self.matrix = np.ascontiguousarray(np.stack([vecs[d] for d in self.vec_rows]) if len(self.vec_rows) else np.zeros((0, dim), np.float32), np.float32)
        self.norms = np.linalg.norm(self.matrix, axis=1)
        self.has_passages = bool(by_turn)
        # without passages the documents are the turns: their BM25 index serves both
        self.bm25_index = build_bm25([{"text": self.text(d)} for d in range(len(turn_of))], "text") if by_turn else turn_bm25

    def __len__(self) -> int:
        return len(self.turn_of)

    def span(self, d: int) -> tuple[int, int] | None:
        return None if self.part[d] < 0 else (int(self.starts[d]), int(self.ends[d]))

    def vector(self, d: int) -> np.ndarray | None:
        pos = np.searchsorted(self.vec_rows, d)
        return self.matrix[pos] if pos < len(self.vec_rows) and self.vec_rows[pos] == d else None

    def text(self, d: int) -> str:
        text = self.turns.cols["text"][self.turn_of[d]]
        span = self.span(d)
        return text if span is None else text[span[0] : span[1]]

    def cosine(self, queries: np.ndarray) -> np.ndarray:
        """[routes, documents with a vector]: cosine similarity."""
        return cosine_rows(queries, self.matrix, self.norms)

    def top(self, scores: np.ndarray, k: int, allowed_turns: np.ndarray | None = None) -> list[int]:
        """Document positions of the k best turns by their best document's score (one route's
        row of `cosine`), best first, ties by turn id; only `allowed_turns` when given."""
        rows = self.vec_rows
        return self._best_per_turn(rows, scores, self.turns.id_rank[self.turn_of[rows]], k, allowed_turns)

    def bm25(self, query_text: str, k: int, allowed_turns: np.ndarray | None = None) -> list[int]:
        """Document positions of the k best turns by BM25 (each turn's best document), among
        the documents sharing a query term; ties in document order, as `bm25_order` breaks them."""
        hits = bm25_order(self.bm25_index, query_text, len(self))
        rows = np.array([d for d, _ in hits], np.int64)
        scores = np.array([s for _, s in hits], np.float64)
        return self._best_per_turn(rows, scores, np.arange(len(rows)), k, allowed_turns)

    def _best_per_turn(self, rows, scores, tie, k, allowed_turns) -> list[int]:
        if allowed_turns is not None and len(rows):
            keep = allowed_turns[self.turn_of[rows]]
            rows, scores, tie = rows[keep], scores[keep], tie[keep]
        if k <= 0 or not len(rows):
            return []
        turn = self.turn_of[rows]
        order = np.lexsort((rows, tie, -scores, turn))  # per turn: its best document first
        best = order[np.r_[True, turn[order][1:] != turn[order][:-1]]]
        rows, scores, tie = rows[best], scores[best], tie[best]
        return rows[np.lexsort((tie, -scores))][:k].tolist()

    @property
    def nbytes(self) -> int:
        """Its arrays; the BM25 index is counted by the conversation that holds it."""
        return self.matrix.nbytes + self.norms.nbytes + self.vec_rows.nbytes + 4 * self.turn_of.nbytes


def cosine_rows(queries: np.ndarray, matrix: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """[routes, rows]: cosine of each query to each row; an all-zero row ranks last (-inf)."""
    dots = queries @ matrix.T
    qn = np.linalg.norm(queries, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sims = dots / (qn[:, None] * norms[None, :])
    return np.where(np.isnan(sims), -np.inf, sims)


def _passages_by_turn(turn_ids: list[str], passages: pa.Table) -> dict[int, list[tuple[int, int, int, int]]]:
    """turn position -> its passages as (passage_idx, char_start, char_end, row in `passages`),
    in passage order. A passage of a turn not loaded (none should be) is left out."""
    pos = {tid: i for i, tid in enumerate(turn_ids)}
    cols = [passages.column(c).to_pylist() for c in ("turn_id", "passage_idx", "char_start", "char_end")]
    out: dict[int, list] = {}
    for row, (tid, idx, start, end) in enumerate(zip(*cols)):
        if tid in pos:
            out.setdefault(pos[tid], []).append((idx, start, end, row))
    for parts in out.values():
        parts.sort()
    return out

