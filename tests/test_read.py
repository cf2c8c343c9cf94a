"""Readers: every source format, exchanges, and every kind of bad input (named, recorded, never
losing the rest)."""

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import InputError
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.io.readers.locomo import normalize_evidence
from lychee_ray.tables import Turn

from .conftest import LME_PATH, LOCOMO_PATH


def read_all(path, **cfg):
    return list(read_file(str(path), ReadConfig(**cfg)))


def raw_locomo_turns(sample: dict) -> list[dict]:
    """The turns of one LoCoMo sample, straight from the JSON (every `session_<n>` list)."""
    body = sample["conversation"]
    return [t for k, v in body.items() if re.fullmatch(r"session_\d+", k) for t in v]


def test_locomo_reader_keeps_every_turn_and_question():
    raw = json.loads(LOCOMO_PATH.read_text())
    convs = read_all(LOCOMO_PATH)
    assert [c.conversation_id for c in convs] == [s["sample_id"] for s in raw] == ["conv-26", "conv-30", "conv-41"]
    # the fixture's counts (tests/fixtures/README.md), counted here from the JSON itself
    n_turns, n_questions = sum(len(raw_locomo_turns(s)) for s in raw), sum(len(s["qa"]) for s in raw)
    assert (n_turns, n_questions) == (311, 120)
    assert [len(c.turns) for c in convs] == [len(raw_locomo_turns(s)) for s in raw]
    assert [len(c.questions) for c in convs] == [len(s["qa"]) for s in raw]
    c26 = convs[0]
    assert c26.turns[2].turn_id == "D1:3" and c26.turns[2].speaker == "Caroline"
    assert c26.turns[0].timestamp == "2023-05-08T13:56:00"
    # image captions are kept as text
    assert any("[image:" in t.text for t in c26.turns)
    q = c26.questions[0]
    assert q.category == "temporal" and q.evidence_turn_ids == ["D1:3"] and q.answer == "7 May 2023"
    # int answers in conv-26 (2022 is in the fixture) are cast to str
    assert any(isinstance(q.get("answer"), int) for q in raw[0]["qa"])
    assert all(isinstance(q.answer, str) for q in c26.questions)
    # exchanges: every turn in exactly one exchange, in order, never across sessions
    for c in convs:
        flat = [i for ex in c.exchanges for i in ex]
        assert flat == list(range(len(c.turns)))
        assert all(len({c.turns[i].session_id for i in ex}) == 1 for ex in c.exchanges)


def test_locomo_pair_rule_halves_the_units_and_turn_rule_keeps_them():
    pair = read_all(LOCOMO_PATH, locomo_exchange="pair")[0]
    turn = read_all(LOCOMO_PATH, locomo_exchange="turn")[0]
    n_turns = len(raw_locomo_turns(json.loads(LOCOMO_PATH.read_text())[0]))
    assert len(turn.exchanges) == len(turn.turns) == n_turns == 108  # conv-26's first 6 sessions
    assert len(turn.turns) / 2.2 < len(pair.exchanges) < len(turn.turns) / 1.8


def test_longmemeval_reader_keeps_has_answer_and_dates():
    (raw,) = json.loads(LME_PATH.read_text())
    (conv,) = read_all(LME_PATH)
    assert conv.conversation_id == "6a1eabeb" and conv.source == "longmemeval"
    raw_turns = [t for session in raw["haystack_sessions"] for t in session]
    assert len(conv.turns) == len(raw_turns) == 24
    assert sum(bool(t.has_answer) for t in conv.turns) == sum(bool(t.get("has_answer")) for t in raw_turns) == 2
    (q,) = conv.questions
    assert q.category == "knowledge-update" and len(q.evidence_turn_ids) == 2
    assert q.question_date == "2023-06-01T00:58:00"
    assert conv.turns[0].timestamp == "2023-05-25T20:21:00"
    # an exchange = a user message + the assistant reply
    assert all([conv.turns[i].role for i in ex] == ["user", "assistant"] for ex in conv.exchanges)


def test_chat_jsonl_and_turn_level_files(tmp_path):
    chat = tmp_path / "chat.jsonl"
    chat.write_text(
        json.dumps({"conversation_id": "a", "turns": [{"role": "user", "content": "hi there, I adopted a dog"}, {"role": "assistant", "content": "Congrats!"}]})
        + "\n"
        + json.dumps({"conversation_id": "b", "turns": [{"speaker": "Ann", "text": "I moved to Oslo", "timestamp": "2024-01-02T10:00:00"}]})
        + "\n"
    )
    a, b = read_all(chat)
    assert (a.conversation_id, len(a.turns), a.exchanges) == ("a", 2, [[0, 1]])
    assert b.turns[0].speaker == "Ann" and b.turns[0].timestamp == "2024-01-02T10:00:00"

    rows = [{"conversation_id": "x", "speaker": "A", "text": f"turn {i}", "turn_idx": i} for i in (2, 0, 1)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "turns.parquet")
    (x,) = read_all(tmp_path / "turns.parquet")
    assert [t.text for t in x.turns] == ["turn 0", "turn 1", "turn 2"]
    assert list_input_files(str(tmp_path)) == sorted([str(chat), str(tmp_path / "turns.parquet")])


def test_not_json_file_names_the_file(tmp_path):
    bad = tmp_path / "notes.json"
    bad.write_text("this is { not json")
    (conv,) = read_all(bad)
    assert conv.status == "error" and str(bad) in conv.error
    assert conv.errors[0]["source_file"] == str(bad)


def test_broken_jsonl_line_is_named_and_the_rest_is_read(tmp_path):
    f = tmp_path / "chats.jsonl"
    good = lambda cid: json.dumps({"conversation_id": cid, "turns": [{"role": "user", "content": "hello"}]})
    f.write_text("\n".join([good("c1"), '{"conversation_id": "c2", "turns": [', good("c3")]) + "\n")
    convs = read_all(f)
    ok = [c.conversation_id for c in convs if c.status == "ok"]
    errs = [c for c in convs if c.status == "error"]
    assert ok == ["c1", "c3"]
    assert len(errs) == 1 and f"{f}:2" in errs[0].error and errs[0].errors[0]["line"] == 2


def test_empty_conversation_gets_status_empty(tmp_path):
    f = tmp_path / "e.jsonl"
    f.write_text(json.dumps({"conversation_id": "nothing", "turns": []}) + "\n")
    (conv,) = read_all(f)
    assert conv.status == "empty" and conv.turns == []


def test_missing_text_and_speaker_are_recorded_and_the_rest_kept(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(json.dumps({"conversation_id": "m", "turns": [{"speaker": "A", "text": "fine"}, {"speaker": "B"}, {"text": "no speaker here"}]}) + "\n")
    (conv,) = read_all(f)
    assert [t.text for t in conv.turns] == ["fine", "no speaker here"]
    assert conv.turns[1].speaker == "unknown"
    kinds = {(e["field"], e["kind"]) for e in conv.errors}
    assert ("turns[1].text", "missing_field") in kinds and ("turns[2].speaker", "missing_field") in kinds


def test_bad_utf8_is_replaced_recorded_and_nothing_lost(tmp_path):
    f = tmp_path / "u.jsonl"
    line1 = json.dumps({"conversation_id": "u1", "turns": [{"role": "user", "content": "caf"}]}).encode().replace(b"caf", b"caf\xe9")
    line2 = json.dumps({"conversation_id": "u2", "turns": [{"role": "user", "content": "ok"}]}).encode()
    f.write_bytes(line1 + b"\n" + line2 + b"\n")
    convs = read_all(f)
    assert [c.conversation_id for c in convs] == ["u1", "u2"]
    assert convs[0].turns[0].text == "caf\ufffd"
    (err,) = [e for c in convs for e in c.errors if e["kind"] == "bad_utf8"]
    assert err["line"] == 1 and str(f) in err["message"]


def test_oversized_turn_is_split_without_losing_text(tmp_path):
    long_text = " ".join(f"Sentence number {i} talks about the weather in town." for i in range(400))
    f = tmp_path / "big.jsonl"
    f.write_text(json.dumps({"conversation_id": "big", "turns": [{"role": "user", "content": long_text}]}) + "\n")
    (conv,) = read_all(f, max_turn_tokens=200)
    assert len(conv.turns) > 5
    assert conv.turns[0].turn_id == "session_1:1" and conv.turns[1].turn_id == "session_1:1#p2"
    assert " ".join(t.text for t in conv.turns).split() == long_text.split()
    assert any(e["kind"] == "turn_split" for e in conv.errors)


def test_duplicate_turn_ids_are_renamed(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text(json.dumps({"conversation_id": "d", "turns": [{"id": "t1", "role": "user", "content": "a"}, {"id": "t1", "role": "assistant", "content": "b"}]}) + "\n")
    (conv,) = read_all(f)
    assert [t.turn_id for t in conv.turns] == ["t1", "t1#1"]


def test_missing_input_path_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        list_input_files(str(tmp_path / "nope"))


def test_evidence_normalization():
    assert normalize_evidence(["D8:6; D9:17", "D:11:26", "D", "D1:3"]) == ["D8:6", "D9:17", "D11:26", "D1:3"]


def test_pair_exchanges_join_runs_of_one_speaker():
    turns = [Turn(turn_id=str(i), turn_idx=i, session_id="s", speaker=sp, role=sp, text="x") for i, sp in enumerate(["A", "A", "B", "A", "B", "B", "A"])]
    assert group_exchanges(turns, "pair") == [[0, 1, 2], [3, 4, 5], [6]]


LABEL_MARKERS = ("answer_", "sharegpt_", "ultrachat_")


def test_longmemeval_session_ids_are_neutral_and_sessions_in_date_order(tmp_path):
    """LongMemEval's session ids name the evidence sessions (answer_<hash>_<n>); the reader
    renames sessions s1, s2, ... in date order and keeps the original only in
    source_session_id. The fixture's sessions are written here in reverse date order, beside a
    filler session named as LongMemEval names them, so order and renaming are both tested."""
    (raw,) = json.loads(LME_PATH.read_text())
    filler = [{"role": "user", "content": "Can you suggest a pasta recipe?"}, {"role": "assistant", "content": "Try cacio e pepe."}]
    raw["haystack_sessions"] = [raw["haystack_sessions"][1], filler, raw["haystack_sessions"][0]]
    raw["haystack_session_ids"] = [raw["haystack_session_ids"][1], "sharegpt_x1_0", raw["haystack_session_ids"][0]]
    raw["haystack_dates"] = [raw["haystack_dates"][1], "2023/05/26 (Fri) 09:00", raw["haystack_dates"][0]]
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([raw]))
    (conv,) = read_all(path)
    for t in conv.turns:
        assert not any(m in t.turn_id or m in t.session_id for m in LABEL_MARKERS), t
    assert [t.session_id for t in conv.turns] == ["s1"] * 12 + ["s2"] * 2 + ["s3"] * 12
    assert [t.source_session_id for t in conv.turns][::12][:2] == ["answer_a25d4a91_1", "sharegpt_x1_0"]
    stamps = [t.timestamp for t in conv.turns]
    assert stamps == sorted(stamps) and stamps[0] == "2023-05-25T20:21:00" and stamps[12] == "2023-05-26T09:00:00"
    (q,) = conv.questions
    assert q.evidence_turn_ids == [t.turn_id for t in conv.turns if t.has_answer] and len(q.evidence_turn_ids) == 2
    assert all(tid.startswith(("s1:", "s3:")) for tid in q.evidence_turn_ids)
