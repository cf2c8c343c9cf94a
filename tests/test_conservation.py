"""Nothing lost, said out loud (issue 13): the ingest summary ends with
`turns: N in = S stored + E recorded in errors + D in duplicate rows + P pending`, where N is what
the read stage saw and the rest is counted in the store (turns, errors and conversations tables,
this run's commits only). When the sides differ the run fails.

The end-to-end test ingests every bad-input fixture of tests/test_hostile_read.py (and the chat
format fixtures, whose system, tool and off-branch turns are skipped and counted) into one store
on a real local Ray, and checks the line against a read of the same files done here.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil

import pyarrow as pa

from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.ingest.summary import IngestSummary
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import DROPPED_TURN_SQL, is_dropped_turn, split_turns, turns_in

from .conftest import FIXTURES, REPO
from .test_hostile_read import DEEP, chat, locomo_sample, lturn, make_store_folder

LOCAL = REPO / "configs" / "local.yaml"
LINE = re.compile(r"turns: (?P<n_in>\d+) in(?: \((?P<split>\d+) split into (?P<parts>\d+) parts: (?P<rows>\d+) turn rows\))? (?P<sign>=|!=) "
                  r"(?P<stored>\d+) stored \+ (?P<errors>\d+) recorded in errors \+ (?P<dups>\d+) in duplicate rows \+ (?P<pending>\d+) pending")


def lines(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def hostile_archive(inp):
    """Every bad-input case of test_hostile_read.py in one folder, plus cross-file duplicates, an
    oversized turn and the format fixtures."""
    (inp / "sub").mkdir(parents=True)
    (inp / "dup.jsonl").write_text(lines(chat("c1", 4), chat("c2"), chat("c1", 6)))  # a second copy in one file
    (inp / "deep.jsonl").write_text(lines(chat("before"), DEEP, chat("after")))
    (inp / "deep.json").write_text("[" + ", ".join([json.dumps(chat("first")), DEEP, json.dumps(chat("third"))]) + "]")
    turned = chat("deep-turn", 3)
    turned["turns"][1] = "PLACEHOLDER"
    (inp / "deep_turn.jsonl").write_text(json.dumps(turned).replace('"PLACEHOLDER"', DEEP) + "\n")
    (inp / "locomo.json").write_text(json.dumps([locomo_sample(
        session_1=("4:27 pm on 2 April, 2024", [lturn(1, 1), "a turn that is a string", lturn(1, 3)]),
        session_2=("2:00 pm on 9 May, 2023", {"0": lturn(2, 1)}),
        session_3=("3:00 pm on 10 May, 2023", [lturn(3, 1), {"speaker": "Ann", "dia_id": "D3:2", "text": ["not", "text"]}, {"speaker": "Bob", "dia_id": "D3:3"}]),
    )]))
    # the same sample id again, from another file: a `duplicate` row
    (inp / "nodate.json").write_text(json.dumps([locomo_sample(session_1=("4:27 pm on 2 April, 2024", [lturn(1, 1)]), session_2=(None, [lturn(2, 1)]))]))
    (inp / "lme.json").write_text(json.dumps([{
        "question_id": "lm1", "question": "Where do I live?", "answer": 7, "question_type": "single-session-user",
        "question_date": "2024/03/14 (Thu) 08:30", "haystack_session_ids": ["s1", "s2", "s3"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/21 (Sun) 02:21", "not a date"],
        "haystack_sessions": [[{"role": "user", "content": "I live in Oslo.", "has_answer": True}, "a string turn"],
                              {"role": "user", "content": "a session that is a dict"}, [{"role": "assistant", "content": "Noted."}]],
    }]))
    (inp / "notes.txt").write_text("just some notes\n")
    (inp / "table.csv").write_text("a,b\n1,2\n")
    (inp / "sub" / "chat.conv").write_text(json.dumps(chat("odd-suffix")))
    (inp / "sub" / "packed.jsonl.gz").write_bytes(gzip.compress(lines(chat("gzipped")).encode()))
    (inp / "sub" / "packed").write_bytes(pa.Codec("zstd").compress(json.dumps([chat("zstd")]).encode(), asbytes=True))
    packed = gzip.compress(lines(*[chat(f"g{i}", 2) for i in range(300)]).encode())
    (inp / "cut.gz").write_bytes(packed[: len(packed) // 2])  # damaged: what came before it is read
    (inp / "pretty.jsonl").write_text(json.dumps([chat("p1"), chat("p2")], indent=2))
    (inp / "lines.json").write_text('{"conversation_id": "x", "turns": [\n' + lines(chat("l2"), chat("l3")))
    stamped = chat("t", 2)
    stamped["turns"][0]["timestamp"] = "the day after the party"
    (inp / "t.jsonl").write_text(lines(stamped))
    (inp / "empty.json").write_text("")
    (inp / "broken.jsonl").write_text(lines(chat("ok"), "{broken"))
    (inp / "u.jsonl").write_bytes(json.dumps(chat("u")).encode().replace(b"tomatoes", b"tomat\xffoes") + b"\n")
    (inp / "emptylist.jsonl").write_text("[]\n")
    (inp / "x1.jsonl").write_text(lines(chat("shared", 3)))
    (inp / "x2.jsonl").write_text(lines(chat("shared", 5)))
    long_turn = chat("long", 2)
    long_turn["turns"][0]["content"] = "A sentence about the weather in Bergen today. " * 200  # over read.max_turn_tokens
    (inp / "long.jsonl").write_text(lines(long_turn))
    for f in (FIXTURES / "formats").glob("*.json*"):
        shutil.copy(f, inp / f.name)
    make_store_folder(inp / "old-store")  # an earlier output inside the input is not input
    return inp


def test_the_conservation_line_holds_for_every_bad_input_fixture(ray_local, tmp_path, capsys):
    inp, out = hostile_archive(tmp_path / "in"), tmp_path / "store"
    rc = main(["ingest", "--config", str(LOCAL), "--input", str(inp), "--out", str(out), "--set", "ray.progress_bars=false"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    last = captured.out.strip().splitlines()[-1].strip()
    m = LINE.fullmatch(last)
    assert m and m["sign"] == "=", last
    n_in, stored, in_errors, in_duplicates, pending = (int(m[k]) for k in ("n_in", "stored", "errors", "dups", "pending"))
    assert int(m["split"]) == 1 and int(m["parts"]) > 2  # the one long turn: counted once, its parts apart
    assert int(m["rows"]) == n_in - 1 + int(m["parts"]) == stored + in_errors + in_duplicates + pending

    # N: the same files read here, one by one, with the job's reader settings
    read = load_config(LOCAL).read
    convs = [c for f in list_input_files(str(inp)) for c in read_file(f, read, root=str(inp))]
    assert n_in == sum(turns_in(c) for c in convs)
    assert in_errors == sum(is_dropped_turn(e) for c in convs for e in c.errors)
    # the store side, counted here
    con = open_store(str(out)).con
    assert stored == con.execute("select count(*) from turns").fetchone()[0]
    assert in_errors == con.execute(f"select count(*) from errors where {DROPPED_TURN_SQL}").fetchone()[0]
    assert in_duplicates == con.execute(
        "select sum(n_turns) from conversations where conversation_id in (select conversation_id from errors where kind = 'duplicate_id')"
    ).fetchone()[0]
    assert pending == 0
    # every bucket is exercised: turns skipped or unreadable, a copy in one file (6 turns), copies across files
    kinds = {k for (k,) in con.execute(f"select distinct kind from errors where {DROPPED_TURN_SQL}").fetchall()}
    assert {"bad_turn", "bad_text", "missing_field", "skipped_system", "skipped_tool", "off_branch"} <= kinds
    dups = dict(con.execute("select conversation_id, status from conversations where conversation_id in "
                            "(select conversation_id from errors where kind = 'duplicate_id')").fetchall())
    assert sorted(dups.values()) == ["duplicate", "duplicate", "duplicate"]  # in one file or across files: one status
    assert in_duplicates >= 6 + 3 + 2  # c1's second copy; the second of 'shared' (3 or 5); of 'lc' (2 or 3)
    assert con.execute("select count(*) from errors where kind = 'turn_split'").fetchone()[0] == 1


def test_a_split_turn_counts_once_and_its_parts_apart(tmp_path):
    """10 input turns, 2 of them far over read.max_turn_tokens: 10 in, not the rows they became."""
    conv = chat("long", 10)
    for k in (3, 7):
        conv["turns"][k]["content"] = "The ferry to the island left late because of the storm. " * 120
    path = tmp_path / "long.jsonl"
    path.write_text(lines(conv))
    (read,) = read_file(str(path), load_config(LOCAL).read_settings)
    n_split, n_parts = split_turns(read)
    assert n_split == 2 and n_parts == len(read.turns) - 8 > 4
    assert turns_in(read) == 10
    summary = IngestSummary(out_dir="store", turns_in=10, split_turns=n_split, split_parts=n_parts, segments=1,
                            turn_accounts={"stored": len(read.turns), "errors": 0, "pending": 0, "duplicate_id": 0})
    line = summary.conservation_line()
    assert line.startswith(f"turns: 10 in (2 split into {n_parts} parts: {len(read.turns)} turn rows) = {len(read.turns)} stored + ")
    assert LINE.fullmatch(line)["sign"] == "="
    assert [f for f in summary.assess(load_config(LOCAL)) if "turns" in f] == []


def summary_with(turns_in: int, **accounts) -> IngestSummary:
    acc = {"stored": 0, "errors": 0, "pending": 0, "duplicate_id": 0, "changed_history": 0, **accounts}
    return IngestSummary(out_dir="store", turns_in=turns_in, turn_accounts=acc, segments=10)


def test_turns_that_do_not_add_up_fail_the_run_in_one_sentence():
    cfg = load_config(LOCAL)
    ok = summary_with(12, stored=7, errors=2, duplicate_id=1, pending=2)
    assert ok.render().splitlines()[-1] == "  turns: 12 in = 7 stored + 2 recorded in errors + 1 in duplicate rows + 2 pending"
    assert [f for f in ok.assess(cfg) if "turns" in f] == []
    short = summary_with(12, stored=6, errors=2, duplicate_id=1, pending=2)
    assert short.render().splitlines()[-1] == "  turns: 12 in != 6 stored + 2 recorded in errors + 1 in duplicate rows + 2 pending"
    (failure,) = [f for f in short.assess(cfg) if "turns" in f]
    assert failure.startswith("turns do not add up: the read stage saw 12 (turn rows) but the store accounts for 11 (turns: 12 in != 6 stored")
    assert failure.endswith("the store in store is missing rows or holds extra ones.")
    changed = summary_with(5, stored=2, changed_history=3)
    assert changed.conservation_line() == "turns: 5 in = 2 stored + 0 recorded in errors + 0 in duplicate rows + 3 in changed-history rows + 0 pending"


def test_more_degraded_segments_than_the_limit_fail_the_run():
    cfg = load_config(LOCAL)
    at_limit = IngestSummary(out_dir="s", segments=10, degraded_segments=2)
    assert at_limit.assess(cfg) == []  # 20% is not more than 0.2
    over = IngestSummary(out_dir="s", segments=10, degraded_segments=3)
    (failure,) = over.assess(cfg)
    assert failure.startswith("3 of 10 segments (30%) fell back to rules records (degraded), more than ingest.max_degraded_fraction=0.2;")
    assert IngestSummary(out_dir="s", segments=10, degraded_segments=3).assess(load_config(LOCAL, ["ingest.max_degraded_fraction=0.5"])) == []

