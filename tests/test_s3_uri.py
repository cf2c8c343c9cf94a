"""Ingest and evaluate against a real S3 API (moto's server on 127.0.0.1): the store, the answer
parts and the report all go through pyarrow's S3FileSystem, and evaluate resumes over S3.

URIs carry the endpoint in their query (``s3://bucket/x?endpoint_override=HOST:PORT&scheme=http``),
which pyarrow reads and the store's path helpers must keep out of every object key. The dummy
credentials are in the environment for this process and in the URI as well: the workers of the
session's Ray started before this module set the environment, and moto refuses their unsigned
writes (403).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lychee_ray.evaluate.job import run_evaluate
from lychee_ray.ingest.job import run_ingest

from .conftest import REPO
from .support.generated import generate, local_config
from .support.s3 import bucket_uri, moto_bucket

BUCKET = "lychee"
MAX_QUESTIONS = 4


@pytest.fixture(scope="module")
def s3():
    """(endpoint, S3FileSystem) of a fresh moto server with one bucket."""
    with moto_bucket(BUCKET) as server:
        yield server


def uri(endpoint: str, path: str) -> str:
    return bucket_uri(BUCKET, endpoint, path)


def names(fs: pafs.FileSystem, folder: str) -> set[str]:
    infos = fs.get_file_info(pafs.FileSelector(f"{BUCKET}/{folder}", allow_not_found=True))
    return {i.base_name for i in infos if i.type == pafs.FileType.File}


@pytest.fixture(scope="module")
def evaluated(s3, ray_local, tmp_path_factory):
    """A generated LoCoMo-format conversation of 2 sessions ingested into S3, then one evaluate into S3."""
    endpoint, _ = s3
    generated = generate(tmp_path_factory.mktemp("generated"), "locomo", conversations=1, sessions=2)
    assert len(generated.questions) >= MAX_QUESTIONS
    store = uri(endpoint, "store")
    summary = run_ingest(local_config(), str(generated.archive), store)
    assert summary.by_status == {"ok": 1}
    cfg = local_config(f"evaluate.max_questions={MAX_QUESTIONS}", "evaluate.questions_per_batch=2")
    out = uri(endpoint, "eval")
    return cfg, store, out, run_evaluate(cfg, store, out)


def test_evaluate_writes_answers_and_report_to_s3_and_resumes(s3, evaluated):
    _, fs = s3
    cfg, store, out, result = evaluated
    assert result.asked == MAX_QUESTIONS and result.skipped == 0
    parts = sorted(n for n in names(fs, "eval/answers") if n.startswith("part-"))
    assert len(parts) == 2  # 4 questions in batches of 2
    rows = pq.read_table(f"{BUCKET}/eval/answers", filesystem=fs).num_rows
    assert rows == result.asked
    top = names(fs, "eval")
    assert "report.md" in top and {"per_category.png", "recall_per_category.png"} <= top
    assert result.report_path == uri(s3[0], "eval/report.md")
    with fs.open_input_stream(f"{BUCKET}/eval/report.md") as src:
        report = src.read().decode()
    assert f"questions asked: {MAX_QUESTIONS} ({MAX_QUESTIONS} ok)" in result.headline
    assert f"{MAX_QUESTIONS} answered ok" in report
    f1, recall = re.search(r"F1 (\d\.\d{3}); evidence recall (\d\.\d{3})", result.headline).groups()
    overall = next(line for line in report.splitlines() if line.startswith("| overall"))
    assert f1 in overall and recall in overall
    # the store's own objects landed in the bucket too, without the query inside their keys
    assert "manifest.json" in names(fs, "store")
    assert not any("endpoint_override" in i.path for i in fs.get_file_info(pafs.FileSelector(BUCKET, recursive=True)))
    for cwd in {Path.cwd(), REPO}:
        assert not list(cwd.glob("s3:*")), f"a local folder named like the URI appeared in {cwd}"

    again = run_evaluate(cfg, store, out)
    assert (again.asked, again.skipped) == (0, MAX_QUESTIONS)
    assert sorted(n for n in names(fs, "eval/answers") if n.startswith("part-")) == parts


def test_resume_over_s3_removes_killed_run_debris(s3, evaluated):
    _, fs = s3
    cfg, store, out, _ = evaluated
    before = names(fs, "eval/answers")
    # what a killed writer leaves: the old-style temp name and write_atomic's own
    debris = {".tmp-0123456789abcdef-4242", ".part-0123456789abcdef.parquet.tmp-abcdef012345"}
    for name in debris:
        with fs.open_output_stream(f"{BUCKET}/eval/answers/{name}") as sink:
            sink.write(b"half a part")
    assert debris <= names(fs, "eval/answers")
    again = run_evaluate(cfg, store, out)
    assert again.asked == 0 and again.skipped == MAX_QUESTIONS
    assert names(fs, "eval/answers") == before
