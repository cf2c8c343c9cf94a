"""Stage 2a, embed: the Ray stage that embeds every turn of a conversation.

The model itself (`Embedder`: loading, L2-normalized float32 vectors) is `lychee_ray.embedding`,
shared with organize, evaluation and the ablation grid; this stage only sends a whole batch of
conversations through one encode call and hands each conversation its slice.
"""

from __future__ import annotations

import time

from lychee_ray.config import EmbeddingConfig
from lychee_ray.embedding import Embedder
from lychee_ray.runtime.stage import (
    PASS_THROUGH,
    Resources,
    Stage,
    add_seconds,
    mark_failed,
)
from lychee_ray.schemas import Conversation

# --------------------------------------------------------------------------------------------
# Pipeline stage
# --------------------------------------------------------------------------------------------


class EmbedTurnsStage(Stage[Conversation]):
    """Embeds every turn of a batch of conversations in one encode() call (large batches keep
    the model busy), then hands each conversation its slice."""

    name = "embed"

    def __init__(self, cfg: EmbeddingConfig):
        self.cfg = cfg
        # one model copy per actor: on a small machine a second copy only competes for cores
        self.resources = Resources(num_cpus=1, num_gpus=cfg.num_gpus_per_actor, num_actors=cfg.num_actors, batch_size=cfg.conversations_per_batch)
        self.embedder: Embedder | None = None

    def setup(self) -> None:
        self.embedder = Embedder(self.cfg)

    def process_batch(self, convs):
        live = [c for c in convs if c.status not in PASS_THROUGH]
        start = time.perf_counter()
        try:
            per_conv = self.embedder.encode_groups([[t.text for t in c.turns] for c in live])
        except Exception as exc:
            for c in live:
                mark_failed(c, self.name, exc)
            return convs
        seconds = time.perf_counter() - start
        n_texts = max(1, sum(len(c.turns) for c in live))
        for c, vecs in zip(live, per_conv):
            c.turn_embeddings = vecs
            add_seconds(c, self.name, seconds * len(c.turns) / n_texts)
        return convs
