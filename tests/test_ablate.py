"""The ablation grid end to end on one generated conversation between friends in LoCoMo's format
(3 sessions of 20 turns, tests/support/generated.py): real MiniLM, real encode/organize/store stages, DuckDB over the Parquet stores. A reduced grid
(via `grid.only`) keeps it to a couple of minutes on 2 cores; one LLM-path grid runs against
the fake OpenAI-compatible server and checks its token accounting against the server's usage."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest
import yaml

from lychee_ray.ablate.grid import load_grid
from lychee_ray.ablate.runner import balanced_windows, run_ablation
from lychee_ray.config_sections import ConfigError
from tests.support.generated import generate

from .conftest import REPO

SPEC = REPO / "configs" / "ablations" / "locomo.yaml"
REDUCED = "grid.only=[full,eager,window,vector_only,delta_0.30,full_context,naive_rag]"


@pytest.fixture(scope="module")
def cut_input(tmp_path_factory):
    archive = generate(tmp_path_factory.mktemp("ablate-input"), "locomo", conversations=1, sessions=3, turns_per_session=20,
                       style="chitchat")
    (path,) = archive.files
    raw = json.loads(path.read_text())  # turns counted from the file itself, not from the reader
    n_turns = sum(len(v) for c in raw for k, v in c["conversation"].items() if isinstance(v, list))
    return path, n_turns


@pytest.fixture(scope="module")
def embedder(local_embedder):
    return local_embedder


@pytest.fixture(scope="module")
def rules_grid(cut_input, embedder, tmp_path_factory):
    path, n_turns = cut_input
    out = tmp_path_factory.mktemp("ablate-rules")
    grid = load_grid(SPEC, [REDUCED, "grid.questions_per_conversation=6"])
    stderr = io.StringIO()  # no terminal: the progress comes as whole lines
    with contextlib.redirect_stderr(stderr):
        result = run_ablation(grid, str(path), str(out), embedder=embedder)
    (out / "progress.log").write_text(stderr.getvalue())
    rows = {r["variant"]: r for r in pq.read_table(out / "ablation.parquet").to_pylist()}
    return result, rows, out, n_turns


def stats_rows(store: Path) -> list[dict]:
    rel = duckdb.sql(f"select * from read_parquet('{store}/build_stats/*.parquet') order by conversation_id")
    return [dict(zip(rel.columns, r)) for r in rel.fetchall()]


def exchanges(store: Path) -> int:
    return duckdb.sql(f"select sum(n_exchanges) from read_parquet('{store}/conversations/*.parquet')").fetchall()[0][0]


def segments(store: Path) -> int:
    return duckdb.sql(f"select count(*) from read_parquet('{store}/segments/*.parquet')").fetchall()[0][0]


def test_one_row_per_variant_and_reference(rules_grid):
    result, rows, out, _ = rules_grid
    assert set(rows) == {"full", "eager", "window", "vector_only", "delta_0.30", "full_context", "naive_rag"}
    assert {r["kind"] for n, r in rows.items() if n in ("full_context", "naive_rag")} == {"reference"}
    assert all(r["questions"] == 6 for r in rows.values())
    assert rows["full"]["d_f1_pp"] == 0.0 and all(r["differs_from_paper"] for r in rows.values())
    md = (out / "ablation.md").read_text()
    for name in rows:
        assert f"| {name} |" in md


def test_progress_names_each_grid_point_and_how_many_are_left(rules_grid):
    _, rows, out, _ = rules_grid
    lines = [line for line in (out / "progress.log").read_text().splitlines() if line.startswith("ablate: ")]
    assert lines[0] == "ablate: reading and embedding the conversations once for every grid point"
    starts = [m.groups() for m in (re.fullmatch(r"ablate: (\S+) \[(\d+)/7, (\d+) after it\]", line) for line in lines) if m]
    # window_matches targets run first (full sizes window's windows), references last
    assert [s[0] for s in starts] == ["full", "eager", "vector_only", "delta_0.30", "window", "full_context", "naive_rag"]
    assert [(int(i), int(left)) for _, i, left in starts] == [(i, 7 - i) for i in range(1, 8)]
    assert "ablate: full: build the store (encode, organize, write)" in lines and "ablate: naive_rag: evaluate" in lines
    assert "ablate: vector_only: build the store (encode, organize, write)" not in lines  # it reuses full's store
    assert lines[-1] == "ablate: 7/7 grid points done (100%)"


def test_eager_calls_equal_exchanges_and_full_calls_equal_segments(rules_grid):
    _, rows, out, _ = rules_grid
    eager, full = out / "builds" / "eager", out / "builds" / "full"
    assert sum(r["encode_units"] for r in stats_rows(eager)) == exchanges(eager)
    assert sum(r["encode_units"] for r in stats_rows(full)) == segments(full)
    assert segments(full) < exchanges(full)  # the segmenter did group exchanges
    assert rows["eager"]["build_calls"] == exchanges(eager) and rows["full"]["build_calls"] == segments(full)
    md = (out / "ablation.md").read_text()
    assert "eager's calls = exchanges **holds**" in md and "full's calls = segments **holds**" in md


def test_window_calls_match_full_per_conversation(rules_grid):
    _, _, out, _ = rules_grid
    full = {r["conversation_id"]: r["encode_units"] for r in stats_rows(out / "builds" / "full")}
    window = {r["conversation_id"]: r["encode_units"] for r in stats_rows(out / "builds" / "window")}
    assert full.keys() == window.keys()
    assert all(abs(full[c] - window[c]) <= 1 for c in full)
    reasons = duckdb.sql(f"select distinct boundary_reason from read_parquet('{out}/builds/window/segments/*.parquet')").fetchall()
    assert reasons == [("window",)]


def test_balanced_windows_cover_every_exchange_with_sizes_within_one():
    for n, k in [(29, 5), (10, 7), (7, 7), (5, 9), (1, 1)]:
        bounds = balanced_windows(n, k)
        sizes = [b.end - b.start for b in bounds]
        assert len(bounds) == min(k, n) and sum(sizes) == n and max(sizes) - min(sizes) <= 1
        assert all(a.end == b.start for a, b in zip(bounds, bounds[1:]))


def test_shared_work_is_done_once(rules_grid):
    result, rows, out, n_turns = rules_grid
    w = result.work
    # every turn embedded once for the whole grid, not once per variant
    assert w.embed_texts["turns"] == n_turns and w.embed_calls["turns"] == 1
    assert w.embedding_passes == 1 and w.naive_embedding_passes == 7
    # full, eager, window, delta_0.30 build; vector_only reuses full's store
    assert w.builds == 4 and w.naive_builds == 5
    assert rows["vector_only"]["build_from"] == "full" and rows["vector_only"]["answers_from"] == "vector_only"
    assert not (out / "builds" / "vector_only").exists()
    assert w.segmentations == 4  # full, eager, window (matched to full), delta_0.30
    assert w.evaluations == 7
    # a reused build costs this row nothing but its own evaluation
    assert rows["vector_only"]["marginal_s"] < rows["vector_only"]["wall_s"]


def test_build_token_accounting_equals_build_stats(rules_grid):
    _, rows, out, _ = rules_grid
    for name in ("full", "eager", "window", "delta_0.30"):
        stats = stats_rows(out / "builds" / name)
        n = len(stats)
        prompt = sum(r["est_prompt_tokens"] for r in stats) / n
        completion = sum(r["est_completion_tokens"] for r in stats) / n
        assert prompt > 0 and rows[name]["build_prompt_tokens"] == pytest.approx(prompt)
        assert rows[name]["build_completion_tokens"] == pytest.approx(completion)
        assert rows[name]["build_total_tokens"] == pytest.approx(prompt + completion)
        assert rows[name]["build_tokens_estimated"] is True
    assert rows["eager"]["build_total_tokens"] > rows["full"]["build_total_tokens"]  # more calls, more prompt frames


def test_references_read_the_whole_conversation_or_the_top_turns(rules_grid):
    _, rows, out, _ = rules_grid
    fc = pq.read_table(out / "evals" / "full_context" / "answers").to_pylist()
    assert all(r["dropped_turns"] == 0 for r in fc)  # 60 turns fit the 16k context
    assert all(r["evidence_recall"] == 1.0 for r in fc if r["evidence_turn_ids"])
    assert rows["full_context"]["query_tokens"] > rows["naive_rag"]["query_tokens"]
    rag = pq.read_table(out / "evals" / "naive_rag" / "answers").to_pylist()
    assert all(0 < r["context_tokens"] <= 1500 for r in rag)


def test_plots_and_statements_exist(rules_grid):
    _, _, out, _ = rules_grid
    for png in ("pareto.png", "per_category.png", "quality_vs_delta.png"):
        assert (out / png).stat().st_size > 5000
    md = (out / "ablation.md").read_text()
    assert "semantic boundaries beat a content-blind window" in md
    assert "delta spread over {0.30, 0.50}" in md and "1.04 pp" in md


def test_truncated_full_context_is_counted(cut_input, embedder, tmp_path):
    path, _ = cut_input
    spec = tmp_path / "grid.yaml"
    raw = yaml.safe_load(SPEC.read_text())
    raw["base_config"] = str(REPO / "configs" / "local.yaml")
    raw["references"] = [{"name": "full_context", "context_tokens": 1200, "paper": "small context"}]
    spec.write_text(json.dumps(raw))
    grid = load_grid(spec, ["grid.only=[full,full_context]", "grid.questions_per_conversation=3"])
    run_ablation(grid, str(path), str(tmp_path / "out"), embedder=embedder)
    fc = pq.read_table(tmp_path / "out" / "evals" / "full_context" / "answers").to_pylist()
    assert all(r["dropped_turns"] > 0 and r["context_tokens"] <= 1200 for r in fc)
    row = pq.read_table(tmp_path / "out" / "ablation.parquet").to_pylist()[-1]
    assert row["variant"] == "full_context" and row["truncated_questions"] == 3


def test_bad_overlays_fail_with_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match="unknown variants"):
        load_grid(SPEC, ["grid.only=[nope]"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"base_config: {REPO / 'configs' / 'local.yaml'}\nvariants:\n  - name: x\n    set: {{embedding.model: other}}\n")
    with pytest.raises(ConfigError, match="shared by the whole grid"):
        load_grid(bad)
    bad.write_text(f"base_config: {REPO / 'configs' / 'local.yaml'}\nvariants:\n  - name: x\n    set: {{encoder.nope: 1}}\n")
    with pytest.raises(ConfigError, match="variant 'x'"):
        load_grid(bad)


def test_llm_grid_token_accounting_matches_server_usage(cut_input, embedder, fake_openai, tmp_path):
    path, _ = cut_input
    sets = [
        "grid.only=[full,eager,naive_rag]",
        "grid.questions_per_conversation=3",
        "llm.backend=openai",
        f"llm.base_url={fake_openai.base_url}",
        "llm.model=fake-model",
        "llm.api_key_env=LYCHEE_TEST_NO_KEY",
        "evaluate.judge=true",
    ]
    out = tmp_path / "out"
    run_ablation(load_grid(SPEC, sets), str(path), str(out), embedder=embedder)
    rows = {r["variant"]: r for r in pq.read_table(out / "ablation.parquet").to_pylist()}
    build_prompt = sum(r["prompt_tokens"] for name in ("full", "eager") for r in stats_rows(out / "builds" / name))
    build_completion = sum(r["completion_tokens"] for name in ("full", "eager") for r in stats_rows(out / "builds" / name))
    answers = [r for name in ("full", "eager", "naive_rag") for r in pq.read_table(out / "evals" / name / "answers").to_pylist()]
    query_prompt = sum(r["prompt_tokens"] + r["judge_prompt_tokens"] for r in answers)
    query_completion = sum(r["completion_tokens"] + r["judge_completion_tokens"] for r in answers)
    usage = fake_openai.total_usage()
    assert build_prompt + query_prompt == usage["prompt_tokens"]
    assert build_completion + query_completion == usage["completion_tokens"]
    eager_stats = stats_rows(out / "builds" / "eager")
    assert rows["eager"]["build_calls"] == pytest.approx(sum(r["llm_calls"] for r in eager_stats) / len(eager_stats))
    assert rows["eager"]["build_tokens_estimated"] is False and rows["full"]["judge_acc"] is not None
    assert sum(r["encode_units"] for r in eager_stats) == exchanges(out / "builds" / "eager")


@pytest.mark.vllm
def test_vllm_grid_token_accounting_matches_engine_counters(vllm_server, embedder, tmp_path):
    """A small grid against the real vLLM CPU engine: the table's and stores' token sums equal
    the prompt/generation tokens vLLM itself counted while the grid ran."""
    from tests.test_vllm_engine import TINY_BOUNDS, vllm_counters

    (cut,) = generate(tmp_path / "input", "locomo", conversations=2, sessions=1, style="chitchat").files
    sets = [
        "grid.only=[full,eager,naive_rag]",
        "grid.questions_per_conversation=2",
        "llm.backend=openai",
        f"llm.base_url={vllm_server.base_url}",
        f"llm.model={vllm_server.model}",
        "llm.timeout_s=300",
        *TINY_BOUNDS,
    ]
    before = vllm_counters(vllm_server)
    run_ablation(load_grid(SPEC, sets), str(cut), str(tmp_path / "out"), embedder=embedder)
    after = vllm_counters(vllm_server)
    out = tmp_path / "out"
    stats = [r for name in ("full", "eager") for r in stats_rows(out / "builds" / name)]
    answers = [r for name in ("full", "eager", "naive_rag") for r in pq.read_table(out / "evals" / name / "answers").to_pylist()]
    prompt = sum(r["prompt_tokens"] for r in stats) + sum(r["prompt_tokens"] + r["judge_prompt_tokens"] for r in answers)
    completion = sum(r["completion_tokens"] for r in stats) + sum(r["completion_tokens"] + r["judge_completion_tokens"] for r in answers)
    assert prompt == after["prompt_tokens_total"] - before["prompt_tokens_total"]
    assert completion == after["generation_tokens_total"] - before["generation_tokens_total"]
    eager = stats_rows(out / "builds" / "eager")
    assert sum(r["encode_units"] for r in eager) == exchanges(out / "builds" / "eager")
    assert all(r["llm_calls"] >= r["encode_units"] for r in eager)
