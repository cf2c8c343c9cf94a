"""Stage 2a, embed: the Ray stage that embeds every turn of a conversation.

The model itself (`Embedder`: loading, L2-normalized float32 vectors) is `lychee_ray.embedding`,
shared with organize, evaluation and the ablation grid; this stage only sends a whole batch of
conversations through one encode call and hands each conversation its slice.
"""

from __future__ import annotations

import time

import numpy as np

from lychee_ray.config import LycheeConfig
from lychee_ray.embedding import Embedder
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
            per_conv = self.embedder.encode_groups([[t.text for t in turns] for turns in new_turns])
        except Exception as exc:
            for c in live:
                mark_failed(c, self.name, exc)
            return convs
        seconds = time.perf_counter() - start
        self._count([t.text for turns in new_turns for t in turns])
        n_texts = max(1, sum(len(turns) for turns in new_turns))
        for c, turns, vecs in zip(live, new_turns, per_conv):
            # a grown conversation keeps the stored vectors of its unchanged prefix
            c.turn_embeddings = vecs if len(turns) == len(c.turns) else np.vstack([c.prior.turn_embeddings, vecs])
            add_seconds(c, self.name, seconds * len(turns) / n_texts)
        return convs

    def _count(self, texts: list[str]) -> None:
        """Stage stats: a turn text repeated in the batch ("ok", "haha") is embedded once."""
        embedded = len(set(texts))
        self.stat_update("texts_asked", len(texts))
        self.stat_update("texts_embedded", embedded)
        self.stat_update("texts_deduplicated", len(texts) - embedded)
