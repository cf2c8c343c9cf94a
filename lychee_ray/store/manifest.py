"""The store's bookkeeping: manifest.json (format tag, schema version, build hash, embedding
model and dim) and the commit markers under _commits/.

`committed_view` turns the commits into what readers see: per table the files to read and, for a
conversation a later batch redid, the older file's rows to hide. Writer and reader both need it
(and the writer imports the reader to count rows), so it lives below both.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from lychee_ray.config import LycheeConfig
from lychee_ray.io.fs import join_path, list_files, write_atomic
from lychee_ray.tables import (  # noqa: F401  (MANIFEST: re-exported to reader and writer)
    INGEST_TABLES,
    MANIFEST,
    SCHEMA_VERSION,
    STORE_FORMAT,
)

COMMITS = "_commits"


class StoreError(RuntimeError):
    """A store that cannot be written or read as asked; the message is one sentence for the user."""


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="microseconds")


# --------------------------------------------------------------------------------------------
# Manifest and commits
# --------------------------------------------------------------------------------------------
def new_manifest(cfg: LycheeConfig) -> dict:
    return {
        "format": STORE_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "build_hash": cfg.build_hash(),
        # what the hash is over: the build sections as written and what the machine resolved
        "build": cfg.build_record(),
        "embedding_model": cfg.embedding.model,
        "embedding_dim": cfg.embedding.dim,
        "created_at": now(),
        "tables": list(INGEST_TABLES),
        # Tags every file this store writes (Parquet footers, temp names), so a cleanup deletes
        # only its own debris and never a look-alike that was already in the folder.
        "store_id": new_store_id(),
    }


def new_store_id() -> str:
    return uuid.uuid4().hex


def check_manifest(manifest: dict, where: str, cfg: LycheeConfig | None) -> None:
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


def load_commits(fs: pafs.FileSystem, base: str) -> list[dict]:
    """Commit markers, oldest first (ties by batch id, so the order is deterministic)."""
    commits = []
    for info in list_files(fs, join_path(base, COMMITS)):
        if info.base_name.startswith(".") or not info.base_name.endswith(".json"):
            continue
        commit = read_json(fs, info.path)
        if not commit or "files" not in commit or "conversations" not in commit:
            raise StoreError(f"commit marker {info.path} is incomplete; the store is damaged.")
        commits.append(commit)
    commits.sort(key=lambda c: (c.get("committed_at", ""), c.get("batch_id", "")))
    return commits


@dataclass
class Committed:
    """What readers see: per table the files to read and, per file, conversations to hide."""

    files: dict[str, list[str]] = field(default_factory=dict)
    hidden: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # table -> file -> ids
    status: dict[str, str] = field(default_factory=dict)  # conversation_id -> status
    build_hashes: set[str] = field(default_factory=set)
    owner: dict[str, str] = field(default_factory=dict)  # conversation_id -> batch id of its newest commit
    batch_files: dict[str, dict[str, str]] = field(default_factory=dict)  # batch id -> table -> path

    def owned_part(self, table: str, conversation_id: str) -> str | None:
        """The one part of `table` that holds every visible row of the conversation: its newest
        commit wrote the whole conversation again (ingest, a grown conversation, compaction), and
        a file is hidden only for conversations a later commit owns. None: not committed, or its
        newest commit wrote no file of `table` (empty tables get none), so it has no rows there."""
        batch = self.owner.get(conversation_id)
        return self.batch_files.get(batch, {}).get(table) if batch is not None else None


def committed_view(commits: list[dict]) -> Committed:
    owner: dict[str, str] = {}
    out = Committed()
    for commit in commits:  # oldest first: a later commit of the same conversation wins
        for conv in commit["conversations"]:
            owner[conv["conversation_id"]] = commit["batch_id"]
            out.status[conv["conversation_id"]] = conv["status"]
    for commit in commits:
        own = [c["conversation_id"] for c in commit["conversations"]]
        lost = [cid for cid in own if owner[cid] != commit["batch_id"]]
        if len(lost) == len(own):
            continue  # every conversation of this batch was redone later: skip its files
        out.owner.update((cid, commit["batch_id"]) for cid in own if cid not in lost)
        out.build_hashes.add(commit.get("build_hash", ""))
        out.batch_files[commit["batch_id"]] = {table: info["path"] for table, info in commit["files"].items()}
        for table, info in commit["files"].items():
            out.files.setdefault(table, []).append(info["path"])
            if lost:
                out.hidden.setdefault(table, {})[info["path"]] = lost
    return out


def read_json(fs: pafs.FileSystem, path: str) -> dict | None:
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


def write_json(fs: pafs.FileSystem, path: str, obj: dict, owner: str | None = None) -> None:
    data = json.dumps(obj, indent=1, sort_keys=True, default=str).encode()
    write_atomic(fs, path, lambda sink: sink.write(data), owner=owner)
