"""Readers: every source format, exchanges, and every kind of bad input (named, recorded, never
losing the rest).

LoCoMo and LongMemEval are read from generated archives (tests/support/generated.py), checked
against the generator's labels, and LoCoMo's quirks (image captions, int answers, malformed
evidence ids, an adversarial answer, a session date with no session) from a hand-made file of
invented text (tests/fixtures/locomo_quirks.json).
"""

import json
import re
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.io.readers.common import InputError
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.io.readers.locomo import normalize_evidence
from lychee_ray.schemas import LOCOMO_CATEGORIES
from lychee_ray.synth.formats import LOCOMO_CATEGORY
from lychee_ray.tables import Turn

from .conftest import FIXTURES
from .support.generated_lme import LABEL_MARKERS, labelled_instance


QUIRKS = FIXTURES / "locomo_quirks.json"


def read_all(path, **cfg):
    return list(read_file(str(path), ReadConfig(**cfg)))


def raw_locomo_turns(sample: dict) -> list[dict]:
    """The turns of one LoCoMo sample, straight from the JSON (every `session_<n>` list)."""
    body = sample["conversation"]
    return [t for k, v in body.items() if re.fullmatch(r"session_\d+", k) for t in v]


def locomo_stamp(raw: str) -> str:
    """"10:20 am on 21 February, 2023" -> ISO, parsed here independently of the package's parser."""
    return datetime.strptime(raw, "%I:%M %p on %d %B, %Y").isoformat()


def lme_stamp(raw: str) -> str:
    """"2023/12/21 (Thu) 15:04" -> ISO."""
    return datetime.strptime(raw, "%Y/%m/%d (%a) %H:%M").isoformat()


@pytest.fixture(scope="module")
def locomo_file(generated_locomo):
    return generated_locomo.archive / "locomo.json"


def test_locomo_reader_keeps_every_turn_and_question(generated_locomo, locomo_file):
    raw = json.loads(locomo_file.read_text())
    convs = read_all(locomo_file)
    assert [c.conversation_id for c in convs] == [s["sample_id"] for s in raw] == generated_locomo.conversation_ids()
    # the counts of the generator's labels, counted here from the JSON too
    n_turns, n_questions = sum(len(raw_locomo_turns(s)) for s in raw), sum(len(s["qa"]) for s in raw)
    assert (n_turns, n_questions) == (sum(c["turns"] for c in generated_locomo.labels["conversations"]), len(generated_locomo.questions))
    assert [len(c.turns) for c in convs] == [len(raw_locomo_turns(s)) for s in raw]
    assert [len(c.questions) for c in convs] == [len(s["qa"]) for s in raw]
    for conv, sample in zip(convs, raw):
        body = sample["conversation"]
        assert [(t.turn_id, t.speaker, t.text) for t in conv.turns] == [(t["dia_id"], t["speaker"], t["text"]) for t in raw_locomo_turns(sample)]
        assert conv.turns[0].timestamp == locomo_stamp(body["session_1_date_time"])
        assert {t.session_id for t in conv.turns} == {k for k in body if re.fullmatch(r"session_\d+", k)}
        # every question keeps its evidence, answer and category (LoCoMo's number, as named by the reader)
        labelled = [q for q in generated_locomo.questions if q["conversation_id"] == conv.conversation_id]
        assert [(q.question, q.answer, q.evidence_turn_ids) for q in conv.questions] == [
            (q["question"], q["answer"], q["evidence_turn_ids"]) for q in labelled]
        assert [q.category for q in conv.questions] == [LOCOMO_CATEGORIES[LOCOMO_CATEGORY[q["category"]]] for q in labelled]
    # exchanges: every turn in exactly one exchange, in order, never across sessions
    for c in convs:
        flat = [i for ex in c.exchanges for i in ex]
        assert flat == list(range(len(c.turns)))
        assert all(len({c.turns[i].session_id for i in ex}) == 1 for ex in c.exchanges)


def test_locomo_quirks_captions_int_answers_malformed_evidence_and_dateless_sessions():
    (raw,) = json.loads(QUIRKS.read_text())
    (conv,) = read_all(QUIRKS)
    assert conv.status == "ok" and len(conv.turns) == len(raw_locomo_turns(raw))
    captioned = [t for t in raw_locomo_turns(raw) if "blip_caption" in t]
    by_id = {t.turn_id: t for t in conv.turns}
    # image captions are kept as text
    assert captioned and all(by_id[t["dia_id"]].text == f"{t['text']} [image: {t['blip_caption']}]" for t in captioned)
    assert all("[image:" not in by_id[t["dia_id"]].text for t in raw_locomo_turns(raw) if "blip_caption" not in t)
    # int answers are cast to str; an adversarial item without `answer` keeps its adversarial one
    assert any(isinstance(q.get("answer"), int) for q in raw["qa"])
    assert [q.answer for q in conv.questions] == [str(q.get("answer", q.get("adversarial_answer"))) for q in raw["qa"]]
    # malformed evidence ids ("D2:1; D2:7", "D:1:5") are repaired to turns that exist
    assert any(";" in e or e.startswith("D:") for q in raw["qa"] for e in q["evidence"])
    assert all(q.evidence_turn_ids and set(q.evidence_turn_ids) <= set(by_id) for q in conv.questions)
    assert [q.evidence_turn_ids for q in conv.questions] == [normalize_evidence(q["evidence"]) for q in raw["qa"]]
    assert [q.category for q in conv.questions] == [LOCOMO_CATEGORIES[q["category"]] for q in raw["qa"]]
    # a session_<n>_date_time with no session list adds no turns and does not date the questions
    body = raw["conversation"]
    dateless = [k for k in body if k.endswith("_date_time") and k.removesuffix("_date_time") not in body]
    assert dateless and not any(t.session_id == dateless[0].removesuffix("_date_time") for t in conv.turns)
    last = max((k for k in body if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
    assert {q.question_date for q in conv.questions} == {locomo_stamp(body[f"{last}_date_time"])}


def test_locomo_pair_rule_halves_the_units_and_turn_rule_keeps_them(generated_locomo, locomo_file):
    pair = read_all(locomo_file, locomo_exchange="pair")[0]
    turn = read_all(locomo_file, locomo_exchange="turn")[0]
    n_turns = generated_locomo.labels["conversations"][0]["turns"]
    assert len(turn.exchanges) == len(turn.turns) == n_turns
    assert len(turn.turns) / 2.2 < len(pair.exchanges) < len(turn.turns) / 1.8


@pytest.fixture(scope="module")
def lme(tmp_path_factory):
    return labelled_instance(tmp_path_factory.mktemp("lme"))


def test_longmemeval_reader_keeps_has_answer_and_dates(lme):
    raw = lme.instance
    (conv,) = read_all(lme.path)
    assert conv.conversation_id == raw["question_id"] and conv.source == "longmemeval"
    raw_turns = [t for session in raw["haystack_sessions"] for t in session]
    assert len(conv.turns) == len(raw_turns)
    assert sum(bool(t.has_answer) for t in conv.turns) == sum(bool(t.get("has_answer")) for t in raw_turns) == 2
    (q,) = conv.questions
    assert q.category == "knowledge-update" and q.evidence_turn_ids == lme.question["evidence_turn_ids"]
    assert q.evidence_turn_ids == [t.turn_id for t in conv.turns if t.has_answer]
    assert q.question_date == lme_stamp(raw["question_date"])
    assert conv.turns[0].timestamp == min(lme_stamp(d) for d in raw["haystack_dates"])
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


def test_longmemeval_session_ids_are_neutral_and_sessions_in_date_order(lme, tmp_path):
    """LongMemEval's session ids name the evidence sessions (answer_<hash>_<n>); the reader
    renames sessions s1, s2, ... in date order and keeps the original only in
    source_session_id. The instance's sessions are written here in reverse date order, with a
    filler session named as LongMemEval names them dated between the first two, so order and
    renaming are both tested."""
    raw = json.loads(json.dumps(lme.instance))
    order = sorted(range(len(raw["haystack_dates"])), key=lambda i: lme_stamp(raw["haystack_dates"][i]))
    first, second = (lme_stamp(raw["haystack_dates"][i]) for i in order[:2])
    filler_date = datetime.fromisoformat(first) + (datetime.fromisoformat(second) - datetime.fromisoformat(first)) / 2
    filler = [{"role": "user", "content": "Can you suggest a soup for a cold evening?"}, {"role": "assistant", "content": "Try a leek and potato soup."}]
    sessions = [(raw["haystack_session_ids"][i], raw["haystack_dates"][i], raw["haystack_sessions"][i]) for i in order]
    sessions.append(("sharegpt_x1_0", filler_date.strftime("%Y/%m/%d (%a) %H:%M"), filler))
    sessions.sort(key=lambda s: lme_stamp(s[1]), reverse=True)
    raw["haystack_session_ids"], raw["haystack_dates"], raw["haystack_sessions"] = (list(x) for x in zip(*sessions))
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([raw]))
    (conv,) = read_all(path)
    for t in conv.turns:
        assert not any(m in t.turn_id or m in t.session_id for m in LABEL_MARKERS), t
    in_date_order = sessions[::-1]
    expected = [f"s{rank}" for rank, (_, _, turns) in enumerate(in_date_order, start=1) for _ in turns]
    assert [t.session_id for t in conv.turns] == expected
    assert [t.source_session_id for t in conv.turns] == [sid for sid, _, turns in in_date_order for _ in turns]
    assert "sharegpt_x1_0" == in_date_order[1][0]  # the filler is second in date order
    stamps = [t.timestamp for t in conv.turns]
    assert stamps == sorted(stamps) and stamps[0] == first and stamps[len(in_date_order[0][2])] == filler_date.isoformat()
    (q,) = conv.questions
    assert q.evidence_turn_ids == [t.turn_id for t in conv.turns if t.has_answer] and len(q.evidence_turn_ids) == 2
    evidence_ranks = {f"s{rank}:" for rank, (sid, _, _) in enumerate(in_date_order, start=1) if sid.startswith("answer_")}
    assert all(tid.startswith(tuple(evidence_ranks)) for tid in q.evidence_turn_ids)
