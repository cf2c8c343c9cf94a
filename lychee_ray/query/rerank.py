"""Optional cross-encoder rerank between fusion and MMR (`retrieval.rerank`).

Its own module so the CrossEncoder is imported and its model loaded only when a config turns
rerank on; the retriever takes any object with the same `rerank` method.
"""

from __future__ import annotations

import numpy as np

from lychee_ray.embedding import resolve_model_path
from lychee_ray.query.retrieve import Evidence


class CrossEncoderReranker:
    """Optional rerank between fusion and MMR: a sentence-transformers CrossEncoder rescores the
    top `top_n` fused candidates against the question; the rest keep their fused order behind
    them. Scores become 1/(1 + new rank), so MMR's relevance sees one scale, not logits mixed
    with RRF sums."""

    def __init__(self, cfg, model=None):
        from sentence_transformers import CrossEncoder


        self.top_n = cfg.top_n
        self.model = model or CrossEncoder(resolve_model_path(cfg.model))

    def rerank(self, question: str, fused: list[tuple[str, float]], pool: dict[str, Evidence]) -> list[tuple[str, float]]:
        head, tail = fused[: self.top_n], fused[self.top_n:]
        scores = np.asarray(self.model.predict([(question, pool[k].text) for k, _ in head]), dtype=np.float64).reshape(-1)
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))  # ties keep the fused order
        keys = [head[i][0] for i in order] + [k for k, _ in tail]
        return [(k, 1.0 / (1 + rank)) for rank, k in enumerate(keys)]
