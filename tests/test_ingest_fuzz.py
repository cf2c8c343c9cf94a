"""Hypothesis fuzz of the whole ingest (issue 16): an archive drawn by the read-path fuzz
(tests/test_read_fuzz.py: valid chat and LoCoMo conversations mixed with random JSON shapes,
wrong types, deep nesting, bad bytes, duplicate ids, huge turns, gzip/zstd, non-JSON files) goes
through the CLI and the real Ray pipeline into a real store.

Invariants: rc 0; every turn the reader returned is a row of `turns`, and nothing else is; no
table holds a key twice; no segment is over the token cap; every conversation the reader
returned has its row. The reader-level fuzz accounts for the turns the reader could not keep.

Each example is a full Ray ingest, so CI runs 2; LYCHEE_INGEST_FUZZ_EXAMPLES raises it nightly.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings

from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.io.readers.files import list_input_files, read_file
from lychee_ray.store.reader import open_store

from .conftest import REPO
from .test_read_fuzz import archive

LOCAL = REPO / "configs" / "local.yaml"
TOKEN_CAP = 256
OVERRIDES = ["ray.progress_bars=false", f"segmenter.token_cap={TOKEN_CAP}", "read.max_turn_tokens=64"]
KEYS = {
    "conversations": ("conversation_id",),
    "turns": ("conversation_id", "turn_id"),
    "segments": ("conversation_id", "segment_id"),
    "records": ("conversation_id", "record_id"),
    "nodes": ("conversation_id", "node_id"),
    "record_nodes": ("conversation_id", "record_id", "node_id"),
    "record_links": ("conversation_id", "record_id", "other_record_id", "kind"),
    "build_stats": ("conversation_id",),
    "questions": ("conversation_id", "question_id"),
}


def fixed_hostile_file() -> bytes:
    """Written beside every drawn archive, so even CI's two examples meet each kind of bad input
    (a drawn archive may be a simple one): a duplicate id, a line nested 50,000 deep, a
    200K-character turn, bad UTF-8, a JSON value that is no object, a broken line."""
    def chat(cid: str, *texts: str) -> bytes:
        turns = [{"turn_id": f"t{i}", "role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(texts)]
        return json.dumps({"conversation_id": cid, "turns": turns}).encode()

    huge = " ".join(f"Sentence {i} tells of the long drive north to the lake house." for i in range(3_000))
    lines = [
        chat("hostile-a", "We moved to Lisbon in May.", "How is the new flat?", "Small but bright."),
        chat("hostile-a", "A second copy under the same id."),
        b"[" * 50_000 + b"]" * 50_000,
        chat("hostile-b", "Before the long one.", huge, "After the long one."),
        chat("hostile-c", "caf\u00e9 PLACEHOLDER").replace(b"PLACEHOLDER", b"\xff\xfe"),
        b"42",
        b'{"conversation_id": "cut", "turns": [',
    ]
    return b"\n".join(lines) + b"\n"


def expected_from_reader(root: Path) -> tuple[set[str], set[tuple[str, str]]]:
    """The conversation ids and (conversation, turn) pairs the reader returns for the archive,
    read here in-process with the same config and root as the job's read tasks."""
    cfg = load_config(LOCAL, OVERRIDES).read
    convs = [c for p in list_input_files(str(root)) for c in read_file(p, cfg, str(root))]
    return {c.conversation_id for c in convs}, {(c.conversation_id, t.turn_id) for c in convs for t in c.turns}


@settings(max_examples=int(os.environ.get("LYCHEE_INGEST_FUZZ_EXAMPLES", "2")), deadline=None, suppress_health_check=list(HealthCheck))
@given(archive())
def test_any_archive_ingests_with_rc_0_unique_keys_every_turn_stored_and_segments_under_the_cap(ray_local, arch):
    files, extras = arch
    with tempfile.TemporaryDirectory() as tmp:
        root, out = Path(tmp) / "archive", Path(tmp) / "store"
        root.mkdir()
        for name, data, _ in [*files, *[(n, d, None) for n, d in extras]]:
            (root / name).write_bytes(data)
        (root / "hostile.jsonl").write_bytes(fixed_hostile_file())
        want_convs, want_turns = expected_from_reader(root)

        rc = main(["ingest", "--config", str(LOCAL), "--input", str(root), "--out", str(out), *sum((["--set", o] for o in OVERRIDES), [])])
        assert rc == 0

        con = open_store(str(out)).con
        for table, key in KEYS.items():
            cols = ", ".join(key)
            dup = con.execute(f"select {cols}, count(*) from {table} group by {cols} having count(*) > 1 limit 3").fetchall()
            assert not dup, f"{table} holds keys twice: {dup}"
        stored_convs = {r[0] for r in con.execute("select conversation_id from conversations").fetchall()}
        assert want_convs <= stored_convs
        assert set(con.execute("select conversation_id, turn_id from turns").fetchall()) == want_turns
        assert {"hostile-a", "hostile-b", "hostile-c"} <= stored_convs
        kinds = {r[0] for r in con.execute("select kind from errors").fetchall()}
        assert {"duplicate_id", "too_deep", "bad_utf8", "turn_split"} <= kinds, kinds
        over = con.execute("select segment_id, n_tokens from segments where n_tokens > ?", [TOKEN_CAP]).fetchall()
        assert not over, f"segments over the cap of {TOKEN_CAP}: {over}"
