"""Stage 2a, embed: the Ray stage that embeds every turn of a conversation, and the passages of
its turns longer than the model reads (ingest/passages.py).

The model itself (`Embedder`: loading, L2-normalized float32 vectors) is `lychee_ray.embedding`,
shared with organize, evaluation and the ablation grid; this stage only sends a whole batch of
conversations through one encode call and hands each conversation its slice.
"""

from __future__ import annotations

import time

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.embedding import Embedder
from lychee_ray.ingest.passages import turn_passages
from lychee_ray.runtime.stage import (
    PASS_THROUGH,
    Resources,
    Stage,
    add_seconds,
    mark_failed,
)
from lychee_ray.schemas import Conversation
from lychee_ray.store.stored_state import StoredState


def stored_turns(conv: Conversation) -> int:
    """How many leading turns the store already embedded (a grown conversation), else 0."""
    return conv.prior.n_turns if isinstance(conv.prior, StoredState) else 0


# --------------------------------------------------------------------------------------------
# Pipeline stage
# --------------------------------------------------------------------------------------------


class EmbedTurnsStage(Stage[Conversation]):
    """Embeds every turn of a batch of conversations in one encode() call (large batches keep
    the model busy; a text repeated in the batch is embedded once), then hands each
    conversation its slice."""

    name = "embed"

    def __init__(self, cfg: LycheeConfig, embedder: Embedder | None = None):
        self.cfg = cfg.embedding
        emb = cfg.embedding
        # one model copy per actor: on a small machine a second copy only competes for cores
        # batch_size None: one work batch per call (ingest.batch_turns, `Pipeline.batching`)
        self.resources = Resources(num_cpus=1, num_gpus=emb.num_gpus_per_actor, num_actors=emb.num_actors, batch_size=None)
        self.embedder = embedder  # a loaded model to share (the ablation grid's); else loaded in setup()

    def setup(self) -> None:
        self.embedder = self.embedder or Embedder(self.cfg)

    def process_batch(self, convs):
        live = [c for c in convs if c.status not in PASS_THROUGH]
        new_turns = [c.turns[stored_turns(c):] for c in live]
        start = time.perf_counter()
        try:
            new_passages = [turn_passages(turns, self.embedder.passage_tokens, self.embedder.count_tokens) for turns in new_turns]
            texts = [[t.text for t in turns] + [p.text for p in passages] for turns, passages in zip(new_turns, new_passages)]
            per_conv = self.embedder.encode_groups(texts)
        except Exception as exc:
            for c in live:
                mark_failed(c, self.name, exc)
            return convs
        seconds = time.perf_counter() - start
        self._count([t for group in texts for t in group])
        self.stat_update("passages", sum(len(p) for p in new_passages))
        n_texts = max(1, sum(len(group) for group in texts))
        for c, turns, passages, group, vecs in zip(live, new_turns, new_passages, texts, per_conv):
            turn_vecs, passage_vecs = vecs[: len(turns)], vecs[len(turns) :]
            rows = [p.row for p in passages]
            if len(turns) == len(c.turns):
                c.turn_embeddings, c.passages, c.passage_embeddings = turn_vecs, rows, passage_vecs
            else:  # a grown conversation keeps the stored vectors of its unchanged prefix
                prior = c.prior
                c.turn_embeddings = np.vstack([prior.turn_embeddings, turn_vecs])
                c.passages = prior.passages + rows
                c.passage_embeddings = np.vstack([prior.passage_embeddings, passage_vecs])
            add_seconds(c, self.name, seconds * len(group) / n_texts)
        return convs

    def _count(self, texts: list[str]) -> None:
        """Stage stats: a turn text repeated in the batch ("ok", "haha") is embedded once."""
        embedded = len(set(texts))
        self.stat_update("texts_asked", len(texts))
        self.stat_update("texts_embedded", embedded)
        self.stat_update("texts_deduplicated", len(texts) - embedded)
