"""Input side of ingest: filesystem/URI helpers (`fs`), one reader module per source format
(`readers`), and exchange grouping (`exchanges`).

Bytes in, `Conversation` objects out: no model, no LLM, no Ray. `fs` (pyarrow.fs paths and
atomic writes) is also what the store and evaluate's answers write through.
"""
