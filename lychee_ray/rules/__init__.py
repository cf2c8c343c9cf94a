"""The `rules` LLM backend: encoder, planner and answerer with no model at all.

Role in the pipeline (DESIGN.md, "Backends" -> `llm.backend: rules`): the zero-cost indexer for
huge archives, the fallback for segments whose LLM encode failed (`degraded=true`), and the
baseline the LLM path must beat. It returns exactly the LLM's reply schemas:
- `encoder.RulesEncoder.encode` -> `EncodeOutput`: one record per utterance sentence, attributed
  to its speaker, pronouns replaced by names, relative dates resolved against the session date
  and written into the text ("yesterday (7 May 2023)"), a type from lexical cues, entities and
  topics from heuristics; plus the resolution state d_k for the next segment.
- `planner.RulesPlanner.plan` -> `QueryPlan`: one route built from the question itself.
- `answerer.extractive_answer`: the evidence sentence that best overlaps the question.

Underneath them: `text` (sentences, content words, topics, record types), `entities`,
`pronouns`, `timeparse` (time expressions and question windows) and `lexicon` (word lists).

Everything is deterministic (no randomness, no set/dict iteration order in outputs) and CPU
only; regexes are compiled once at import.
"""
