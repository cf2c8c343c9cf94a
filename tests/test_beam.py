"""The BEAM reader (arXiv 2510.27246) on small hand-written BEAM-shaped folders: a conversation
folder is found by what it holds and read as one conversation (batches as sessions, anchors as
times, markers removed, probing questions with ability, difficulty, reference, rubric and
evidence by role), whatever the input path's spelling; a bad part costs only itself and is an
errors row naming file, batch and field."""

from __future__ import annotations

import json
import logging
import os

import pytest

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.files import iter_conversations, list_input_files, read_file
from lychee_ray.store.rows import is_dropped_turn

from .conftest import REPO
from .support.beam_folder import batch, message, small_chat, small_questions, write_beam


def read(root, **cfg):
    return list(iter_conversations(list_input_files(str(root)), ReadConfig(**cfg), root=str(root)))


def one(root):
    (conv,) = read(root)
    return conv


def rows(conv, kind=None):
    return [e for e in conv.errors if kind is None or e["kind"] == kind]


# --------------------------------------------------------------------------------------------
# One conversation folder
# --------------------------------------------------------------------------------------------
def test_a_beam_folder_is_one_conversation_of_sessions_stamped_by_their_anchors(tmp_path):
    folder = write_beam(tmp_path / "100K" / "1")
    conv = one(folder)
    assert (conv.conversation_id, conv.source, conv.status) == ("beam-100K-1", "beam", "ok")
    assert conv.source_file == str(folder / "chat.json")
    assert [t.turn_id for t in conv.turns] == ["0", "1", "2", "3", "4", "5"]
    assert [t.session_id for t in conv.turns] == ["session_1"] * 4 + ["session_2"] * 2
    assert [t.timestamp for t in conv.turns] == ["2024-04-02T00:00:00"] * 4 + ["2024-05-20T00:00:00"] * 2
    assert [t.role for t in conv.turns] == ["user", "assistant"] * 3
    # the generation markers are gone, and nothing else of the text
    assert conv.turns[0].text == "I am planning a rooftop garden for basil and chili peppers."
    assert conv.turns[2].text == "The planters are cedar, 40 cm deep."
    assert conv.turns[4].text == "I moved the chili peppers to the sunny corner"
    assert not any("->->" in t.text for t in conv.turns)
    assert conv.exchanges == [[0, 1], [2, 3], [4, 5]]
    assert conv.errors == []  # chat.json read, topic.json named in the log only


def test_probing_questions_carry_ability_difficulty_reference_rubric_and_evidence_by_role(tmp_path):
    conv = one(write_beam(tmp_path / "100K" / "1"))
    q = {x.category: x for x in conv.questions}
    assert len(conv.questions) == 6 and all(x.conversation_id == "beam-100K-1" for x in conv.questions)
    assert q["information_extraction"].question_id == "beam-100K-1:information_extraction:1"
    assert (q["information_extraction"].answer, q["information_extraction"].difficulty) == ("40 cm", "easy")
    assert q["information_extraction"].rubric == ["says 40 cm"]
    assert (q["information_extraction"].evidence_turn_ids, q["information_extraction"].evidence_roles) == (["2"], [""])
    assert q["knowledge_update"].evidence_turn_ids == ["0", "4"]
    assert q["knowledge_update"].evidence_roles == ["original_info", "updated_info"]
    assert (q["event_ordering"].evidence_turn_ids, q["event_ordering"].evidence_roles) == (["0", "2", "4"], ["", "", ""])  # groups flattened
    assert q["summarization"].answer == "A rooftop garden."  # ideal_summary
    assert q["abstention"].answer == "Not mentioned." and q["abstention"].evidence_turn_ids == []  # ideal_response
    assert q["instruction_following"].answer == ""  # no reference key: the rubric is its reference
    # asked after the last message: the last batch's anchor
    assert {x.question_date for x in conv.questions} == {"2024-05-20T00:00:00"}


def test_a_question_date_in_the_data_is_kept_and_an_anchor_on_the_batch_counts(tmp_path):
    chat = [batch(1, "June-01-2024", [[message(0, "user", "Hello there."), message(1, "assistant", "Hi.")]], anchor_on="batch")]
    questions = {"temporal_reasoning": [{"question": "When?", "answer": "June", "question_date": "2024-07-01", "source_chat_ids": {"first_event": [0], "second_event": [1]}}]}
    conv = one(write_beam(tmp_path / "b" / "c", chat, questions))
    assert [t.timestamp for t in conv.turns] == ["2024-06-01T00:00:00"] * 2
    (q,) = conv.questions
    assert q.question_date == "2024-07-01T00:00:00" and q.evidence_roles == ["first_event", "second_event"]


def test_the_truncated_chat_is_read_when_it_exists_and_the_unread_files_are_logged(tmp_path, caplog):
    short_chat = [batch(1, "April-02-2024", [[message(0, "user", "Only the short chat."), message(1, "assistant", "Yes.")]])]
    folder = write_beam(tmp_path / "100K" / "5", truncated=short_chat, questions={"abstention": [{"question": "Who?", "ideal_response": "Unknown."}]})
    with caplog.at_level(logging.INFO, logger="lychee_ray.io.readers"):
        files = list_input_files(str(folder))
        conv = one(folder)
    assert files == [str(folder)] and files[0].folder == "beam"
    assert [t.text for t in conv.turns] == ["Only the short chat.", "Yes."]
    assert conv.source_file == str(folder / "chat_trunecated.json") and conv.errors == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"not reading {folder / 'chat.json'}" in logged and "chat_trunecated.json (the authors' rule" in logged
    assert f"not reading {folder / 'topic.json'}" in logged


# --------------------------------------------------------------------------------------------
# Buckets, folders above buckets, and the id's independence of the path's spelling
# --------------------------------------------------------------------------------------------
def test_a_bucket_and_a_folder_above_buckets_read_as_many_conversations(tmp_path):
    for bucket, name in (("100K", "1"), ("100K", "2"), ("500K", "1")):
        write_beam(tmp_path / "beam" / bucket / name)
    (tmp_path / "beam" / "notes.jsonl").write_text(json.dumps({"conversation_id": "plain", "turns": [{"role": "user", "content": "hi"}]}) + "\n")
    assert sorted(c.conversation_id for c in read(tmp_path / "beam" / "100K")) == ["beam-100K-1", "beam-100K-2"]
    convs = read(tmp_path / "beam")
    assert sorted(c.conversation_id for c in convs) == ["beam-100K-1", "beam-100K-2", "beam-500K-1", "plain"]
    assert all(c.status == "ok" and not c.errors for c in convs)  # no file of a BEAM folder read again as another format
    assert len(list_input_files(str(tmp_path / "beam"))) == 4


def test_the_conversation_id_does_not_depend_on_how_the_input_is_spelled(tmp_path, monkeypatch):
    folder = write_beam(tmp_path / "data" / "100K" / "7")
    os.symlink(tmp_path / "data", tmp_path / "link")
    monkeypatch.chdir(tmp_path / "data")
    spellings = ["100K/7", "100K/7/", "./100K/../100K/7", str(folder), str(tmp_path / "link" / "100K" / "7"), "100K"]
    assert {one(s).conversation_id for s in spellings} == {"beam-100K-7"}


def test_folder_names_are_sanitized_in_the_id(tmp_path):
    conv = one(write_beam(tmp_path / "my bucket!" / "conv #3"))
    assert conv.conversation_id == "beam-my_bucket_-conv_3"


# --------------------------------------------------------------------------------------------
# Bad parts: each an errors row naming file, batch and field; the rest is kept
# --------------------------------------------------------------------------------------------
def test_bad_batches_messages_anchors_and_evidence_are_error_rows_and_the_rest_is_kept(tmp_path):
    chat = [
        batch(1, "April-02-2024", [[message(0, "user", "A good first message."), {"role": "assistant", "content": "No id here."}]]),
        "a batch that is a string",
        batch(3, "the thirty-second of Smarch", [[message(2, "user", "Anchor is no date."), message(2, "assistant", "Same id again.")]]),
        batch(4, "May-01-2024", [[message(3, "user", None), {"role": "user", "id": 4}, message(5, "assistant", 17), 9]]),
    ]
    questions = {"information_extraction": [{"question": "Which?", "answer": "x", "source_chat_ids": [0, 99, "2"]}], "made_up_ability": [{"question": "Odd?", "answer": "y"}]}
    folder = write_beam(tmp_path / "100K" / "9", chat, questions)
    conv = one(folder)
    chat_file, q_file = str(folder / "chat.json"), str(folder / "probing_questions" / "probing_questions.json")
    got = {(e["source_file"], e["line"], e["field"], e["kind"]) for e in conv.errors}
    assert got == {
        (chat_file, 1, "[0].turns[0][1].id", "missing_field"),
        (chat_file, 2, "[1]", "bad_batch"),
        (chat_file, 3, "[2].turns[0][0].time_anchor", "bad_timestamp"),
        (chat_file, 3, "[2].turns[0][1].turn_id", "duplicate_turn_id"),
        (chat_file, 4, "[3].turns[0][0].text", "missing_field"),
        (chat_file, 4, "[3].turns[0][1].text", "missing_field"),
        (chat_file, 4, "[3].turns[0][2].text", "bad_text"),
        (chat_file, 4, "[3].turns[0][3]", "bad_turn"),
        (q_file, None, "information_extraction[0].source_chat_ids[1]", "unknown_evidence_id"),
        (q_file, None, "made_up_ability", "unknown_category"),
    }
    assert all(e["conversation_id"] == "beam-100K-9" for e in conv.errors)
    anchor = next(e for e in conv.errors if e["kind"] == "bad_timestamp")
    assert anchor["message"].startswith(f"{chat_file}:3: beam-100K-9: [2].turns[0][0].time_anchor ") and "Smarch" in anchor["message"]
    # every valid turn kept: the id-less one under a made-up id, the repeated id renamed
    assert [t.text for t in conv.turns] == ["A good first message.", "No id here.", "Anchor is no date.", "Same id again."]
    assert [t.timestamp for t in conv.turns] == ["2024-04-02T00:00:00"] * 2 + [None, None]
    assert conv.turns[3].turn_id == "2#3"
    # 8 messages in the batches that are objects: 4 kept + 4 dropped rows (the string batch has its own row)
    assert len(conv.turns) + sum(is_dropped_turn(e) for e in conv.errors) == 8
    (q, odd) = conv.questions
    assert q.evidence_turn_ids == ["0", "2"] and odd.category == "made_up_ability"
    assert q.question_date == "2024-05-01T00:00:00"


@pytest.mark.parametrize(
    ("questions", "kind"),
    [("{not json", "bad_json"), ("[1, 2]", "bad_field"), (False, "missing_file")],
)
def test_a_bad_or_missing_questions_file_is_an_error_row_and_the_chat_is_kept(tmp_path, questions, kind):
    folder = write_beam(tmp_path / "100K" / "2", questions=questions)
    conv = one(folder)
    assert len(conv.turns) == 6 and conv.questions == [] and conv.status == "ok"
    (row,) = rows(conv)
    assert (row["kind"], row["source_file"]) == (kind, str(folder / "probing_questions" / "probing_questions.json"))


def test_a_chat_file_that_breaks_midway_is_an_error_row_and_the_questions_are_kept(tmp_path):
    folder = write_beam(tmp_path / "100K" / "3", chat='[{"batch_number": 1, "turns": [[{"role": "user", "id": 0, "content": "cut')
    conv = one(folder)
    assert conv.status == "empty" and [e["kind"] for e in conv.errors] == ["bad_json"]
    assert conv.errors[0]["source_file"] == str(folder / "chat.json")
    assert len(conv.questions) == len(sum(small_questions().values(), []))  # evidence unchecked: the chat is unknown


def test_a_folder_whose_chat_file_is_no_list_is_not_beam_and_its_files_are_read_as_any_input(tmp_path):
    write_beam(tmp_path / "x" / "1", chat=json.dumps({"conversation_id": "looks-like-chat", "turns": [{"role": "user", "content": "hi"}]}))
    files = list_input_files(str(tmp_path / "x"))
    assert not any(f.folder for f in files) and len(files) == 3
    convs = read(tmp_path / "x")
    assert "looks-like-chat" in {c.conversation_id for c in convs}


def test_a_beam_chat_file_read_alone_says_to_give_its_folder(tmp_path):
    folder = write_beam(tmp_path / "100K" / "1")
    convs = list(read_file(str(folder / "chat.json"), ReadConfig()))
    assert len(convs) == len(small_chat()) and all(c.status == "error" for c in convs)
    assert all("give that folder as input" in c.error for c in convs)


# --------------------------------------------------------------------------------------------
# End to end: the ingest job's Ray read plan takes a BEAM folder as one part
# --------------------------------------------------------------------------------------------
def test_a_bucket_is_ingested_with_the_questions_new_columns(tmp_path, ray_local):
    from lychee_ray.cli import main
    from lychee_ray.store.reader import open_store

    for name in ("1", "2"):
        write_beam(tmp_path / "in" / "100K" / name, truncated=small_chat() if name == "2" else None)
    out = tmp_path / "out"
    rc = main(["ingest", "--config", str(REPO / "configs" / "local.yaml"), "--input", str(tmp_path / "in" / "100K"), "--out", str(out), "--set", "ray.progress_bars=false"])
    assert rc == 0
    con = open_store(str(out)).con
    assert con.execute("select conversation_id, source, status, n_turns from conversations order by 1").fetchall() == [
        ("beam-100K-1", "beam", "ok", 6), ("beam-100K-2", "beam", "ok", 6)]  # fmt: skip
    assert con.execute("select count(*) from errors").fetchone()[0] == 0  # topic.json and the superseded chat.json are no rows
    row = con.execute(
        "select difficulty, rubric, evidence_turn_ids, evidence_roles, cast(question_date as varchar) from questions where question_id = 'beam-100K-1:knowledge_update:1'"
    ).fetchone()
    assert row == ("medium", ["sunny corner"], ["0", "4"], ["original_info", "updated_info"], "2024-05-20 00:00:00")
    assert con.execute("select count(*) from questions").fetchone()[0] == 2 * len(sum(small_questions().values(), []))
