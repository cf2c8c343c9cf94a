"""`ray job submit` of the ingest and evaluate jobs against real `ray start` clusters on 127.0.0.1.

Issue 2: `jobs/ingest.py` submitted to a single `ray start --head`. Issue 6: a second node joins
with `ray start --address` and resources of its own, then `jobs/ingest.py` and `jobs/evaluate.py`
run over a generated archive of 200 short conversations (tests/support/generated.py: chit-chat,
one session of 6 turns each) with the rules backend, and every table's row count is checked
against the generator's labels. The cluster uses free ports and its own temp
dir, and only its own processes are stopped (tests/support/ray_cluster.py), because other Ray
instances may share the machine.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

from lychee_ray.store.reader import open_store

from .conftest import REPO
from .support.generated import generate
from .support.ray_cluster import LocalRayCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1800)]

# The job config: the offline default. Inside a Ray job RAY_ADDRESS is set, so its
# `ray.address: null` joins the cluster the job was submitted to (pipeline.init_ray).
JOB_CONFIG = ["--config", "configs/local.yaml", "--set", "ray.progress_bars=false"]
WORKER_RESOURCE = "lychee_worker_b"


@pytest.fixture(scope="module")
def cluster():
    c = LocalRayCluster()
    try:
        c.start_head(num_cpus=2)
        yield c
    finally:
        c.stop()
        assert not c.processes(), "processes of the test cluster survived stop()"


@pytest.fixture(scope="module")
def two_nodes(cluster):
    if not any(WORKER_RESOURCE in n["Resources"] for n in cluster.alive_nodes()):
        cluster.add_node(num_cpus=2, resources={WORKER_RESOURCE: 1})
    return cluster


def counts(store_dir: str) -> dict[str, int]:
    store = open_store(store_dir)
    tables = ("conversations", "turns", "segments", "records", "nodes", "record_nodes", "build_stats", "questions")
    return {t: store.con.execute(f"select count(*) from {t}").fetchall()[0][0] for t in tables}  # fixed names


def short_archive(out: Path, n: int) -> tuple[Path, dict[str, int]]:
    """n generated chit-chat conversations of one 6-turn session (LoCoMo's format, questions
    inside), and the counts a store built from it must hold."""
    generated = generate(out, "locomo", conversations=n, sessions=1, turns_per_session=6, style="chitchat")
    turns = sum(c["turns"] for c in generated.labels["conversations"])
    return generated.archive, {"conversations": n, "turns": turns, "questions": len(generated.questions)}


def summary_line(stdout: str, label: str) -> str:
    return next(line for line in stdout.splitlines() if line.strip().startswith(label))


def test_job_runs_the_uploaded_working_dir(cluster):
    """The job's python is the cluster's venv, and lychee_ray is imported from the uploaded
    working dir (Ray puts it first on PYTHONPATH), not from the checkout it was uploaded from."""
    code = "import sys, lychee_ray; print('LYCHEE_AT', lychee_ray.__file__); print('PYTHON_AT', sys.prefix)"
    out = cluster.submit(["python", "-c", code], working_dir=str(REPO), timeout=300).stdout
    imported = re.search(r"LYCHEE_AT (\S+)", out).group(1)
    assert cluster.root in imported and "_ray_pkg_" in imported, imported
    assert re.search(r"PYTHON_AT (\S+)", out).group(1) == str(REPO / ".venv")


def test_ingest_job_on_a_single_head_node(cluster, tmp_path):
    """Issue 2: `ray job submit -- python jobs/ingest.py` against one `ray start --head`."""
    archive, expected = short_archive(tmp_path / "generated", 20)
    store = tmp_path / "store"
    out = cluster.submit(["python", "jobs/ingest.py", *JOB_CONFIG, "--input", str(archive), "--out", str(store)],
                         working_dir=str(REPO)).stdout
    assert "conversations written: 20 (ok=20)" in summary_line(out, "files:")
    got = counts(str(store))
    assert got["conversations"] == 20 and got["build_stats"] == 20
    assert got["turns"] == expected["turns"]
    assert got["questions"] == expected["questions"]


def test_two_node_ingest_then_evaluate(two_nodes, tmp_path):
    """Issue 6: 200 conversations through ingest, then evaluate, on a two-node cluster."""
    cluster = two_nodes
    nodes = cluster.alive_nodes()
    assert len(nodes) == 2 and sum(WORKER_RESOURCE in n["Resources"] for n in nodes) == 1

    archive, expected = short_archive(tmp_path / "generated", 200)
    store, eval_out = tmp_path / "store", tmp_path / "eval"
    # Two embedding actors (one CPU each) and the other stages cannot all fit on one 2-CPU node,
    # so the pipeline has to use both nodes.
    ingest = cluster.submit(
        ["python", "jobs/ingest.py", *JOB_CONFIG, "--set", "embedding.num_actors=2", "--set", "embedding.num_threads=1",
         "--input", str(archive), "--out", str(store)],
        working_dir=str(REPO),
    ).stdout
    assert "conversations written: 200 (ok=200)" in summary_line(ingest, "files:")
    max_questions = 40
    evaluate = cluster.submit(
        ["python", "jobs/evaluate.py", *JOB_CONFIG, "--set", f"evaluate.max_questions={max_questions}",
         "--store", str(store), "--out", str(eval_out)],
        working_dir=str(REPO),
    ).stdout
    assert f"questions asked now: {max_questions}" in evaluate

    got = counts(str(store))
    assert got["conversations"] == expected["conversations"] == 200
    assert got["turns"] == expected["turns"]
    assert got["questions"] == expected["questions"]
    assert got["build_stats"] == 200
    assert got["records"] > 0 and got["nodes"] > 0 and got["record_nodes"] >= got["records"]
    check_store_consistency(str(store))
    check_answers(eval_out, max_questions)
    placed = actor_nodes(cluster, ingest)
    assert placed >= {n["NodeID"] for n in nodes}, f"the ingest job's actors ran on {placed} only"


def check_store_consistency(store_dir: str) -> None:
    """Counts that only hold if no row was lost or duplicated between the tables."""
    con = open_store(store_dir).con
    one = lambda sql: con.execute(sql).fetchall()[0]  # noqa: E731
    # Every turn lies in exactly one segment, and the conversation rows agree with the tables.
    assert one("select count(*), count(distinct conversation_id || '/' || turn_id) from turns")[0] == one(
        "select count(*) from (select conversation_id, unnest(turn_ids) from segments)")[0]
    assert one("select count(*) from turns where segment_id is null")[0] == 0
    assert one("select sum(n_turns), sum(n_segments), sum(n_records) from conversations") == one(
        "select (select count(*) from turns), (select count(*) from segments), (select count(*) from records)")
    # Every conversation has records; every edge joins a record and a node that exist.
    assert one("select count(*) from conversations c where not exists (select 1 from records r where r.conversation_id = c.conversation_id)")[0] == 0
    assert one("select count(*) from record_nodes e anti join records r using (conversation_id, record_id)")[0] == 0
    assert one("select count(*) from record_nodes e anti join nodes n using (conversation_id, node_id)")[0] == 0
    assert one("select count(*) from records r anti join segments s using (conversation_id, segment_id)")[0] == 0


def check_answers(eval_out, max_questions: int) -> None:
    con = duckdb.connect()
    files = [str(p) for p in (eval_out / "answers").glob("part-*.parquet")]
    rows = con.read_parquet(files).aggregate("count(*), count(distinct question_id), count(prediction)").fetchall()[0]
    assert rows == (max_questions, max_questions, max_questions)
    assert (eval_out / "report.md").read_text().startswith("# lychee-ray evaluation report")


def actor_nodes(cluster: LocalRayCluster, submit_output: str) -> set[str]:
    """The nodes that hosted the Ray Data actors of one submitted job (from the state API)."""
    from ray.util.state import list_actors, list_jobs

    submission_id = re.search(r"raysubmit_\w+", submit_output).group(0)
    job_id = next(j.job_id for j in list_jobs(address=cluster.dashboard_url) if j.submission_id == submission_id)
    actors = list_actors(address=cluster.dashboard_url, filters=[("job_id", "=", job_id)], limit=1000, detail=True,
                         raise_on_missing_output=False)
    return {a.node_id for a in actors if "MapWorker" in (a.class_name or "")}


def test_job_failure_is_reported(cluster, tmp_path):
    """A job whose input is missing fails with the CLI's one-sentence error, and submit says so."""
    with pytest.raises(RuntimeError) as err:
        cluster.submit(["python", "jobs/ingest.py", *JOB_CONFIG, "--input", str(tmp_path / "nope.json"), "--out", str(tmp_path / "s")],
                       working_dir=str(REPO), timeout=300)
    assert "nope.json" in str(err.value) and "failed" in str(err.value).lower()
