"""Turn-level rows grouped across every file and byte range of the input (issue 13).

A conversation whose turns are spread over several turn-level files (one per day, mixed JSONL,
JSON and Parquet) is one conversation with every turn, ordered by timestamp, then turn_idx, then
file and line, through the local read (`iter_conversations`) and through the ingest job's Ray
read plan alike; so are the turn rows of one conversation that a large JSONL file's byte ranges
split between two read tasks.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.files import iter_conversations, list_input_files
from lychee_ray.io.readers.plan import plan_parts

from .support.generated import local_config


def row(cid, k, day, **extra):
    """Turn k of conversation `cid`, said on day `day` of January 2024 at 10:00 + k minutes."""
    return {"conversation_id": cid, "speaker": "Ann" if k % 2 else "Bo", "text": f"{cid} turn {k}",
            "timestamp": f"2024-01-{day:02d}T10:{k % 60:02d}:00", **extra}  # fmt: skip


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def three_day_archive(root: Path) -> Path:
    """Conversation x over three files of three kinds, each file's rows out of order; y in one
    file; z (no timestamps, turn_idx only) over two files."""
    untimed = {"timestamp": None}
    write_jsonl(root / "day1.jsonl", [row("x", 2, 1), row("y", 1, 1), row("x", 1, 1), row("z", 3, 1, turn_idx=3) | untimed])
    (root / "day2.json").write_text(json.dumps([row("x", 4, 2), row("x", 3, 2), row("z", 1, 2, turn_idx=1) | untimed]))
    # z first: from_pylist takes its columns from the first row
    pq.write_table(pa.Table.from_pylist([row("z", 2, 3, turn_idx=2) | untimed, row("x", 6, 3), row("x", 5, 3)]), root / "day3.parquet")
    return root


def ray_read(cfg, root: Path) -> list:
    """Every conversation the ingest job's read stage gives for `root` (before embedding)."""
    from lychee_ray.ingest.read import read_dataset

    return [pickle.loads(r["state"]) for r in read_dataset(cfg, list_input_files(str(root)), {}, str(root)).iter_rows()]


def by_id(convs) -> dict:
    convs = list(convs)
    ids = [c.conversation_id for c in convs]
    assert len(ids) == len(set(ids)), ids
    return {c.conversation_id: c for c in convs}


def check_three_days(convs) -> None:
    got = by_id(convs)
    assert set(got) == {"x", "y", "z"} and all(c.status == "ok" for c in got.values())
    x = got["x"]
    assert [t.text for t in x.turns] == [f"x turn {k}" for k in range(1, 7)]  # every turn, in time order
    assert [t.timestamp for t in x.turns] == sorted(t.timestamp for t in x.turns)
    assert x.source == "turns" and Path(x.source_file).name == "day1.jsonl"  # where its first row is
    # z's rows have no time: turn_idx orders them, across the three files
    assert [t.text for t in got["z"].turns] == ["z turn 1", "z turn 2", "z turn 3"]
    assert not any(c.status == "duplicate" for c in convs)


def test_a_conversation_split_across_three_turn_files_is_one_conversation(tmp_path):
    root = three_day_archive(tmp_path / "in")
    convs = list(iter_conversations(list_input_files(str(root)), ReadConfig(), root=str(root)))
    check_three_days(convs)
    x = by_id(convs)["x"]
    assert [t.turn_id for t in x.turns] == [f"session_1:{k}" for k in range(1, 7)]


def test_the_ray_read_plan_groups_the_three_files_the_same_way(tmp_path, ray_local):
    root = three_day_archive(tmp_path / "in")
    local = by_id(iter_conversations(list_input_files(str(root)), ReadConfig(), root=str(root)))
    remote = by_id(ray_read(local_config(), root))
    check_three_days(remote.values())
    assert {cid: [(t.turn_id, t.text, t.timestamp) for t in c.turns] for cid, c in remote.items()} == {
        cid: [(t.turn_id, t.text, t.timestamp) for t in c.turns] for cid, c in local.items()
    }


def test_a_turn_without_time_orders_by_turn_idx_then_place(tmp_path):
    """A key orders only when every row of the conversation has it: one row without a time keeps
    its place instead of jumping to an end."""
    write_jsonl(tmp_path / "a.jsonl", [row("m", 1, 5), {"conversation_id": "m", "speaker": "Ann", "text": "untimed"}, row("m", 0, 5)])
    write_jsonl(tmp_path / "b.jsonl", [row("m", 3, 4)])
    (m,) = iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path))
    assert [t.text for t in m.turns] == ["m turn 1", "untimed", "m turn 0", "m turn 3"]  # file, then line
    assert [e["kind"] for e in m.errors] == []


def test_an_offset_and_a_naive_time_compare_in_utc(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [row("t", 1, 1) | {"timestamp": "2024-01-01T12:00:00+02:00"}, row("t", 2, 1) | {"timestamp": "2024-01-01T11:00:00"}])
    (t,) = iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path))
    assert [x.text for x in t.turns] == ["t turn 1", "t turn 2"]  # 10:00 UTC before 11:00


def test_anonymous_turn_rows_are_one_conversation_per_file(tmp_path):
    """Rows with no conversation_id cannot be matched across files: one conversation per file,
    with an id that differs between the files."""
    for name in ("a", "b"):
        write_jsonl(tmp_path / name / "rows.jsonl", [{"speaker": "Ann", "text": "hello", "conversation_id": None}, {"speaker": "Bo", "text": "hi", "conversation_id": None}])
    convs = list(iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path)))
    assert len(convs) == 2 and all(len(c.turns) == 2 for c in convs)
    assert len({c.conversation_id for c in convs}) == 2 and all(c.conversation_id.startswith("anon-") for c in convs)


def test_a_conversation_object_is_kept_over_turn_rows_of_its_id(tmp_path):
    write_jsonl(tmp_path / "a.jsonl", [{"conversation_id": "k", "turns": [{"role": "user", "content": "the object"}]}, row("k", 1, 1)])
    write_jsonl(tmp_path / "b.jsonl", [row("k", 2, 1)])
    convs = by_id(iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path)))
    assert [t.text for t in convs["k"].turns] == ["the object"]
    (dup,) = [c for c in convs.values() if c.conversation_id != "k"]
    # the rows' first file holds the object: a duplicate row naming both lines, its 2 turns counted
    assert dup.status == "duplicate" and dup.n_input_turns == 2
    (err,) = [e for e in dup.errors if e["kind"] == "duplicate_id"]
    assert err["line"] == 2 and "already appeared at line 1 of this file" in err["message"]


def test_turn_rows_of_one_conversation_across_two_byte_ranges_are_one_conversation(tmp_path, ray_local):
    rows = [row("long", k, 1 + k // 60) for k in range(120)] + [row("short", 0, 1)]
    path = write_jsonl(tmp_path / "in" / "turns.jsonl", rows[::2] + rows[1::2])  # odd turns in the second half
    cfg = local_config(f"read.split_bytes={path.stat().st_size // 2}")
    assert [p.is_range for p in plan_parts(list_input_files(str(path)), str(path), cfg.read.split_bytes)] == [True, True]
    for convs in (ray_read(cfg, path), list(iter_conversations([str(path)], cfg.read, root=str(path)))):
        got = by_id(convs)
        assert set(got) == {"long", "short"}
        assert [t.text for t in got["long"].turns] == [f"long turn {k}" for k in range(120)]
