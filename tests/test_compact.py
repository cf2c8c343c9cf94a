"""`lychee-ray compact` (issue 31): a store of many small commits rewritten into a few large parts
shows exactly the same rows, the old commits and parts are gone, and a compaction killed
half-way leaves a store that reads the same and finishes on a rerun."""

from __future__ import annotations

import copy
import hashlib

import pytest

from lychee_ray.cli import main
from lychee_ray.store import compact as compact_mod
from lychee_ray.store.compact import compact_store, conversation_groups
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.tables import INGEST_TABLES

from .support.small_store import make_cfg, make_conv

N = 12


def rows_digest(out: str) -> dict[str, tuple[int, str]]:
    """Every visible row of every table, sorted: what a reader sees."""
    with open_store(out, make_cfg()) as store:
        out_rows = {}
        for t in INGEST_TABLES:
            rows = sorted(repr(r) for r in store.con.execute(f"SELECT * FROM {t}").fetchall())
            out_rows[t] = (len(rows), hashlib.sha256("\n".join(rows).encode()).hexdigest())
        return out_rows


@pytest.fixture()
def many_commits(tmp_path):
    """N conversations, two a commit, then c03 redone by a later commit (its old rows hidden in
    the part it shares with c02)."""
    cfg, out = make_cfg(), str(tmp_path / "store")
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    convs = {f"c{i:02d}": make_conv(f"c{i:02d}", i) for i in range(N)}
    pairs = list(convs.values())
    for i in range(0, N, 2):
        writer.write_batch(pairs[i : i + 2])
    redo = copy.deepcopy(convs["c03"])
    redo.status = "degraded"
    writer.write_batch([redo])
    return out, cfg


def parts(out: str) -> dict[str, int]:
    from pathlib import Path

    return {t: len(list((Path(out) / t).glob("part-*.parquet"))) for t in INGEST_TABLES if (Path(out) / t).exists()}


def test_groups_hold_about_the_turns_asked_in_id_order():
    assert conversation_groups([("b", 5), ("a", 5), ("d", 50), ("c", 5)], 12, 10) == [["a", "b"], ["c"], ["d"]]
    assert conversation_groups([(f"x{i}", 1) for i in range(5)], 100, 2) == [["x0", "x1"], ["x2", "x3"], ["x4"]]


def test_compaction_keeps_every_visible_row_in_a_few_parts(many_commits):
    out, cfg = many_commits
    before = rows_digest(out)
    assert before["records"][0] == N * 8  # c03's first copy is hidden by its redo
    with open_store(out, cfg) as store:
        assert store.con.execute("SELECT status FROM conversations WHERE conversation_id = 'c03'").fetchall() == [("degraded",)]
    assert parts(out)["turns"] == N // 2 + 1
    result = compact_store(out, cfg, turns_per_file=12 * 5)  # 5 conversations of 12 turns a part
    assert rows_digest(out) == before
    assert (result.commits_before, result.commits_after) == (N // 2 + 1, 3)
    assert parts(out)["turns"] == 3 and parts(out)["records"] == 3
    assert result.conversations == N
    again = compact_store(out, cfg, turns_per_file=12 * 5)  # nothing to gain: the same rows again
    assert rows_digest(out) == before and again.commits_after == 3


def test_a_compaction_killed_half_way_reads_the_same_and_finishes_on_a_rerun(many_commits, monkeypatch):
    out, cfg = many_commits
    before = rows_digest(out)
    real = StoreWriter.write_tables
    calls = []

    def dies_on_the_second(self, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(compact_mod.StoreWriter, "write_tables", dies_on_the_second)
    with pytest.raises(KeyboardInterrupt):
        compact_store(out, cfg, turns_per_file=12 * 5)
    assert rows_digest(out) == before  # one group committed, the old commits still there
    monkeypatch.setattr(compact_mod.StoreWriter, "write_tables", real)
    compact_store(out, cfg, turns_per_file=12 * 5)
    assert rows_digest(out) == before and parts(out)["turns"] == 3


def test_the_cli_compacts(many_commits, tmp_path, capsys):
    out, _ = many_commits
    before = rows_digest(out)
    config = tmp_path / "c.yaml"
    config.write_text("embedding: {model: test-model, dim: 16}\nstore: {row_group_rows: 8}\n")
    assert main(["compact", "--config", str(config), "--store", out, "--turns-per-file", "1000"]) == 0
    assert capsys.readouterr().out.startswith(f"compacted {N} conversations: {N // 2 + 1} commits / ")
    assert rows_digest(out) == before and parts(out)["turns"] == 1
