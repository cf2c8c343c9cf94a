"""One conversation in memory: what retrieval ranks, loaded from the store once.

Over DuckDB each route x channel would be its own query over Parquet (about ten per question,
150-300 ms a question); one conversation is a few thousand rows of 384 floats, which numpy ranks
in well under a millisecond. So the first question of a conversation loads its turns, records,
nodes, record_nodes, record_links and passages with six queries (`Store.conversation_arrow`)
into a `LoadedConversation`: the query-exposed columns of each table (as the declarations in
`lychee_ray.tables` name them) as Python lists, its vectors as one contiguous float32 matrix, the
turns' BM25 index (store/search.py), the documents the raw-turn channels rank (turn_docs.py:
whole turns, and the passages of long ones), and the indexes the channels (channels.py) look up:
time windows, record coverage of turns, node names and links, and each record's validity from
its record_links (validity.py). Later questions touch no SQL.

The time-window rule lives here once (`window_mask` and `LoadedConversation.records_in_window`):
a record is in a window when its normalized time overlaps it, or, when it states no time, when
one of its source turns was said in it. Retrieval and `Memory.records` both use it.

Staleness: a `Store` is a snapshot (its views read the files committed when it was opened), and
a cache belongs to one `Store` object (`cache_for`), keyed by conversation id within it. A
re-ingested store is opened anew, so it gets a new, empty cache: nothing is served stale.

Memory: `LoadedConversation.nbytes` counts the numpy buffers exactly and Python strings/lists by
`sys.getsizeof` (an estimate of the heap they hold); the LRU evicts least recently used
conversations while the total exceeds `retrieval.cache_mb`. A single conversation larger than
the bound is still served (then evicted by the next load).
"""

from __future__ import annotations

import datetime as dt
import sys
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import numpy as np
import pyarrow as pa

from lychee_ray.config_sections import RetrievalConfig
from lychee_ray.dates import parse_iso_date
from lychee_ray.names import normalize_name
from lychee_ray.query.validity import Validity, derive_validity
from lychee_ray.store.reader import Store
from lychee_ray.store.search import Bm25Index, bm25_order, build_bm25
from lychee_ray.query.turn_docs import TurnDocs, cosine_rows
from lychee_ray.rules.encoder import said_by_assistant
from lychee_ray.table_model import Row
from lychee_ray.tables import Node, Passage, Record, Turn


class TableRows:
    """One conversation's rows of one table: its query-exposed columns as Python lists, the rows
    that have a vector as one float32 matrix (`matrix[vec_pos[i]]` is row i's vector; -1: none),
    and each row as its declared type on demand (`row(i)`)."""

    def __init__(self, data: pa.Table, row_type: type[Row], dim: int):
        self.row_type = row_type
        self.n = data.num_rows
        self.cols = {name: data.column(name).to_pylist() for name in data.column_names if name != "embedding"}
        self.ids: list[str] = self.cols[row_type.KEY[-1]]
        # ties are broken by id, in Python's str order (code points, as DuckDB orders UTF-8)
        self.id_rank = np.empty(self.n, np.int64)
        self.id_rank[sorted(range(self.n), key=self.ids.__getitem__)] = np.arange(self.n)
        self.vec_rows, self.matrix = _vectors(data, dim)
        self.vec_pos = np.full(self.n, -1, np.int64)
        self.vec_pos[self.vec_rows] = np.arange(len(self.vec_rows))
        self.norms = np.linalg.norm(self.matrix, axis=1)
        self.matrix.setflags(write=False)  # evidence embeddings are views of it: nobody may write them
        self._rows: dict[int, Row] = {}
        self._as_text = {name for name in self.cols if _is_time(data.schema.field(name).type)}

    def vector(self, i: int) -> np.ndarray | None:
        return self.matrix[self.vec_pos[i]] if self.vec_pos[i] >= 0 else None

    def row(self, i: int) -> Row:
        """Row i as its declared type, its vector a view of `matrix` (made once, then kept)."""
        row = self._rows.get(i)
        if row is None:
            values = {c: (v[i].isoformat() if c in self._as_text and v[i] is not None else v[i]) for c, v in self.cols.items()}
            row = self._rows[i] = self.row_type(**values, embedding=self.vector(i))
        return row

    def cosine(self, queries: np.ndarray) -> np.ndarray:
        """[routes, rows with a vector]: cosine similarity, one matrix product for all routes."""
        return cosine_rows(queries, self.matrix, self.norms)

    def top(self, scores: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[int]:
        """Row positions of the k best `scores` (one route's row of `cosine`), best first, ties by
        id; only rows with a vector, and only `allowed` rows when given."""
        rows = self.vec_rows
        if allowed is not None:
            keep = allowed[rows]
            rows, scores = rows[keep], scores[keep]
        if k <= 0 or not len(rows):
            return []
        if k < len(rows):  # everything scoring at least the k-th best, so ties at the cut stay in
            kth = np.partition(scores, len(rows) - k)[len(rows) - k]
            sel = np.flatnonzero(scores >= kth)
            rows, scores = rows[sel], scores[sel]
        order = np.lexsort((self.id_rank[rows], -scores))[:k]
        return rows[order].tolist()

    def rank_by_vector(self, positions: Sequence[int], query: np.ndarray) -> list[int]:
        """`positions` (unique) by dot product with `query` (unit vectors: the cosine), best first, ties
        in the given order; a row without a vector ranks last."""
        if not positions:
            return []
        idx = np.asarray(positions, np.int64)
        pos = self.vec_pos[idx]
        sims = np.full(len(idx), -np.inf, dtype=np.result_type(np.float32, query))
        has = pos >= 0
        sims[has] = self.matrix[pos[has]] @ query
        return [positions[i] for i in sorted(range(len(positions)), key=lambda i: (-sims[i], i))]

    @property
    def nbytes(self) -> int:
        arrays = self.matrix.nbytes + self.vec_rows.nbytes + self.vec_pos.nbytes + self.id_rank.nbytes + self.norms.nbytes
        return arrays + sum(_py_bytes(col) for col in self.cols.values())


def window_mask(lo: np.ndarray, hi: np.ndarray, start: dt.date | None, end: dt.date | None) -> np.ndarray:
    """The one window rule: [lo, hi] (datetime64[D], NaT where none) overlaps [start, end]
    (inclusive, either open); NaT never overlaps."""
    mask = ~np.isnat(lo)
    if end is not None:
        mask &= lo <= np.datetime64(end, "D")
    if start is not None:
        mask &= hi >= np.datetime64(start, "D")
    return mask


def window_dates(start=None, end=None) -> tuple[dt.date | None, dt.date | None]:
    """A window's bounds as dates (ISO text, a `date` or a `datetime`); one sentence when not."""
    return _as_date(start, "start"), _as_date(end, "end")


def _as_date(value, name: str) -> dt.date | None:
    if value is None:
        return None
    d = parse_iso_date(value)
    if d is None:
        raise ValueError(f"{name} must be an ISO date (YYYY-MM-DD), got {value!r}")
    return d


STANDING_TYPES = frozenset({"preference", "constraint"})


def with_assistant(roles: Sequence[str | None], speakers: Sequence[str | None]) -> bool:
    """Whether any turn is an assistant's (the rules encoder's `is_assistant`, on columns; a
    missing column is empty)."""
    n = max(len(roles), len(speakers))
    return any(said_by_assistant(r, s) for r, s in zip(roles or [None] * n, speakers or [None] * n))


class LoadedConversation:
    """What retrieval reads of one conversation, in memory (see the module docstring)."""

    def __init__(self, turns: pa.Table, records: pa.Table, nodes: pa.Table, edges: pa.Table, dim: int,
                 links: pa.Table | None = None, passages: pa.Table | None = None):
        self.turns = TableRows(turns, Turn, dim)
        self.records = TableRows(records, Record, dim)
        self.nodes = TableRows(nodes, Node, dim)
        self.dim = dim
        stated = self.records.cols.get("stated_at") or [None] * self.records.n
        self.validity: Validity = derive_validity(self.records.ids, stated, links.to_pylist() if links is not None else [])
        self._index_turns(turns)
        self._index_records(records)
        self._index_nodes(edges)
        self.bm25_index: Bm25Index = build_bm25([{"text": t} for t in self.turns.cols["text"]], "text")
        passages = passages if passages is not None else Passage.to_arrow([], dim)
        # what the raw-turn channels rank: whole turns, and the passages of long ones
        self.docs = TurnDocs(self.turns, passages, _vectors(passages, dim), self.bm25_index, dim)
        self._tokens: dict = {}  # (token counter, line form) -> {evidence key: tokens of its prompt line}
        self._said_by: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        # the records the standing channel ranks among (channels.py): how the person wants
        # things done, what they like and must avoid
        self.standing_records = np.array([t in STANDING_TYPES for t in self.records.cols["type"]], dtype=bool)
        # a person talking to an assistant, not people talking to each other (channels.py's
        # neighbor and standing channels read it); a table built by hand may lack either column
        self.with_assistant = with_assistant(self.turns.cols.get("role", ()), self.turns.cols.get("speaker", ()))

    @classmethod
    def load(cls, store: Store, conversation_id: str) -> "LoadedConversation":
        """Six queries: the conversation's turns (turn order, as BM25 indexes them), records
        (record_id order), nodes, record_nodes, record_links and passages; the columns queries
        expose, and the vectors."""
        def read(row_type: type[Row], order: list[str]):
            return store.conversation_arrow(row_type.TABLE, conversation_id, row_type.column_names(query=True) + ["embedding"], order)

        return cls(
            read(Turn, ["turn_idx"]),
            read(Record, ["record_id"]),
            read(Node, ["node_id"]),
            store.conversation_arrow("record_nodes", conversation_id, ["record_id", "node_id"]),
            store.dim,
            store.conversation_arrow("record_links", conversation_id, ["record_id", "other_record_id", "kind", "stated_at"]),
            read(Passage, ["turn_id", "passage_idx"]),
        )

    # ---- indexes built at load --------------------------------------------------------------
    def _index_turns(self, turns: pa.Table) -> None:
        self.turn_day = _days(turns.column("timestamp"))
        self.turn_pos: dict[str, list[int]] = {}
        for i, tid in enumerate(self.turns.ids):
            self.turn_pos.setdefault(tid, []).append(i)

    def _index_records(self, records: pa.Table) -> None:
        """Window bounds of timed records; (record, day) pairs of the untimed ones' source turns;
        turn id -> the records citing it, in record_id order."""
        start, end = _days(records.column("time_start")), _days(records.column("time_end"))
        self.rec_lo = np.where(np.isnat(start), end, start)  # coalesce(time_start, time_end)
        self.rec_hi = np.where(np.isnat(end), start, end)  # coalesce(time_end, time_start)
        pairs_rec, pairs_day = [], []
        self.cover: dict[str, list[int]] = {}
        for i, tids in enumerate(self.records.cols["source_turn_ids"]):
            for tid in tids or ():
                self.cover.setdefault(tid, []).append(i)
                if np.isnat(start[i]) and np.isnat(end[i]):
                    for t in self.turn_pos.get(tid, ()):
                        if not np.isnat(self.turn_day[t]):
                            pairs_rec.append(i)
                            pairs_day.append(self.turn_day[t])
        self.untimed_rec = np.array(pairs_rec, np.int64)
        self.untimed_day = np.array(pairs_day, dtype="datetime64[D]")

    def _index_nodes(self, edges: pa.Table) -> None:
        """Normalised name -> nodes; the match order (n_records desc, nulls last, node_id); node
        id -> its records (edges to records not in this conversation's records are dropped)."""
        self.by_name: dict[str, list[int]] = {}
        for i, name in enumerate(self.nodes.cols["name"]):
            if name is not None:
                self.by_name.setdefault(normalize_name(name), []).append(i)
        n_rec = self.nodes.cols["n_records"]
        order = sorted(range(self.nodes.n), key=lambda i: (n_rec[i] is None, -(n_rec[i] or 0), self.nodes.ids[i]))
        self.match_rank = np.empty(self.nodes.n, np.int64)
        self.match_rank[order] = np.arange(self.nodes.n)
        rec_pos = {rid: i for i, rid in enumerate(self.records.ids)}
        linked: dict[str, list[int]] = {}
        for rid, nid in zip(edges.column("record_id").to_pylist(), edges.column("node_id").to_pylist()):
            if rid in rec_pos:
                linked.setdefault(nid, []).append(rec_pos[rid])
        self.node_links = {nid: np.array(pos, np.int64) for nid, pos in linked.items()}

    # ---- lookups the channels use ------------------------------------------------------------
    def records_in_window(self, start, end) -> list[int]:
        """Records in the window by the one rule (module docstring), by (date, record_id): a timed
        record's date is its start, an untimed one's its first source turn said in the window."""
        s, e = window_dates(start, end)
        timed = window_mask(self.rec_lo, self.rec_hi, s, e)
        idx, day = np.flatnonzero(timed), self.rec_lo[timed]
        said = window_mask(self.untimed_day, self.untimed_day, s, e)
        u_rec, u_day = self.untimed_rec[said], self.untimed_day[said]
        if len(u_rec):  # each untimed record's first in-window day
            order = np.lexsort((u_day, u_rec))
            u_rec, u_day = u_rec[order], u_day[order]
            first = np.r_[True, u_rec[1:] != u_rec[:-1]]
            idx, day = np.r_[idx, u_rec[first]], np.r_[day, u_day[first]]
        return idx[np.lexsort((self.records.id_rank[idx], day))].tolist()

    def turn_mask(self, start, end) -> np.ndarray:
        """The turns said in the window, as a mask."""
        s, e = window_dates(start, end)
        return window_mask(self.turn_day, self.turn_day, s, e)

    def match_nodes(self, names: Iterable[str]) -> list[int]:
        """Nodes whose normalised name is a normalised query name, most linked first."""
        hits = {i for n in names if n for i in self.by_name.get(normalize_name(n), ())}
        return sorted(hits, key=self.match_rank.__getitem__)

    def node_records(self, node_ids: Sequence[str]) -> list[int]:
        """Records linked to any of the nodes, most links first, then id."""
        parts = [self.node_links[n] for n in dict.fromkeys(node_ids) if n in self.node_links]
        if not parts:
            return []
        recs, counts = np.unique(np.concatenate(parts), return_counts=True)
        return recs[np.lexsort((self.records.id_rank[recs], -counts))].tolist()

    @property
    def speakers(self) -> list[str]:
        """The conversation's speakers, most turns first (then by name)."""
        counts: dict[str, int] = {}
        for s in self.turns.cols["speaker"]:
            if s:
                counts[s] = counts.get(s, 0) + 1
        return sorted(counts, key=lambda s: (-counts[s], s))

    def said_by(self, speaker: str) -> tuple[np.ndarray, np.ndarray]:
        """(record mask, turn mask): the records citing a turn `speaker` said, and those turns."""
        if speaker not in self._said_by:
            turns = np.array([s == speaker for s in self.turns.cols["speaker"]], dtype=bool)
            records = np.zeros(self.records.n, bool)
            for t in np.flatnonzero(turns):
                records[self.covering(self.turns.ids[t])] = True
            self._said_by[speaker] = (records, turns)
        return self._said_by[speaker]

    def covering(self, turn_id: str) -> list[int]:
        """The records citing `turn_id` (one entry per citation), in record_id order."""
        return self.cover.get(turn_id, [])

    def bm25(self, query_text: str, k: int) -> list[int]:
        """Positions of the top-k turns sharing a query term, by BM25."""
        return [i for i, _ in bm25_order(self.bm25_index, query_text, k)]

    def token_memo(self, counter) -> dict[str, int]:
        """What `counter` (a token counter, with whatever else decides how a line renders)
        charged for each evidence line of this conversation so far: a line is fixed for the
        snapshot, so its count is, and a warm question need not tokenize again."""
        return self._tokens.setdefault(counter, {})

    def check_queries(self, queries) -> np.ndarray:
        """The query vectors as float32 [routes, dim]; one sentence for a wrong width or NaN."""
        q = np.asarray(queries, dtype=np.float32)
        q = q.reshape(1, -1) if q.ndim == 1 else q
        if q.shape[1] != self.dim:
            raise ValueError(f"query vector has {q.shape[1]} values; the store's embeddings have {self.dim}")
        if not np.isfinite(q).all():
            raise ValueError("query vector holds NaN or infinite values")
        return q

    @property
    def nbytes(self) -> int:
        arrays = (self.turn_day, self.rec_lo, self.rec_hi, self.untimed_rec, self.untimed_day,
                  self.match_rank, *self.node_links.values())
        index = sum(a.nbytes for a in arrays) + _py_bytes(self.cover) + _py_bytes(self.by_name) + _py_bytes(self.turn_pos)
        docs = self.docs.nbytes + (_bm25_bytes(self.docs.bm25_index) if self.docs.has_passages else 0)
        return self.turns.nbytes + self.records.nbytes + self.nodes.nbytes + index + _bm25_bytes(self.bm25_index) + docs


class ConversationCache:
    """Loaded conversations of one store, least recently used evicted past `max_bytes`."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict[str, LoadedConversation] = OrderedDict()
        self.nbytes = 0
        self.loads = 0  # conversations loaded so far (a reload after eviction counts again)

    def get(self, store: Store, conversation_id: str) -> LoadedConversation:
        conv = self._items.get(conversation_id)
        if conv is not None:
            self._items.move_to_end(conversation_id)
            return conv
        conv = LoadedConversation.load(store, conversation_id)
        self.loads += 1
        self._items[conversation_id] = conv
        self.nbytes += conv.nbytes
        self._evict(keep=conversation_id)
        return conv

    def discard(self, conversation_id: str) -> None:
        """Forget one conversation (its next question loads it again)."""
        conv = self._items.pop(conversation_id, None)
        if conv is not None:
            self.nbytes -= conv.nbytes

    def resize(self, max_bytes: int) -> None:
        self.max_bytes = int(max_bytes)
        self._evict(keep=next(reversed(self._items), None))

    def _evict(self, keep: str | None) -> None:
        while self.nbytes > self.max_bytes and len(self._items) > 1:
            cid, conv = next(iter(self._items.items()))
            if cid == keep:
                break
            del self._items[cid]
            self.nbytes -= conv.nbytes

    def __contains__(self, conversation_id: str) -> bool:
        return conversation_id in self._items

    def __len__(self) -> int:
        return len(self._items)


# One cache per opened Store (weakly keyed: it goes with the Store), shared by every Retriever
# and baseline over that Store, so evaluate's baselines read the retriever's warm rows.
_CACHES: "weakref.WeakKeyDictionary[Store, ConversationCache]" = weakref.WeakKeyDictionary()


def cache_for(store: Store, max_bytes: int | None = None) -> ConversationCache:
    """The cache of this Store, made on first use; `max_bytes` (when given) sets its bound."""
    cache = _CACHES.get(store)
    if cache is None:
        cache = _CACHES[store] = ConversationCache(max_bytes or RetrievalConfig().cache_mb * 2**20)
    elif max_bytes is not None and max_bytes != cache.max_bytes:
        cache.resize(max_bytes)
    return cache


def drop_cache(store: Store) -> None:
    """Forget this Store's cache now (a closed Store needs it no more)."""
    _CACHES.pop(store, None)


# --------------------------------------------------------------------------------------------
def _vectors(data: pa.Table, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(row positions with a vector, float32 [m, dim] C-contiguous copy of their vectors). A
    NULL embedding (a node kind that is not embedded) or no embedding column: no vector."""
    if "embedding" not in data.column_names or data.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros((0, dim), np.float32)
    col = data.column("embedding").combine_chunks()
    if isinstance(col, pa.ExtensionArray):  # pragma: no cover - not produced by the views
        col = col.storage
    flat = col.values[col.offset * dim:(col.offset + len(col)) * dim].to_numpy(zero_copy_only=False)
    mat = flat.astype(np.float32, copy=False).reshape(len(col), dim)
    rows = np.flatnonzero(col.is_valid().to_numpy(zero_copy_only=False)) if col.null_count else np.arange(len(col))
    return rows.astype(np.int64), np.ascontiguousarray(mat[rows])


def _is_time(data_type: pa.DataType) -> bool:
    return pa.types.is_date(data_type) or pa.types.is_timestamp(data_type)


def _days(col: pa.ChunkedArray) -> np.ndarray:
    """A DATE or TIMESTAMP column as datetime64[D] (NaT for NULL); timestamps floor to their
    day, as CAST(ts AS DATE) does."""
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if len(arr) == 0:
        return np.zeros(0, "datetime64[D]")
    return arr.to_numpy(zero_copy_only=False).astype("datetime64[D]")


def _py_bytes(obj) -> int:
    """Heap of a list/dict of strings, numbers, dates or lists of them, by sys.getsizeof."""
    size = sys.getsizeof(obj)
    items = obj.items() if isinstance(obj, dict) else ((x,) for x in obj)
    for parts in items:
        for x in parts:
            size += _py_bytes(x) if isinstance(x, (list, tuple)) else sys.getsizeof(x)
    return size


def _bm25_bytes(index: Bm25Index) -> int:
    if index.model is None:
        return 0
    arrays = sum(v.nbytes for v in index.model.scores.values() if isinstance(v, np.ndarray))
    return arrays + _py_bytes(index.model.vocab_dict) + _py_bytes(index.rows)
