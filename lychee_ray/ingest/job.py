"""The ingest job as a Ray Data pipeline: read -> embed -> segment -> encode -> organize -> write.

Planning happens on the driver and is cheap: list the input files (any pyarrow filesystem URI),
open the output (which removes debris of a killed run), read what the store holds of each
conversation (turn count and digest), and describe the dataset. Execution streams: each file, or
byte range of a large JSONL file, is read by a task that compares every conversation with the
store (`resume.classify`: unchanged ones are skipped, grown ones extended, edited ones recorded)
and yields small blocks; stateful stages (the embedding model, the LLM client) are actor pools;
the writer commits Parquet files batch by batch. The driver only aggregates counters, so its
memory does not grow with the archive.
"""

from __future__ import annotations

import json
import logging
import pickle
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from lychee_ray.config import ConfigError, LycheeConfig
from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage
from lychee_ray.ingest.organize import OrganizeStage
from lychee_ray.ingest.resume import ResumeStage, classify, keep_stored_on_failure, prior_cost
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.readers.decode import count_newlines
from lychee_ray.io.readers.files import Found, duplicate_copy, list_input_files, read_part
from lychee_ray.io.readers.plan import FirstCopies, Place, number_parts, parts_to_count, plan_parts, whole_part
from lychee_ray.io.readers.turns import TurnRow, group_conversation
from lychee_ray.llm.client import endpoint_name
from lychee_ray.runtime.ray import init_ray
from lychee_ray.runtime.stage import apply_stage, pack, unpack
from lychee_ray.schemas import Conversation
from lychee_ray.store.prior import StoredConversation, stored_digests
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import WITHHOLDING_KINDS, is_withheld, turns_in
from lychee_ray.store.writer import StoreWriter, batch_id_for, finalize_manifest, prepare_output, turn_accounts
from lychee_ray.tokens import token_counter

log = logging.getLogger(__name__)


def _registry_actor():
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

    registry = registry or _registry_actor()
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
        for item in read_part(part, cfg.read):
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
    conv, place = group_conversation(rows, cfg.read), min(r.place for r in rows)
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
    `files.duplicate_copy` makes (an error row naming both lines in one file, a `duplicate` row
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


# --------------------------------------------------------------------------------------------
# Write stage
# --------------------------------------------------------------------------------------------
def write_batch(batch, out_dir: str, cfg: LycheeConfig):
    convs, held = keep_stored_on_failure(unpack(batch))
    for c in convs:
        c.stats.wall_s = sum(c.seconds.values())
    summaries = StoreWriter(out_dir, cfg).write_batch(convs) if convs else []
    by_id = {c.conversation_id: c for c in convs}
    batch_id = batch_id_for(c.conversation_id for c in convs)  # the driver counts this run's turns by it
    for s in summaries:  # for the run's checks: degraded segments as committed, turns as read
        conv = by_id[s["conversation_id"]]
        s["degraded_segments"] = 0 if is_withheld(conv) else int(conv.stats.degraded_segments)
        s["turns_in"] = turns_in(conv)
        for key, paid in prior_cost(conv).items():  # the summary counts this run's calls only
            if key in ("llm_calls", "prompt_tokens", "completion_tokens") and s.get(key) is not None:
                s[key] = int(s[key]) - int(paid or 0)
        s["batch_id"] = batch_id
    summaries += [_held_summary(c) for c in held]
    keys = ("conversation_id", "status", "n_turns", "n_segments", "n_records", "degraded_segments", "turns_in",
            "held_turns", "llm_calls", "prompt_tokens", "completion_tokens", "batch_id")
    out = {k: np.array([s.get(k) for s in summaries], dtype=object) for k in keys}
    # per-stage seconds travel to the driver with the rows, to be summed in the run summary
    seconds = {c.conversation_id: c.seconds for c in convs + held}
    out["stage_seconds"] = np.array([json.dumps(seconds.get(r["conversation_id"], {})) for r in summaries], dtype=object)
    return out


def _held_summary(conv: Conversation) -> dict:
    """The summary row of a grown conversation left pending and not written (`keep_stored_on_failure`)."""
    n = turns_in(conv)
    return {"conversation_id": conv.conversation_id, "status": conv.status, "n_turns": 0, "n_segments": 0, "n_records": 0,
            "degraded_segments": 0, "turns_in": n, "held_turns": n, "llm_calls": conv.stats.llm_calls,
            "prompt_tokens": conv.stats.prompt_tokens, "completion_tokens": conv.stats.completion_tokens, "batch_id": None}


# --------------------------------------------------------------------------------------------
# The job
# --------------------------------------------------------------------------------------------
REDO_STATUSES = ("error", "degraded", "pending")  # what --redo accepts


def check_redo(redo) -> tuple[str, ...]:
    """The statuses to redo, or one ConfigError sentence naming the unknown ones and the allowed."""
    redo = tuple(dict.fromkeys(redo))
    unknown = [s for s in redo if s not in REDO_STATUSES]
    if unknown:
        raise ConfigError(
            f"--redo: unknown status {', '.join(repr(s) for s in unknown)}; the statuses that can be redone are {', '.join(REDO_STATUSES)}."
        )
    return redo


@dataclass
class IngestSummary:
    out_dir: str
    files: int = 0
    resumed: int = 0  # input conversations the store already held exactly (no work done)
    by_status: Counter = field(default_factory=Counter)
    turns: int = 0
    segments: int = 0
    records: int = 0
    degraded_segments: int = 0  # of `segments`: rules fallback records after an LLM failure
    turns_in: int = 0  # turns the read stage saw (`lychee_ray.store.rows.turns_in`)
    held_turns: int = 0  # turns of grown conversations left pending and not written (the store keeps their old rows)
    batch_ids: set[str] = field(default_factory=set)  # the commits this run made
    # where the store put this run's turns (`turn_accounts`); None until counted
    turn_accounts: dict[str, int] | None = None
    # one sentence per reason the run counts as failed (pending conversations, too many degraded
    # segments, turns that do not add up); the CLI prints them and exits non-zero
    failures: list[str] = field(default_factory=list)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_s: float = 0.0
    stage_seconds: Counter = field(default_factory=Counter)  # summed over conversations
    problems: list[str] = field(default_factory=list)  # first few non-ok conversations
    mean_exchanges_per_segment: str = "n/a"
    tokenizer: str = "o200k_base"  # what the segment cap and context budget counted with

    @property
    def conversations(self) -> int:
        return sum(self.by_status.values())

    def add(self, row: dict) -> None:
        self.by_status[row["status"]] += 1
        self.turns += int(row["n_turns"] or 0)
        self.segments += int(row["n_segments"] or 0)
        self.records += int(row["n_records"] or 0)
        self.degraded_segments += int(row.get("degraded_segments") or 0)
        self.turns_in += int(row.get("turns_in") or 0)
        self.held_turns += int(row.get("held_turns") or 0)
        if row.get("batch_id"):
            self.batch_ids.add(row["batch_id"])
        self.llm_calls += int(row["llm_calls"] or 0)
        self.prompt_tokens += int(row["prompt_tokens"] or 0)
        self.completion_tokens += int(row["completion_tokens"] or 0)
        self.stage_seconds.update(json.loads(row["stage_seconds"]))
        if row["status"] not in ("ok",) and len(self.problems) < 20:
            self.problems.append(f"{row['conversation_id']}: {row['status']}")

    def render(self) -> str:
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.by_status.items()))
        lines = [
            f"ingest -> {self.out_dir}",
            f"  files: {self.files}; conversations written: {self.conversations} ({statuses or 'none'}); already complete: {self.resumed}",
            f"  turns: {self.turns}; segments: {self.segments}; exchanges/segment: {self.mean_exchanges_per_segment}",
            f"  records: {self.records}; LLM calls: {self.llm_calls}; tokens: {self.prompt_tokens} prompt + {self.completion_tokens} completion",
            f"  tokenizer for the segment cap and context budget: {self.tokenizer}",
            f"  time: {self.wall_s:.1f} s; stage seconds summed over conversations: "
            + (", ".join(f"{k} {v:.1f}" for k, v in self.stage_seconds.items()) or "none"),
        ]
        if self.problems:
            lines.append("  not ok: " + "; ".join(self.problems[:10]))
        if self.turn_accounts is not None:
            lines.append("  " + self.conservation_line())
        return "\n".join(lines)

    @property
    def turns_accounted(self) -> int | None:
        return None if self.turn_accounts is None else sum(self.turn_accounts.values())

    def conservation_line(self) -> str:
        """`turns: N in = S stored + E recorded in errors + D in duplicate rows + P pending`
        (+ changed-history rows when there are any); `!=` when the two sides differ."""
        acc = self.turn_accounts or {}
        parts = [f"{acc.get('stored', 0)} stored", f"{acc.get('errors', 0)} recorded in errors"]
        parts += [f"{acc.get(kind, 0)} {words}" for kind, words in WITHHOLDING_KINDS.items() if kind == "duplicate_id" or acc.get(kind)]
        parts.append(f"{acc.get('pending', 0)} pending")
        sign = "=" if self.turns_accounted == self.turns_in else "!="
        return f"turns: {self.turns_in} in {sign} " + " + ".join(parts)

    def assess(self, cfg: LycheeConfig) -> list[str]:
        """The run's failures, one sentence each (also kept in `failures`)."""
        out = []
        pending = self.by_status.get("pending", 0)
        if pending:
            out.append(
                f"{pending} conversation{'s are' if pending != 1 else ' is'} pending because the LLM endpoint "
                f"{endpoint_name(cfg.llm.base_url)} (llm.base_url) failed transiently and the circuit breaker stopped calls; "
                f"rerun the same command, or pass --redo pending, to complete {'them' if pending != 1 else 'it'}."
            )
        limit = cfg.ingest.max_degraded_fraction
        if self.segments and self.degraded_segments / self.segments > limit:
            out.append(
                f"{self.degraded_segments} of {self.segments} segments ({self.degraded_segments / self.segments:.0%}) fell back to "
                f"rules records (degraded), more than ingest.max_degraded_fraction={limit:g}; the errors table (kind llm_failure) "
                f"says why, and --redo degraded re-encodes them."
            )
        if self.turn_accounts is not None and self.turns_accounted != self.turns_in:
            out.append(
                f"turns do not add up: the read stage saw {self.turns_in} but the store accounts for {self.turns_accounted} "
                f"({self.conservation_line()}); the store in {self.out_dir} is missing rows or holds extra ones."
            )
        self.failures = out
        return out


def build_dataset(cfg: LycheeConfig, files: list[str], out_dir: str, stored: Mapping[str, StoredConversation],
                  input_root: str | None = None, registry=None):
    ds = read_dataset(cfg, files, stored, input_root, registry)
    emb = cfg.embedding
    if any(s.n_turns for s in stored.values()):  # a grown conversation gets its stored state
        ds = apply_stage(ds, partial(ResumeStage, out_dir, cfg))
    # each stage declares its resources (actors, CPUs, GPUs, batch size) from its config
    ds = apply_stage(ds, partial(EmbedTurnsStage, emb))
    ds = apply_stage(ds, partial(SegmentStage, cfg.segmenter, cfg.encoder.mode, cfg.encoder.window_exchanges, cfg.tokenizer_spec))
    ds = apply_stage(ds, partial(EncodeStage, cfg))
    ds = apply_stage(ds, partial(OrganizeStage, cfg.organize, emb))
    return ds.map_batches(
        write_batch, fn_args=(out_dir, cfg), batch_size=cfg.store.conversations_per_file, batch_format="numpy", num_cpus=0.5
    )


def run_ingest(
    cfg: LycheeConfig, input_path: str, out_dir: str, *, force: bool = False, redo: tuple[str, ...] | list[str] = ()
) -> IngestSummary:
    """`force`: write into a non-empty folder that is not a store (nothing there is deleted).
    `redo`: statuses (REDO_STATUSES) whose stored conversations are processed again; the new
    commit replaces their rows (`pending` ones are redone by every run). The summary's
    `failures` say whether the run counts as failed (the CLI then exits non-zero)."""
    start = time.perf_counter()
    redo = check_redo(redo)
    files = list_input_files(input_path, exclude=out_dir)  # an output inside the input is not input
    tokenizer = token_counter(cfg.tokenizer_spec).name  # a tokenizer that cannot load fails here, before any work
    done_ids = prepare_output(out_dir, cfg, force=force, redo_statuses=redo)
    stored = _stored(out_dir, cfg, redo) if done_ids else {}
    summary = IngestSummary(out_dir=out_dir, files=len(files), tokenizer=tokenizer)
    init_ray(cfg.ray)
    registry = _registry_actor()
    for row in build_dataset(cfg, files, out_dir, stored, input_path, registry).iter_rows():
        summary.add(row)
    import ray

    summary.resumed = ray.get(registry.count_unchanged.remote())
    finalize_manifest(out_dir)
    summary.turn_accounts = turn_accounts(out_dir, summary.batch_ids)
    summary.turn_accounts["pending"] += summary.held_turns
    summary.assess(cfg)
    summary.wall_s = time.perf_counter() - start
    summary.mean_exchanges_per_segment = _mean_exchanges(out_dir)
    return summary


def _stored(out_dir: str, cfg: LycheeConfig, redo: tuple[str, ...]) -> dict[str, StoredConversation]:
    """The committed conversations a read task compares its input with; those in a redo state
    (and `pending` ones, always) are left out, so they are processed whole as if new."""
    with open_store(out_dir, cfg) as store:
        return stored_digests(store, skip_statuses=set(redo) | {"pending"})


def _mean_exchanges(out_dir: str) -> str:
    try:
        row = open_store(out_dir).con.execute("select avg(n_exchanges), count(*) from segments").fetchone()
        return f"{row[0]:.2f} (over {row[1]} segments in the store)" if row and row[1] else "n/a"
    except Exception as exc:  # the summary must never fail the job
        return f"n/a ({exc})"
