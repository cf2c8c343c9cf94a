"""The memory store: Parquet files written by ingest, read in place by DuckDB.

Role in the pipeline
--------------------
Ingest ends in a write stage. Each Ray worker holds a `StoreWriter` and hands it batches of fully
processed `Conversation` objects; `write_batch` turns them into one Parquet file per table
(DESIGN.md "Tables") and then a commit marker. The driver calls `prepare_output` before the run
(checks the manifest, deletes what a killed run left, returns the conversations to skip) and
`finalize_manifest` after it. The answer stage and the CLI call `open_store`, which gives a DuckDB
connection with one view per table plus the parameterized queries the retrieval channels need.

Layout of an output directory (local path or any `pyarrow.fs` URI such as ``s3://bucket/x``)::

    manifest.json                      schema version, build hash, embedding model/dim, counts
    _commits/<batch_id>.json           one per written batch: conversations, statuses, files, rows
    <table>/part-<batch_id>.parquet    one file per table per batch, rows sorted by conversation_id

Writes are idempotent and resumable:
- `batch_id` is a hash of the batch's sorted conversation ids, so a rerun of a batch overwrites
  the same file names; ids never appear in paths.
- Every file is written under a dot-prefixed temp name in its folder and renamed into place. The
  commit marker is written last, so a batch without one never happened: readers only see files
  that a commit lists, and `prepare_output` deletes the rest.
- If a conversation is committed by more than one batch (it was redone, e.g. after an error), the
  newest commit wins and the older batch's rows of that conversation are filtered out of the views.

Reading: each view reads exactly the files the commits list (never a glob). Rows are sorted by
conversation_id in small row groups, so ``conversation_id = $cid`` is pushed into the Parquet
scan: DuckDB skips row groups whose min/max exclude the conversation and does not decode the
embeddings of row batches without a match. benchmarks/bench_store.py measures it: at 1,000
conversations (16 files per table) one question's whole retrieval took 227 ms p50 pruned (1 of 47
record row groups scanned) against 5.2 s with the filter above the scan, and 152 ms at 10. Parquet has no fixed-size list and no second-resolution timestamp, so files read back
as FLOAT[] and TIMESTAMP_MS; each view casts them to FLOAT[d] and TIMESTAMP. All query helpers
bind user input as parameters; the only text formatted into SQL is this module's own table and
column names and the integer dimension. A `Store` holds one DuckDB connection: use it from one
thread at a time (open one Store per worker or thread).

Extensions (checked on this machine, duckdb 2.0.1, no internet except PyPI):
- ``INSTALL fts`` / ``INSTALL vss`` fail: the download from the extension repository is refused.
- PyPI ships the binaries only for older DuckDB: duckdb-ext-fts/-vss 1.4.4.20260205 and
  duckdb-extension-fts/-vss 1.5.5 (the newest; there is none for 2.x). With
  ``allow_unsigned_extensions``, LOAD refuses each one ("built specifically for DuckDB version
  v1.4.4 / v1.5.5"); with ``allow_extensions_metadata_mismatch`` as well, fts 1.4.4 fails in its
  init function, vss 1.4.4 and fts 1.5.5 segfault the process, and vss 1.5.5 hangs.
- So BM25 uses `bm25s` (pinned, pure numpy): one index per (table, conversation) built on first
  use from that conversation's rows and kept in a small LRU in the `Store`. Vector search is exact
  ``array_cosine_similarity`` (built into DuckDB) over one conversation's rows: a few thousand
  vectors per conversation need no ANN index.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import re
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import bm25s
import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from bm25s.stopwords import STOPWORDS_EN_PLUS

from .config import LycheeConfig
from .schemas import INGEST_TABLES, SCHEMA_VERSION, Conversation, table_schemas

log = logging.getLogger(__name__)
# bm25s sets its own logger to DEBUG on import, which puts "Building index" lines on a user's
# stderr (e.g. under `lychee-ray query`); leave its level to the application's root logger.
logging.getLogger("bm25s").setLevel(logging.NOTSET)

STORE_FORMAT = "lychee-ray-store"
MANIFEST = "manifest.json"
COMMITS = "_commits"
VECTOR_TABLES = {"records": "record_id", "turns": "turn_id", "nodes": "node_id"}
BM25_TABLES = {"records": "record_id", "turns": "turn_id"}
TMP_MARK = ".tmp-"
_PART_RE = re.compile(r"^part-[0-9a-f]+\.parquet$")


class StoreError(RuntimeError):
    """A store that cannot be written or read as asked; the message is one sentence for the user."""


# --------------------------------------------------------------------------------------------
# Filesystem: everything goes through pyarrow.fs so s3:// (or gs://, hdfs://) works like a path.
# Public because evaluate's answers and report use the same helpers.
# --------------------------------------------------------------------------------------------
def resolve_uri(uri: str, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path without trailing slash). A URI's query (``?endpoint_override=...``)
    configures the filesystem and is not part of the path, so paths joined onto it stay clean."""
    if filesystem is not None:
        return filesystem, uri.rstrip("/")
    if "://" not in uri:
        uri = os.path.abspath(uri)  # from_uri only takes absolute local paths
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/") or "/"


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def join_path(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))


def child_uri(uri: str, name: str) -> str:
    """`name` inside the folder `uri`, as the user would write it: a plain path stays a path and
    a URI keeps its query after the new path (``s3://b/x?scheme=http`` -> ``s3://b/x/name?...``)."""
    if "://" not in uri:
        return os.path.join(uri, name)
    head, sep, query = uri.partition("?")
    return f"{head.rstrip('/')}/{name}{sep}{query}"


def is_part_name(name: str) -> bool:
    """A committed data file: `part-<hex>.parquet` (store tables and evaluate's answers)."""
    return _PART_RE.match(name) is not None


def is_temp_name(name: str) -> bool:
    """A file `write_atomic` had not renamed yet: the debris of a killed writer."""
    return name.startswith(".") and TMP_MARK in name


def _tmp_path(path: str) -> str:
    # Same folder (so the rename stays on one filesystem), dot-prefixed and not ending in
    # .parquet/.json, so no reader glob and no commit ever matches a half-written file.
    head, _, name = path.rpartition("/")
    return f"{head}/.{name}{TMP_MARK}{uuid.uuid4().hex[:12]}"


def _rename(fs: pafs.FileSystem, src: str, dst: str) -> None:
    if is_local(fs):
        os.replace(src, dst)  # atomic on POSIX, replaces an older version of the same part
    else:
        fs.move(src, dst)  # object stores: copy+delete; safe because the commit comes last


def write_atomic(fs: pafs.FileSystem, path: str, write) -> None:
    """`write(sink)` into a temp name beside `path`, then rename: a killed writer leaves no half
    file at `path`, only debris that `is_temp_name` recognises."""
    tmp = _tmp_path(path)
    try:
        with fs.open_output_stream(tmp) as sink:
            write(sink)
        _rename(fs, tmp, path)
    except BaseException:
        delete_quietly(fs, tmp)
        raise


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except (FileNotFoundError, OSError):
        pass


def _write_json(fs: pafs.FileSystem, path: str, obj: dict) -> None:
    data = json.dumps(obj, indent=1, sort_keys=True, default=str).encode()
    write_atomic(fs, path, lambda sink: sink.write(data))


def _read_json(fs: pafs.FileSystem, path: str) -> dict | None:
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as src:
        raw = src.read()
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise StoreError(f"{path} is not valid JSON ({exc.msg}); the store is damaged.") from exc
    if not isinstance(obj, dict):
        raise StoreError(f"{path} does not hold a JSON object; the store is damaged.")
    return obj


def list_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return [i for i in infos if i.type == pafs.FileType.File]


# --------------------------------------------------------------------------------------------
# Rows: Conversation -> one list of row dicts per table (pure)
# --------------------------------------------------------------------------------------------
def _error_row(conv: Conversation, field_name: str, kind: str, message: str) -> dict:
    return {
        "conversation_id": conv.conversation_id,
        "source_file": conv.source_file,
        "line": None,
        "field": field_name,
        "kind": kind,
        "message": message,
    }


def _parse_timestamp(value, conv: Conversation, field_name: str, problems: list[dict]):
    """ISO 8601 -> naive UTC datetime (schema: timestamp[s]); unparsable -> None + an errors row."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        ts = value
    elif isinstance(value, dt.date):
        ts = dt.datetime(value.year, value.month, value.day)
    else:
        try:
            ts = dt.datetime.fromisoformat(str(value).strip())
        except ValueError:
            problems.append(_error_row(conv, field_name, "bad_timestamp", f"not ISO 8601: {value!r}"))
            return None
    if ts.tzinfo is not None:
        ts = ts.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return ts.replace(microsecond=0)


def _month_end(year: int, month: int) -> dt.date:
    nxt = dt.date(year + month // 12, month % 12 + 1, 1)
    return nxt - dt.timedelta(days=1)


def _parse_date(value, conv: Conversation, field_name: str, problems: list[dict], end: bool):
    """ISO date -> date. 'YYYY-MM' / 'YYYY' widen to the first (start) or last (end) day."""
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    try:
        if re.fullmatch(r"\d{4}", text):
            return dt.date(int(text), 12, 31) if end else dt.date(int(text), 1, 1)
        if re.fullmatch(r"\d{4}-\d{2}", text):
            y, m = int(text[:4]), int(text[5:])
            return _month_end(y, m) if end else dt.date(y, m, 1)
        return dt.date.fromisoformat(text[:10])
    except ValueError:
        problems.append(_error_row(conv, field_name, "bad_date", f"not an ISO date: {value!r}"))
        return None


def _embedding_matrix(value, n_rows: int, dim: int, what: str, cid: str) -> np.ndarray | None:
    if value is None:
        return None
    mat = np.asarray(value, dtype=np.float32)
    if mat.ndim != 2 or mat.shape != (n_rows, dim):
        raise ValueError(
            f"conversation {cid!r}: {what} has shape {mat.shape}, expected ({n_rows}, {dim})"
        )
    return mat


def _vec(mat: np.ndarray | None, i: int):
    return None if mat is None else mat[i]  # a view: the table builder copies once, in bulk


def _turn_rows(conv: Conversation, dim: int, problems: list[dict]) -> list[dict]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.turn_embeddings, len(conv.turns), dim, "turn_embeddings", cid)
    exchange_of = {t: x for x, idxs in enumerate(conv.exchanges) for t in idxs}
    segment_of = {t: s.segment_id for s in conv.segments for t in s.turn_idxs}
    rows = []
    for pos, turn in enumerate(conv.turns):
        rows.append(
            {
                "conversation_id": cid,
                "turn_id": turn.turn_id,
                "turn_idx": turn.turn_idx,
                "exchange_idx": exchange_of.get(pos),
                "session_id": turn.session_id,
                "speaker": turn.speaker,
                "role": turn.role,
                "text": turn.text,
                "timestamp": _parse_timestamp(turn.timestamp, conv, f"turns[{pos}].timestamp", problems),
                "has_answer": turn.has_answer,
                "segment_id": segment_of.get(pos),
                "embedding": _vec(emb, pos),
            }
        )
    return rows


def _segment_rows(conv: Conversation) -> list[dict]:
    rows = []
    for seg in conv.segments:
        idxs = list(seg.turn_idxs)
        rows.append(
            {
                "conversation_id": conv.conversation_id,
                "segment_id": seg.segment_id,
                "segment_idx": seg.segment_idx,
                "turn_ids": [conv.turns[i].turn_id for i in idxs],
                "start_idx": idxs[0] if idxs else None,
                "end_idx": idxs[-1] if idxs else None,
                "n_exchanges": len(seg.exchange_idxs),
                "n_tokens": seg.n_tokens,
                "boundary_p": seg.boundary_p,
                "boundary_reason": seg.boundary_reason,
            }
        )
    return rows


def _record_rows(conv: Conversation, dim: int, problems: list[dict]) -> list[dict]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.record_embeddings, len(conv.records), dim, "record_embeddings", cid)
    rows = []
    for i, rec in enumerate(conv.records):
        where = f"records[{i}]"
        rows.append(
            {
                "conversation_id": cid,
                "record_id": rec.record_id,
                "segment_id": rec.segment_id,
                "type": rec.type,
                "text": rec.text,
                "entities": list(rec.entities),
                "topics": list(rec.topics),
                "time_start": _parse_date(rec.time_start, conv, f"{where}.time_start", problems, end=False),
                "time_end": _parse_date(rec.time_end, conv, f"{where}.time_end", problems, end=True),
                "time_granularity": rec.time_granularity,
                "time_expression": rec.time_expression,
                "source_turn_ids": list(rec.source_turn_ids),
                "backend": rec.backend,
                "degraded": bool(rec.degraded),
                "embedding": _vec(emb, i),
            }
        )
    return rows


def _node_rows(conv: Conversation, dim: int) -> list[dict]:
    cid = conv.conversation_id
    emb = _embedding_matrix(conv.node_embeddings, len(conv.nodes), dim, "node_embeddings", cid)
    return [
        {
            "conversation_id": cid,
            "node_id": node["node_id"],
            "kind": node["kind"],
            "name": node["name"],
            "n_records": node.get("n_records"),
            "embedding": _vec(emb, i),
        }
        for i, node in enumerate(conv.nodes)
    ]


def _stats_row(conv: Conversation, schema: pa.Schema) -> dict:
    row = {"conversation_id": conv.conversation_id}
    for f in schema:
        if f.name == "conversation_id":
            continue
        value = conv.stats.get(f.name)
        if pa.types.is_integer(f.type):
            row[f.name] = int(value or 0)
        elif pa.types.is_floating(f.type):
            row[f.name] = float(value or 0.0)
        else:
            row[f.name] = None if value is None else str(value)
    return row


def _question_rows(conv: Conversation, problems: list[dict]) -> list[dict]:
    return [
        {
            # the conversation's id, not the question's copy: rows must sort with their conversation
            "conversation_id": conv.conversation_id,
            "question_id": q.question_id,
            "question": q.question,
            "answer": None if q.answer is None else str(q.answer),
            "category": q.category,
            "evidence_turn_ids": list(q.evidence_turn_ids),
            "question_date": _parse_timestamp(
                q.question_date, conv, f"questions[{i}].question_date", problems
            ),
        }
        for i, q in enumerate(conv.questions)
    ]


def _errors_rows(conv: Conversation, problems: list[dict], schema: pa.Schema) -> list[dict]:
    defaults = {"conversation_id": conv.conversation_id, "source_file": conv.source_file}
    rows = []
    for err in list(conv.stats.get("errors", [])) + problems:
        rows.append({f.name: err[f.name] if f.name in err else defaults.get(f.name) for f in schema})
    return rows


def conversation_rows(conv: Conversation, dim: int) -> dict[str, list[dict]]:
    """All rows one conversation contributes, per table. Embedding cells are numpy row views.

    A timestamp or date that does not parse becomes NULL plus an `errors` row (kind bad_timestamp /
    bad_date), so the conversation is still stored and the problem is not lost.
    """
    schemas = table_schemas(dim)
    problems: list[dict] = []
    turns = _turn_rows(conv, dim, problems)
    records = _record_rows(conv, dim, problems)
    questions = _question_rows(conv, problems)
    sessions = {t.session_id for t in conv.turns}
    return {
        "conversations": [
            {
                "conversation_id": conv.conversation_id,
                "source": conv.source,
                "source_file": conv.source_file,
                # a duplicate's turns are not ingested; its row still says how many it held
                "n_turns": conv.stats.get("n_input_turns", len(conv.turns)),
                "n_sessions": len(sessions),
                "n_exchanges": len(conv.exchanges),
                "n_segments": len(conv.segments),
                "n_records": len(conv.records),
                "status": conv.status,
                "error": conv.error,
            }
        ],
        "turns": turns,
        "segments": _segment_rows(conv),
        "records": records,
        "nodes": _node_rows(conv, dim),
        "record_nodes": [
            {"conversation_id": conv.conversation_id, "record_id": r, "node_id": n}
            for r, n in conv.record_nodes
        ],
        "build_stats": [_stats_row(conv, schemas["build_stats"])],
        "questions": questions,
        "errors": _errors_rows(conv, problems, schemas["errors"]),
    }


def _embedding_array(vectors: Sequence, dim: int) -> pa.FixedSizeListArray:
    """FixedSizeList<float32>[dim] from one flat float32 buffer (no per-element Python objects)."""
    n = len(vectors)
    missing = np.fromiter((v is None for v in vectors), dtype=bool, count=n)
    if not missing.any():
        flat = np.stack(vectors).astype(np.float32, copy=False).reshape(-1) if n else np.zeros(0, np.float32)
        return pa.FixedSizeListArray.from_arrays(pa.array(flat, type=pa.float32()), dim)
    mat = np.zeros((n, dim), dtype=np.float32)
    for i in np.flatnonzero(~missing):
        mat[i] = vectors[i]
    return pa.FixedSizeListArray.from_arrays(
        pa.array(mat.reshape(-1), type=pa.float32()), dim, mask=pa.array(missing)
    )


def rows_to_table(table: str, rows: list[dict], dim: int) -> pa.Table:
    """Rows -> Arrow table with exactly the schema of `table_schemas(dim)[table]`."""
    schema = table_schemas(dim)[table]
    arrays = []
    for f in schema:
        if f.name == "embedding":
            arrays.append(_embedding_array([r["embedding"] for r in rows], dim))
        else:
            arrays.append(pa.array([r.get(f.name) for r in rows], type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def batch_id_for(conversation_ids: Iterable[str]) -> str:
    """Stable name of a batch: the same conversations give the same files on a rerun."""
    blob = "\x1f".join(sorted(conversation_ids)).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------
class StoreWriter:
    """Writes batches of processed conversations; one instance per Ray worker (picklable)."""

    def __init__(self, out_dir: str, cfg: LycheeConfig, filesystem: pafs.FileSystem | None = None):
        self.out_dir = out_dir
        self.cfg = cfg
        self.dim = cfg.embedding.dim
        self._filesystem = filesystem
        self._fs: pafs.FileSystem | None = None
        self._base = ""

    def _paths(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:  # lazily, so the writer pickles as plain config into Ray workers
            self._fs, self._base = resolve_uri(self.out_dir, self._filesystem)
        return self._fs, self._base

    def write_batch(self, convs: list[Conversation]) -> list[dict]:
        """Write one Parquet file per non-empty table, then the commit marker; return summaries."""
        if not convs:
            return []
        convs = sorted(convs, key=lambda c: c.conversation_id)
        ids = [c.conversation_id for c in convs]
        if len(set(ids)) != len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"batch holds conversation {dup!r} more than once")
        batch_id = batch_id_for(ids)
        per_table: dict[str, list[dict]] = {t: [] for t in INGEST_TABLES}
        for conv in convs:
            for table, rows in conversation_rows(conv, self.dim).items():
                per_table[table].extend(rows)
        files = {}
        for table in INGEST_TABLES:
            if per_table[table]:
                files[table] = self._write_table(table, batch_id, per_table[table])
        self._write_commit(batch_id, [(c.conversation_id, c.status) for c in convs], files)
        return [_summary(c) for c in convs]

    def write_tables(self, tables: dict[str, pa.Table], statuses: dict[str, str]) -> str:
        """Commit already-built Arrow tables (exact table schemas) as one batch of the
        conversations in `statuses` ({conversation_id: status}); rows are sorted by
        conversation_id as `write_batch` writes them. For tools that copy or relabel stored
        rows (benchmarks/bench_store.py) without rebuilding Conversation objects."""
        ids = sorted(statuses)
        batch_id = batch_id_for(ids)
        schemas = table_schemas(self.dim)
        fs, base = self._paths()
        files = {}
        for table in INGEST_TABLES:
            data = tables.get(table)
            if data is None or data.num_rows == 0:
                continue
            data = data.cast(schemas[table]).sort_by("conversation_id")
            rel = f"{table}/part-{batch_id}.parquet"
            fs.create_dir(join_path(base, table), recursive=True)
            write_atomic(fs, join_path(base, rel), lambda sink, d=data: self._write_parquet(d, sink))
            files[table] = {"path": rel, "rows": data.num_rows}
        self._write_commit(batch_id, [(cid, statuses[cid]) for cid in ids], files)
        return batch_id

    def _write_table(self, table: str, batch_id: str, rows: list[dict]) -> dict:
        fs, base = self._paths()
        data = rows_to_table(table, rows, self.dim)
        rel = f"{table}/part-{batch_id}.parquet"
        fs.create_dir(join_path(base, table), recursive=True)
        write_atomic(fs, join_path(base, rel), lambda sink: self._write_parquet(data, sink))
        return {"path": rel, "rows": data.num_rows}

    def _write_parquet(self, data: pa.Table, sink) -> None:
        plain = [f.name for f in data.schema if f.name != "embedding"]
        has_emb = "embedding" in data.schema.names
        pq.write_table(
            data,
            sink,
            row_group_size=self.cfg.store.row_group_rows,
            compression=self.cfg.store.compression,
            # Statistics on ids/dates let DuckDB skip row groups; on 384 floats they are noise.
            write_statistics=plain,
            use_dictionary=plain,
            # ~15% smaller float columns under zstd, and faster to write (measured on unit vectors).
            use_byte_stream_split=["embedding.list.element"] if has_emb else False,
        )

    def _write_commit(self, batch_id: str, convs: list[tuple[str, str]], files: dict) -> None:
        fs, base = self._paths()
        commit = {
            "batch_id": batch_id,
            "schema_version": SCHEMA_VERSION,
            "build_hash": self.cfg.build_hash(),
            "committed_at": _now(),
            "conversations": [{"conversation_id": cid, "status": status} for cid, status in convs],
            "files": files,
        }
        fs.create_dir(join_path(base, COMMITS), recursive=True)
        _write_json(fs, join_path(base, COMMITS, f"{batch_id}.json"), commit)


def _summary(conv: Conversation) -> dict:
    stats = conv.stats
    return {
        "conversation_id": conv.conversation_id,
        "status": conv.status,
        "n_turns": len(conv.turns),
        "n_segments": len(conv.segments),
        "n_records": len(conv.records),
        "llm_calls": int(stats.get("llm_calls") or 0),
        "prompt_tokens": int(stats.get("prompt_tokens") or 0),
        "completion_tokens": int(stats.get("completion_tokens") or 0),
    }


# --------------------------------------------------------------------------------------------
# Manifest and commits
# --------------------------------------------------------------------------------------------
def _new_manifest(cfg: LycheeConfig) -> dict:
    return {
        "format": STORE_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "build_hash": cfg.build_hash(),
        "embedding_model": cfg.embedding.model,
        "embedding_dim": cfg.embedding.dim,
        "created_at": _now(),
        "tables": list(INGEST_TABLES),
    }


def _check_manifest(manifest: dict, where: str, cfg: LycheeConfig | None) -> None:
    if manifest.get("format") != STORE_FORMAT:
        raise StoreError(f"{where} is not a lychee-ray store: its manifest.json has no lychee-ray format tag.")
    version = manifest.get("schema_version")
    if version != SCHEMA_VERSION:
        raise StoreError(
            f"store {where} has schema version {version}, but this lychee-ray uses schema version "
            f"{SCHEMA_VERSION}; re-run ingest into a new directory."
        )
    if cfg is None:
        return
    model, dim = manifest.get("embedding_model"), manifest.get("embedding_dim")
    if model != cfg.embedding.model or dim != cfg.embedding.dim:
        raise StoreError(
            f"store {where} was built with embedding model {model!r} (dim {dim}), but the config "
            f"uses {cfg.embedding.model!r} (dim {cfg.embedding.dim}); use the same embedding settings "
            f"or a new output directory."
        )


def _load_commits(fs: pafs.FileSystem, base: str) -> list[dict]:
    """Commit markers, oldest first (ties by batch id, so the order is deterministic)."""
    commits = []
    for info in list_files(fs, join_path(base, COMMITS)):
        if info.base_name.startswith(".") or not info.base_name.endswith(".json"):
            continue
        commit = _read_json(fs, info.path)
        if not commit or "files" not in commit or "conversations" not in commit:
            raise StoreError(f"commit marker {info.path} is incomplete; the store is damaged.")
        commits.append(commit)
    commits.sort(key=lambda c: (c.get("committed_at", ""), c.get("batch_id", "")))
    return commits


@dataclass
class _Committed:
    """What readers see: per table the files to read and, per file, conversations to hide."""

    files: dict[str, list[str]] = field(default_factory=dict)
    hidden: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # table -> file -> ids
    status: dict[str, str] = field(default_factory=dict)  # conversation_id -> status
    build_hashes: set[str] = field(default_factory=set)


def _committed_view(commits: list[dict]) -> _Committed:
    owner: dict[str, str] = {}
    out = _Committed()
    for commit in commits:  # oldest first: a later commit of the same conversation wins
        for conv in commit["conversations"]:
            owner[conv["conversation_id"]] = commit["batch_id"]
            out.status[conv["conversation_id"]] = conv["status"]
    for commit in commits:
        own = [c["conversation_id"] for c in commit["conversations"]]
        lost = [cid for cid in own if owner[cid] != commit["batch_id"]]
        if len(lost) == len(own):
            continue  # every conversation of this batch was redone later: skip its files
        out.build_hashes.add(commit.get("build_hash", ""))
        for table, info in commit["files"].items():
            out.files.setdefault(table, []).append(info["path"])
            if lost:
                out.hidden.setdefault(table, {})[info["path"]] = lost
    return out


def _remove_orphans(fs: pafs.FileSystem, base: str, referenced: set[str]) -> int:
    """Delete table parts no commit lists (a killed run) and temp files; only our own names."""
    removed = 0
    for table in INGEST_TABLES:
        for info in list_files(fs, join_path(base, table)):
            name = info.base_name
            ours = is_part_name(name) or is_temp_name(name)
            if ours and f"{table}/{name}" not in referenced:
                fs.delete_file(info.path)
                removed += 1
    for folder in (join_path(base, COMMITS), base):
        for info in list_files(fs, folder):
            if is_temp_name(info.base_name):
                fs.delete_file(info.path)
                removed += 1
    return removed


def prepare_output(
    out_dir: str,
    cfg: LycheeConfig,
    *,
    redo_statuses: Iterable[str] = (),
    filesystem: pafs.FileSystem | None = None,
) -> set[str]:
    """Create or check the store at `out_dir`, clean what a killed run left, return done ids.

    Call it on the driver before any writer runs (it deletes uncommitted files, so it must not run
    while another job writes to the same directory). Conversations whose committed status is in
    `redo_statuses` (e.g. {"error"}) are not returned, so the driver processes them again; the new
    commit then wins over the old one.
    """
    fs, base = resolve_uri(out_dir, filesystem)
    fs.create_dir(base, recursive=True)
    manifest_path = join_path(base, MANIFEST)
    manifest = _read_json(fs, manifest_path)
    if manifest is None:
        if list_files(fs, join_path(base, COMMITS)):
            raise StoreError(f"{out_dir} holds commits but no manifest.json; refusing to write into it.")
        _write_json(fs, manifest_path, _new_manifest(cfg))
    else:
        _check_manifest(manifest, out_dir, cfg)
        if manifest.get("build_hash") != cfg.build_hash():
            # Allowed (e.g. a resume after tuning a retry setting), but the mix is recorded:
            # each commit keeps its build hash and finalize_manifest lists them all.
            log.warning("store %s was started with build %s; this run is build %s",
                        out_dir, manifest.get("build_hash"), cfg.build_hash())
    commits = _load_commits(fs, base)
    referenced = {info["path"] for c in commits for info in c["files"].values()}
    removed = _remove_orphans(fs, base, referenced)
    if removed:
        log.info("removed %d uncommitted or temporary files from %s", removed, out_dir)
    redo = set(redo_statuses)
    return {cid for cid, status in _committed_view(commits).status.items() if status not in redo}


def finalize_manifest(out_dir: str, *, filesystem: pafs.FileSystem | None = None) -> dict:
    """Recount rows per table (as the views see them) and conversations by status into the manifest."""
    fs, base = resolve_uri(out_dir, filesystem)
    manifest = _read_json(fs, join_path(base, MANIFEST))
    if manifest is None:
        raise StoreError(f"{out_dir} is not a lychee-ray store (it has no manifest.json).")
    with open_store(out_dir, filesystem=filesystem) as store:
        counts = {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in INGEST_TABLES}
        committed = store._committed
    by_status: dict[str, int] = {}
    for status in committed.status.values():
        by_status[status] = by_status.get(status, 0) + 1
    manifest.update(
        counts=counts,
        n_conversations=len(committed.status),
        n_conversations_by_status=dict(sorted(by_status.items())),
        build_hashes=sorted(committed.build_hashes),
        finalized_at=_now(),
    )
    _write_json(fs, join_path(base, MANIFEST), manifest)
    return manifest


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
# One normalization for node names and query names, so "The Support-Group's" matches
# "support group": case, a possessive 's, runs of punctuation and a leading article do not count.
# Accents do count (no transliteration).
_NORM_MACRO = (
    "CREATE MACRO lychee_norm(x) AS regexp_replace(trim(regexp_replace(regexp_replace(lower(x), "
    "'[''’]s\\b', '', 'g'), '[^\\p{L}\\p{N}]+', ' ', 'g')), '^(the|a|an) ', '')"
)
_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")
_STOPWORDS = frozenset(STOPWORDS_EN_PLUS)


def _tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN_RE.findall((text or "").lower()) if t not in _STOPWORDS]


@dataclass
class _Bm25Index:
    rows: list[dict]
    model: bm25s.BM25 | None  # None when no row has a single indexable token


def _build_bm25(rows: list[dict], text_key: str) -> _Bm25Index:
    corpus = [_tokenize(r[text_key]) for r in rows]
    if not any(corpus):
        return _Bm25Index(rows, None)
    model = bm25s.BM25()
    model.index(corpus, show_progress=False)
    return _Bm25Index(rows, model)


def _as_date(value, name: str) -> dt.date | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value).strip()[:10])
    except ValueError as exc:
        raise ValueError(f"{name} must be an ISO date (YYYY-MM-DD), got {value!r}") from exc


class Store:
    """A read-only view of one store: `con` has a DuckDB view per table; helpers are parameterized."""

    def __init__(self, path: str, manifest: dict, con: duckdb.DuckDBPyConnection,
                 committed: _Committed, bm25_cache_size: int = 64, keep: Sequence = ()):
        self.path = path
        self._keep = list(keep)  # Arrow objects and relations the views scan must outlive them
        self._manifest = manifest
        self.con = con
        # Helpers run on their own cursor (same database, same views), so a result the caller
        # left unfinished on `con` cannot make them fail, and theirs cannot break the caller's.
        self._cur = con.cursor()
        self.dim = int(manifest["embedding_dim"])
        self._committed = committed
        self._bm25: OrderedDict[tuple[str, str], _Bm25Index] = OrderedDict()
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
        column (entities, topics, source_turn_ids) any overlap; values are bound, columns checked."""
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
        terms = _tokenize(query_text)
        if index.model is None or not terms or k <= 0:
            return []
        scores = index.model.get_scores(terms)
        order = np.lexsort((np.arange(len(scores)), -scores))  # score desc, then stored order
        return [dict(index.rows[i], score=float(scores[i])) for i in order[:k] if scores[i] > 0]

    def _bm25_index(self, table: str, conversation_id: str) -> _Bm25Index:
        key = (table, conversation_id)
        if key in self._bm25:
            self._bm25.move_to_end(key)
            return self._bm25[key]
        rows = self.turns(conversation_id) if table == "turns" else self.records(conversation_id)
        index = _build_bm25(rows, "text")
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
        """(ids, float32 [n, d]) of one conversation's rows (e.g. for MMR); ordered by id."""
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


def _create_view(con, table: str, schema: pa.Schema, committed: _Committed,
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
    manifest = _read_json(fs, join_path(base, MANIFEST))
    if manifest is None:
        raise StoreError(f"{path} is not a lychee-ray store (it has no manifest.json).")
    _check_manifest(manifest, path, cfg)
    committed = _committed_view(_load_commits(fs, base))
    con = duckdb.connect(":memory:")
    # DuckDB's late materialization turns "ORDER BY score LIMIT k" into a second scan that
    # re-reads the embeddings; off, vector top-k is ~40% faster (benchmarks/bench_store.py).
    con.execute("SET GLOBAL late_materialization_max_rows = 0")
    # Parts are immutable once committed (a rewrite is a rename of a whole new file), so footers
    # can be cached instead of parsed on every query: -25% latency with 1024-row groups.
    con.execute("SET GLOBAL parquet_metadata_cache = true")
    con.execute(_NORM_MACRO)
    keep: list = []
    schemas = table_schemas(int(manifest["embedding_dim"]))
    for table in INGEST_TABLES:
        _create_view(con, table, schemas[table], committed, fs, base, keep)
    return Store(path, manifest, con, committed, bm25_cache_size, keep)
