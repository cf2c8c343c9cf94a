"""lychee-ray: LycheeMemory V2 on Ray.

Conversations are segmented, each segment is encoded into memory records, and the records are
stored as Parquet and queried through DuckDB. `lychee-ray ingest` builds a store,
`lychee-ray evaluate` measures it, and agents use it from Python through `Memory`::

    from lychee_ray import Memory

    with Memory.open("out/store") as memory:
        for item in memory.search(memory.conversations()[0], "Where did Ana move from?", k=5):
            print(item.type, item.time, item.text)

The stages live in subpackages, lowest first: io, llm, rules, runtime (inputs, the LLM client,
the rule-based backend, stage plumbing), store (Parquet + DuckDB), ingest and query, evaluate,
ablate, and the `cli`.
"""

from lychee_ray.query.memory import Memory, MemoryAnswer, MemoryItem, Recall

__all__ = ["Memory", "MemoryAnswer", "MemoryItem", "Recall"]
