"""Inputs from any pyarrow filesystem URI, and large JSON Lines files read in byte ranges (issue 13).

S3 is moto's server on 127.0.0.1, as in tests/test_s3_uri.py: URIs carry the endpoint in their
query and the dummy credentials in their user info (the session's Ray workers started before this
module set the environment). An archive read from the bucket gives the store a read of the same
folder on disk gives, ids included: ids hash paths relative to the input root, never the URI.

A JSON Lines file over `read.split_bytes` is cut into ranges at line starts; each range is told
the number of its first line, so the conversations, turns and error rows (line numbers, ids,
anonymous ids, duplicates) are exactly those of a whole-file read: by Hypothesis over random
lines in this process, and through the ingest job's Ray read plan on a file with a broken line,
bad UTF-8, duplicate ids and turn rows on both sides of a cut.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.common import InputError
from lychee_ray.io.readers.files import iter_conversations, list_input_files
from lychee_ray.io.readers.plan import plan_parts
from lychee_ray.tables import MANIFEST, STORE_FORMAT

from .conftest import FIXTURES
from .support.generated import generate, local_config
from .support.s3 import bucket_uri, moto_bucket

BUCKET = "lychee"


@pytest.fixture(scope="module")
def s3():
    """(endpoint, S3FileSystem) of a fresh moto server with one bucket."""
    with moto_bucket(BUCKET) as server:
        yield server


def uri(endpoint: str, path: str) -> str:
    return bucket_uri(BUCKET, endpoint, path)


def upload(fs: pafs.FileSystem, folder: Path, prefix: str) -> None:
    for f in sorted(folder.rglob("*")):
        if f.is_file():
            with fs.open_output_stream(f"{BUCKET}/{prefix}/{f.relative_to(folder).as_posix()}") as sink:
                sink.write(f.read_bytes())


def chat(cid, n=2, text="hello"):
    return {"conversation_id": cid, "turns": [{"role": "user" if k % 2 == 0 else "assistant", "content": f"{text} {k}"} for k in range(n)]}


def turn(cid, k, day):
    return {"conversation_id": cid, "speaker": "Ann" if k % 2 else "Bo", "text": f"{cid} says {k}", "timestamp": f"2024-02-{day:02d}T09:{k:02d}:00"}


def jsonl(rows) -> str:
    return "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)


def mixed_folder(root: Path) -> Path:
    """Every input format at once: the hand-made chat-export fixtures, a generated LoCoMo file (one
    conversation of one session), a chat JSONL with a broken line and a duplicate id (large
    enough to be split when split_bytes is small), a conversation as turn rows over a JSONL and a
    Parquet file, and a gzip JSONL."""
    (root / "exports").mkdir(parents=True)
    for name in ("sharegpt.json", "openai_chat.jsonl", "chatgpt_conversations.json"):
        (root / "exports" / name).write_bytes((FIXTURES / "formats" / name).read_bytes())
    generated = generate(root.parent / f"{root.name}-generated", "locomo", conversations=1, sessions=1)
    shutil.copy(generated.archive / "locomo.json", root / "locomo.json")
    (root / "chats").mkdir()
    lines = [chat(f"c{i}", 2, f"chat number {i} says") for i in range(12)]
    lines.insert(5, '{"conversation_id": "broken", "turns": [')
    lines.append(chat("c3", 4, "a second copy of c3"))
    (root / "chats" / "day1.jsonl").write_text(jsonl(lines))
    (root / "turns").mkdir()
    (root / "turns" / "a.jsonl").write_text(jsonl([turn("tr", 2, 1), turn("tr", 0, 1)]))
    pq.write_table(pa.Table.from_pylist([turn("tr", 3, 2), turn("tr", 1, 1)]), root / "turns" / "b.parquet")
    (root / "packed.jsonl.gz").write_bytes(gzip.compress(jsonl([chat("gz", 2)]).encode()))
    return root


# --------------------------------------------------------------------------------------------
# Listing
# --------------------------------------------------------------------------------------------
def test_listing_a_bucket_keeps_the_query_and_skips_stores_and_the_output(s3, tmp_path):
    endpoint, fs = s3
    upload(fs, mixed_folder(tmp_path / "in"), "list/in")
    with fs.open_output_stream(f"{BUCKET}/list/in/old-store/{MANIFEST}") as sink:  # a store inside the input
        sink.write(json.dumps({"format": STORE_FORMAT}).encode())
    with fs.open_output_stream(f"{BUCKET}/list/in/old-store/conversations/part-00.parquet") as sink:
        sink.write(b"PAR1")
    with fs.open_output_stream(f"{BUCKET}/list/in/out/stray.json") as sink:  # the run's output, no manifest yet
        sink.write(b"{}")
    local = [Path(p).relative_to(tmp_path / "in").as_posix() for p in list_input_files(str(tmp_path / "in"))]
    files = list_input_files(uri(endpoint, "list/in"), exclude=uri(endpoint, "list/in/out"))
    assert files == sorted(files) and [uri(endpoint, f"list/in/{name}") for name in local] == files
    assert all(f.size and f.size > 0 for f in files)  # sizes come from the listing
    # a single object as the input
    (one,) = list_input_files(uri(endpoint, "list/in/locomo.json"))
    assert one == uri(endpoint, "list/in/locomo.json")


def test_a_missing_bucket_prefix_is_one_sentence_without_credentials(s3):
    endpoint, _ = s3
    with pytest.raises(InputError) as err:
        list_input_files(uri(endpoint, "nowhere/archive"))
    assert str(err.value) == f"input s3://{BUCKET}/nowhere/archive does not exist"


def test_reading_from_the_bucket_names_files_without_credentials_and_ids_as_on_disk(s3, tmp_path):
    endpoint, fs = s3
    root = mixed_folder(tmp_path / "in")
    upload(fs, root, "ids/in")
    on_disk = list(iter_conversations(list_input_files(str(root)), ReadConfig(), root=str(root)))
    remote = list(iter_conversations(list_input_files(uri(endpoint, "ids/in")), ReadConfig(), root=uri(endpoint, "ids/in")))
    assert [c.conversation_id for c in remote] == [c.conversation_id for c in on_disk]
    assert {"ok", "error"} <= {c.status for c in remote}
    for conv in remote:
        assert conv.source_file.startswith(f"s3://{BUCKET}/ids/in/"), conv.source_file
        for row in conv.errors:
            assert "testing:testing" not in row["message"] + row["source_file"] and "endpoint_override" not in row["message"]
    assert [c.conversation_id for c in remote if c.source == "turns"] == ["tr"]


# --------------------------------------------------------------------------------------------
# Ingest from S3 = ingest from disk
# --------------------------------------------------------------------------------------------
TABLES = {
    "conversations": "conversation_id, source, source_file, n_turns, n_sessions, n_exchanges, n_segments, n_records, status, error",
    "turns": "conversation_id, turn_id, turn_idx, exchange_idx, session_id, speaker, role, text, timestamp, segment_id",
    "segments": "conversation_id, segment_id, turn_ids, start_idx, end_idx, n_tokens, round(boundary_p, 4), boundary_reason",
    "records": "conversation_id, record_id, segment_id, type, text, entities, topics, time_start, source_turn_ids",
    "errors": "conversation_id, source_file, line, field, kind, message",
}


def store_rows(store: str, roots: tuple[str, str]) -> dict[str, list]:
    """Every table's rows (no vectors), sorted, with the input root written as <in>."""
    from lychee_ray.store.reader import open_store

    con = open_store(store).con
    out = {}
    for table, cols in TABLES.items():
        rows = con.execute(f"select {cols} from {table}").fetchall()
        out[table] = sorted(tuple(_rooted(v, roots) for v in r) for r in rows)
    return out


def _rooted(value, roots: tuple[str, str]):
    if isinstance(value, str):
        for root in roots:
            value = value.replace(root, "<in>")
    return value


def test_an_ingest_from_s3_gives_the_store_of_an_ingest_from_disk(s3, tmp_path, ray_local):
    from lychee_ray.ingest.job import run_ingest

    endpoint, fs = s3
    root = mixed_folder(tmp_path / "in")
    upload(fs, root, "ingest/in")
    cfg = local_config("read.split_bytes=600")  # the chat JSONL is read in ranges, through S3 too
    assert sum(p.is_range for p in plan_parts(list_input_files(uri(endpoint, "ingest/in")), None, 600)) >= 2
    on_disk = run_ingest(cfg, str(root), str(tmp_path / "store"))
    remote = run_ingest(cfg, uri(endpoint, "ingest/in"), uri(endpoint, "ingest/store"))
    assert remote.by_status == on_disk.by_status and remote.turns == on_disk.turns
    assert {"ok", "error"} <= set(remote.by_status), remote.by_status
    roots = (str(root), f"s3://{BUCKET}/ingest/in")
    local_rows, remote_rows = store_rows(str(tmp_path / "store"), roots), store_rows(uri(endpoint, "ingest/store"), roots)
    for table in TABLES:
        assert remote_rows[table] == local_rows[table], table
    (locomo,) = json.loads((root / "locomo.json").read_text())
    assert {"tr", "gz", "c3", locomo["sample_id"]} <= {r[0] for r in remote_rows["conversations"]}
    # the second c3 (line 14 of a file read in ranges) is named at its line, against line 4
    (dup,) = [r for r in remote_rows["errors"] if r[4] == "duplicate_id"]
    assert dup[1:4] == ("<in>/chats/day1.jsonl", 14, "conversation_id") and "already appeared at line 4" in dup[5]
    assert not any("testing:testing" in str(v) or "endpoint_override" in str(v) for rows in remote_rows.values() for r in rows for v in r)


# --------------------------------------------------------------------------------------------
# Byte ranges
# --------------------------------------------------------------------------------------------
def snapshot(conv) -> tuple:
    """Everything a read gives about one conversation."""
    return (
        conv.conversation_id, conv.status, conv.source, conv.source_file, conv.error, conv.n_input_turns,
        [(t.turn_id, t.turn_idx, t.session_id, t.speaker, t.role, t.text, t.timestamp) for t in conv.turns],
        [(q.question_id, q.question) for q in conv.questions], conv.exchanges,
        sorted(tuple(sorted((k, str(v)) for k, v in row.items())) for row in conv.errors),
    )  # fmt: skip


def read_local(path: Path, split_bytes: int) -> list[tuple]:
    return [snapshot(c) for c in iter_conversations(list_input_files(str(path)), ReadConfig(split_bytes=split_bytes), root=str(path.parent))]


BAD = "@@BAD@@"  # replaced by an invalid UTF-8 byte in the file
ids = st.sampled_from(["a", "b", "c", "d"])  # few ids: duplicates and shared turn-row ids are common
texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)


def dumps(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)  # raw UTF-8, U+2028 included: lines are cut at \n only


lines = st.one_of(
    st.builds(lambda cid, ts: dumps({"conversation_id": cid, "turns": [{"role": "user", "content": t} for t in ts]}), ids, st.lists(texts, min_size=1, max_size=3)),
    st.builds(lambda ts: dumps({"messages": [{"role": "user", "content": t} for t in ts]}), st.lists(texts, min_size=1, max_size=2)),  # anonymous
    st.builds(lambda cid, t, ts: dumps({"conversation_id": cid, "speaker": "Ann", "text": t, "timestamp": ts}), ids, texts, st.sampled_from([None, "2024-03-01T10:00:00", "2024-03-02"])),
    st.builds(lambda t: dumps({"speaker": "Bo", "text": t}), texts),  # a turn row with no id: unknown format
    st.builds(lambda t: dumps({"conversation_id": "u", "turns": [{"role": "user", "content": f"caf{BAD}{t}"}]}), texts),
    texts.map(lambda t: "{" + t),  # broken
    st.sampled_from(["", "   ", "[1, 2]", "42"]),
)  # fmt: skip


@settings(max_examples=int(os.environ.get("LYCHEE_FUZZ_EXAMPLES", "40")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(first=st.builds(lambda t: dumps(chat("first", 1, t)), texts), rest=st.lists(lines, min_size=1, max_size=40), split_bytes=st.integers(16, 400))
def test_a_split_read_gives_what_the_whole_read_gives(first, rest, split_bytes):
    data = jsonl([first, *rest]).encode().replace(BAD.encode(), b"\xff")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "archive.jsonl"
        path.write_bytes(data)
        assert read_local(path, split_bytes) == read_local(path, 0)


def tricky_archive(path: Path) -> Path:
    """Duplicate ids within and across ranges, a broken line, bad UTF-8, an anonymous chat, a
    conversation of turn rows spread over the whole file, a byte-order mark."""
    rows = []
    for i in range(40):
        rows.append(chat(f"c{i % 30}", 2, f"line {i}"))  # c0..c9 come back 60 lines later
        rows.append(turn("spread", i % 60, 1 + i // 20))
    rows.insert(17, '{"conversation_id": "broken", "turns": [{"role": "user"')
    rows.insert(33, {"messages": [{"role": "user", "content": "no id here"}, {"role": "assistant", "content": "none"}]})
    rows.insert(50, "")
    data = ("\ufeff" + jsonl(rows)).encode().replace(b"line 9 0", b"line \xff9 0")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_the_ray_read_plan_over_ranges_gives_the_whole_read(tmp_path, ray_local):
    from lychee_ray.ingest.read import read_dataset

    path = tricky_archive(tmp_path / "in" / "tricky.jsonl")
    split = path.stat().st_size // 5
    cfg = local_config(f"read.split_bytes={split}")
    parts = plan_parts(list_input_files(str(path.parent)), str(path.parent), split)
    assert len(parts) >= 4 and [p.first_line for p in parts][0] == 1
    whole = read_local(path, 0)
    statuses = [s[1] for s in whole]
    assert statuses.count("error") >= 1 and statuses.count("duplicate") >= 10  # the broken line; ten same-file duplicates
    assert any(s[0] == "spread" and len(s[6]) == 40 for s in whole)
    assert any(r for s in whole for r in s[9] if ("kind", "bad_utf8") in r)
    ds = read_dataset(cfg, list_input_files(str(path.parent)), {}, str(path.parent))
    remote = sorted(snapshot(pickle.loads(r["state"])) for r in ds.iter_rows())
    assert remote == sorted(whole)


def test_documents_compressed_files_and_short_files_are_one_part(tmp_path):
    many = [chat(f"c{i}", 3) for i in range(30)]
    (tmp_path / "pretty.json").write_text(json.dumps(many, indent=2))
    (tmp_path / "oneline.json").write_text(json.dumps(many))  # one document on one line
    (tmp_path / "one_object.jsonl").write_text(json.dumps(many[0]) + "\n\n\n")
    (tmp_path / "packed.jsonl.gz").write_bytes(gzip.compress(jsonl(many).encode()))
    (tmp_path / "lines.jsonl").write_text(jsonl(many))
    (tmp_path / "small.jsonl").write_text(jsonl(many[:1]))
    parts = plan_parts(list_input_files(str(tmp_path)), str(tmp_path), 200)
    counts = {Path(p.path).name: 0 for p in parts}
    for p in parts:
        counts[Path(p.path).name] += 1
    assert counts.pop("lines.jsonl") >= 5 and set(counts.values()) == {1}
    ranges = [p for p in parts if p.is_range]
    assert ranges[0].start == 0 and all(a.end == b.start for a, b in zip(ranges, ranges[1:]))
    assert ranges[-1].end == (tmp_path / "lines.jsonl").stat().st_size
