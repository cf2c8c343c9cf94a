"""The memory store: Parquet files written by ingest, read in place by DuckDB.

Role in the pipeline
--------------------
Ingest ends in a write stage. Each Ray worker holds a `writer.StoreWriter` and hands it batches
of fully processed `Conversation` objects; `write_batch` turns them into one Parquet file per
table (DESIGN.md "Tables") and then a commit marker. The driver calls `prepare_output` before
the run (checks the manifest, deletes what a killed run left, returns the conversations to skip)
and `finalize_manifest` after it. The answer stage and the CLI call `reader.open_store`, which
gives a DuckDB connection with one view per table plus the parameterized queries the retrieval
channels need.

Layout of an output directory (local path or any `pyarrow.fs` URI such as ``s3://bucket/x``)::

    manifest.json                      schema version, build hash, embedding model/dim, counts
    _commits/<batch_id>.json           one per written batch: conversations, statuses, files, rows
    <table>/part-<batch_id>.parquet    one file per table per batch, rows sorted by conversation_id

The commit marker is written last, so a batch without one never happened: readers only see
files that a commit lists (writer.py has the whole commit protocol, reader.py how the views read).

Modules: `manifest` (manifest, commit markers, what readers see), `rows` (Conversation -> table
rows), `writer`, `reader`, `stored_state` (what a grown conversation resumes from) and `search`
(BM25, with no DuckDB extension).
"""
