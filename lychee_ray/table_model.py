"""How a stored table is declared: one typed class per table, every other shape derived from it.

A table is a dataclass subclass of `Row` (the idea of LanceDB's `LanceModel`): each field is a
column, in order, and its annotation gives the Arrow type. `column(...)` adds what an annotation
cannot say: whether the LLM reply carries the column (`llm`: True, or the dotted path inside the
reply, e.g. "time.start"), whether queries expose it (`query`), an explicit Arrow type, and a doc.

Derived from the declaration, never written again by hand:
- `arrow_schema(dim)`: the Parquet/DuckDB schema (a `Vector` column is FLOAT[dim]);
- `to_arrow(rows, dim)`: rows (objects or dicts) to a table of exactly that schema;
- `from_arrow(table)`: rows read back by column name into typed objects;
- `column_names(query=..., vector=...)`: the column lists of reads and of the public API;
- `llm_columns()`: what the LLM reply carries (schemas.py builds the reply model from it);
- `markdown_reference(tables)`: the tables' reference in docs/tables.md (a test keeps it current).

Types: `str`, `int`, `float`, `bool`, `list[str]`, `datetime.date`, `datetime.datetime`,
`Literal[...]` of strings, and `Vector`; `X | None` is a nullable column. A column may hold its
value in memory as an ISO string while it is stored as DATE or TIMESTAMP (`arrow=DATE`): readers
and the LLM give strings, the row builder parses them (store/rows.py), and `from_arrow` gives the
string back, so a record read from the store is the record that was written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np
import pyarrow as pa

DATE = pa.date32()
TIMESTAMP = pa.timestamp("s")


class Vector:
    """Annotation of an embedding column: FLOAT[d], d fixed per store (`embedding.dim`)."""


def column(doc: str = "", *, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING,
           llm: bool | str = False, describe: str = "", query: bool = True, arrow: pa.DataType | None = None) -> Any:
    """A column: what it holds (`doc`, for people), and what its annotation cannot say (see the
    module docstring). `describe`: what the LLM is told of a column its reply carries (the
    description in the JSON schema); most say nothing, since every word costs tokens per call."""
    meta = {"llm": llm, "describe": describe, "query": query, "arrow": arrow, "doc": doc}
    if factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class Column:
    """One column as the declaration gives it."""

    name: str
    py_type: Any  # the annotation, Optional removed
    arrow_type: pa.DataType | None  # None: a Vector, whose width is the store's
    nullable: bool
    llm: bool | str  # False, True (same name in the reply) or a dotted path in the reply
    describe: str  # its description in the reply's JSON schema ("" for none)
    query: bool  # exposed to queries and the public API
    doc: str

    @property
    def is_vector(self) -> bool:
        return self.py_type is Vector

    def arrow(self, dim: int) -> pa.DataType:
        return pa.list_(pa.float32(), dim) if self.is_vector else self.arrow_type

    @property
    def reply_path(self) -> str | None:
        """Where the LLM reply carries this column, or None."""
        if self.llm is True:
            return self.name
        return self.llm or None


_SCALARS: dict[Any, pa.DataType] = {
    str: pa.string(), int: pa.int64(), float: pa.float64(), bool: pa.bool_(),
    dt.date: DATE, dt.datetime: TIMESTAMP,
}


def _unwrap_optional(annotation) -> tuple[Any, bool]:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        if len(rest) != 1:
            raise TypeError(f"a column is one type or None, not {annotation!r}")
        return rest[0], True
    return annotation, False


def _arrow_of(py_type) -> pa.DataType | None:
    if py_type is Vector:
        return None
    if py_type in _SCALARS:
        return _SCALARS[py_type]
    origin, args = typing.get_origin(py_type), typing.get_args(py_type)
    if origin is Literal and all(isinstance(a, str) for a in args):
        return pa.string()
    if origin is list and len(args) == 1 and args[0] in _SCALARS:
        return pa.list_(_SCALARS[args[0]])
    raise TypeError(f"no Arrow type for the annotation {py_type!r}: give column(arrow=...)")


class Row:
    """Base of every table declaration: `class Record(Row, table="records", key=("record_id",))`.

    Subclasses are made keyword-only dataclasses here, so field order is column order and a
    column with a default may stand before one without."""

    TABLE: ClassVar[str]
    KEY: ClassVar[tuple[str, ...]]
    _COLUMNS: ClassVar[tuple[Column, ...]]

    def __init_subclass__(cls, *, table: str, key: Sequence[str], **kwargs):
        super().__init_subclass__(**kwargs)
        dataclasses.dataclass(kw_only=True)(cls)
        cls.TABLE, cls.KEY = table, tuple(key)
        hints = typing.get_type_hints(cls)
        cols = []
        for f in dataclasses.fields(cls):
            py_type, nullable = _unwrap_optional(hints[f.name])
            meta = f.metadata
            cols.append(Column(f.name, py_type, meta.get("arrow") or _arrow_of(py_type), nullable,
                               meta.get("llm", False), meta.get("describe", ""), meta.get("query", True), meta.get("doc", "")))
        cls._COLUMNS = tuple(cols)
        missing = [k for k in cls.KEY if k not in {c.name for c in cols}]
        if missing:
            raise TypeError(f"table {table}: key column(s) {missing} are not declared")

    # ---- the declaration ---------------------------------------------------------------------
    @classmethod
    def columns(cls) -> tuple[Column, ...]:
        return cls._COLUMNS

    @classmethod
    def column_names(cls, *, query: bool | None = None, vector: bool = True) -> list[str]:
        """Column names in order; `query=True` only those queries expose, `vector=False` none
        of the embedding columns."""
        return [c.name for c in cls._COLUMNS if (query is None or c.query == query) and (vector or not c.is_vector)]

    @classmethod
    def llm_columns(cls) -> list[Column]:
        return [c for c in cls._COLUMNS if c.reply_path]

    @classmethod
    def arrow_schema(cls, dim: int) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.arrow(dim), nullable=c.nullable) for c in cls._COLUMNS])

    # ---- rows -> Arrow -------------------------------------------------------------------------
    @classmethod
    def to_arrow(cls, rows: Sequence[Any], dim: int) -> pa.Table:
        """Rows (objects of this class or dicts keyed by column) to a table of `arrow_schema`.
        Values must already have their stored form (dates as `date`, see store/rows.py); a
        required column holding None is a bug of its producer and says so."""
        schema = cls.arrow_schema(dim)
        arrays = []
        for col, fld in zip(cls._COLUMNS, schema):
            values = [_get(r, col.name) for r in rows]
            if not col.nullable and any(v is None for v in values):
                raise ValueError(f"{cls.TABLE}.{col.name} is declared NOT NULL but a row holds None")
            arrays.append(_vector_array(values, dim) if col.is_vector else pa.array(values, type=fld.type))
        return pa.Table.from_arrays(arrays, schema=schema)

    # ---- Arrow -> rows ---------------------------------------------------------------------------
    @classmethod
    def from_arrow(cls, table: pa.Table) -> list["Row"]:
        """Typed rows from `table`, by column name. Columns the table lacks take their default
        (a read may leave out the embedding); a DATE/TIMESTAMP column declared `str` comes back as
        its ISO text; a vector as a float32 numpy row (a view of one matrix)."""
        n = table.num_rows
        values: dict[str, list] = {}
        for col in cls._COLUMNS:
            if col.name not in table.column_names:
                continue
            data = table.column(col.name)
            if col.is_vector:
                values[col.name] = vector_rows(data)
            elif col.py_type is str and (pa.types.is_date(data.type) or pa.types.is_timestamp(data.type)):
                values[col.name] = [None if v is None else v.isoformat() for v in data.to_pylist()]
            else:
                values[col.name] = data.to_pylist()
        return [cls(**{name: vals[i] for name, vals in values.items()}) for i in range(n)]

    def as_dict(self) -> dict[str, Any]:
        """Column -> value (a shallow copy: lists are shared)."""
        return {c.name: getattr(self, c.name) for c in self._COLUMNS}


def _get(row, name: str):
    return row.get(name) if isinstance(row, dict) else getattr(row, name)


def _vector_array(vectors: Sequence, dim: int) -> pa.FixedSizeListArray:
    """FixedSizeList<float32>[dim] from one flat float32 buffer (no per-element Python objects);
    None is a NULL vector."""
    n = len(vectors)
    missing = np.fromiter((v is None for v in vectors), dtype=bool, count=n)
    if not missing.any():
        flat = np.stack(vectors).astype(np.float32, copy=False).reshape(-1) if n else np.zeros(0, np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)
    mat = np.zeros((n, dim), dtype=np.float32)
    for i in np.flatnonzero(~missing):
        mat[i] = vectors[i]
    return pa.FixedSizeListArray.from_arrays(pa.array(mat.reshape(-1), type=pa.float32()), dim, mask=pa.array(missing))


def vector_rows(data: pa.ChunkedArray | pa.Array) -> list[np.ndarray | None]:
    """One float32 row view per cell (None for NULL) over a single copy of the values."""
    arr = data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data
    if len(arr) == 0:
        return []
    dim = arr.type.list_size if pa.types.is_fixed_size_list(arr.type) else len(arr[0].values) if arr[0].is_valid else 0
    mat = vector_matrix(arr, dim)
    if arr.null_count == 0:
        return list(mat)
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return [mat[i] if valid[i] else None for i in range(len(arr))]


def vector_matrix(arr: pa.Array, dim: int) -> np.ndarray:
    """[len(arr), dim] float32 over an Arrow list array of vectors (NULL rows hold zeros or
    whatever the buffer has: callers mask them)."""
    flat = arr.values[arr.offset * dim:(arr.offset + len(arr)) * dim] if pa.types.is_fixed_size_list(arr.type) else arr.flatten()
    return flat.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(len(arr), dim)


def markdown_reference(tables: Iterable[type[Row]]) -> str:
    """One Markdown section per table: its key, and each column's type, nullability, whether
    the LLM reply carries it, whether queries expose it, and its doc."""
    out = []
    for row in tables:
        out += [f"### `{row.TABLE}`", "", (row.__doc__ or "").strip().replace("\n    ", " "), "",
                f"Key: {', '.join(row.KEY) or '(none)'}.", "",
                "| column | type | null | LLM reply | queries | what it holds |", "|---|---|---|---|---|---|"]
        for c in row.columns():
            arrow = "FLOAT[d]" if c.is_vector else str(c.arrow_type)
            reply = c.reply_path if c.reply_path else ""
            out.append(f"| `{c.name}` | {arrow} | {'yes' if c.nullable else 'no'} | {reply} | {'yes' if c.query else 'no'} | {c.doc} |")
        out.append("")
    return "\n".join(out)
