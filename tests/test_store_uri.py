"""Outputs go through pyarrow filesystems: a `file://` URI works for ingest's --out and for
reading the store back, the same code path an `s3://` store on a cluster takes."""

from __future__ import annotations

import pytest

from lychee_ray.config import load_config
from lychee_ray.evaluate import local_out_dir, run_evaluate
from lychee_ray.pipeline import run_ingest
from lychee_ray.store import StoreError, open_store

from benchmarks.short_archive import write_short_archive

from .conftest import LOCOMO_PATH, REPO, requires_shared_data


@requires_shared_data
def test_ingest_writes_to_a_file_uri(ray_local, tmp_path):
    archive = tmp_path / "synth_3.jsonl"
    expected = write_short_archive(LOCOMO_PATH, archive, n=3, seed=2, turns_per_session=4)
    uri = f"file://{tmp_path}/uri-store"
    cfg = load_config(str(REPO / "configs/local.yaml"), ["ray.progress_bars=false"])
    summary = run_ingest(cfg, str(archive), uri)
    assert summary.by_status == {"ok": 3}
    # The files landed at the URI's path (not in a folder literally named "file:").
    assert (tmp_path / "uri-store" / "manifest.json").is_file()
    assert not (REPO / "file:").exists()
    store = open_store(uri)
    turns = store.con.execute("select count(*) from turns").fetchall()[0][0]
    assert turns == expected["turns"] == 12
    # A rerun over the same URI resumes: everything is already complete.
    again = run_ingest(cfg, str(archive), uri)
    assert again.resumed == 3 and again.conversations == 0
    # Evaluate reads the store by its URI and takes a file:// URI as its output folder.
    asked = min(3, expected["questions"])
    assert asked > 0
    cfg_eval = cfg.with_overrides({"evaluate": {"max_questions": 3}})
    result = run_evaluate(cfg_eval, uri, f"file://{tmp_path}/eval")
    assert result.asked == asked
    assert len(list((tmp_path / "eval" / "answers").glob("part-*.parquet"))) >= 1
    assert (tmp_path / "eval" / "report.md").is_file()


def test_evaluate_output_uri_rules():
    assert local_out_dir("file:///data/eval") == "/data/eval"
    assert local_out_dir("out/eval") == "out/eval"
    with pytest.raises(StoreError, match="s3://bucket/eval"):
        local_out_dir("s3://bucket/eval")
