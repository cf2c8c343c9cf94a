"""The read stage of ingest: input parts in, packed conversations out, on Ray Data.

The driver plans the parts (io/readers/plan.py: one per file, byte ranges for a large JSON Lines
file) and numbers the lines of byte ranges (one cheap counting task per range); each part is read
by a task of its own, which compares every conversation with the store (`resume.classify`:
unchanged ones are skipped, grown ones extended, edited ones recorded) and yields small blocks.
Then comes one barrier: which copy of an id is first is known only once every part has registered
its copies (`ConversationIdRegistry`), and a conversation of turn rows only once every file has
given its rows (a shuffle groups them). What the read tasks made waits in Ray's object store
(which spills to disk), not in any process.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.resume import classify
from lychee_ray.io.readers.decode import count_newlines
from lychee_ray.io.readers.files import Found, duplicate_copy, read_part
from lychee_ray.io.readers.plan import FirstCopies, Place, number_parts, parts_to_count, plan_parts, whole_part
from lychee_ray.io.readers.turns import TurnRow, group_conversation
from lychee_ray.runtime.stage import pack
from lychee_ray.schemas import Conversation
from lychee_ray.store.stored_state import StoredConversation


def registry_actor():
    import ray

    @ray.remote(num_cpus=0)
    class ConversationIdRegistry(FirstCopies):
        """`FirstCopies` for every read task of the job; it also counts the turn rows the tasks
        passed on, so the job groups them only when there are some (a shuffle costs seconds
        even when it has nothing to move)."""

        def __init__(self):
            super().__init__()
            self.turn_rows = 0
            self.unchanged = 0

        def alive(self) -> bool:
            """The run's lease: Ray kills this actor with the driver that owns it, so a worker
            that gets no answer stops before committing (`runtime.ray.check_driver`)."""
            return True

        def add_unchanged(self, n: int) -> None:
            self.unchanged += n

        def count_unchanged(self) -> int:
            return self.unchanged

        def add_turn_rows(self, n: int) -> None:
            self.turn_rows += n

        def count_turn_rows(self) -> int:
            return self.turn_rows

    return ConversationIdRegistry.remote()


# --------------------------------------------------------------------------------------------
# Read stage: parts of the plan in, small blocks out; then, once every part is read, the first
# copy of each id is kept and the turn rows of each conversation are gathered from every file
# --------------------------------------------------------------------------------------------
TURN_ROWS_PER_BLOCK = 4096  # a turn row is small: blocks of them, not of 16
TURN_ROWS_PER_PARTITION = 50_000  # turn rows per partition of the shuffle that groups them


def read_dataset(cfg: LycheeConfig, files: list[str], stored: Mapping[str, StoredConversation], input_root: str | None, registry=None):
    """The read stage as a dataset of packed conversations. The driver plans the parts (`plan`)
    and numbers the lines of byte ranges (one cheap counting task per range); each part is read
    by a task of its own; then comes one barrier, since which copy of an id is first is known
    only once every part has registered its copies, and a conversation of turn rows only once
    every file has given its rows. What the read tasks made waits in Ray's object store (which
    spills to disk), not in any process. `stored`: what the store holds (`resume.classify`
    decides per conversation: skip, extend, redo or record an edited history)."""
    import ray

    registry = registry or registry_actor()
    parts = plan_parts(files, input_root, cfg.read.split_bytes)
    count = ray.remote(num_cpus=0.5)(count_newlines)
    parts = number_parts(parts, ray.get([count.remote(p.uri, p.start, p.end) for p in parts_to_count(parts)]))
    read = ray.data.from_items([{"path": p.path, "part": pickle.dumps(p)} for p in parts], override_num_blocks=max(1, len(parts)))
    read = read.map_batches(
        read_files_batch, fn_args=(cfg, stored, registry, input_root), batch_size=1, batch_format="numpy", num_cpus=0.5
    ).materialize()
    ds = read.map_batches(keep_first_batch, fn_args=(registry, stored), batch_size=None, batch_format="numpy", num_cpus=0.5)
    n_rows = ray.get(registry.count_turn_rows.remote())
    if not n_rows:
        return ds
    rows = read.map_batches(_turn_rows_only, batch_size=None, batch_format="pyarrow", num_cpus=0.5)
    groups = rows.groupby("group", num_partitions=1 + n_rows // TURN_ROWS_PER_PARTITION).map_groups(
        turn_group_batch, fn_args=(cfg, stored, registry), batch_format="numpy", num_cpus=0.5
    )
    # grouped here, while the cluster is free: inside the pipeline the shuffle's tasks and
    # aggregators wait for CPUs that the later stages' actor pools hold, and nothing moves
    return ds.union(groups.materialize())


def read_files_batch(batch, cfg: LycheeConfig, stored: Mapping[str, StoredConversation], registry, input_root: str | None):
    """Each part of the batch (`plan.FilePart`, pickled in `part`; a bare `path` is read whole)
    as blocks of conversations, whose places go to `registry`, and blocks of turn rows."""
    parts = [pickle.loads(b) for b in batch["part"]] if "part" in batch else [whole_part(str(p), 0, input_root) for p in batch["path"]]
    for part in parts:
        found: list[Found] = []
        rows: list[TurnRow] = []
        unchanged = 0
        for item in read_part(part, cfg.read_settings):
            if isinstance(item, TurnRow):
                rows.append(item)
                if len(rows) >= TURN_ROWS_PER_BLOCK:
                    yield _turn_block(rows, registry)
                    rows = []
                continue
            item = _against_store(item, stored, cfg)
            if item is None:
                unchanged += 1
                continue
            found.append(item)
            if len(found) >= cfg.ray.read_block_conversations:
                yield _found_block(found, registry)
                found = []
        if found:
            yield _found_block(found, registry)
        if rows:
            yield _turn_block(rows, registry)
        if unchanged:  # counted for the summary: the input, not the store, says what was complete
            import ray

            ray.get(registry.add_unchanged.remote(unchanged))


def _against_store(item: Found, stored: Mapping[str, StoredConversation], cfg: LycheeConfig) -> Found | None:
    """`resume.classify` on a conversation as read: None when the store holds exactly it; an
    edited history's error row is no copy of anything (no place), and is written once."""
    if item.place is None or item.conv.source == "error":
        return item
    conv = classify(item.conv, stored, cfg.ingest.on_changed_history)
    if conv is None or conv is item.conv:
        return None if conv is None else item
    return None if conv.conversation_id in stored else Found(conv, None)


def _found_block(found: list[Found], registry) -> dict[str, np.ndarray]:
    import ray

    copies = [f for f in found if f.place is not None]
    if copies:  # waited for: every copy is registered before the barrier ends
        ray.get(registry.register.remote([f.conv.conversation_id for f in copies], [f.place for f in copies]))
    return _block("conversation", [""] * len(found), [f.conv.conversation_id for f in found], [f.conv for f in found], [f.place for f in found])


def _turn_block(rows: list[TurnRow], registry) -> dict[str, np.ndarray]:
    import ray

    ray.get(registry.add_turn_rows.remote(len(rows)))
    return _block("turn", [r.group for r in rows], [r.cid or "" for r in rows], rows, [None] * len(rows))


def _block(kind: str, groups: list[str], ids: list[str], states: list, places: list) -> dict[str, np.ndarray]:
    return {
        "kind": np.array([kind] * len(ids), dtype=object),
        "group": np.array(groups, dtype=object),
        "conversation_id": np.array(ids, dtype=object),
        "state": np.array([pickle.dumps(s, protocol=5) for s in states], dtype=object),
        "place": np.array([pickle.dumps(p, protocol=5) for p in places], dtype=object),
    }


def keep_first_batch(batch, registry, stored: Mapping[str, StoredConversation]) -> dict[str, np.ndarray]:
    """The conversations of a block of the read, each kept or replaced by its duplicate row."""
    mine = batch["kind"] == "conversation"
    convs = [pickle.loads(s) for s in batch["state"][mine]]
    places = [pickle.loads(p) for p in batch["place"][mine]]
    # a later copy's row (or an error row) may be in the store already (a resumed run): written once
    return pack([c for c in mark_duplicates(convs, registry, places) if not _stored_row(c, stored)])


def _stored_row(conv: Conversation, stored: Mapping[str, StoredConversation]) -> bool:
    """A row that only records something (a duplicate copy, an error) and is stored already."""
    return conv.status in ("duplicate", "error") and conv.conversation_id in stored


def _turn_rows_only(table):
    import pyarrow.compute as pc

    return table.filter(pc.equal(table["kind"], "turn"))


def turn_group_batch(batch, cfg: LycheeConfig, stored: Mapping[str, StoredConversation], registry) -> dict[str, np.ndarray]:
    """All turn rows of one conversation, from every file and range, as that conversation; a
    conversation object read under the same id is kept over it."""
    import ray

    rows = [pickle.loads(s) for s in batch["state"]]
    conv, place = group_conversation(rows, cfg.read_settings), min(r.place for r in rows)
    if conv.source != "error":
        (first,) = ray.get(registry.group_firsts.remote([conv.conversation_id], [place]))
        conv = conv if first is None else duplicate_copy(conv, place, first)
    if conv.source == "error" or conv.status == "duplicate":
        return pack([] if _stored_row(conv, stored) else [conv])
    found = _against_store(Found(conv, place), stored, cfg)
    if found is None:
        ray.get(registry.add_unchanged.remote(1))
    return pack([] if found is None else [found.conv])


def mark_duplicates(convs: list[Conversation], registry, places: list[Place | None] | None = None) -> list[Conversation]:
    """The first copy of an id in listing order is kept; a later one is replaced by the row
    `files.duplicate_copy` makes (a `duplicate` row whose errors row names both places, in one file or
    across files), and its turns are not ingested twice. `places`: where each was read (None
    for an error row); without them each conversation counts as its own file, in list order."""
    import ray

    if places is None:
        places = [Place(i, 0, c.source_file, c.source_file) for i, c in enumerate(convs)]
    mine = [k for k, (c, p) in enumerate(zip(convs, places)) if p is not None and c.source != "error"]
    if not mine:
        return convs
    firsts = ray.get(registry.claim.remote([convs[k].conversation_id for k in mine], [places[k] for k in mine]))
    out = list(convs)
    for k, first in zip(mine, firsts):
        if first is not None:
            out[k] = duplicate_copy(convs[k], places[k], first)
    return out
