"""Answering from a store (stage 6): `engine.QueryEngine` builds the query path from the config
(planner and answerer in `answer`, the retriever, the token counter, the LLM client); `retrieve`
runs the `channels` over a conversation loaded once into memory (`conversation`), fuses them
(`fusion`: RRF, MMR, budget), optionally reranks (`rerank`) and selects the evidence
(`evidence`). `memory.Memory` is the public API over it. No Ray and no judging: evaluate, the
ablation grid and `lychee-ray query` all call it.
"""
