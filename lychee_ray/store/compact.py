"""`lychee-ray compact`: rewrite a store's parts into fewer, larger ones under the commit protocol.

Every ingest batch is a commit with one Parquet part per table (ingest.batch_turns turns, at most
store.conversations_per_file conversations), so a large or nightly-grown store holds thousands
of small parts and commit markers. Opening it reads every marker, and every query over a view
opens every part's footer (a conversation's own load does not: it reads the part its newest
commit wrote). Compaction brings the parts back to a few per table.

How it stays safe (the commit protocol of store/writer.py, nothing new):
1. the visible rows (what the views show: a conversation's newest commit) are read group by
   group of conversations, sorted by id, about `turns_per_file` turn rows a group, and each
   group is committed as one new batch (`StoreWriter.write_tables`). A new commit is newer than
   every old one, so from its marker on readers see its rows and hide the old ones; a store
   killed half-way is complete and consistent at every moment;
2. once all groups are committed, the old commit markers are deleted, then the parts no commit
   lists (the orphan cleanup of `prepare_output`, which deletes only this store's own files).

Like an ingest, it must not run while another job writes to the store; a `Memory` opened before
it should be opened again after (its views list the old parts).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from lychee_ray.config import LycheeConfig
from lychee_ray.io.fs import join_path, resolve_uri
from lychee_ray.store.manifest import COMMITS, MANIFEST, StoreError, load_commits, read_json
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, finalize_manifest, prepare_output
from lychee_ray.tables import INGEST_TABLES

log = logging.getLogger(__name__)


@dataclass
class Compaction:
    commits_before: int
    commits_after: int
    files_before: int
    files_after: int
    conversations: int

    def render(self) -> str:
        return (f"compacted {self.conversations} conversations: {self.commits_before} commits / {self.files_before} parts "
                f"-> {self.commits_after} commits / {self.files_after} parts")


def conversation_groups(n_turns: list[tuple[str, int]], turns_per_file: int, max_conversations: int) -> list[list[str]]:
    """Conversation ids (sorted) in groups of about `turns_per_file` turns, at most
    `max_conversations` ids; a longer conversation is a group of its own."""
    groups, current, total = [], [], 0
    for cid, n in sorted(n_turns):
        if current and (total + n > turns_per_file or len(current) >= max_conversations):
            groups.append(current)
            current, total = [], 0
        current.append(cid)
        total += max(1, n)
    if current:
        groups.append(current)
    return groups


def compact_store(out_dir: str, cfg: LycheeConfig, *, turns_per_file: int = 65_536, max_conversations: int = 16_384,
                  filesystem: pafs.FileSystem | None = None) -> Compaction:
    """Rewrite the store at `out_dir` into groups of about `turns_per_file` turn rows (module docstring)."""
    fs, base = resolve_uri(out_dir, filesystem)
    if read_json(fs, join_path(base, MANIFEST)) is None:
        raise StoreError(f"{out_dir} is not a lychee-ray store (it has no manifest.json).")
    prepare_output(out_dir, cfg, filesystem=filesystem)  # debris of a killed run first, as an ingest does
    old = load_commits(fs, base)
    files_before = sum(len(c["files"]) for c in old)
    writer = StoreWriter(out_dir, cfg, filesystem)
    new_ids: set[str] = set()
    with open_store(out_dir, cfg, filesystem=filesystem) as store:
        statuses = dict(store.con.execute("SELECT conversation_id, status FROM conversations").fetchall())
        counts = dict(store.con.execute("SELECT conversation_id, count(*) FROM turns GROUP BY 1").fetchall())
        groups = conversation_groups([(cid, counts.get(cid, 0)) for cid in statuses], turns_per_file, max_conversations)
        for k, ids in enumerate(groups):
            tables = _group_tables(store, ids, with_unowned=k == 0)
            new_ids.add(writer.write_tables(tables, {cid: statuses[cid] for cid in ids}, batch_id=_batch_id(ids, old)))
    for commit in old:  # superseded: every conversation of it is in a newer commit now
        if commit["batch_id"] not in new_ids:
            fs.delete_file(join_path(base, COMMITS, f"{commit['batch_id']}.json"))
    prepare_output(out_dir, cfg, filesystem=filesystem)  # the parts no commit lists any more
    finalize_manifest(out_dir, filesystem=filesystem)
    after = load_commits(fs, base)
    result = Compaction(len(old), len(after), files_before, sum(len(c["files"]) for c in after), len(statuses))
    log.info("%s", result.render())
    return result


def _group_tables(store, ids: list[str], with_unowned: bool) -> dict[str, pa.Table]:
    """The visible rows of these conversations in every table (plus, once, rows with no
    conversation id: an errors row about a file as a whole)."""
    store.con.register("compact_ids", pa.table({"conversation_id": pa.array(ids, pa.string())}))
    unowned = " OR conversation_id IS NULL" if with_unowned else ""
    try:
        return {t: store.con.sql(f"SELECT * FROM {t} WHERE conversation_id IN (SELECT conversation_id FROM compact_ids){unowned}")
                .to_arrow_table() for t in INGEST_TABLES}
    finally:
        store.con.unregister("compact_ids")


def _batch_id(ids: list[str], old: list[dict]) -> str:
    """A name no old commit has: the hash of the group's ids and of the commits it replaces."""
    blob = "\x1f".join(ids) + "\x1e" + "\x1f".join(sorted(c["batch_id"] for c in old))
    return "c" + hashlib.sha256(blob.encode()).hexdigest()[:19]
