"""What `load_questions` reads of a store (conversations, record counts, conversation ids), in
memory: one chat conversation `c1` with one record, for the questions-file tests."""

from __future__ import annotations

import duckdb


class TinyQuestionStore:
    def __init__(self):
        self.con = duckdb.connect()
        self.con.execute("create table conversations as select 'c1' as conversation_id, 'chat' as source")
        self.con.execute("create table records as select 'c1' as conversation_id")

    def conversation_ids(self):
        return ["c1"]
