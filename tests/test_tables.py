"""Each table is declared once (lychee_ray/tables.py): the Arrow schema, the row builder, rows
read back by name, the LLM reply model and docs/tables.md all come from the declaration."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from lychee_ray.schemas import LINK_REPLY_FIELDS, EncodedRecord, NormalizedTime
from lychee_ray.table_model import Row, column
from lychee_ray.tables import TABLES, Record, Turn, tables_doc

from .conftest import REPO


def test_docs_tables_md_is_generated_from_the_declarations():
    assert (REPO / "docs" / "tables.md").read_text() == tables_doc(), \
        "docs/tables.md is out of date: regenerate it with the command in its header"


def test_the_reply_model_is_the_llm_columns_in_order():
    carried = [c.reply_path.split(".")[0] for c in Record.llm_columns()]
    assert list(dict.fromkeys(carried)) == ["type", "text", "entities", "topics", "time", "source_turn_ids"]
    # then the reply-only link lists (ids of earlier records: record_links rows, not record columns)
    assert list(EncodedRecord.model_fields) == [*dict.fromkeys(carried), *LINK_REPLY_FIELDS] == [*dict.fromkeys(carried), "supersedes", "contradicts"]
    assert [c.name for c in Record.llm_columns() if c.reply_path.startswith("time.")] == ["time_start", "time_end", "time_granularity", "time_expression"]
    assert set(NormalizedTime.model_fields) == {"start", "end", "granularity", "expression"}
    assert EncodedRecord.model_json_schema()["properties"]["text"]["description"].startswith("self-contained")


def test_rows_read_back_by_name_whatever_the_column_order():
    rec = Record(conversation_id="c", record_id="r1", segment_id="s", type="event", text="t", entities=["A"], topics=[],
                 time_start=dt.date(2024, 3, 1), time_end=None, time_granularity="day", time_expression="on 1 March",
                 stated_at=dt.date(2024, 3, 2), source_turn_ids=["t1"], backend="rules", embedding=np.ones(4, np.float32))
    table = Record.to_arrow([rec], 4)
    assert table.schema == Record.arrow_schema(4) and table.schema.field("record_id").nullable is False
    shuffled = table.select(list(reversed(table.column_names)))
    (back,) = Record.from_arrow(shuffled)
    assert (back.record_id, back.time_start, back.stated_at, back.time_end) == ("r1", "2024-03-01", "2024-03-02", None)
    np.testing.assert_array_equal(back.embedding, np.ones(4, np.float32))
    (no_vector,) = Record.from_arrow(table.drop(["embedding"]))  # a read that leaves the vector out
    assert no_vector.embedding is None and no_vector.text == "t"


def test_a_required_column_holding_none_is_the_producers_bug_and_says_so():
    turn = Turn(turn_id="t1", turn_idx=0, session_id="s", speaker="a", role="a", text="x")  # conversation_id not filled
    with pytest.raises(ValueError, match=r"turns.conversation_id is declared NOT NULL"):
        Turn.to_arrow([turn], 4)


def test_a_new_column_is_one_line():
    """A table declared in a test: its schema, rows and docs follow from the class alone."""

    class Note(Row, table="notes", key=("note_id",)):
        """Notes."""

        note_id: str = column("the id")
        said_on: str | None = column("ISO in memory, DATE stored", default=None, arrow=pa.date32())
        tags: list[str] = column("labels", factory=list)
        weight: float | None = column("how much it counts", default=None, query=False)

    assert Note.arrow_schema(8) == pa.schema([pa.field("note_id", pa.string(), nullable=False), ("said_on", pa.date32()),
                                              pa.field("tags", pa.list_(pa.string()), nullable=False), ("weight", pa.float64())])
    assert Note.column_names(query=True) == ["note_id", "said_on", "tags"]
    (back,) = Note.from_arrow(Note.to_arrow([Note(note_id="n", said_on=dt.date(2024, 1, 2), tags=["x"])], 8))
    assert back == Note(note_id="n", said_on="2024-01-02", tags=["x"])
    assert "notes" not in TABLES  # a declaration registers nothing by itself
