"""Hypothesis fuzz of the read path (issue 16): archives that mix valid chat and LoCoMo
conversations with malformed ones (random JSON shapes, wrong types, deep nesting, bad UTF-8
bytes, duplicate ids, huge turns, gzip/zstd, files that are no JSON at all).

Invariants: the reader never raises; every file is read or named in an error row; one file never
gives one conversation id twice and error ids are unique across the archive; and every input turn
of a (partly) valid conversation is accounted for, returned as a turn or named in an error row.

LYCHEE_FUZZ_EXAMPLES raises the example count for a nightly run (default 25, CI-sized).
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.files import list_input_files, read_file

DEEP = b"[" * 3_000 + b"]" * 3_000  # past the parser's recursion limit
DEEP_MARK, BAD_BYTES_MARK = "__DEEP__", "__BADBYTES__"  # placeholders, replaced in the bytes
CFG = ReadConfig(max_turn_tokens=64)  # small, so "huge" turns split without costing much
# rows that say an input turn was not kept (the others note a problem with a kept turn)
LOSS_KINDS = {"bad_turn", "bad_field", "bad_text"}  # bad_text: text that is a number or an object


@dataclass
class Tracked:
    """A conversation whose turns must all be accounted for: its id, where it sits in its file
    (line or item), and each input turn as (field, turn id or None)."""

    cid: str
    where: int = 0
    turns: list[tuple[str, str | None]] = field(default_factory=list)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from(["conversation_id", "turns", "text", "qa", "x"]), kids, max_size=4),
    max_leaves=12,
)
good_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(str.strip)
junk_turn = st.one_of(
    st.text(max_size=8), st.integers(), st.lists(st.integers(), max_size=3), st.just({}),
    # A list of strings is content parts (read as their text): junk only when every part is blank.
    st.builds(lambda v: {"role": "user", "content": v}, st.one_of(st.integers(), st.none(), st.just("  "), st.lists(st.sampled_from(["", " ", "\t\n"]), max_size=2))),
    st.just(DEEP_MARK),
)  # fmt: skip


@st.composite
def turn(draw, tid: str, fld: str, text_key: str):
    """(the turn as written, whether it must survive as a turn)."""
    shape = draw(st.sampled_from(["good", "good", "good", "huge", "bad_bytes", "bad_time", "deep_text", "junk"]))
    if shape == "junk":
        return draw(junk_turn)
    text = {
        "good": draw(good_text),
        "huge": " ".join(f"Sentence {i} is about the long trip to the lake." for i in range(300)),
        "bad_bytes": f"caf{BAD_BYTES_MARK}e au lait",
        "bad_time": draw(good_text),
        "deep_text": DEEP_MARK,
    }[shape]
    t = {"speaker": "Ann", "role": draw(st.sampled_from(["user", "assistant"])), text_key: text}
    t["turn_id" if text_key == "content" else "dia_id"] = tid
    if shape == "bad_time":
        t["timestamp"] = draw(st.text(max_size=12) | st.integers())
    return t


@st.composite
def chat_conversation(draw, rec: int, cid: str):
    tracked, turns = Tracked(cid), []
    for i in range(draw(st.integers(0, 5))):
        turns.append(draw(turn(f"r{rec}-t{i}", f"turns[{i}]", "content")))
        tracked.turns.append((f"turns[{i}]", f"r{rec}-t{i}"))
    turns_value = turns if draw(st.integers(0, 9)) else {"not": turns}  # now and then not a list
    return {"conversation_id": cid, "turns": turns_value}, tracked


@st.composite
def locomo_conversation(draw, rec: int, cid: str):
    tracked = Tracked(cid)
    body = {"speaker_a": "Ann", "speaker_b": "Bob"}
    for n in range(1, draw(st.integers(1, 3)) + 1):
        session = []
        for k in range(draw(st.integers(0, 4))):
            tid, fld = f"r{rec}-D{n}:{k + 1}", f"conversation.session_{n}[{k}]"
            session.append(draw(turn(tid, fld, "text")))
            tracked.turns.append((fld, tid))
        shape = draw(st.sampled_from(["list", "list", "dict", "string", "no_date"]))
        body[f"session_{n}"] = {"dict": session} if shape == "dict" else "a session" if shape == "string" else session
        if shape == "string":
            tracked.turns = [t for t in tracked.turns if not t[0].startswith(f"conversation.session_{n}[")]
        if shape != "no_date":
            body[f"session_{n}_date_time"] = draw(st.sampled_from(["4:27 pm on 2 April, 2024", "someday", ""]))
    qa = draw(st.lists(st.one_of(st.just({"question": "Where?", "answer": "Oslo", "category": 4, "evidence": ["D1:1"]}), json_values), max_size=3))
    return {"sample_id": cid, "conversation": body, "qa": qa}, tracked


def encode(obj) -> bytes:
    data = json.dumps(obj).encode()
    return data.replace(json.dumps(DEEP_MARK).encode(), DEEP).replace(BAD_BYTES_MARK.encode(), b"\xff\xfe")


raw_junk = st.sampled_from([b"42", b'{"conversation_id": "cut", "turns": [', DEEP, b"\xff\xfe{}", b"[1, 2]", b'"just a string"'])


@st.composite
def input_file(draw, file_no: int):
    """(name, bytes, tracked conversations)."""
    layout = draw(st.sampled_from(["jsonl", "json", "jsonl.gz", "json.zst"]))
    items, tracked, cids = [], [], []
    for rec in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["chat", "chat", "locomo", "random", "junk"]))
        if kind in ("chat", "locomo"):
            reuse = cids and draw(st.integers(0, 4)) == 0  # a duplicate id in this file
            cid = draw(st.sampled_from(cids)) if reuse else f"f{file_no}-c{rec}"
            cids.append(cid)
            maker = chat_conversation if kind == "chat" else locomo_conversation
            obj, t = draw(maker(rec, cid))
            t.where = len(items) + 1
            tracked.append(t)
            items.append(encode(obj))
        elif kind == "random":
            items.append(json.dumps(draw(json_values)).encode())
        elif layout.startswith("jsonl"):
            items.append(draw(raw_junk))
        else:
            items.append(DEEP)  # a document must stay one document: its junk is a deep item
    data = b"\n".join(items) + b"\n" if layout.startswith("jsonl") else b"[" + b",\n".join(items) + b"]"
    if layout.endswith(".gz"):
        data = gzip.compress(data)
    elif layout.endswith(".zst"):
        data = pa.Codec("zstd").compress(data, asbytes=True)
    return f"file{file_no}.{layout}", data, tracked


@st.composite
def archive(draw):
    files = [draw(input_file(i)) for i in range(draw(st.integers(1, 3)))]
    extras = draw(st.lists(st.sampled_from([("notes.txt", b"plain notes\n"), ("blob.bin", bytes(range(256))), ("empty.json", b"")]), unique=True, max_size=2))
    return files, extras


# --------------------------------------------------------------------------------------------
# The invariants
# --------------------------------------------------------------------------------------------
def covers(row_field: str | None, turn_field: str) -> bool:
    """An error row about `row_field` speaks for the turn at `turn_field` (itself, a part of it,
    or the session or list that holds it)."""
    if not row_field:
        return False
    return turn_field == row_field or turn_field.startswith(row_field + "[") or row_field.startswith(turn_field + ".")


def accounted(t: Tracked, convs) -> list[str]:
    """The turns of `t` that are neither a returned turn nor named in an error row."""
    record_rows = [e for c in convs for e in c.errors if e["line"] == t.where and e["kind"] in ("duplicate_id", "reader_error")]
    if record_rows:
        return []
    own = [c for c in convs if c.conversation_id == t.cid]
    assert len(own) == 1, f"{t.cid}: {len(own)} conversations"
    ids = {turn.turn_id for turn in own[0].turns}
    loss_rows = [e for e in own[0].errors if e["kind"] in LOSS_KINDS or (e["kind"] == "missing_field" and (e["field"] or "").endswith(".text"))]
    missing = []
    for fld, tid in t.turns:
        kept = tid in ids or any(i.startswith(f"{tid}#") for i in ids)
        if not kept and not any(covers(e["field"], fld) for e in loss_rows):
            missing.append(fld)
    return missing


@settings(max_examples=int(os.environ.get("LYCHEE_FUZZ_EXAMPLES", "25")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(archive())
def test_no_input_raises_and_every_turn_is_accounted_for(arch):
    files, extras = arch
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name, data, _ in files:
            (root / name).write_bytes(data)
        for name, data in extras:
            (root / name).write_bytes(data)
        listed = list_input_files(str(root))
        assert sorted(Path(p).name for p in listed) == sorted([f[0] for f in files] + [e[0] for e in extras])
        read = {Path(p).name: list(read_file(p, CFG, str(root))) for p in listed}

    error_ids = [c.conversation_id for convs in read.values() for c in convs if c.status == "error"]
    assert len(error_ids) == len(set(error_ids)), "two error rows share an id"
    for name, convs in read.items():
        assert convs, f"{name} was neither read nor named"
        ids = [c.conversation_id for c in convs]
        assert len(ids) == len(set(ids)), f"{name} gave one conversation id twice"
        for row in (e for c in convs for e in c.errors):
            assert row["kind"] and row["message"] and Path(row["source_file"]).name == name
    for name, _, tracked in files:
        for t in tracked:
            assert not accounted(t, read[name]), f"{name}: {t.cid} lost turns {accounted(t, read[name])}"
