"""Hostile-input findings in the readers (issues 29 and 31): each test failed on the code before
its fix. A blank or null conversation id of a turn row, an empty timestamp, an unparseable
question_date in a questions file, one status for one duplicate fact, plain strings as content
parts, wrong-type text as its own kind with a type named in English, and an --out that is the
input folder."""

from __future__ import annotations

import json
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lychee_ray.config import load_config
from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.common import InputError
from lychee_ray.io.readers.files import iter_conversations, list_input_files, read_file

from .conftest import REPO
from tests.support.tiny_question_store import TinyQuestionStore

LOCAL = REPO / "configs" / "local.yaml"


def read_dir(root):
    return list(iter_conversations(list_input_files(str(root)), ReadConfig(), root=str(root)))


def rows_of(convs, kind):
    return [e for c in convs for e in c.errors if e["kind"] == kind]


def turn(cid, text, **extra):
    return {"conversation_id": cid, "speaker": "Ann", "text": text, **extra}


# --------------------------------------------------------------------------------------------
# 1. A blank or null conversation id in a turn row
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_blank_or_null_conversation_id_of_a_turn_row_is_an_error_row_and_the_turn_is_kept(tmp_path, fmt):
    rows = [turn("k", "named row"), turn(" ", "blank id row"), turn(None, "null id row")]
    path = tmp_path / f"rows.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    convs = read_dir(tmp_path)
    (anon,) = [c for c in convs if c.conversation_id.startswith("anon-")]
    assert sorted(t.text for t in anon.turns) == ["blank id row", "null id row"]  # kept, under the file's anonymous id
    got = sorted((e["source_file"], e["line"], e["field"], e["kind"]) for e in anon.errors)
    assert got == [(str(path), 2, "conversation_id", "bad_field"), (str(path), 3, "conversation_id", "missing_field")]
    blank = next(e for e in anon.errors if e["line"] == 2)
    assert f"{path}:2" in blank["message"] and "blank" in blank["message"] and anon.conversation_id in blank["message"]


def test_a_blank_conversation_id_of_a_chat_object_is_an_error_row(tmp_path):
    f = tmp_path / "c.jsonl"
    f.write_text(json.dumps({"conversation_id": "  ", "turns": [{"role": "user", "content": "hello"}]}) + "\n")
    (conv,) = read_file(str(f), ReadConfig())
    assert conv.conversation_id.startswith("anon-") and len(conv.turns) == 1
    (row,) = rows_of([conv], "bad_field")
    assert (row["field"], row["line"]) == ("conversation_id", 1) and "blank" in row["message"]


# --------------------------------------------------------------------------------------------
# 2. An empty-string timestamp
# --------------------------------------------------------------------------------------------
def test_an_empty_timestamp_is_a_bad_timestamp_row(tmp_path):
    f = tmp_path / "c.jsonl"
    turns = [{"role": "user", "content": "a", "timestamp": ""}, {"role": "assistant", "content": "b", "timestamp": "  "}, {"role": "user", "content": "c"}]
    f.write_text(json.dumps({"conversation_id": "c", "turns": turns}) + "\n")
    (conv,) = read_file(str(f), ReadConfig())
    assert len(conv.turns) == 3 and all(t.timestamp is None for t in conv.turns)
    assert [e["field"] for e in rows_of([conv], "bad_timestamp")] == ["turns[0].timestamp", "turns[1].timestamp"]  # absent is no error


# --------------------------------------------------------------------------------------------
# 3. An unparseable question_date in a questions file
# --------------------------------------------------------------------------------------------


def test_an_unparseable_question_date_in_a_questions_file_is_logged_with_file_line_and_value(tmp_path, caplog):
    from lychee_ray.evaluate.questions import load_questions

    qfile = tmp_path / "questions.jsonl"
    good = {"conversation_id": "c1", "question_id": "q1", "question": "When?", "answer": "May", "question_date": "2024-05-08"}
    bad = dict(good, question_id="q2", question_date="the day after the fair")
    qfile.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with caplog.at_level(logging.WARNING, logger="lychee_ray.evaluate"):
        items = load_questions(TinyQuestionStore(), load_config(LOCAL), str(qfile))
    assert [i.status for i in items] == ["ok", "ok"]  # the question is still asked
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and f"{qfile}:2" in warned[0] and "'the day after the fair'" in warned[0]


# --------------------------------------------------------------------------------------------
# 4. A duplicate conversation id: one fact, one status
# --------------------------------------------------------------------------------------------
def test_a_duplicate_id_in_one_file_and_across_files_both_end_duplicate(tmp_path):
    chat = {"conversation_id": "c1", "turns": [{"role": "user", "content": "hello"}]}
    (tmp_path / "a.jsonl").write_text(json.dumps(chat) + "\n" + json.dumps(chat) + "\n")
    (tmp_path / "b.jsonl").write_text(json.dumps(chat) + "\n")
    convs = read_dir(tmp_path)
    dups = [c for c in convs if c.conversation_id != "c1"]
    assert [c.status for c in dups] == ["duplicate", "duplicate"] and all(c.n_input_turns == 1 for c in dups)
    rows = rows_of(dups, "duplicate_id")
    assert len(rows) == 2 and {r["line"] for r in rows} == {1, 2}
    same = next(r for r in rows if r["source_file"].endswith("a.jsonl"))
    assert "line 1" in same["message"] and f"{tmp_path / 'a.jsonl'}:2" in same["message"]


# --------------------------------------------------------------------------------------------
# 5. Content parts that are plain strings; text of the wrong type; "a int"
# --------------------------------------------------------------------------------------------
def test_plain_string_content_parts_are_read_as_text(tmp_path):
    f = tmp_path / "m.jsonl"
    msgs = [{"role": "user", "content": ["First part.", "Second part."]}, {"role": "assistant", "content": ["Sure.", {"type": "image_url", "image_url": {}}]}]
    f.write_text(json.dumps({"messages": msgs}) + "\n")
    (conv,) = read_file(str(f), ReadConfig())
    assert [t.text for t in conv.turns] == ["First part.\nSecond part.", "Sure."]
    (row,) = conv.errors  # the image part alone is named
    assert row["kind"] == "non_text_content" and "image_url" in row["message"] and "'str'" not in row["message"]


@pytest.mark.parametrize(("content", "phrase"), [(42, "an int"), ({"value": "x"}, "a dict"), (1.5, "a float")])
def test_text_of_the_wrong_type_is_its_own_kind_naming_the_type(tmp_path, content, phrase):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"conversation_id": "c", "turns": [{"role": "user", "content": content}, {"role": "user", "content": "ok"}]}) + "\n")
    (conv,) = read_file(str(f), ReadConfig())
    assert [t.text for t in conv.turns] == ["ok"]
    (row,) = conv.errors
    assert (row["kind"], row["field"]) == ("bad_text", "turns[0].text") and phrase in row["message"]


def test_a_turn_that_is_an_int_is_named_in_english(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"conversation_id": "c", "turns": [7, None, {"role": "user", "content": "ok"}]}) + "\n")
    (conv,) = read_file(str(f), ReadConfig())
    messages = [e["message"] for e in conv.errors if e["kind"] == "bad_turn"]
    assert len(messages) == 2 and "is an int, not an object" in messages[0] and "is null, not an object" in messages[1]


def test_a_wrong_type_id_field_is_named_in_english(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"conversation_id": ["x"], "turns": [{"role": "user", "content": "ok"}]}) + "\n" + json.dumps({"conversation_id": "d", "turns": 5}) + "\n")
    convs = read_file(str(f), ReadConfig())
    messages = {e["line"]: e["message"] for e in rows_of(convs, "bad_field")}
    assert "is a list, not a string" in messages[1] and "is an int, not a list" in messages[2]


# --------------------------------------------------------------------------------------------
# 6. --out is the input folder
# --------------------------------------------------------------------------------------------
def test_an_output_folder_that_is_the_input_folder_is_refused_saying_so(tmp_path, capsys):
    from lychee_ray.cli import main

    inp = tmp_path / "chats"
    inp.mkdir()
    (inp / "chats.jsonl").write_text(json.dumps({"conversation_id": "c", "turns": [{"role": "user", "content": "hi"}]}) + "\n")
    with pytest.raises(InputError, match="is the input folder") as info:
        list_input_files(str(inp), exclude=str(inp))
    assert "choose another --out" in str(info.value) and "holds no files" not in str(info.value)
    assert list_input_files(str(inp), exclude=str(inp / "store")) == [str(inp / "chats.jsonl")]  # an output inside is fine
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(inp) + "/"])
    err = capsys.readouterr().err
    assert rc != 0 and "is the input folder" in err and "choose another --out" in err
