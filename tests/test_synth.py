"""The generator of labelled conversations (lychee_ray/synth): determinism, labels that point at
the turns that state them (checked on the turns as the project's readers give them back, with
dates resolved here by plain datetime arithmetic, not by the generator's code), every format read
back by its reader, the size parameters, the categories planted, and one ingest end to end."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter
from datetime import date, datetime, timedelta
from pathlib import Path

import pytest

from lychee_ray.cli import main as cli_main
from lychee_ray.config import load_config
from lychee_ray.config_sections import ReadConfig
from lychee_ray.dates import MONTH_NAMES
from lychee_ray.evaluate.questions import _read_question_file, as_id_list
from lychee_ray.ingest.job import run_ingest
from lychee_ray.io.readers.files import iter_conversations, list_input_files
from lychee_ray.schemas import LOCOMO_CATEGORIES
from lychee_ray.store.reader import open_store
from lychee_ray.synth import FORMATS, SynthParams, write_archive
from lychee_ray.synth.archive import CATEGORIES
from lychee_ray.synth.beam import ABILITIES
from lychee_ray.synth.formats import LOCOMO_CATEGORY
from lychee_ray.synth.work_words import COMPONENTS

from .conftest import REPO

READABLE = [f for f in FORMATS if f != "beam"]  # the BEAM reader is not on this branch
DIRECT = {"single_hop", "coreference", "multi_hop", "knowledge_update", "assistant_recall"}  # the answer is said in a turn


@pytest.fixture(scope="module")
def archives(tmp_path_factory) -> dict[str, Path]:
    """Every format at the default size and seed."""
    root = tmp_path_factory.mktemp("synth")
    return {fmt: write_archive(root / fmt, SynthParams(format=fmt)).out for fmt in FORMATS}


@pytest.fixture(scope="module")
def read(archives) -> dict[str, dict]:
    """format -> conversation id -> the conversation as its reader gives it back."""
    return {fmt: read_back(archives[fmt]) for fmt in READABLE}


def read_back(out: Path, cfg: ReadConfig | None = None) -> dict:
    """conversation id -> the conversation as the project's reader gives it."""
    convs = list(iter_conversations(list_input_files(str(out / "archive")), cfg or ReadConfig()))
    return {c.conversation_id: c for c in convs}


def labels(out: Path) -> dict:
    return json.loads((out / "labels.json").read_text())


def questions(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines()]


def said(text: str, value: str) -> bool:
    return re.search(rf"(?<!\w){re.escape(value)}(?!\w)", text, re.IGNORECASE) is not None


def file_digests(out: Path) -> dict[str, str]:
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------------------------
# dates, resolved here with datetime alone
# --------------------------------------------------------------------------------------------
NUMBERS = {"two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = {m.lower(): i for i, m in enumerate(MONTH_NAMES, start=1)}


def resolve(expression: str, said_on: date) -> date:
    """The day a date expression names, said on `said_on` (past events; future ones carry a year)."""
    e = expression.lower()
    if e == "yesterday":
        return said_on - timedelta(days=1)
    if e == "the day before yesterday":
        return said_on - timedelta(days=2)
    if m := re.fullmatch(r"(\w+) days ago", e):
        return said_on - timedelta(days=NUMBERS[m[1]])
    if e in ("a week ago", "two weeks ago"):
        return said_on - timedelta(weeks=1 if e.startswith("a ") else 2)
    if m := re.fullmatch(r"last (\w+)", e):
        back = (said_on.weekday() - WEEKDAYS.index(m[1])) % 7 or 7  # the most recent one strictly before
        day = said_on - timedelta(days=back)
        monday = said_on - timedelta(days=said_on.weekday())
        assert monday - timedelta(days=7) <= day < monday, f"{expression!r} on {said_on} is not in the week before: ambiguous"
        return day
    m = re.fullmatch(r"on (\d{1,2}) ([a-z]+)(?: (\d{4}))?", e)
    assert m, f"unknown date expression {expression!r}"
    if m[3]:
        return date(int(m[3]), MONTHS[m[2]], int(m[1]))
    day = date(said_on.year, MONTHS[m[2]], int(m[1]))
    return day if day <= said_on else date(said_on.year - 1, MONTHS[m[2]], int(m[1]))


def day_text(d: date) -> str:
    return f"{d.day} {MONTH_NAMES[d.month - 1]} {d.year}"


def test_the_date_resolver_of_these_tests():
    wednesday = date(2024, 3, 13)
    assert resolve("yesterday", wednesday) == date(2024, 3, 12)
    assert resolve("three days ago", wednesday) == date(2024, 3, 10)
    assert resolve("last Saturday", wednesday) == date(2024, 3, 9)
    assert resolve("two weeks ago", wednesday) == date(2024, 2, 28)
    assert resolve("on 14 March", wednesday) == date(2023, 3, 14)  # no year: the last one on or before
    assert resolve("on 2 March", wednesday) == date(2024, 3, 2)
    with pytest.raises(AssertionError):
        resolve("last Tuesday", wednesday)  # yesterday: "last Tuesday" would be ambiguous


# --------------------------------------------------------------------------------------------
# determinism
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path, archives, fmt):
    again = write_archive(tmp_path / "again", SynthParams(format=fmt)).out
    assert file_digests(again) == file_digests(archives[fmt])
    other = write_archive(tmp_path / "other", SynthParams(format=fmt, seed=1)).out
    theirs, ours = file_digests(other), file_digests(archives[fmt])
    assert theirs.keys() == ours.keys() or fmt == "turns"  # turns: one file per day, other days
    assert all(theirs.get(name) != digest for name, digest in ours.items())


def test_same_bytes_in_another_process_with_another_hash_seed(tmp_path, archives):
    """Nothing depends on set or dict order of strings (PYTHONHASHSEED)."""
    code = "import sys; from lychee_ray.synth import SynthParams, write_archive; write_archive(sys.argv[1], SynthParams(format='chat'))"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "sub")], check=True, env=env, timeout=120)
    assert file_digests(tmp_path / "sub") == file_digests(archives["chat"])


# --------------------------------------------------------------------------------------------
# every label points at a turn that states it, on the turns as read back
# --------------------------------------------------------------------------------------------
def turn_texts(conv) -> dict[str, tuple[str, date]]:
    return {t.turn_id: (t.text, datetime.fromisoformat(t.timestamp).date()) for t in conv.turns}


@pytest.mark.parametrize("fmt", READABLE)
def test_every_fact_and_change_is_stated_by_its_turn(archives, read, fmt):
    convs = read[fmt]
    doc = labels(archives[fmt])
    assert doc["facts"] and doc["changes"]
    for fact in doc["facts"]:
        text, said_on = turn_texts(convs[fact["conversation_id"]])[fact["turn_id"]]
        if fact["kind"] == "event":
            assert said(text, fact["expression"]), (fact, text)
            assert resolve(fact["expression"], said_on).isoformat() == fact["date"] == fact["value"], (fact, said_on)
            assert said_on.isoformat() == fact["session_date"]
        else:
            assert said(text, fact["value"]), (fact, text)
    for change in doc["changes"]:
        turns = turn_texts(convs[change["conversation_id"]])
        assert change["kind"] in ("supersedes", "contradicts")
        assert said(turns[change["old_turn_id"]][0], change["old_value"]), change
        assert said(turns[change["new_turn_id"]][0], change["new_value"]), change
        order = [t.turn_id for t in convs[change["conversation_id"]].turns]
        assert order.index(change["old_turn_id"]) < order.index(change["new_turn_id"])


def check_question(q: dict, facts: dict[str, dict], conv, changes: list[dict]) -> None:
    """The answer follows from the evidence turns, as the category says."""
    texts = turn_texts(conv)
    order = [t.turn_id for t in conv.turns]
    own = [facts[f] for f in q["fact_ids"]]
    evidence = q["evidence_turn_ids"]
    assert evidence == sorted({f["turn_id"] for f in own}, key=order.index), q  # exactly its facts' turns, in order
    assert len(q["evidence_roles"]) == len(evidence)
    role = dict(zip(evidence, q["evidence_roles"]))
    elsewhere = [texts[t][0] for t in order if t not in evidence]
    category, answer = q["category"], q["answer"]
    if category == "abstention":
        assert answer == "not mentioned" and not evidence
        return
    if category in DIRECT:
        for item in answer.split(", "):
            assert any(said(texts[t][0], item) for t in evidence), (q, item)
            assert not any(said(text, item) for text in elsewhere), (q, item)  # only the evidence says it
    if category == "coreference":
        statement = next(f for f in own if f["value"] == answer)
        mention = next(f for f in own if f is not statement)
        assert not said(texts[statement["turn_id"]][0], statement["subject"]), q  # said without the name
        assert said(texts[mention["turn_id"]][0], statement["subject"]) and statement["subject"] in q["question"]
    if category == "knowledge_update":
        assert q["evidence_roles"] == ["original_info", "updated_info"] and said(texts[evidence[1]][0], answer)
        assert any(c["old_turn_id"] == evidence[0] and c["new_turn_id"] == evidence[1] and c["kind"] == "supersedes" for c in changes)
    if category == "contradiction":
        assert q["evidence_roles"] == ["first_statement", "second_statement"]
        assert any(c["old_turn_id"] == evidence[0] and c["new_turn_id"] == evidence[1] and c["kind"] == "contradicts" for c in changes)
    if category == "temporal":
        days = {f["turn_id"]: resolve(f["expression"], texts[f["turn_id"]][1]) for f in own}
        if len(own) == 1:
            assert answer == day_text(days[evidence[0]]), q
        else:
            first = next(t for t in evidence if role[t] == "first_event")
            second = next(t for t in evidence if role[t] == "second_event")
            assert days[first] < days[second], q
            if m := re.fullmatch(r"(\d+) weeks?", answer):
                assert (days[second] - days[first]).days == 7 * int(m[1]), q
            else:
                assert next(f for f in own if f["turn_id"] == first)["attribute"] in answer, q
    if category == "event_ordering":
        items = answer.split(", ")
        assert len(items) == len(evidence) == 3
        for item, turn_id in zip(items, evidence):
            assert said(texts[turn_id][0], item)
            assert not any(said(texts[t][0], item) for t in order[: order.index(turn_id)]), q  # first brought up there
    if category in ("summarization", "preference", "instruction"):
        assert all(f["value"] in answer and said(texts[f["turn_id"]][0], f["value"]) for f in own), q


@pytest.mark.parametrize("fmt", READABLE)
def test_every_question_follows_from_its_evidence_turns(archives, read, fmt):
    convs = read[fmt]
    doc = labels(archives[fmt])
    facts = {(f["conversation_id"], f["fact_id"]): f for f in doc["facts"]}
    for q in questions(archives[fmt]):
        cid = q["conversation_id"]
        own = {f: facts[(cid, f)] for f in q["fact_ids"]}
        check_question(q, own, convs[cid], [c for c in doc["changes"] if c["conversation_id"] == cid])
        assert datetime.fromisoformat(q["question_date"]) > max(datetime.fromisoformat(t.timestamp) for t in convs[cid].turns)


def test_abstention_terms_are_said_nowhere(archives, read):
    convs = read["chat"]
    doc = labels(archives["chat"])
    asked = {q["question_id"]: q for q in questions(archives["chat"]) if q["category"] == "abstention"}
    assert asked and {a["question_id"] for a in doc["abstentions"]} == set(asked)
    for a in doc["abstentions"]:
        assert a["never_said"] in asked[a["question_id"]]["question"]
        assert not any(said(t.text, a["never_said"]) for t in convs[a["conversation_id"]].turns)


def test_filler_names_the_asked_entities_without_their_facts(archives, read):
    """Finding the turns that name an entity is not enough: turns outside the evidence name the
    person a chit-chat coreference or multi-hop question is about, or the component a work
    question names, without the fact."""
    convs = read["chat"]
    doc = labels(archives["chat"])
    facts = {(f["conversation_id"], f["fact_id"]): f for f in doc["facts"]}
    checked = named_elsewhere = 0
    for q in questions(archives["chat"]):
        conv = convs[q["conversation_id"]]
        speakers = {t.speaker for t in conv.turns}
        if q["category"] in ("coreference", "multi_hop") and "user" not in speakers:
            entities = [facts[(conv.conversation_id, f)]["subject"] for f in q["fact_ids"]]
            entities = [e for e in entities if e not in speakers]
        else:
            entities = [c for c in COMPONENTS if c in q["question"]]
        if not entities:
            continue
        checked += 1
        others = [t.text for t in conv.turns if t.turn_id not in q["evidence_turn_ids"]]
        named_elsewhere += any(said(text, e) for text in others for e in entities)
    assert checked >= 20 and named_elsewhere / checked >= 0.9, (named_elsewhere, checked)


# --------------------------------------------------------------------------------------------
# each format through the project's own reader
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", READABLE)
def test_each_format_reads_back_whole(archives, read, fmt):
    out = archives[fmt]
    convs = read[fmt]
    doc = labels(out)
    assert all(c.status == "ok" and not c.errors for c in convs.values())
    turns = {c["conversation_id"]: c["turns"] for c in doc["conversations"]}
    if fmt == "longmemeval":  # one instance per question, each holding its whole conversation
        assert len(convs) == len(questions(out))
        assert all(len(c.turns) == turns[c.conversation_id.split(":")[0]] for c in convs.values())
    else:
        assert {cid: len(c.turns) for cid, c in convs.items()} == turns
    ids = {cid: {t.turn_id for t in c.turns} for cid, c in convs.items()}
    for q in questions(out):
        assert set(q["evidence_turn_ids"]) <= ids[q["conversation_id"]], q
    for f in doc["facts"]:
        assert f["turn_id"] in ids[f["conversation_id"]]
    for c in doc["changes"]:
        assert {c["old_turn_id"], c["new_turn_id"]} <= ids[c["conversation_id"]]


@pytest.mark.parametrize("fmt", ["locomo", "longmemeval"])
def test_the_reader_reads_the_questions_with_their_evidence(archives, read, fmt):
    convs = read[fmt]
    read = {q.question_id: q for c in convs.values() for q in c.questions}
    ours = questions(archives[fmt])
    assert set(read) == {q["question_id"] for q in ours}
    for q in ours:
        theirs = read[q["question_id"]]
        assert (theirs.conversation_id, theirs.question, theirs.answer, theirs.evidence_turn_ids) == (
            q["conversation_id"], q["question"], q["answer"], q["evidence_turn_ids"])
        if fmt == "locomo":
            assert theirs.category == LOCOMO_CATEGORIES[LOCOMO_CATEGORY[q["category"]]]
        else:
            assert theirs.category.endswith("_abs") == (q["category"] == "abstention")


@pytest.mark.parametrize("fmt", FORMATS)
def test_evaluate_reads_the_questions_file(archives, fmt):
    placed = _read_question_file(str(archives[fmt] / "questions.jsonl"))
    assert [where for where, _ in placed] == [f"{archives[fmt] / 'questions.jsonl'}:{i}" for i in range(1, len(placed) + 1)]
    rows = [row for _, row in placed]
    ours = questions(archives[fmt])
    assert len(rows) == len(ours) > 0
    assert [as_id_list(r["evidence_turn_ids"]) for r in rows] == [q["evidence_turn_ids"] for q in ours]
    assert all({"conversation_id", "question_id", "question", "answer", "category", "question_date"} <= set(r) for r in rows)


def test_default_turns_fit_the_local_configs_turn_cap(archives):
    """No turn is split by the reader under configs/local.yaml, so labels keep their turn ids."""
    cfg = load_config(REPO / "configs" / "local.yaml")
    convs = read_back(archives["chat"], cfg.read_settings)
    assert sum(len(c.turns) for c in convs.values()) == sum(c["turns"] for c in labels(archives["chat"])["conversations"])
    assert not [e for c in convs.values() for e in c.errors]


ANCHOR = re.compile(r"^(January|February|March|April|May|June|July|August|September|October|November|December)-\d{2}-\d{4}$")
REFERENCES = {"abstention": "ideal_response", "contradiction_resolution": "ideal_answer", "summarization": "ideal_summary",
              "instruction_following": "expected_compliance", "preference_following": "expected_compliance"}
ROLE_KEYS = {"knowledge_update": {"original_info", "updated_info"}, "contradiction_resolution": {"first_statement", "second_statement"},
             "temporal_reasoning": {"first_event", "second_event"}}


def test_beam_follows_the_documented_layout(archives):
    out = archives["beam"]
    doc = labels(out)
    ours = {q["question"]: q for q in questions(out)}
    for conv in doc["conversations"]:
        folder = out / "archive" / doc["beam_folders"][conv["conversation_id"]]
        batches = json.loads((folder / "chat.json").read_text())
        assert [b["batch_number"] for b in batches] == list(range(1, conv["sessions"] + 1))
        messages = {}
        for b in batches:
            assert set(b) == {"batch_number", "time_anchor", "turns"} and isinstance(b["turns"], list)
            first = b["turns"][0][0]
            assert ANCHOR.match(first["time_anchor"]) and first["role"] == "user"
            opened = 0
            for group in b["turns"]:
                assert group[0]["role"] == "user" and all(m["role"] == "assistant" for m in group[1:])
                for m in group:
                    assert set(m) <= {"role", "id", "content", "time_anchor", "index", "question_type"} and isinstance(m["id"], int)
                    messages[m["id"]] = m
                user = group[0]
                if user["question_type"] == "main_question":
                    opened += 1
                    assert user["index"] == f"{b['batch_number']},{opened}"
                    assert user["content"].endswith(f" ->-> {b['batch_number']},{opened}")
                else:
                    assert user["question_type"] == "followup_question" and "index" not in user and "->->" not in user["content"]
        assert sorted(messages) == list(range(conv["turns"]))
        probing = json.loads((folder / "probing_questions" / "probing_questions.json").read_text())
        assert list(probing) == list(ABILITIES)
        for ability, asked in probing.items():
            for p in asked:
                assert isinstance(p["question"], str) and p["difficulty"] in ("easy", "medium", "hard", "clear")
                assert p["rubric"] and all(isinstance(n, str) and n for n in p["rubric"])
                assert p[REFERENCES.get(ability, "answer")] == ours[p["question"]]["answer"]
                source = p.get("source_chat_ids")
                if ability == "abstention":
                    assert source is None
                    continue
                ids = [i for v in source.values() for i in v] if isinstance(source, dict) else source
                if ability in ROLE_KEYS:
                    assert set(source) == ROLE_KEYS[ability]
                else:
                    assert isinstance(source, list)
                assert sorted(str(i) for i in ids) == sorted(ours[p["question"]]["evidence_turn_ids"])
    for fact in doc["facts"]:  # labels name messages by id, and the message states the value
        conv_folder = out / "archive" / doc["beam_folders"][fact["conversation_id"]]
        batches = json.loads((conv_folder / "chat.json").read_text())
        message = next(m for b in batches for g in b["turns"] for m in g if str(m["id"]) == fact["turn_id"])
        assert said(message["content"], fact["expression"] if fact["kind"] == "event" else fact["value"])


# --------------------------------------------------------------------------------------------
# sizes and categories
# --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("style", ["chitchat", "work"])
def test_the_size_parameters_are_honoured(tmp_path, style):
    params = SynthParams(conversations=3, sessions=5, turns_per_session=10, turn_words=12, style=style, format="chat")
    convs = read_back(write_archive(tmp_path, params).out)
    assert len(convs) == 3
    for conv in convs.values():
        per_session = Counter(t.session_id for t in conv.turns)
        assert len(per_session) == 5 and set(per_session.values()) == {10}
        short = [t for t in conv.turns if t.role != "assistant"]  # chit-chat turns, user turns
        assert all(len(t.text.split()) >= 12 for t in short)
        if style == "work":
            replies = [t for t in conv.turns if t.role == "assistant"]
            assert all("```" in t.text and "\n- " in t.text and "\n1. " in t.text for t in replies)


def test_odd_turns_in_a_work_session_are_refused_in_one_sentence(tmp_path, capsys):
    assert cli_main(["synth", "--out", str(tmp_path), "--style", "work", "--turns-per-session", "7"]) == 2
    assert "must be even" in capsys.readouterr().err
    assert cli_main(["synth", "--out", str(REPO / "configs")]) == 2  # a folder that is not ours is left alone
    assert "not empty" in capsys.readouterr().err


def test_the_cli_reports_what_it_wrote(tmp_path, capsys):
    assert cli_main(["synth", "--out", str(tmp_path), "--conversations", "2", "--format", "locomo", "--seed", "3"]) == 0
    shown = capsys.readouterr().out
    asked = Counter(q["category"] for q in questions(tmp_path))
    assert "archive/locomo.json" in shown and "changes:" in shown
    for category, n in asked.items():
        assert re.search(rf"^\s+{category}\s+{n}$", shown, re.M)
    assert cli_main(["synth", "--out", str(tmp_path), "--conversations", "1", "--format", "chat"]) == 0  # our own archive is replaced
    assert not (tmp_path / "archive" / "locomo.json").exists()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_claimed_category_is_planted_at_the_default_size(tmp_path, seed):
    out = write_archive(tmp_path, SynthParams(seed=seed)).out
    doc = labels(out)
    by_conv: dict[str, Counter] = {}
    for q in questions(out):
        by_conv.setdefault(q["conversation_id"], Counter())[q["category"]] += 1
    for conv in doc["conversations"]:
        assert set(CATEGORIES[conv["style"]]) <= set(by_conv[conv["conversation_id"]]), (conv, by_conv[conv["conversation_id"]])
    kinds = Counter(c["kind"] for c in doc["changes"])
    assert kinds["supersedes"] and kinds["contradicts"]


# --------------------------------------------------------------------------------------------
# end to end: ingest keeps every generated turn
# --------------------------------------------------------------------------------------------
def test_ingest_stores_every_generated_turn(tmp_path, ray_local):
    out = write_archive(tmp_path / "synth", SynthParams(conversations=2, sessions=3, turns_per_session=8, style="mixed", format="chat")).out
    cfg = load_config(REPO / "configs" / "local.yaml", ["ray.progress_bars=false", "ray.num_cpus=2"])
    summary = run_ingest(cfg, str(out / "archive"), str(tmp_path / "store"))
    assert not summary.failures
    expected = {c["conversation_id"]: c["turns"] for c in labels(out)["conversations"]}
    with open_store(str(tmp_path / "store")) as store:
        stored = dict(store.con.execute("select conversation_id, count(*) from turns group by 1").fetchall())
        ids = {(cid, tid) for cid, tid in store.con.execute("select conversation_id, turn_id from turns").fetchall()}
    assert stored == expected
    assert all((q["conversation_id"], t) in ids for q in questions(out) for t in q["evidence_turn_ids"])
