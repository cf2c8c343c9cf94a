"""Incremental ingest: a conversation the store already holds comes back with more turns.

The read task classifies every incoming conversation against the store (`classify`): unchanged
(skipped: no work), grown (the stored turns are an unchanged prefix: extend), edited (a stored turn
changed or went away: `ingest.on_changed_history` says error or reingest) or new.

A grown conversation then carries `Conversation.prior`, loaded by `ResumeStage` from the store:
- embed embeds only the new turns and reuses the stored vectors of the prefix;
- segment reruns the online segmenter over the whole conversation (it is numpy over stored
  vectors, milliseconds), so the boundaries are exactly those of a fresh full run;
- encode reuses every leading segment whose turns are unchanged, with its records, failure rows
  and the stored context rho after it, and calls the LLM only from the first segment that differs:
  the new segments, and the last stored one when the new turns continue it (it was only closed
  because the input ended);
- organize reuses stored record and node vectors by id.
The writer then commits the whole conversation again; the store's later-commit-wins view hides
the older rows, so readers see the grown conversation at once and a killed run loses nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging

from lychee_ray.config import LycheeConfig

from lychee_ray.ingest.reference_context import ReferenceContext
from lychee_ray.io.readers.common import ErrorEntry
from lychee_ray.runtime.stage import PASS_THROUGH, Resources, Stage
from lychee_ray.schemas import Conversation, turn_content_hash, turns_digest
from lychee_ray.store.stored_state import (
    EXTENDABLE,
    StoredState,
    StoredConversation,
    load_stored_state,
)
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import is_dropped_turn
from lychee_ray.tables import Record

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------
# Read side: what to do with an incoming conversation
# --------------------------------------------------------------------------------------------
class ExtendFrom(int):
    """`Conversation.prior` between the read task and `ResumeStage`: the stored turn count, a
    plain int so it travels cheaply; the stage swaps it for the loaded `StoredState`."""


def classify(conv: Conversation, stored: dict[str, StoredConversation], on_changed_history: str) -> Conversation | None:
    """The conversation to process (new, grown, or redone whole), an error conversation for an
    edited history under `error`, or None when the store already holds exactly these turns."""
    known = stored.get(conv.conversation_id)
    if known is None:
        return conv
    hashes = [turn_content_hash(t) for t in conv.turns]
    if len(hashes) == known.n_turns and turns_digest(hashes) == known.digest:
        return None
    if known.n_turns == 0 or known.status not in EXTENDABLE:
        return conv  # nothing worth keeping: the stored row (empty, error) is replaced whole
    if len(hashes) > known.n_turns and turns_digest(hashes[: known.n_turns]) == known.digest:
        conv.prior = ExtendFrom(known.n_turns)
        return conv
    if on_changed_history == "reingest":
        log.warning("%s: stored history changed; re-ingesting it whole (ingest.on_changed_history=reingest)", conv.conversation_id)
        return conv
    return changed_history_error(conv, known, hashes)


def changed_history_error(conv: Conversation, known: StoredConversation, hashes: list[str]) -> Conversation:
    """An `error` row under a derived id (the stored conversation is left as it was). The id
    hashes the new turns, so the same edited input on the next night is not recorded twice."""
    cid = conv.conversation_id
    suffix = hashlib.sha1(f"{cid}|{turns_digest(hashes)}".encode()).hexdigest()[:8]
    message = (
        f"conversation {cid!r} in {conv.source_file}: the store holds {known.n_turns} turns of it, but the input's "
        f"{'first ' + str(known.n_turns) + ' ' if len(hashes) >= known.n_turns else ''}turns differ from them "
        f"({len(hashes)} turns now): a turn was edited or removed. The stored conversation is kept as it was; set "
        f"ingest.on_changed_history: reingest to rebuild it from the input."
    )
    err = Conversation(conversation_id=f"{cid}#changed-{suffix}", source="error", source_file=conv.source_file, status="error", error=message)
    err.n_input_turns = len(conv.turns)
    err.errors = [ErrorEntry(conv.source_file, None, "turns", "changed_history", message, err.conversation_id).as_row()]
    log.warning("%s", message)
    return err


# --------------------------------------------------------------------------------------------
# The stage that loads what the store holds
# --------------------------------------------------------------------------------------------
class ResumeStage(Stage[Conversation]):
    """Loads the stored state of grown conversations; every other conversation passes untouched."""

    name = "resume"

    def __init__(self, cfg: LycheeConfig, out_dir: str):
        self.out_dir, self.cfg = out_dir, cfg
        # one actor: it holds an open store (DuckDB views over the committed parts). No CPU
        # reserved: it waits on reads, and a reservation would keep embed or organize from starting
        # on a small machine (their actors take whole CPUs), which stalls the whole pipeline
        self.resources = Resources(num_cpus=0, num_actors=1, batch_size=8)
        self.store = None

    def process(self, conv: Conversation) -> None:
        if not isinstance(conv.prior, ExtendFrom) or conv.status in PASS_THROUGH:
            return
        if self.store is None:  # lazily: most runs extend nothing
            self.store = open_store(self.out_dir, self.cfg)
        prior = load_stored_state(self.store, conv.conversation_id)
        if prior.n_turns != int(conv.prior) or prior.turn_embeddings.shape[0] != prior.n_turns:
            raise RuntimeError(f"stored state of {conv.conversation_id} has {prior.n_turns} turns, expected {int(conv.prior)}")
        conv.prior = prior
        conv.extended_at = dt.datetime.now(dt.timezone.utc).isoformat()
        log.info("%s: extending %d stored turns with %d new", conv.conversation_id, prior.n_turns, len(conv.turns) - prior.n_turns)

    def teardown(self) -> None:
        if self.store is not None:
            self.store.close()


# --------------------------------------------------------------------------------------------
# Encode side: where to resume
# --------------------------------------------------------------------------------------------
def reusable_segments(conv: Conversation) -> int:
    """How many leading segments are exactly (same turns) what the store holds."""
    prior = conv.prior
    if not isinstance(prior, StoredState):
        return 0
    k = 0
    for seg, old in zip(conv.segments, prior.segments):
        if [conv.turns[i].turn_id for i in seg.turn_idxs] != old.turn_ids or not old.context_json:
            break
        k += 1
    return k


def resume_point(conv: Conversation) -> tuple[int, ReferenceContext, list[Record], dict[str, str], int]:
    """(first segment to encode, rho before it, the reused records, entity aliases so far, reused
    degraded segments). Reused segments keep their stored context and their failure rows."""
    k = reusable_segments(conv)
    if k == 0:
        return 0, ReferenceContext(), [], {}, 0
    records: list[Record] = []
    aliases: dict[str, str] = {}
    degraded = 0
    for seg, old in zip(conv.segments[:k], conv.prior.segments[:k]):
        seg.context_json = old.context_json
        records.extend(old.records)
        conv.errors.extend(old.failure_rows)
        degraded += any(r.degraded for r in old.records)
        state = ReferenceContext.from_json(old.context_json).state
        for ent in state.entities if state else []:
            for alias in ent.aliases:
                aliases[alias.lower()] = ent.name
    return k, ReferenceContext.from_json(conv.segments[k - 1].context_json), records, aliases, degraded


# --------------------------------------------------------------------------------------------
# Write side: a grown conversation that failed leaves the stored one as it was
# --------------------------------------------------------------------------------------------
def keep_stored_on_failure(convs: list[Conversation]) -> tuple[list[Conversation], list[Conversation]]:
    """(what to write, grown conversations held back). Written under its own id, a failed grown
    conversation would hide the stored one (the later commit wins) until a rerun. Instead a
    `pending` one is not written at all (the run reports it pending and the next run extends it
    again); an `error` one is recorded under a derived id (`<id>#extend-failed-<hash8>`, an
    errors row of kind extend_failed) and the next run tries again."""
    write, held = [], []
    for conv in convs:
        if conv.prior is None or conv.status not in ("pending", "error"):
            write.append(conv)
        elif conv.status == "pending":
            held.append(conv)
        else:
            write.append(failed_extension(conv))
    return write, held


def failed_extension(conv: Conversation) -> Conversation:
    cid = conv.conversation_id
    digest = turns_digest([turn_content_hash(t) for t in conv.turns])
    suffix = hashlib.sha1(f"{cid}|{digest}".encode()).hexdigest()[:8]
    message = (
        f"conversation {cid!r} in {conv.source_file} grew to {len(conv.turns)} turns, but extending the stored one "
        f"failed ({conv.error}); the stored conversation is kept as it was and the next run tries again."
    )
    err = Conversation(conversation_id=f"{cid}#extend-failed-{suffix}", source="error", source_file=conv.source_file, status="error", error=message)
    err.n_input_turns = len(conv.turns)
    err.errors = [ErrorEntry(conv.source_file, None, "turns", "extend_failed", message, err.conversation_id).as_row()]
    err.errors += [e for e in conv.errors if is_dropped_turn(e)]  # the reader's dropped turns stay counted
    log.error("%s", message)
    return err


def prior_cost(conv: Conversation) -> dict:
    """The build cost the stored prefix already paid (added to this run's: build_stats is what
    the conversation cost in all)."""
    return conv.prior.stats if isinstance(conv.prior, StoredState) else {}
