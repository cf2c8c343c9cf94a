"""The query engine: everything a question needs, built from the config in one place.

`QueryEngine(cfg, store)` holds the planner, the retriever (its channels, the embedding model and
the optional cross-encoder, loaded at first use), the answerer, the token counter the budgets
count with, and the per-conversation lookups the planner needs (the known entity names, cut at
`query.max_known_entities`). `Memory`, the evaluate stages and the ablation grid all build one,
so the rules that decide how a question is answered exist once:
- an LLM client only under `llm.backend: openai` (`new_client`, one per event loop);
- the planner is told the conversation's entity names, most linked first;
- budgets count in the served model's tokens when its tokenizer is known (`cfg.tokenizer_spec`).
"""

from __future__ import annotations

from functools import lru_cache

from lychee_ray.config import LycheeConfig
from lychee_ray.embedding import Embedder
from lychee_ray.llm.client import LLMClient, llm_client
from lychee_ray.query.answer import Answerer, Planner
from lychee_ray.query.channels import channels_for
from lychee_ray.query.rerank import CrossEncoderReranker
from lychee_ray.query.retrieve import Retriever, entity_names
from lychee_ray.store.reader import Store
from lychee_ray.tokens import token_counter


class QueryEngine:
    def __init__(self, cfg: LycheeConfig, store: Store, embedder=None, reranker=None, embed_fn=None):
        """`embedder`: a loaded model to share (the ablation grid's); `embed_fn`: what turns
        query texts into vectors when not `embedder.encode` (evaluate embeds a batch at once)."""
        channels_for(cfg.retrieval)  # an unknown channel name fails here, before any model loads
        self.cfg = cfg
        self.store = store
        self._embedder = embedder
        self._embed_fn = embed_fn
        self._reranker = reranker
        self._retriever: Retriever | None = None
        self._entities: dict[str, list[str]] = {}
        # memoised: a conversation's lines come back question after question (200 baseline hits each)
        self.count_tokens = lru_cache(maxsize=1 << 16)(token_counter(cfg.tokenizer_spec).count)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            self._embedder = Embedder(self.cfg.embedding)
        return self._embedder

    @property
    def retriever(self) -> Retriever:
        """The retriever over this store; the embedding model and the reranker load here, once."""
        if self._retriever is None:
            if self._reranker is None and self.cfg.retrieval.rerank.enabled:
                self._reranker = CrossEncoderReranker(self.cfg.retrieval.rerank)
            self._retriever = Retriever(self.store, self.cfg.retrieval, self.embed, self._reranker, self.count_tokens)
        return self._retriever

    def embed(self, texts: list[str]):
        return self._embed_fn(texts) if self._embed_fn is not None else self.embedder.encode(texts)

    def new_client(self) -> LLMClient | None:
        """A client for the LLM steps (None under rules). Its HTTP pool belongs to the event
        loop it first runs on, so make one per loop."""
        return llm_client(self.cfg.llm)

    def planner(self, client: LLMClient | None) -> Planner:
        return Planner(self.cfg, client)

    def answerer(self, client: LLMClient | None) -> Answerer:
        return Answerer(self.cfg, client)

    def known_entities(self, conversation_id: str) -> list[str]:
        """The entity names the planner is told, most linked first."""
        if conversation_id not in self._entities:
            names = entity_names(self.store, conversation_id)
            self._entities[conversation_id] = names[: self.cfg.query.max_known_entities]
        return self._entities[conversation_id]
