"""Reading a store: `open_store` gives a `Store`, a DuckDB connection with one view per table
(`Store.con`, `Store.sql`), the derived `record_validity` view (when each record held, from the
append-only `record_links`), plus the reads that load one conversation whole.

Each view reads exactly the files the commits list (never a glob), with the types the table's
declaration gives (`lychee_ray.tables`). Rows are sorted by conversation_id in small row groups,
so ``conversation_id = $cid`` is pushed into the Parquet scan: DuckDB skips row groups whose
min/max exclude the conversation and does not decode the embeddings of row batches without a
match (benchmarks/bench_store.py measures loads at 1,000 conversations). Parquet has no
fixed-size list and no second-resolution timestamp, so files read back as FLOAT[] and
TIMESTAMP_MS; each view casts them to FLOAT[d] and TIMESTAMP. All queries bind user input as
parameters; the only text formatted into SQL is this module's own table and column names and the
integer dimension. A `Store` holds one DuckDB connection: use it from one thread at a time (open
one Store per worker or thread).

Retrieval does not query the store per question: it loads a conversation once
(`conversation_arrow`, from the one part its newest commit wrote, not the view over all parts)
and ranks in memory (lychee_ray/query/engine.py). BM25 uses `bm25s` (search.py): DuckDB's fts
extension cannot be installed here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lychee_ray.config import LycheeConfig
from lychee_ray.io.fs import is_local, join_path, resolve_uri
from lychee_ray.store.manifest import (
    MANIFEST,
    Committed,
    StoreError,
    check_manifest,
    committed_view,
    load_commits,
    read_json,
)
from lychee_ray.table_model import vector_rows
from lychee_ray.tables import TABLES, VECTOR_TABLES

log = logging.getLogger(__name__)


class Store:
    """A read-only view of one store: `con` has a DuckDB view per table; helpers are parameterized."""

    def __init__(self, path: str, manifest: dict, con: duckdb.DuckDBPyConnection,
                 committed: Committed, keep: Sequence = (), *, fs: pafs.FileSystem | None = None, base: str = ""):
        self.path = path
        self._fs, self._base = fs, base
        self._keep = list(keep)  # Arrow objects and relations the views scan must outlive them
        self._manifest = manifest
        self.con = con
        # Helpers run on their own cursor (same database, same views), so a result the caller
        # left unfinished on `con` cannot make them fail, and theirs cannot break the caller's.
        self._cur = con.cursor()
        self.dim = int(manifest["embedding_dim"])
        self._committed = committed
        self._cols = {name: cls.column_names() for name, cls in TABLES.items()}
        self._schemas = {name: cls.arrow_schema(self.dim) for name, cls in TABLES.items()}

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
                columns[name] = vector_rows(col)
            else:
                columns[name] = col.to_pylist()
        names = list(columns)
        return [dict(zip(names, cells)) for cells in zip(*columns.values())]

    def _conv_eq(self, alias: str) -> str:
        """The conversation predicate every read uses; a plain comparison, pushed into the scan."""
        return f"{alias}.conversation_id = $cid"

    def _select(self, table: str, alias: str) -> str:
        return ", ".join(f'{alias}."{c}"' for c in self._cols[table])

    def _check_columns(self, table: str, columns: Sequence[str]) -> None:
        """Only this module's own names are formatted into SQL: unknown tables or columns raise."""
        self._check_table(table, self._cols)
        for col in columns:
            if col not in self._cols[table]:
                raise ValueError(f"{table} has no column {col!r}")

    @staticmethod
    def _check_table(table: str, allowed: dict) -> str:
        if table not in allowed:
            raise ValueError(f"table must be one of {sorted(allowed)}, got {table!r}")
        return allowed[table]

    # -- whole conversations (retrieval loads one once, then ranks in memory) --------------------
    def columns(self, table: str) -> list[str]:
        """The view's column names of `table`, in schema order."""
        self._check_table(table, self._cols)
        return list(self._cols[table])

    def conversation_arrow(self, table: str, conversation_id: str, columns: Sequence[str] | None = None,
                           order_by: Sequence[str] = (), in_stored_order: bool = False) -> pa.Table:
        """One conversation's rows of `table` as Arrow, with the view's types (FLOAT[d], DATE,
        TIMESTAMP), ordered by `order_by` (or, `in_stored_order`, as the rows were written);
        column names are checked, the id is bound."""
        cols = list(columns) if columns is not None else self._cols[table]
        self._check_columns(table, [*cols, *order_by])
        select = ", ".join(f'x."{c}"' for c in cols)
        with self._conversation_source(table, conversation_id, [*cols, *order_by]) as (source, params):
            if in_stored_order:
                query = (f"SELECT {select} FROM (SELECT *, row_number() OVER () AS _pos FROM {source} "
                         f"WHERE conversation_id = $cid) x ORDER BY x._pos")
            else:
                order = (" ORDER BY " + ", ".join(f'x."{c}"' for c in order_by)) if order_by else ""
                query = f"SELECT {select} FROM {source} x WHERE {self._conv_eq('x')}{order}"
            return self._cur.sql(query, params={"cid": conversation_id, **params}).to_arrow_table()

    def conversation_query(self, conversation_id: str, columns: dict[str, Sequence[str]],
                           query: Callable[[dict[str, str]], str], params: dict | None = None) -> pa.Table:
        """Arrow result of `query(sources)` over one conversation's rows of several tables: `columns`
        names the columns each table must offer, `sources` maps each table to what to select them
        from (its owned part, as `_conversation_source` reads it). `$cid` is bound to the id."""
        for table, cols in columns.items():
            self._check_columns(table, cols)
        bound = {"cid": conversation_id, **(params or {})}
        with ExitStack() as stack:
            sources = {}
            for table, cols in columns.items():
                sources[table], more = stack.enter_context(self._conversation_source(table, conversation_id, cols))
                bound.update(more)
            return self._cur.sql(query(sources), params=bound).to_arrow_table()

    @contextmanager
    def _conversation_source(self, table: str, conversation_id: str, columns: Sequence[str]) -> Iterator[tuple[str, dict]]:
        """(what to select one conversation's rows of `table` from, its parameters): the one part
        its newest commit wrote (`Committed.owned_part`), typed as the view types it; nothing when
        that commit wrote no file of the table (the conversation has no rows there); else the view.

        The view opens every part's footer: on a store of 100,000 short chats (1,563 parts per
        table) a conversation's first question took over a second and grew with the store; the
        owned part is one file whatever the store's size (benchmarks/bench_scale.py measures both)."""
        if conversation_id not in self._committed.owner or self._fs is None:
            yield table, {}
            return
        part = self._committed.owned_part(table, conversation_id)
        schema = self._schemas[table]
        wanted = list(dict.fromkeys(["conversation_id", *columns]))
        typed = ", ".join(_view_column(schema.field(c)) for c in wanted)
        if part is not None and is_local(self._fs):
            key = f"{table}_part"  # one name per table: a query may read several parts
            yield f"(SELECT {typed} FROM read_parquet(${key}))", {key: join_path(self._base, part)}
            return
        if part is None:
            data = schema.empty_table().select(wanted)
        else:  # no httpfs offline: a remote part comes through pyarrow on the store's own filesystem
            data = pq.read_table(join_path(self._base, part), filesystem=self._fs, columns=wanted,
                                 filters=pc.field("conversation_id") == conversation_id)
        name = f"_owned_{table}"
        self._cur.register(name, data)
        try:
            yield f"(SELECT {typed} FROM {name})", {}
        finally:
            self._cur.unregister(name)

    # -- plain reads -------------------------------------------------------------------------------
    def conversation_ids(self) -> list[str]:
        """Every committed conversation, sorted. The commits list them (each with its row in
        `conversations`), so no scan: on 100,000 chats the view's took 0.3 s of `Memory.open`."""
        return sorted(self._committed.status)

    def turns(self, conversation_id: str) -> list[dict]:
        with self._conversation_source("turns", conversation_id, self._cols["turns"]) as (source, params):
            return self.sql(
                f"SELECT {self._select('turns', 't')} FROM {source} t WHERE {self._conv_eq('t')} ORDER BY t.turn_idx",
                {"cid": conversation_id, **params},
            )

    def records(self, conversation_id: str) -> list[dict]:
        with self._conversation_source("records", conversation_id, self._cols["records"]) as (source, more):
            return self.sql(
                f"SELECT {self._select('records', 'r')} FROM {source} r WHERE {self._conv_eq('r')} "
                f"ORDER BY r.segment_id, r.record_id",
                {"cid": conversation_id, **more},
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
        with self._conversation_source(table, conversation_id, [id_col, "embedding"]) as (source, more):
            result = self._cur.sql(
                f"SELECT t.{id_col} AS id, t.embedding FROM {source} t "
                f"WHERE {self._conv_eq('t')} AND t.embedding IS NOT NULL{id_clause} ORDER BY t.{id_col}",
                params={**params, **more},
            ).to_arrow_table()
        emb = result.column("embedding").combine_chunks()
        flat = emb.values.to_numpy(zero_copy_only=False) if len(emb) else np.zeros(0, np.float32)
        return result.column("id").to_pylist(), flat.astype(np.float32, copy=False).reshape(-1, self.dim)


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
               filesystem: pafs.FileSystem | None = None) -> Store:
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
    keep: list = []
    dim = int(manifest["embedding_dim"])
    for table, declared in TABLES.items():
        _create_view(con, table, declared.arrow_schema(dim), committed, fs, base, keep)
    con.execute(RECORD_VALIDITY_VIEW)
    return Store(path, manifest, con, committed, keep, fs=fs, base=base)


# A record's validity, derived from the append-only links (never stored): valid from the day it
# was said; superseded by the successor said first (ties: lowest id), and valid until that day;
# `conflicts_with` holds the records it contradicts or that contradict it. query/validity.py
# derives the same for a loaded conversation (tests/test_links.py checks they agree).
def validity_select(records: str, links: str) -> str:
    """The validity query over a records source and a record_links source (view names, or one
    conversation's parts, as `Memory.records` reads them)."""
    return f"""
WITH sup AS (
    SELECT conversation_id, other_record_id AS record_id,
           first(record_id ORDER BY stated_at ASC NULLS LAST, record_id) AS superseded_by,
           first(stated_at ORDER BY stated_at ASC NULLS LAST, record_id) AS valid_until
    FROM {links} WHERE kind = 'supersedes'
    GROUP BY conversation_id, other_record_id
), pairs AS (
    SELECT conversation_id, record_id, other_record_id AS other FROM {links} WHERE kind = 'contradicts'
    UNION SELECT conversation_id, other_record_id, record_id FROM {links} WHERE kind = 'contradicts'
), con AS (
    SELECT conversation_id, record_id, list(other ORDER BY other) AS conflicts_with FROM pairs GROUP BY conversation_id, record_id
)
SELECT r.conversation_id, r.record_id, r.stated_at AS valid_from, s.valid_until, s.superseded_by,
       coalesce(c.conflicts_with, []::VARCHAR[]) AS conflicts_with
FROM {records} r
LEFT JOIN sup s ON s.conversation_id = r.conversation_id AND s.record_id = r.record_id
LEFT JOIN con c ON c.conversation_id = r.conversation_id AND c.record_id = r.record_id
"""


RECORD_VALIDITY_VIEW = f"CREATE OR REPLACE VIEW record_validity AS {validity_select('records', 'record_links')}"
