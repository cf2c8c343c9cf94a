"""`--out` as a hostile or careless user gives it (issue 16).

- A folder that is not empty and is not a lychee-ray store is refused with one sentence and rc 2;
  `--force` writes into it, and even then nothing we did not write is deleted: look-alikes of
  our own files (`turns/part-….parquet`, a root dotfile with `.tmp-`) stay, on this run and the
  next. What a killed run of this store left is still cleaned (it carries the store's id).
- Every filesystem problem on the output (a file as the output, a file as a parent, a folder we
  cannot write) is one sentence and rc 2, never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lychee_ray.cli import main
from lychee_ray.config import load_config
from lychee_ray.io.fs import _tmp_path
from lychee_ray.store.manifest import MANIFEST
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, prepare_output, store_id_of

from .conftest import REPO

LOCAL = str(REPO / "configs" / "local.yaml")


def chat_input(tmp_path: Path) -> Path:
    inp = tmp_path / "in.jsonl"
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"Message {i} about gardening and tomatoes."} for i in range(4)]
    inp.write_text(json.dumps({"conversation_id": "c1", "turns": turns}) + "\n")
    return inp


def ingest(inp: Path, out, *flags: str) -> int:
    return main(["ingest", "--config", LOCAL, "--set", "ray.progress_bars=false", "--input", str(inp), "--out", str(out), *flags])


def one_sentence(capsys, *must_contain: str) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err.startswith("lychee-ray ingest: ") and err.endswith("."), err
    for text in must_contain:
        assert text in err, err
    return err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def plant_look_alikes(out: Path) -> dict[str, bytes]:
    """Files of someone else named like ours: a table part, temp debris at the root and in a table."""
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "turns").mkdir()
    pq.write_table(pa.table({"x": [1, 2]}), out / "turns" / "part-0123456789abcdef0123.parquet")
    (out / ".backup.tmp-0001").write_text("someone's temp file")
    (out / "records").mkdir()
    (out / "records" / ".part-abc.parquet.tmp-123").write_bytes(b"half a file, not ours")
    return snapshot(out)


# -------------------------------------------------------------------------- not a store: refused
def test_non_empty_folder_that_is_not_a_store_is_refused(tmp_path, capsys):
    out = tmp_path / "mine"
    before = plant_look_alikes(out)
    assert ingest(chat_input(tmp_path), out) == 2
    one_sentence(capsys, str(out), "is not empty and is not a lychee-ray store", "--force")
    assert snapshot(out) == before  # nothing written, nothing deleted


def test_force_writes_beside_foreign_files_and_deletes_none(tmp_path, capsys, ray_local):
    out = tmp_path / "mine"
    before = plant_look_alikes(out)
    assert ingest(chat_input(tmp_path), out, "--force") == 0, capsys.readouterr().err
    after = snapshot(out)
    assert {k: after.get(k) for k in before} == before
    with open_store(str(out)) as store:
        assert store.conversation_ids() == ["c1"]
        assert store.con.execute("select count(*) from turns").fetchone()[0] == 4
    # The folder is a store now: a rerun needs no --force, and its cleanup still spares them.
    assert ingest(chat_input(tmp_path), out) == 0, capsys.readouterr().err
    after = snapshot(out)
    assert {k: after.get(k) for k in before} == before


def test_cleanup_deletes_only_what_this_store_wrote(tmp_path):
    """A killed run's uncommitted part and temp files carry the store's id and are removed; the
    look-alikes that were there first do not, and stay."""
    cfg = load_config(LOCAL)
    out = tmp_path / "mine"
    before = plant_look_alikes(out)
    prepare_output(str(out), cfg, force=True)
    owner = store_id_of(*_local(out))
    assert owner
    writer = StoreWriter(str(out), cfg)
    row = {"conversation_id": "c9", "source_file": "x", "line": 1, "field": None, "kind": "bad_json", "message": "m."}
    killed = writer._write_table("errors", "00aa11bb22cc33dd44ee", [row])["path"]  # no commit follows
    own_tmp = Path(_tmp_path(str(out / "records" / "part-1.parquet"), owner))
    own_tmp.write_bytes(b"half")
    own_root_tmp = Path(_tmp_path(str(out / MANIFEST), owner))
    own_root_tmp.write_bytes(b"half")
    assert prepare_output(str(out), cfg) == set()
    after = snapshot(out)
    assert {k: after.get(k) for k in before} == before
    assert not (out / killed).exists() and not own_tmp.exists() and not own_root_tmp.exists()


def _local(out: Path):
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem(), str(out)


# -------------------------------------------------------------------- filesystem problems: rc 2
def read_only_output(tmp_path: Path) -> Path:
    """A folder we cannot write. As root, chmod blocks nothing, so use a path under /sys (a
    read-only pseudo filesystem); otherwise a folder with its write bit removed."""
    if os.geteuid() == 0:
        return Path("/sys/lychee-ray-test-out")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder / "store"


@pytest.mark.parametrize("case", ["output_is_a_file", "parent_is_a_file", "read_only"])
def test_filesystem_problems_on_the_output_are_one_sentence(tmp_path, capsys, case):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    out = {
        "output_is_a_file": a_file,
        "parent_is_a_file": a_file / "store",
        "read_only": read_only_output(tmp_path),
    }[case]
    try:
        assert ingest(chat_input(tmp_path), out) == 2
    finally:
        if case == "read_only" and os.geteuid() != 0:
            out.parent.chmod(0o755)
    err = one_sentence(capsys, str(out))
    expected = {"output_is_a_file": "is a file, not a folder", "parent_is_a_file": "is a file, not a folder",
                "read_only": "cannot write to"}[case]
    assert expected in err


def test_through_python_m_cli_an_output_that_is_a_file_is_rc_2(tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    cmd = [sys.executable, "-m", "lychee_ray.cli", "ingest", "--config", LOCAL, "--input", str(chat_input(tmp_path)), "--out", str(a_file)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(cmd, check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert err == f"lychee-ray ingest: {a_file} is a file, not a folder; give a folder as the output."
    assert a_file.read_text() == "not a folder"
