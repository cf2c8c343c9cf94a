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

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["Memory", "MemoryAnswer", "MemoryItem", "Recall"]

if TYPE_CHECKING:
    from lychee_ray.query.memory import Memory, MemoryAnswer, MemoryItem, Recall


def __getattr__(name: str):
    """`Memory` and its result types, imported on first use (PEP 562): every process that
    imports any module of the package runs this file, and an eager import of the query layer
    (DuckDB, the store reader, the LLM client) cost each Ray worker and each CLI start about a
    second that the ingest stages never use."""
    if name in __all__:
        from lychee_ray.query import memory

        return getattr(memory, name)
    raise AttributeError(f"module 'lychee_ray' has no attribute {name!r}")
