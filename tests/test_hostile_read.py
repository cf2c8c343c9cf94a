"""Hostile input on the read path (issue 16): no file, line, item or turn can end a run, and
every turn is either read or named in an error row (file, line, field, kind, one sentence).

Each test reproduces one finding of the adversarial pass; on the code before the fix each one
raised, lost data, or lost it silently."""

from __future__ import annotations

import gzip
import json
import logging
import os
from pathlib import Path

import pyarrow as pa

from lychee_ray.config import load_config
from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.store import manifest as store_manifest

from .conftest import REPO
from tests.support.tiny_question_store import TinyQuestionStore

LOCAL = REPO / "configs" / "local.yaml"
DEEP = "[" * 50_000 + "]" * 50_000  # far past the parser's recursion limit


def read_all(path, **cfg):
    return list(read_file(str(path), ReadConfig(**cfg)))


def chat(cid, n=2, **extra):
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i} about tomatoes in {cid}."} for i in range(n)]
    return {"conversation_id": cid, "turns": turns, **extra}


def error_rows(convs, kind=None):
    return [e for c in convs for e in c.errors if kind is None or e["kind"] == kind]


def by_id(convs):
    return {c.conversation_id: c for c in convs}


# --------------------------------------------------------------------------------------------
# 1. The same conversation id twice in one file
# --------------------------------------------------------------------------------------------
def test_duplicate_id_in_one_file_keeps_the_first_copy_and_names_the_second(tmp_path):
    f = tmp_path / "dup.jsonl"
    f.write_text("\n".join(json.dumps(o) for o in (chat("c1", 2), chat("c2"), chat("c1", 3))) + "\n")
    convs = read_all(f)
    ids = [c.conversation_id for c in convs]
    assert len(ids) == len(set(ids)), "one file gave one id twice: the writer refuses such a batch"
    assert len(by_id(convs)["c1"].turns) == 2  # the first copy
    (row,) = error_rows(convs, "duplicate_id")
    assert (row["source_file"], row["line"], row["field"]) == (str(f), 3, "conversation_id")
    assert f"{f}:3" in row["message"] and "line 1" in row["message"] and "3 turns" in row["message"]


def test_duplicate_id_in_one_file_is_ingested_with_rc_0(tmp_path, ray_local):
    from lychee_ray.cli import main
    from lychee_ray.store.reader import open_store

    inp = tmp_path / "dup.jsonl"
    inp.write_text("\n".join(json.dumps(o) for o in (chat("c1", 4), chat("c2"), chat("c1", 6))) + "\n")
    out = tmp_path / "out"
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(out), "--set", "ray.progress_bars=false"])
    assert rc == 0
    con = open_store(str(out)).con
    statuses = dict(con.execute("select conversation_id, status from conversations").fetchall())
    assert statuses["c1"] == "ok" and statuses["c2"] == "ok"
    assert con.execute("select count(*) from turns where conversation_id = 'c1'").fetchone()[0] == 4  # the first copy
    (row,) = con.execute("select source_file, line, field from errors where kind = 'duplicate_id'").fetchall()
    assert row == (str(inp), 3, "conversation_id")


# --------------------------------------------------------------------------------------------
# 2. Nesting deeper than the parser's recursion limit
# --------------------------------------------------------------------------------------------
def test_a_deeply_nested_jsonl_line_costs_only_that_line(tmp_path):
    f = tmp_path / "deep.jsonl"
    f.write_text("\n".join([json.dumps(chat("before")), DEEP, json.dumps(chat("after"))]) + "\n")
    convs = read_all(f)
    assert {"before", "after"} <= set(by_id(convs))
    (row,) = error_rows(convs, "too_deep")
    assert row["line"] == 2 and row["source_file"] == str(f) and f"{f}:2" in row["message"]


def test_a_deeply_nested_item_in_a_json_document_costs_only_that_item(tmp_path):
    f = tmp_path / "deep.json"
    f.write_text("[" + ", ".join([json.dumps(chat("first")), DEEP, json.dumps(chat("third"))]) + "]")
    convs = read_all(f)
    assert {"first", "third"} <= set(by_id(convs))
    assert error_rows(convs, "too_deep") and [e["line"] for e in error_rows(convs, "bad_record")] == [2]


def test_a_deeply_nested_turn_costs_only_that_turn(tmp_path):
    f = tmp_path / "deep_turn.jsonl"
    conv = chat("c", 3)
    conv["turns"][1] = "PLACEHOLDER"
    f.write_text(json.dumps(conv).replace('"PLACEHOLDER"', DEEP) + "\n")
    (c, *rest) = sorted(read_all(f), key=lambda c: c.conversation_id != "c")
    assert c.conversation_id == "c" and [t.turn_id for t in c.turns] == ["session_1:1", "session_1:3"]
    assert any(e["field"] == "turns[1]" for e in c.errors)
    assert error_rows(rest, "too_deep")


# --------------------------------------------------------------------------------------------
# 3. A questions line that is JSON but not an object
# --------------------------------------------------------------------------------------------


def test_a_questions_line_that_is_not_an_object_is_an_error_row_naming_file_and_line(tmp_path, caplog):
    from lychee_ray.evaluate.questions import load_questions

    qfile = tmp_path / "questions.jsonl"
    good = {"conversation_id": "c1", "question_id": "q1", "question": "What grows?", "answer": "tomatoes"}
    qfile.write_text("42\n" + json.dumps(good) + "\n[1, 2]\n" + "[" * 50_000 + "\n{not json\n")
    with caplog.at_level(logging.ERROR, logger="lychee_ray.evaluate"):
        items = load_questions(TinyQuestionStore(), load_config(LOCAL), str(qfile))
    got = [(i.question_id, i.status) for i in items]
    assert got == [("questions.jsonl:line1", "error"), ("q1", "ok"), ("questions.jsonl:line3", "error"), ("questions.jsonl:line4", "error"), ("questions.jsonl:line5", "error")]
    errors = {i.question_id: i.error for i in items if i.status == "error"}
    assert errors["questions.jsonl:line1"].startswith(f"{qfile}:1: expected a JSON object") and "got int" in errors["questions.jsonl:line1"]
    assert errors["questions.jsonl:line4"] == f"{qfile}:4: nested too deeply to parse"
    assert errors["questions.jsonl:line5"].startswith(f"{qfile}:5: not valid JSON")
    logged = [r.getMessage() for r in caplog.records]
    assert any(m.startswith(f"{qfile}:3: expected a JSON object") for m in logged)


def test_a_repeated_question_id_is_one_error_row_and_the_first_copy_is_asked(tmp_path):
    from lychee_ray.evaluate.questions import load_questions

    qfile = tmp_path / "questions.jsonl"
    rows = [{"conversation_id": "c1", "question_id": "q1", "question": q, "answer": "a"} for q in ("First?", "Second?", "Third?")]
    qfile.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items = load_questions(TinyQuestionStore(), load_config(LOCAL), str(qfile))
    assert [(i.question_id, i.status, i.question) for i in items] == [("q1", "ok", "First?"), ("q1#dup2", "error", "Second?"), ("q1#dup3", "error", "Third?")]
    assert "appears more than once" in items[1].error


# --------------------------------------------------------------------------------------------
# 4. LoCoMo and LongMemEval: a bad turn or session costs only itself
# --------------------------------------------------------------------------------------------
def locomo_sample(**sessions):
    body = {"speaker_a": "Ann", "speaker_b": "Bob"}
    for n, (stamp, turns) in sessions.items():
        body[n] = turns
        if stamp is not None:
            body[f"{n}_date_time"] = stamp
    qa = [{"question": "Where did Ann go?", "answer": "Oslo", "evidence": "D1:1", "category": 4}, 42]
    return {"sample_id": "lc", "conversation": body, "qa": qa}


def lturn(n, k, text="I went to Oslo last week."):
    return {"speaker": "Ann" if k % 2 else "Bob", "dia_id": f"D{n}:{k}", "text": text}


def test_locomo_keeps_every_valid_turn_and_question_and_names_each_bad_one(tmp_path):
    sample = locomo_sample(
        session_1=("4:27 pm on 2 April, 2024", [lturn(1, 1), "a turn that is a string", lturn(1, 3)]),
        session_2=("2:00 pm on 9 May, 2023", {"0": lturn(2, 1)}),
        session_3=("3:00 pm on 10 May, 2023", [lturn(3, 1), {"speaker": "Ann", "dia_id": "D3:2", "text": ["not", "text"]}]),
    )
    f = tmp_path / "locomo.json"
    f.write_text(json.dumps([sample]))
    (conv,) = read_all(f)
    assert conv.status == "ok" and [t.turn_id for t in conv.turns] == ["D1:1", "D1:3", "D3:1"]
    assert [q.evidence_turn_ids for q in conv.questions] == [["D1:1"]]  # a bare string is one id
    fields = {e["field"]: e for e in conv.errors}
    assert fields["conversation.session_1[1]"]["kind"] == "bad_turn"
    assert fields["conversation.session_2"]["kind"] == "bad_field"
    assert fields["conversation.session_3[1].text"]["kind"] == "bad_text"  # a list, not a string
    assert fields["qa[1]"]["kind"] == "bad_question"
    for e in conv.errors:
        assert e["source_file"] == str(f) and e["conversation_id"] == "lc" and e["message"].startswith(f"{f}:1: lc: ")


def test_longmemeval_keeps_every_valid_turn_and_the_question_and_names_each_bad_one(tmp_path):
    item = {
        "question_id": "lm1",
        "question": "Where do I live?",
        "answer": 7,
        "question_type": "single-session-user",
        "question_date": "2024/03/14 (Thu) 08:30",
        "haystack_session_ids": ["s1", "s2", "s3"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 02:21", "not a date"],
        "haystack_sessions": [
            [{"role": "user", "content": "I live in Oslo.", "has_answer": True}, "a string turn"],
            {"role": "user", "content": "a session that is a dict"},
            [{"role": "assistant", "content": "Noted."}],
        ],
    }
    f = tmp_path / "lme.json"
    f.write_text(json.dumps([item]))
    (conv,) = read_all(f)
    assert [t.turn_id for t in conv.turns] == ["s1:1", "s3:1"]
    (q,) = conv.questions
    assert q.answer == "7" and q.evidence_turn_ids == ["s1:1"]
    kinds = {e["field"]: e["kind"] for e in conv.errors}
    assert kinds == {"haystack_sessions[0][1]": "bad_turn", "haystack_sessions[1]": "bad_field", "haystack_dates[2]": "bad_timestamp"}
    assert conv.turns[1].timestamp is None  # kept, without a time


# --------------------------------------------------------------------------------------------
# 5. Every file in a folder is read or named; compressed input; content decides the format
# --------------------------------------------------------------------------------------------
def make_store_folder(folder: Path) -> None:
    """What an earlier run's output looks like inside the input folder."""
    (folder / "turns").mkdir(parents=True)
    (folder / "_commits").mkdir()
    (folder / store_manifest.MANIFEST).write_text(json.dumps({"format": store_manifest.STORE_FORMAT, "schema_version": 1}))
    (folder / "_commits" / "0001.json").write_text(json.dumps({"conversation_id": "x", "turns": []}))
    (folder / "turns" / "part-00ab.parquet").write_bytes(b"PAR1 not really")


def test_every_file_in_a_folder_is_read_or_named_and_the_store_is_not_input(tmp_path):
    inp = tmp_path / "in"
    (inp / "sub").mkdir(parents=True)
    (inp / "a.jsonl").write_text(json.dumps(chat("plain")) + "\n")
    (inp / "notes.txt").write_text("just some notes\n")
    (inp / "table.csv").write_text("a,b\n1,2\n")
    (inp / "sub" / "chat.conv").write_text(json.dumps(chat("odd-suffix")))
    (inp / "sub" / "packed.jsonl.gz").write_bytes(gzip.compress(json.dumps(chat("gzipped")).encode() + b"\n"))
    (inp / "sub" / "packed").write_bytes(pa.Codec("zstd").compress(json.dumps([chat("zstd")]).encode(), asbytes=True))
    make_store_folder(inp / "out")

    files = list_input_files(str(inp))
    assert not any("/out/" in f for f in files)
    assert len(files) == 6
    convs = [c for f in files for c in read_all(f)]
    assert {"plain", "odd-suffix", "gzipped", "zstd"} <= set(by_id(convs))
    unsupported = {Path(e["source_file"]).name: e["message"] for e in error_rows(convs, "unsupported_format")}
    assert set(unsupported) == {"notes.txt", "table.csv"}
    assert ".txt" in unsupported["notes.txt"] and ".csv" in unsupported["table.csv"]
    # a folder that is the run's output is skipped even before it holds a manifest
    (inp / "out2").mkdir()
    (inp / "out2" / "stray.json").write_text("{}")
    assert list_input_files(str(inp), exclude=str(inp / "out2")) == files


def test_a_gzip_file_given_directly_is_read_transparently_and_damage_is_named(tmp_path):
    lines = "".join(json.dumps(chat(f"c{i}", 2)) + "\n" for i in range(300)).encode()
    whole = tmp_path / "chats.jsonl.gz"
    whole.write_bytes(gzip.compress(lines))
    assert [c.conversation_id for c in read_all(whole)] == [f"c{i}" for i in range(300)]
    cut = tmp_path / "cut.gz"
    packed = gzip.compress(lines)
    cut.write_bytes(packed[: len(packed) // 2])
    convs = read_all(cut)
    assert len([c for c in convs if c.status == "ok"]) > 50  # what came before the damage
    (row,) = error_rows(convs, "bad_compression")
    assert "gzip" in row["message"] and "truncated" in row["message"]


def test_content_not_the_suffix_decides_json_or_jsonl(tmp_path):
    pretty = tmp_path / "pretty.jsonl"  # one indented JSON document under a JSONL name
    pretty.write_text(json.dumps([chat("p1"), chat("p2")], indent=2))
    assert [c.conversation_id for c in read_all(pretty)] == ["p1", "p2"]
    lines = tmp_path / "lines.json"  # JSON Lines under a JSON name, its first line broken
    lines.write_text('{"conversation_id": "x", "turns": [\n' + json.dumps(chat("l2")) + "\n" + json.dumps(chat("l3")) + "\n")
    convs = read_all(lines)
    assert {"l2", "l3"} <= set(by_id(convs)) and [e["line"] for e in error_rows(convs, "bad_json")] == [1]


# --------------------------------------------------------------------------------------------
# 6. Timestamps that do not parse, sessions without a date
# --------------------------------------------------------------------------------------------
def test_a_chat_timestamp_that_does_not_parse_is_named_and_the_turn_kept(tmp_path):
    f = tmp_path / "t.jsonl"
    conv = chat("t", 2)
    conv["turns"][0]["timestamp"] = "the day after the party"
    conv["turns"][1]["timestamp"] = "2024-01-02T10:00:00"
    f.write_text(json.dumps(conv) + "\n")
    (c,) = read_all(f)
    assert [t.timestamp for t in c.turns] == [None, "2024-01-02T10:00:00"]
    (row,) = error_rows([c], "bad_timestamp")
    assert row["field"] == "turns[0].timestamp" and row["line"] == 1 and "the day after the party" in row["message"]


def test_a_locomo_session_without_a_date_is_named_and_its_questions_say_so(tmp_path):
    sample = locomo_sample(session_1=("4:27 pm on 2 April, 2024", [lturn(1, 1)]), session_2=(None, [lturn(2, 1)]))
    f = tmp_path / "nodate.json"
    f.write_text(json.dumps([sample]))
    (conv,) = read_all(f)
    assert [t.timestamp for t in conv.turns] == ["2024-04-02T16:27:00", None]
    assert {e["field"]: e["kind"] for e in conv.errors}["conversation.session_2_date_time"] == "missing_session_date"
    # asked after session 2, whose date is unknown: not session 1's date
    assert conv.questions[0].question_date is None
    assert error_rows([conv], "unknown_question_date")


# --------------------------------------------------------------------------------------------
# 7. Error ids do not depend on how the input path was spelled
# --------------------------------------------------------------------------------------------
def test_error_ids_are_the_same_under_a_relative_and_an_absolute_path(tmp_path, monkeypatch):
    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "empty.json").write_text("")
    (inp / "broken.jsonl").write_text(json.dumps(chat("ok")) + "\n{broken\n")
    monkeypatch.chdir(tmp_path)

    def error_ids(input_path: str, pass_root: bool) -> set[str]:
        root = {"root": input_path} if pass_root else {}
        convs = [c for f in list_input_files(input_path) for c in read_file(f, ReadConfig(), **root)]
        return {c.conversation_id for c in convs if c.status == "error"}

    for pass_root in (False, True):
        relative, absolute = error_ids("in", pass_root), error_ids(str(inp.resolve()), pass_root)
        assert len(relative) == 2 and relative == absolute
    # with the root, the ids follow the file inside the archive, wherever the archive lies
    moved = tmp_path / "elsewhere"
    os.rename(inp, moved)
    assert error_ids(str(moved), True) == error_ids("elsewhere", True) == relative


def test_bad_utf8_rows_carry_their_conversation_id(tmp_path):
    f = tmp_path / "u.jsonl"
    f.write_bytes(json.dumps(chat("u")).encode().replace(b"tomatoes", b"tomat\xffoes") + b"\n")
    (row,) = error_rows(read_all(f), "bad_utf8")
    assert row["conversation_id"] == "u"


def test_a_file_holding_an_empty_list_is_named_not_silently_skipped(tmp_path):
    """Found by tests/test_read_fuzz.py: `[]` in a .jsonl file gave no conversation and no row."""
    for name in ("empty.jsonl", "empty.json"):
        f = tmp_path / name
        f.write_text("[]\n")
        (conv,) = read_all(f)
        assert conv.status == "error" and [e["kind"] for e in conv.errors] == ["empty_file"]
        assert "empty JSON list" in conv.errors[0]["message"] and conv.errors[0]["source_file"] == str(f)


def test_the_id_registry_marks_a_second_copy_in_the_same_block_as_a_duplicate(ray_local):
    """The root of the writer's "batch holds conversation ... more than once": the registry
    claimed every id of a block before recording any, so two copies in one block were both new."""
    from lychee_ray.ingest.read import mark_duplicates, registry_actor
    from lychee_ray.schemas import Conversation

    convs = [Conversation(conversation_id="same", source="chat", source_file=f) for f in ("a.jsonl", "b.jsonl", "c.jsonl")]
    marked = mark_duplicates(convs, registry_actor())
    assert [c.status for c in marked] == ["ok", "duplicate", "duplicate"]
    assert marked[0].conversation_id == "same" and len({c.conversation_id for c in marked}) == 3
    assert "first seen in a.jsonl" in marked[1].error and "first seen in a.jsonl" in marked[2].error
