"""Reading a store: `open_store` gives a `Store`, a DuckDB connection with one view per table
plus the parameterized queries the retrieval channels need.

Each view reads exactly the files the commits list (never a glob). Rows are sorted by
conversation_id in small row groups, so ``conversation_id = $cid`` is pushed into the Parquet
scan: DuckDB skips row groups whose min/max exclude the conversation and does not decode the
embeddings of row batches without a match. benchmarks/bench_store.py measures it: at 1,000
conversations (16 files per table) one question's whole retrieval took 227 ms p50 pruned (1 of 47
record row groups scanned) against 5.2 s with the filter above the scan, and 152 ms at 10.
Parquet has no fixed-size list and no second-resolution timestamp, so files read back
as FLOAT[] and TIMESTAMP_MS; each view casts them to FLOAT[d] and TIMESTAMP. All query helpers
bind user input as parameters; the only text formatted into SQL is this module's own table and
column names and the integer dimension. A `Store` holds one DuckDB connection: use it from one
thread at a time (open one Store per worker or thread).

Vector search is exact ``array_cosine_similarity`` (built into DuckDB; the vss extension cannot
be loaded, see search.py) over one conversation's rows: a few thousand vectors per conversation
need no ANN index. BM25 indexes (search.py) are built per (table, conversation) on first use and
kept in a small LRU in the `Store`.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import OrderedDict
from collections.abc import Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from lychee_ray.config import LycheeConfig
from lychee_ray.dates import parse_iso_date
from lychee_ray.io.fs import is_local, join_path, resolve_uri
from lychee_ray.names import NORMALIZE_NAME_SQL
from lychee_ray.schemas import INGEST_TABLES, table_schemas
from lychee_ray.store.manifest import (
    BM25_TABLES,
    MANIFEST,
    VECTOR_TABLES,
    Committed,
    StoreError,
    check_manifest,
    committed_view,
    load_commits,
    read_json,
)
from lychee_ray.store.search import Bm25Index, build_bm25, tokenize

log = logging.getLogger(__name__)


def _as_date(value, name: str) -> dt.date | None:
    if value is None:
        return None
    d = parse_iso_date(value)
    if d is None:
        raise ValueError(f"{name} must be an ISO date (YYYY-MM-DD), got {value!r}")
    return d


class Store:
    """A read-only view of one store: `con` has a DuckDB view per table; helpers are parameterized."""

    def __init__(self, path: str, manifest: dict, con: duckdb.DuckDBPyConnection,
                 committed: Committed, bm25_cache_size: int = 64, keep: Sequence = ()):
        self.path = path
        self._keep = list(keep)  # Arrow objects and relations the views scan must outlive them
        self._manifest = manifest
        self.con = con
        # Helpers run on their own cursor (same database, same views), so a result the caller
        # left unfinished on `con` cannot make them fail, and theirs cannot break the caller's.
        self._cur = con.cursor()
        self.dim = int(manifest["embedding_dim"])
        self._committed = committed
        self._bm25: OrderedDict[tuple[str, str], Bm25Index] = OrderedDict()
        self._bm25_cache_size = bm25_cache_size
        schemas = table_schemas(self.dim)
        # embeddings are returned too: retrieval needs them for MMR diversity
        self._cols = {t: [f.name for f in s] for t, s in schemas.items()}
        self._list_cols = {
            t: {f.name for f in s if pa.types.is_list(f.type)} for t, s in schemas.items()
        }

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def manifest(self) -> dict:
        return dict(self._manifest)

    def close(self) -> None:
        self._cur.close()
        self.con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def sql(self, query: str, params: dict | list | None = None) -> list[dict]:
        """Run a parameterized query against the views; rows as dicts. FLOAT[d] cells come back
        as float32 numpy rows (views into one [n, d] array), not as lists of Python floats."""
        result = self._cur.sql(query, params=params or {}).to_arrow_table()
        columns = {}
        for name, col in zip(result.column_names, result.columns):
            if pa.types.is_fixed_size_list(col.type):
                columns[name] = _fixed_list_rows(col.combine_chunks(), col.type.list_size)
            else:
                columns[name] = col.to_pylist()
        names = list(columns)
        return [dict(zip(names, cells)) for cells in zip(*columns.values())]

    def _conv_eq(self, alias: str) -> str:
        """The conversation predicate every helper uses; a plain comparison, pushed into the scan."""
        return f"{alias}.conversation_id = $cid"

    def _select(self, table: str, alias: str) -> str:
        return ", ".join(f'{alias}."{c}"' for c in self._cols[table])

    @staticmethod
    def _check_table(table: str, allowed: dict) -> str:
        if table not in allowed:
            raise ValueError(f"table must be one of {sorted(allowed)}, got {table!r}")
        return allowed[table]

    def _where(self, table: str, alias: str, where: dict | None, params: dict) -> str:
        """{column: value} -> ' AND ...' with bound values: scalar = equality, list = membership;
        on a list column (entities, topics, ...) any overlap."""
        clauses = []
        for i, (col, value) in enumerate((where or {}).items()):
            if col not in self._cols[table]:
                raise ValueError(f"{table} has no column {col!r}")
            key = f"w{i}"
            many = isinstance(value, (list, tuple, set, frozenset))
            values = list(value) if many else [value]
            if col in self._list_cols[table]:
                if not values:
                    clauses.append("FALSE")
                    continue
                clauses.append(f'list_has_any({alias}."{col}", ${key})')
                params[key] = values
            elif many:
                if not values:
                    clauses.append("FALSE")
                    continue
                clauses.append(f'list_contains(${key}, {alias}."{col}")')
                params[key] = values
            else:
                clauses.append(f'{alias}."{col}" = ${key}')
                params[key] = value
        return "".join(f" AND {c}" for c in clauses)

    def _query_vector(self, query_vec) -> list[float]:
        vec = np.asarray(query_vec, dtype=np.float32).reshape(-1)
        if vec.shape[0] != self.dim:
            raise ValueError(f"query vector has {vec.shape[0]} values; the store's embeddings have {self.dim}")
        if not np.isfinite(vec).all():
            raise ValueError("query vector holds NaN or infinite values")
        return vec.tolist()

    # -- channels --------------------------------------------------------------------------------
    def vector_topk(self, table: str, conversation_id: str, query_vec, k: int,
                    where: dict | None = None) -> list[dict]:
        """Top-k rows of one conversation by cosine similarity (exact), best first, as dicts + score.
        `where` is {column: value}: a scalar means equality, a list membership, and on a list
        column (entities, topics, source_turn_ids) any overlap; values are bound, columns checked.
        Rows without a vector (NULL embedding: time and event-frame nodes) are never returned."""
        id_col = self._check_table(table, VECTOR_TABLES)
        if k <= 0:
            return []
        params = {"cid": conversation_id, "q": self._query_vector(query_vec), "k": int(k)}
        extra = self._where(table, "t", where, params)
        query = (
            f"SELECT {self._select(table, 't')}, "
            f"array_cosine_similarity(t.embedding, $q::FLOAT[{self.dim}]) AS score "
            f"FROM {table} t WHERE {self._conv_eq('t')} AND t.embedding IS NOT NULL{extra} "
            f"ORDER BY score DESC, t.{id_col} LIMIT $k"
        )
        return self.sql(query, params)

    def bm25_topk(self, table: str, conversation_id: str, query_text: str, k: int) -> list[dict]:
        """Top-k rows of one conversation by BM25 on `text`; only rows sharing a query term."""
        self._check_table(table, BM25_TABLES)
        index = self._bm25_index(table, conversation_id)
        terms = tokenize(query_text)
        if index.model is None or not terms or k <= 0:
            return []
        scores = index.model.get_scores(terms)
        order = np.lexsort((np.arange(len(scores)), -scores))  # score desc, then stored order
        return [dict(index.rows[i], score=float(scores[i])) for i in order[:k] if scores[i] > 0]

    def _bm25_index(self, table: str, conversation_id: str) -> Bm25Index:
        key = (table, conversation_id)
        if key in self._bm25:
            self._bm25.move_to_end(key)
            return self._bm25[key]
        rows = self.turns(conversation_id) if table == "turns" else self.records(conversation_id)
        index = build_bm25(rows, "text")
        self._bm25[key] = index
        while len(self._bm25) > self._bm25_cache_size:
            self._bm25.popitem(last=False)
        return index

    def records_in_window(self, conversation_id: str, start=None, end=None,
                          k: int | None = None) -> list[dict]:
        """Records whose [time_start, time_end] overlaps [start, end] (dates, inclusive, either
        open), or, for records with no time, any of whose source turns falls in the window.
        Ordered by date; each row has `window_date` (its start, or its first in-window turn day)."""
        params = {"cid": conversation_id, "s": _as_date(start, "start"), "e": _as_date(end, "end"),
                  "k": None if k is None else int(k)}
        query = f"""
            WITH timed AS (
                SELECT r.record_id, coalesce(r.time_start, r.time_end) AS d0
                FROM records r
                WHERE {self._conv_eq('r')} AND coalesce(r.time_start, r.time_end) IS NOT NULL
                  AND ($e::DATE IS NULL OR coalesce(r.time_start, r.time_end) <= $e::DATE)
                  AND ($s::DATE IS NULL OR coalesce(r.time_end, r.time_start) >= $s::DATE)
            ), untimed AS (
                SELECT r.record_id, unnest(r.source_turn_ids) AS turn_id
                FROM records r
                WHERE {self._conv_eq('r')} AND r.time_start IS NULL AND r.time_end IS NULL
            ), by_turn AS (
                SELECT u.record_id, min(CAST(t."timestamp" AS DATE)) AS d0
                FROM untimed u JOIN turns t ON t.turn_id = u.turn_id
                WHERE {self._conv_eq('t')} AND t."timestamp" IS NOT NULL
                  AND ($s::DATE IS NULL OR CAST(t."timestamp" AS DATE) >= $s::DATE)
                  AND ($e::DATE IS NULL OR CAST(t."timestamp" AS DATE) <= $e::DATE)
                GROUP BY u.record_id
            ), hits AS (SELECT * FROM timed UNION ALL SELECT * FROM by_turn)
            SELECT {self._select('records', 'r')}, h.d0 AS window_date
            FROM hits h JOIN records r ON r.record_id = h.record_id
            WHERE {self._conv_eq('r')}
            ORDER BY h.d0, r.record_id
            LIMIT $k
        """
        return self.sql(query, params)

    def turns_in_window(self, conversation_id: str, start=None, end=None) -> list[dict]:
        """Turns whose timestamp's date lies in [start, end] (dates, inclusive, either open)."""
        params = {"cid": conversation_id, "s": _as_date(start, "start"), "e": _as_date(end, "end")}
        query = (
            f"SELECT {self._select('turns', 't')} FROM turns t "
            f"WHERE {self._conv_eq('t')} AND t.\"timestamp\" IS NOT NULL "
            f"AND ($s::DATE IS NULL OR CAST(t.\"timestamp\" AS DATE) >= $s::DATE) "
            f"AND ($e::DATE IS NULL OR CAST(t.\"timestamp\" AS DATE) <= $e::DATE) "
            f"ORDER BY t.turn_idx"
        )
        return self.sql(query, params)

    def match_nodes(self, conversation_id: str, names: Sequence[str],
                    kinds: Sequence[str] | None = None) -> list[dict]:
        """Nodes whose name equals one of `names` after normalization (case, punctuation, "'s",
        a leading article); most-linked first."""
        names = [n for n in names if n]
        if not names:
            return []
        params: dict = {"cid": conversation_id, "names": list(names)}
        kind_clause = ""
        if kinds is not None:
            kind_clause = " AND list_contains($kinds, n.kind)"
            params["kinds"] = list(kinds) or [""]
        query = (
            f"SELECT {self._select('nodes', 'n')} FROM nodes n "
            f"WHERE {self._conv_eq('n')}{kind_clause} "
            f"AND lychee_norm(n.name) IN (SELECT lychee_norm(x) FROM unnest($names) AS q(x)) "
            f"ORDER BY n.n_records DESC NULLS LAST, n.node_id"
        )
        return self.sql(query, params)

    def node_records(self, conversation_id: str, node_ids: Sequence[str]) -> list[dict]:
        """Records linked to any of `node_ids`, with the matched `node_ids` and their count
        `n_nodes`; records linked to more of the asked nodes first."""
        if not node_ids:
            return []
        query = f"""
            WITH hit AS (
                SELECT e.record_id, list(e.node_id ORDER BY e.node_id) AS node_ids, count(*) AS n_nodes
                FROM record_nodes e
                WHERE {self._conv_eq('e')} AND list_contains($nodes, e.node_id)
                GROUP BY e.record_id
            )
            SELECT {self._select('records', 'r')}, h.node_ids, h.n_nodes
            FROM hit h JOIN records r ON r.record_id = h.record_id
            WHERE {self._conv_eq('r')}
            ORDER BY h.n_nodes DESC, r.record_id
        """
        return self.sql(query, {"cid": conversation_id, "nodes": list(node_ids)})

    def records_for_turns(self, conversation_id: str, turn_ids: Sequence[str]) -> list[dict]:
        """Records whose source turns include any of `turn_ids`."""
        if not turn_ids:
            return []
        query = (
            f"SELECT {self._select('records', 'r')} FROM records r "
            f"WHERE {self._conv_eq('r')} AND list_has_any(r.source_turn_ids, $tids) "
            f"ORDER BY r.record_id"
        )
        return self.sql(query, {"cid": conversation_id, "tids": list(turn_ids)})

    # -- whole conversations (query/cache.py loads one once, then retrieves in memory) -----------
    def columns(self, table: str) -> list[str]:
        """The view's column names of `table`, in schema order."""
        self._check_table(table, self._cols)
        return list(self._cols[table])

    def conversation_arrow(self, table: str, conversation_id: str, columns: Sequence[str] | None = None,
                           order_by: Sequence[str] = ()) -> pa.Table:
        """One conversation's rows of `table` as Arrow, with the view's types (FLOAT[d], DATE,
        TIMESTAMP), ordered by `order_by`; column names are checked, the id is bound."""
        self._check_table(table, self._cols)
        cols = list(columns) if columns is not None else self._cols[table]
        for col in [*cols, *order_by]:
            if col not in self._cols[table]:
                raise ValueError(f"{table} has no column {col!r}")
        select = ", ".join(f'x."{c}"' for c in cols)
        order = (" ORDER BY " + ", ".join(f'x."{c}"' for c in order_by)) if order_by else ""
        query = f"SELECT {select} FROM {table} x WHERE {self._conv_eq('x')}{order}"
        return self._cur.sql(query, params={"cid": conversation_id}).to_arrow_table()

    @staticmethod
    def window_dates(start=None, end=None) -> tuple[dt.date | None, dt.date | None]:
        """The dates `records_in_window` / `turns_in_window` bind for a window (ValueError if not a date)."""
        return _as_date(start, "start"), _as_date(end, "end")

    # -- plain reads -------------------------------------------------------------------------------
    def conversation_ids(self) -> list[str]:
        return [r["conversation_id"] for r in self.sql(
            "SELECT conversation_id FROM conversations ORDER BY conversation_id")]

    def turns(self, conversation_id: str) -> list[dict]:
        return self.sql(
            f"SELECT {self._select('turns', 't')} FROM turns t WHERE {self._conv_eq('t')} ORDER BY t.turn_idx",
            {"cid": conversation_id},
        )

    def records(self, conversation_id: str) -> list[dict]:
        return self.sql(
            f"SELECT {self._select('records', 'r')} FROM records r WHERE {self._conv_eq('r')} "
            f"ORDER BY r.segment_id, r.record_id",
            {"cid": conversation_id},
        )

    def embeddings(self, table: str, conversation_id: str,
                   ids: Sequence[str] | None = None) -> tuple[list[str], np.ndarray]:
        """(ids, float32 [n, d]) of one conversation's rows that have a vector (e.g. for MMR);
        ordered by id. Rows with a NULL embedding are left out, so `ids` may be fewer than asked."""
        id_col = self._check_table(table, VECTOR_TABLES)
        params: dict = {"cid": conversation_id}
        id_clause = ""
        if ids is not None:
            if not ids:
                return [], np.zeros((0, self.dim), np.float32)
            id_clause = f" AND list_contains($ids, t.{id_col})"
            params["ids"] = list(ids)
        result = self._cur.sql(
            f"SELECT t.{id_col} AS id, t.embedding FROM {table} t "
            f"WHERE {self._conv_eq('t')} AND t.embedding IS NOT NULL{id_clause} ORDER BY t.{id_col}",
            params=params,
        ).to_arrow_table()
        emb = result.column("embedding").combine_chunks()
        flat = emb.values.to_numpy(zero_copy_only=False) if len(emb) else np.zeros(0, np.float32)
        return result.column("id").to_pylist(), flat.astype(np.float32, copy=False).reshape(-1, self.dim)


def _fixed_list_rows(arr: pa.FixedSizeListArray, dim: int) -> list:
    """One float32 row view per cell (None for NULL) over a single copy of the values."""
    if len(arr) == 0:
        return []
    flat = arr.flatten() if arr.null_count == 0 else arr.values[arr.offset * dim:(arr.offset + len(arr)) * dim]
    mat = flat.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(arr), dim)
    if arr.null_count == 0:
        return list(mat)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return [mat[i] if valid[i] else None for i in range(len(arr))]


def parquet_relation(con, fs: pafs.FileSystem, base: str, files: list[str], schema: pa.Schema | None, keep: list):
    """A DuckDB relation over `files` (relative to `base`); `keep` must outlive the relation
    (it holds the Arrow dataset a remote scan reads from). schema None: the files' own."""
    paths = [join_path(base, f) for f in files]
    if is_local(fs):
        return con.read_parquet(paths)
    # No httpfs offline: remote stores are scanned through a pyarrow dataset on the same
    # filesystem object; DuckDB pushes projections and filters into the Arrow scanner.
    dataset = pads.dataset(paths, filesystem=fs, format="parquet", schema=schema)
    keep.append(dataset)
    return con.from_arrow(dataset)


def _view_column(f: pa.Field) -> str:
    """One view column (internal identifiers only). Parquet has no fixed-size list and no
    second-resolution timestamp, so files come back as FLOAT[] and TIMESTAMP_MS; the casts give
    every view the same types whether it reads files or is empty: FLOAT[d] and TIMESTAMP."""
    if pa.types.is_fixed_size_list(f.type):
        return f'CAST("{f.name}" AS FLOAT[{f.type.list_size}]) AS "{f.name}"'
    if pa.types.is_timestamp(f.type):
        return f'CAST("{f.name}" AS TIMESTAMP) AS "{f.name}"'
    return f'"{f.name}"'


def _create_view(con, table: str, schema: pa.Schema, committed: Committed,
                 fs: pafs.FileSystem, base: str, keep: list) -> None:
    files = committed.files.get(table, [])
    hidden = committed.hidden.get(table, {})
    if not files:
        empty = schema.empty_table()
        keep.append(empty)
        rel = con.from_arrow(empty)
    else:
        clean = [f for f in files if f not in hidden]
        parts = [parquet_relation(con, fs, base, clean, schema, keep)] if clean else []
        for f, ids in hidden.items():  # rare: a conversation redone by a later batch
            col = duckdb.ColumnExpression("conversation_id")
            keep_rows = col.isnotin(*[duckdb.ConstantExpression(i) for i in ids])
            parts.append(parquet_relation(con, fs, base, [f], schema, keep).filter(keep_rows))
        rel = parts[0]
        for part in parts[1:]:
            rel = rel.union(part)
    rel = rel.project(", ".join(_view_column(f) for f in schema))
    keep.append(rel)
    rel.create_view(table, replace=True)


def open_store(path: str, cfg: LycheeConfig | None = None, *,
               filesystem: pafs.FileSystem | None = None, bm25_cache_size: int = 64) -> Store:
    """Open a store for reading. Any problem is a one-sentence StoreError, not a traceback."""
    fs, base = resolve_uri(path, filesystem)
    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise StoreError(f"store path {path} does not exist.")
    if info.type != pafs.FileType.Directory:
        raise StoreError(f"store path {path} is not a directory.")
    manifest = read_json(fs, join_path(base, MANIFEST))
    if manifest is None:
        raise StoreError(f"{path} is not a lychee-ray store (it has no manifest.json).")
    check_manifest(manifest, path, cfg)
    committed = committed_view(load_commits(fs, base))
    con = duckdb.connect(":memory:")
    # DuckDB's late materialization turns "ORDER BY score LIMIT k" into a second scan that
    # re-reads the embeddings; off, vector top-k is ~40% faster (benchmarks/bench_store.py).
    con.execute("SET GLOBAL late_materialization_max_rows = 0")
    # Parts are immutable once committed (a rewrite is a rename of a whole new file), so footers
    # can be cached instead of parsed on every query: -25% latency with 1024-row groups.
    con.execute("SET GLOBAL parquet_metadata_cache = true")
    con.execute(NORMALIZE_NAME_SQL)
    keep: list = []
    schemas = table_schemas(int(manifest["embedding_dim"]))
    for table in INGEST_TABLES:
        _create_view(con, table, schemas[table], committed, fs, base, keep)
    return Store(path, manifest, con, committed, bm25_cache_size, keep)
