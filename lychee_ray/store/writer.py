"""Writing a store: batches of processed conversations -> one Parquet part per table, then a
commit marker; plus the driver's `prepare_output` (before a run) and `finalize_manifest` (after).

Writes are idempotent and resumable:
- `batch_id` is a hash of the batch's sorted conversation ids, so a rerun of a batch overwrites
  the same file names; ids never appear in paths.
- Every file is written under a dot-prefixed temp name in its folder and renamed into place. The
  commit marker is written last, so a batch without one never happened: readers only see files
  that a commit lists, and `prepare_output` deletes the rest of what this store wrote.
- Every file carries the store's id (manifest `store_id`: in Parquet footers and temp names),
  and a cleanup deletes only files that carry it: `--out` may point at a folder that held other
  files, and a look-alike (`turns/part-....parquet`, `.x.tmp-y`) that we did not write stays.
- If a conversation is committed by more than one batch (it was redone, e.g. after an error), the
  newest commit wins and the older batch's rows of that conversation are filtered out of the views.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from lychee_ray.config import LycheeConfig
from lychee_ray.io.fs import (
    check_writable,
    is_empty_dir,
    is_own_temp_name,
    is_part_name,
    join_path,
    list_files,
    make_output_dir,
    resolve_uri,
    write_atomic,
)
from lychee_ray.schemas import Conversation
from lychee_ray.store.manifest import (
    COMMITS,
    MANIFEST,
    StoreError,
    check_manifest,
    committed_view,
    load_commits,
    new_manifest,
    new_store_id,
    now,
    read_json,
    write_json,
)
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import (
    DROPPED_TURN_SQL,
    WITHHOLDING_KINDS,
    conversation_rows,
    is_withheld,
    rows_to_table,
)
from lychee_ray.tables import INGEST_TABLES, SCHEMA_VERSION, table_schemas

log = logging.getLogger(__name__)
STORE_ID_KEY = b"lychee_ray.store_id"  # Parquet footer key: the store that wrote the part


def batch_id_for(conversation_ids: Iterable[str]) -> str:
    """Stable name of a batch: the same conversations give the same files on a rerun."""
    blob = "\x1f".join(sorted(conversation_ids)).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


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
        self._owner: str | None = None  # the manifest's store_id, tagged on every file written

    def _paths(self) -> tuple[pafs.FileSystem, str]:
        if self._fs is None:  # lazily, so the writer pickles as plain config into Ray workers
            self._fs, self._base = resolve_uri(self.out_dir, self._filesystem)
            self._owner = store_id_of(self._fs, self._base)
        return self._fs, self._base

    def write_batch(self, convs: list[Conversation], before_commit: Callable[[], None] | None = None) -> list[dict]:
        """Write one Parquet file per non-empty table, then the commit marker; return summaries.
        `before_commit` runs between the two (it raises to leave the batch uncommitted)."""
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
        if before_commit is not None:
            before_commit()
        self._write_commit(batch_id, [(c.conversation_id, c.status) for c in convs], files)
        return [_summary(c) for c in convs]

    def write_tables(self, tables: dict[str, pa.Table], statuses: dict[str, str], batch_id: str | None = None) -> str:
        """Commit already-built Arrow tables (exact table schemas) as one batch of the
        conversations in `statuses` ({conversation_id: status}); rows are sorted by
        conversation_id as `write_batch` writes them. For tools that copy, relabel or compact
        stored rows (benchmarks/bench_scale.py, store/compact.py) without rebuilding
        Conversation objects. `batch_id`: the name of the batch (default: from its ids)."""
        ids = sorted(statuses)
        batch_id = batch_id or batch_id_for(ids)
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
            write_atomic(fs, join_path(base, rel), lambda sink, d=data: self._write_parquet(d, sink), owner=self._owner)
            files[table] = {"path": rel, "rows": data.num_rows}
        self._write_commit(batch_id, [(cid, statuses[cid]) for cid in ids], files)
        return batch_id

    def _write_table(self, table: str, batch_id: str, rows: list[dict]) -> dict:
        fs, base = self._paths()
        data = rows_to_table(table, rows, self.dim)
        rel = f"{table}/part-{batch_id}.parquet"
        fs.create_dir(join_path(base, table), recursive=True)
        write_atomic(fs, join_path(base, rel), lambda sink: self._write_parquet(data, sink), owner=self._owner)
        return {"path": rel, "rows": data.num_rows}

    def _write_parquet(self, data: pa.Table, sink) -> None:
        plain = [f.name for f in data.schema if f.name != "embedding"]
        has_emb = "embedding" in data.schema.names
        if self._owner:  # proves on a later cleanup that this part is ours (see module docstring)
            data = data.replace_schema_metadata({**(data.schema.metadata or {}), STORE_ID_KEY: self._owner.encode()})
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
            "committed_at": now(),
            "conversations": [{"conversation_id": cid, "status": status} for cid, status in convs],
            "files": files,
        }
        fs.create_dir(join_path(base, COMMITS), recursive=True)
        write_json(fs, join_path(base, COMMITS, f"{batch_id}.json"), commit, owner=self._owner)


def _summary(conv: Conversation) -> dict:
    """What the run summary adds up: counts as committed (a pending conversation commits no
    segments or records) and what the conversation cost."""
    stats = conv.stats
    withheld = is_withheld(conv)
    return {
        "conversation_id": conv.conversation_id,
        "status": conv.status,
        "n_turns": len(conv.turns),
        "n_segments": 0 if withheld else len(conv.segments),
        "n_records": 0 if withheld else len(conv.records),
        "llm_calls": int(stats.llm_calls),
        "prompt_tokens": int(stats.prompt_tokens),
        "completion_tokens": int(stats.completion_tokens),
    }


def turn_accounts(out_dir: str, batch_ids: Iterable[str], *, filesystem: pafs.FileSystem | None = None) -> dict[str, int]:
    """Where the store put the turns of the conversations that the batches `batch_ids` committed
    (one run's batches; rows a later commit redid are not theirs any more): `stored` (turns
    rows), `errors` (rows that each name a turn a reader dropped), one entry per
    WITHHOLDING_KINDS kind (n_turns of rows whose turns were counted, not stored: duplicate
    copies, changed histories) and `pending` (n_turns of pending rows)."""
    fs, base = resolve_uri(out_dir, filesystem)
    wanted = set(batch_ids)
    owner: dict[str, str] = {}
    for commit in load_commits(fs, base):  # oldest first: the last commit of an id owns it
        for conv in commit["conversations"]:
            owner[conv["conversation_id"]] = commit["batch_id"]
    ids = pa.table({"conversation_id": pa.array([cid for cid, b in owner.items() if b in wanted], pa.string())})
    with open_store(out_dir, filesystem=filesystem) as store:
        store.con.register("run_ids", ids)
        mine = "conversation_id IN (SELECT conversation_id FROM run_ids)"

        def one(sql: str) -> int:
            return int(store.con.execute(sql).fetchone()[0] or 0)

        accounts = {
            "stored": one(f"SELECT count(*) FROM turns WHERE {mine}"),
            "errors": one(f"SELECT count(*) FROM errors WHERE {mine} AND {DROPPED_TURN_SQL}"),
            "pending": one(f"SELECT sum(n_turns) FROM conversations WHERE {mine} AND status = 'pending'"),
        }
        for kind in WITHHOLDING_KINDS:
            accounts[kind] = one(
                f"SELECT sum(n_turns) FROM conversations WHERE {mine} AND conversation_id IN "
                f"(SELECT conversation_id FROM errors WHERE kind = '{kind}')"
            )
    return accounts


def store_id_of(fs: pafs.FileSystem, base: str) -> str | None:
    """The store id in the manifest at `base`, or None (no manifest yet, or an older store)."""
    manifest = read_json(fs, join_path(base, MANIFEST))
    return (manifest or {}).get("store_id") or None


def _part_store_id(fs: pafs.FileSystem, path: str) -> str | None:
    """The store id in a Parquet file's footer; None for a file we cannot read as ours."""
    try:
        with fs.open_input_file(path) as src:
            meta = pq.read_metadata(src).metadata or {}
    except (OSError, ValueError):  # not Parquet at all (ArrowInvalid is a ValueError)
        return None
    return meta.get(STORE_ID_KEY, b"").decode(errors="replace") or None


def _is_own_orphan(fs: pafs.FileSystem, info: pafs.FileInfo, owner: str) -> bool:
    name = info.base_name
    if is_own_temp_name(name, owner):
        return True
    return is_part_name(name) and _part_store_id(fs, info.path) == owner


def _remove_orphans(fs: pafs.FileSystem, base: str, referenced: set[str], owner: str | None) -> int:
    """Delete table parts no commit lists (a killed run) and temp files, but only those that
    carry this store's id: a file that merely looks like ours is left alone."""
    if not owner:
        return 0
    removed = 0
    for table in INGEST_TABLES:
        for info in list_files(fs, join_path(base, table)):
            if f"{table}/{info.base_name}" not in referenced and _is_own_orphan(fs, info, owner):
                fs.delete_file(info.path)
                removed += 1
    for folder in (join_path(base, COMMITS), base):
        for info in list_files(fs, folder):
            if is_own_temp_name(info.base_name, owner):
                fs.delete_file(info.path)
                removed += 1
    return removed


def _open_manifest(fs: pafs.FileSystem, base: str, out_dir: str, cfg: LycheeConfig, force: bool) -> dict:
    """The store's manifest, made if the folder is new (or empty, or `force`d); refuses a
    non-empty folder that is not a store, so we never write among files that are not ours."""
    manifest_path = join_path(base, MANIFEST)
    manifest = read_json(fs, manifest_path)
    if manifest is None:
        if list_files(fs, join_path(base, COMMITS)):
            raise StoreError(f"{out_dir} holds commits but no manifest.json; refusing to write into it.")
        if not force and not is_empty_dir(fs, base):
            raise StoreError(f"{out_dir} is not empty and is not a lychee-ray store; choose another output folder, or pass --force to write into it anyway.")
        manifest = new_manifest(cfg)
        check_writable(fs, base, out_dir, manifest["store_id"])
        write_json(fs, manifest_path, manifest, owner=manifest["store_id"])
        return manifest
    check_manifest(manifest, out_dir, cfg)
    check_writable(fs, base, out_dir, manifest.get("store_id"))
    if manifest.get("build_hash") != cfg.build_hash():
        # Allowed (e.g. a resume after tuning a retry setting), but the mix is recorded:
        # each commit keeps its build hash and finalize_manifest lists them all.
        log.warning("store %s was started with build %s; this run is build %s",
                    out_dir, manifest.get("build_hash"), cfg.build_hash())
    if not manifest.get("store_id"):  # a store from before store ids: tag what it writes from now on
        manifest["store_id"] = new_store_id()
        write_json(fs, manifest_path, manifest, owner=manifest["store_id"])
    return manifest


def prepare_output(
    out_dir: str,
    cfg: LycheeConfig,
    *,
    redo_statuses: Iterable[str] = (),
    filesystem: pafs.FileSystem | None = None,
    force: bool = False,
) -> set[str]:
    """Create or check the store at `out_dir`, clean what a killed run left, return done ids.

    Call it on the driver before any writer runs (it deletes uncommitted files, so it must not run
    while another job writes to the same directory). Conversations whose committed status is in
    `redo_statuses` (e.g. {"error"}) are not returned, so the driver processes them again; the new
    commit then wins over the old one. A folder that is not empty and holds no store is refused
    unless `force`; a path that cannot be a writable folder is one PathProblem sentence.
    """
    fs, base = resolve_uri(out_dir, filesystem)
    make_output_dir(fs, base, out_dir)
    manifest = _open_manifest(fs, base, out_dir, cfg, force)
    owner = manifest["store_id"]
    commits = load_commits(fs, base)
    referenced = {info["path"] for c in commits for info in c["files"].values()}
    removed = _remove_orphans(fs, base, referenced, owner)
    if removed:
        log.info("removed %d uncommitted or temporary files from %s", removed, out_dir)
    # `pending` is a transient failure (the LLM endpoint was down): always redone by the next run
    redo = set(redo_statuses) | {"pending"}
    return {cid for cid, status in committed_view(commits).status.items() if status not in redo}


def finalize_manifest(out_dir: str, *, filesystem: pafs.FileSystem | None = None) -> dict:
    """Recount rows per table (as the views see them) and conversations by status into the manifest."""
    fs, base = resolve_uri(out_dir, filesystem)
    manifest = read_json(fs, join_path(base, MANIFEST))
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
        finalized_at=now(),
    )
    write_json(fs, join_path(base, MANIFEST), manifest, owner=manifest.get("store_id"))
    return manifest
