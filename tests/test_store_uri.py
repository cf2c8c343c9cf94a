"""Outputs go through pyarrow filesystems: a `file://` URI works for ingest's --out, for
reading the store back and for evaluate's --out, the same code path an `s3://` URI on a cluster
takes (tests/test_s3_uri.py runs it against an S3 server)."""

from __future__ import annotations

import pyarrow.fs as pafs

from lychee_ray.config import load_config
from lychee_ray.evaluate.job import run_evaluate
from lychee_ray.ingest.job import run_ingest
from lychee_ray.io.fs import child_uri, join_path, resolve_uri
from lychee_ray.store.reader import open_store

from .conftest import REPO
from .support.generated import generate


def test_ingest_writes_to_a_file_uri(ray_local, tmp_path):
    generated = generate(tmp_path / "generated", "locomo", conversations=3, sessions=1, turns_per_session=4)
    archive = generated.archive
    uri = f"file://{tmp_path}/uri-store"
    cfg = load_config(str(REPO / "configs/local.yaml"), ["ray.progress_bars=false"])
    summary = run_ingest(cfg, str(archive), uri)
    assert summary.by_status == {"ok": 3}
    # The files landed at the URI's path (not in a folder literally named "file:").
    assert (tmp_path / "uri-store" / "manifest.json").is_file()
    assert not (REPO / "file:").exists()
    store = open_store(uri)
    turns = store.con.execute("select count(*) from turns").fetchall()[0][0]
    assert turns == sum(c["turns"] for c in generated.labels["conversations"]) == 12
    # A rerun over the same URI resumes: everything is already complete.
    again = run_ingest(cfg, str(archive), uri)
    assert again.resumed == 3 and again.conversations == 0
    # Evaluate reads the store by its URI and takes a file:// URI as its output folder.
    asked = min(3, len(generated.questions))
    assert asked > 0
    cfg_eval = cfg.with_overrides({"evaluate": {"max_questions": 3}})
    result = run_evaluate(cfg_eval, uri, f"file://{tmp_path}/eval")
    assert result.asked == asked
    assert len(list((tmp_path / "eval" / "answers").glob("part-*.parquet"))) >= 1
    assert (tmp_path / "eval" / "report.md").is_file()
    assert (tmp_path / "eval" / "per_category.png").is_file()
    assert result.report_path == f"file://{tmp_path}/eval/report.md"
    assert not (REPO / "file:").exists()


def test_uri_query_stays_out_of_paths_and_child_uris_keep_it():
    uri = "s3://bucket/eval/?endpoint_override=127.0.0.1:9000&scheme=http"
    fs, base = resolve_uri(uri)  # no request is made: the endpoint needs no region lookup
    assert isinstance(fs, pafs.S3FileSystem)
    assert join_path(base, "answers") == "bucket/eval/answers"
    assert child_uri(uri, "report.md") == "s3://bucket/eval/report.md?endpoint_override=127.0.0.1:9000&scheme=http"
    assert child_uri("file:///data/eval", "report.md") == "file:///data/eval/report.md"
    assert child_uri("out/eval", "report.md") == "out/eval/report.md"
