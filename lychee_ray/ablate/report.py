"""The ablation grid's outputs: `ablation.parquet`, `ablation.md` and its PNG plots.

One row per variant and reference: build cost per conversation (from each store's build_stats),
query tokens per question, evidence recall at the context budget, F1 (and judge accuracy with
an LLM) per category and overall, wall time, and deltas against the full variant. Under each
plot the report states, computed from the same data, whether the issue's claims hold.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lychee_ray.evaluate.metrics import counts_as_correct
from lychee_ray.evaluate.report import CATEGORY_NOTE
from lychee_ray.plots import bar_chart, line_chart, markdown_table, scatter_labeled
from lychee_ray.redact import mask_url
from lychee_ray.store.reader import open_store

FULL = "full"


def _mean(values) -> float | None:
    vals = [float(v) for v in values if v is not None]
    return sum(vals) / len(vals) if vals else None


def _pp(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else 100.0 * (a - b)


# --------------------------------------------------------------------------------------------
# Per-conversation facts from a store
# --------------------------------------------------------------------------------------------
def build_facts(store_dir: str) -> dict[str, dict]:
    """conversation_id -> build_stats columns plus n_exchanges and the segments actually stored."""

    with open_store(store_dir) as store:
        rows = store.sql(
            """select b.conversation_id, b.encode_units, b.llm_calls, b.llm_failures, b.degraded_segments,
                      b.prompt_tokens, b.completion_tokens, b.cached_tokens, b.est_prompt_tokens, b.est_completion_tokens,
                      c.n_exchanges, (select count(*) from segments s where s.conversation_id = b.conversation_id) as n_segments
               from build_stats b join conversations c using (conversation_id) order by b.conversation_id"""
        )
    return {r["conversation_id"]: r for r in rows}


def build_columns(facts: dict[str, dict], estimated: bool) -> dict:
    """Build cost per conversation. Under rules no LLM is called: calls are the encode units an
    LLM build would make, and tokens the o200k estimate of their prompts and replies."""
    convs = list(facts.values())
    prompt_key, completion_key = ("est_prompt_tokens", "est_completion_tokens") if estimated else ("prompt_tokens", "completion_tokens")
    prompt = _mean(r[prompt_key] for r in convs)
    completion = _mean(r[completion_key] for r in convs)
    return {
        "build_calls": _mean(r["encode_units"] if estimated else r["llm_calls"] for r in convs),
        "build_encode_units": _mean(r["encode_units"] for r in convs),
        "build_prompt_tokens": prompt,
        "build_completion_tokens": completion,
        "build_total_tokens": (prompt or 0.0) + (completion or 0.0),
        "build_cached_tokens": _mean(r["cached_tokens"] for r in convs),
        "build_degraded_segments": sum(int(r["degraded_segments"] or 0) for r in convs),
        "build_tokens_estimated": estimated,
    }


# --------------------------------------------------------------------------------------------
# Quality from the answers
# --------------------------------------------------------------------------------------------
def quality_columns(items: list, categories: list[str], estimated: bool, judged: bool) -> dict:
    """`judged`: the run asked a judge (`LycheeConfig.asks_judge`), so its accuracy counts every
    question even when no label came back."""
    ok = [i for i in items if i.status == "ok"]
    out = {"questions": len(ok), "question_errors": len(items) - len(ok)}

    def judge(group):  # over every question asked, errors included (evaluate.metrics.counts_as_correct)
        return _mean(1.0 if counts_as_correct(i.status, i.answer_fallback, i.judge_label) else 0.0 for i in group) if judged and group else None

    def recall(group):
        return _mean(i.evidence_recall for i in group if i.evidence_turn_ids)

    out.update(f1=_mean(i.f1 for i in ok), recall=recall(ok), judge_acc=judge(items))
    for cat in categories:
        group = [i for i in ok if i.category == cat]
        out[f"f1_{cat}"] = _mean(i.f1 for i in group)
        out[f"recall_{cat}"] = recall(group)
        out[f"judge_{cat}"] = judge([i for i in items if i.category == cat])
    if estimated:
        out["query_tokens"] = _mean((i.est_prompt_tokens or 0) + (i.est_completion_tokens or 0) for i in ok)
    else:
        out["query_tokens"] = _mean(i.plan_usage.total_tokens + i.answer_usage.total_tokens for i in ok)
    out["query_tokens_estimated"] = estimated
    out["context_tokens"] = _mean(i.context_tokens for i in ok)
    truncated = [i for i in ok if i.dropped_turns]
    if any(i.dropped_turns is not None for i in ok):
        out["truncated_questions"] = len(truncated)
        out["dropped_tokens_per_question"] = _mean(i.dropped_tokens or 0 for i in ok)
    return out


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------
def variant_rows(grid, runs) -> tuple[list[dict], dict[str, dict]]:
    estimated = grid.base.llm.backend == "rules"
    categories = grid.base.evaluate.categories
    facts_by_store: dict[str, dict] = {}
    rows = []
    for run in runs:
        row = {
            "variant": run.name,
            "kind": run.kind,
            "differs_from_paper": run.spec.paper,
            "backend": run.cfg.llm.backend,
            "model": run.cfg.llm.model,
            "encode_mode": run.cfg.encoder.mode if run.kind == "variant" else None,
            "delta": run.cfg.segmenter.delta if run.kind == "variant" and run.cfg.encoder.mode == "segment" else None,
            "build_from": run.build.first_variant if run.build else None,
            "answers_from": run.evaluation.first_variant,
            "wall_s": run.standalone_s,
            "marginal_s": run.marginal_s,
        }
        if run.build is not None:
            facts = facts_by_store.setdefault(run.build.store_dir, build_facts(run.build.store_dir))
            row["conversations"] = len(facts)
            row.update(build_columns(facts, estimated))
        else:  # references build nothing with an LLM
            row.update(build_calls=0.0, build_prompt_tokens=0.0, build_completion_tokens=0.0, build_total_tokens=0.0, build_tokens_estimated=estimated)
        row.update(quality_columns(run.evaluation.items, categories, estimated, run.cfg.asks_judge))
        rows.append(row)
    full = next((r for r in rows if r["variant"] == FULL), None)
    for r in rows:
        if full is not None:
            r["d_recall_pp"] = _pp(r["recall"], full["recall"])
            r["d_f1_pp"] = _pp(r["f1"], full["f1"])
            r["d_judge_pp"] = _pp(r["judge_acc"], full["judge_acc"])
            r["build_tokens_vs_full"] = r["build_total_tokens"] / full["build_total_tokens"] if full["build_total_tokens"] else None
    per_store = {run.name: facts_by_store[run.build.store_dir] for run in runs if run.build is not None}
    return rows, per_store


def write_table(rows: list[dict], path: Path) -> None:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    pq.write_table(pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows]), path)


# --------------------------------------------------------------------------------------------
# Statements (the "must show"), computed from the data
# --------------------------------------------------------------------------------------------
def _holds(ok: bool) -> str:
    return "**holds**" if ok else "**does not hold**"


def statement_eager(facts: dict[str, dict] | None, llm: bool) -> str:
    if facts is None:
        return "- eager's calls = exchanges: not checked (the eager variant was not run)."
    good = [cid for cid, r in facts.items() if r["encode_units"] == r["n_exchanges"]]
    calls = sum(r["llm_calls"] for r in facts.values()) if llm else None
    units = sum(r["encode_units"] for r in facts.values())
    ex = sum(r["n_exchanges"] for r in facts.values())
    line = f"- eager's calls = exchanges {_holds(len(good) == len(facts))}: {len(good)}/{len(facts)} conversations; {units} encode calls for {ex} exchanges in all"
    if llm:
        line += f"; requests sent {calls} (repairs and retries included)"
    return line + "."


def statement_full(facts: dict[str, dict] | None, llm: bool) -> str:
    if facts is None:
        return "- full's calls = segments: not checked (the full variant was not run)."
    good = [cid for cid, r in facts.items() if r["encode_units"] == r["n_segments"]]
    units = sum(r["encode_units"] for r in facts.values())
    segs = sum(r["n_segments"] for r in facts.values())
    line = f"- full's calls = segments {_holds(len(good) == len(facts))}: {len(good)}/{len(facts)} conversations; {units} encode calls for {segs} stored segments"
    if llm:
        line += f"; requests sent {sum(r['llm_calls'] for r in facts.values())}"
    return line + "."


def statement_window(rows: dict[str, dict], facts: dict[str, dict], window: str | None) -> str:
    if window is None or window not in rows or FULL not in rows:
        return "- semantic boundaries vs. a fixed window: not checked (no window variant)."
    fw, ff = facts[window], facts[FULL]
    worst = max(abs(fw[c]["encode_units"] - ff[c]["encode_units"]) for c in ff)
    d = _pp(rows[FULL]["recall"], rows[window]["recall"])
    df1 = _pp(rows[FULL]["f1"], rows[window]["f1"])
    return (
        f"- semantic boundaries beat a content-blind window at the same number of calls (max per-conversation call difference {worst}), in recall: "
        f"{_holds(d is not None and d > 0)}: full {rows[FULL]['recall']:.3f} vs. {window} {rows[window]['recall']:.3f} ({d:+.2f} pp; F1 {df1:+.2f} pp)."
    )


def statement_delta(delta_rows: list[dict], paper_pp: float) -> str:
    if len(delta_rows) < 2:
        return "- delta spread: not checked (fewer than two delta values ran)."
    recalls = [r["recall"] for r in delta_rows if r["recall"] is not None]
    f1s = [r["f1"] for r in delta_rows if r["f1"] is not None]
    spread = 100 * (max(recalls) - min(recalls))
    f1_spread = 100 * (max(f1s) - min(f1s))
    judge = [r["judge_acc"] for r in delta_rows if r["judge_acc"] is not None]
    extra = f"; judge accuracy spread {100 * (max(judge) - min(judge)):.2f} pp" if len(judge) >= 2 else ""
    deltas = ", ".join(f"{r['delta']:.2f}" for r in delta_rows)
    return (
        f"- delta spread over {{{deltas}}}: recall {spread:.2f} pp, F1 {f1_spread:.2f} pp{extra}. "
        f"\"Within the paper's {paper_pp:.2f} pp accuracy spread\" {_holds(spread <= paper_pp)} for recall "
        f"(different metrics: the paper measures judge accuracy with gpt-4.1-mini, this is evidence recall)."
    )


# --------------------------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------------------------
def _quality(rows: list[dict]) -> tuple[str, str]:
    has_judge = any(r.get("judge_acc") is not None for r in rows)
    return ("judge_acc", "judge accuracy") if has_judge else ("f1", "token F1")


def write_plots(out: Path, rows: list[dict], delta_rows: list[dict], main: list[str], categories: list[str], metric: str, label: str, backend: str) -> dict[str, Path]:
    est = " (o200k estimate: rules backend)" if backend == "rules" else ""
    paths = {
        "pareto": scatter_labeled(
            out / "pareto.png",
            [(r["variant"], r["build_total_tokens"], r[metric] or 0.0) for r in rows],
            f"Build cost vs. quality ({backend} backend)",
            f"build tokens per conversation{est}",
            label,
        )
    }
    if len(delta_rows) >= 2:
        xs = [r["delta"] for r in delta_rows]
        series = {"evidence recall": [r["recall"] for r in delta_rows], label: [r[metric] for r in delta_rows]}
        paths["delta"] = line_chart(out / "quality_vs_delta.png", xs, series, "Quality vs. boundary threshold delta", "delta", "score")
    shown = [r for r in rows if r["variant"] in main or r["kind"] == "reference"] or rows
    prefix = "judge" if metric == "judge_acc" else "f1"
    paths["per_category"] = bar_chart(
        out / "per_category.png",
        categories,
        {r["variant"]: [r.get(f"{prefix}_{c}") for c in categories] for r in shown},
        f"{label} per category ({backend} backend)",
        label,
    )
    return paths


def write_report(grid, runner, runs, out: Path, wall_s: float) -> list[dict]:
    rows, facts = variant_rows(grid, runs)
    write_table(rows, out / "ablation.parquet")
    by_name = {r["variant"]: r for r in rows}
    metric, label = _quality(rows)
    backend = grid.base.llm.backend
    llm = backend != "rules"
    categories = grid.base.evaluate.categories
    # The delta sweep: the variants that change nothing but segmenter.delta (full included);
    # one row per delta value (delta_0.50 and full share their answers).
    sweep = [by_name[v.name] for v in grid.variants if set(v.set) <= {"segmenter.delta"} and by_name[v.name]["delta"] is not None]
    delta_rows = sorted({r["delta"]: r for r in reversed(sweep)}.values(), key=lambda r: r["delta"])
    main = [v.name for v in grid.variants if v.main]
    plots = write_plots(out, rows, delta_rows, main, categories, metric, label, backend)
    eager = next((v.name for v in grid.variants if grid.configs[v.name].encoder.mode == "eager"), None)
    window = next((v.name for v in grid.variants if v.window_matches == FULL), None)
    w = runner.work
    backend_line = (
        "rules (no LLM: extractive answers, rule-based records and plans; build and query tokens are o200k estimates of the prompts an LLM would get)"
        if not llm else f"LLM {grid.base.llm.model} via {mask_url(grid.base.llm.base_url) or 'api.openai.com'} (tokens are the usage the server reported)"
    )
    fmt = {"build_calls": ".1f", "build_prompt_tokens": ",.0f", "build_completion_tokens": ",.0f", "build_total_tokens": ",.0f", "query_tokens": ",.0f",
           "wall_s": ".1f", "marginal_s": ".1f", "d_recall_pp": "+.2f", "d_f1_pp": "+.2f", "d_judge_pp": "+.2f", "build_tokens_vs_full": ".2f"}
    cols = ["variant", "build_calls", "build_prompt_tokens", "build_completion_tokens", "build_total_tokens", "query_tokens", "recall", "f1"]
    if metric == "judge_acc":
        cols += ["judge_acc", "d_judge_pp"]
    cols += ["d_recall_pp", "d_f1_pp", "build_tokens_vs_full", "wall_s", "marginal_s", "differs_from_paper"]
    cat_cols = ["variant"] + [f"{p}_{c}" for c in categories for p in (["f1", "recall"] + (["judge"] if metric == "judge_acc" else []))]
    lines = [
        "# lychee-ray ablation grid",
        "",
        f"- **Backend:** {backend_line}",
        f"- **Grid spec:** `{grid.path}` (base `{grid.spec.base_config}`); **conversations:** {len(runner.convs)}; **questions per variant:** {by_name[rows[0]['variant']]['questions']}",
        f"- **Context budget:** {grid.base.retrieval.context_token_budget} tokens (evidence recall is measured there); quality measure: {label}",
        f"- **Grid wall time:** {wall_s:.1f} s; the sum of the rows' standalone times (`wall_s`: shared read + embedding, plus their own segmentation, build and evaluation) is {sum(r['wall_s'] for r in rows):.1f} s",
        f"- **Work actually done vs. the naive sum of independent runs:** embedding passes over all turns {w.embedding_passes} vs. {w.naive_embedding_passes}; "
        f"segmentations {w.segmentations} vs. {w.naive_segmentations}; encode+store builds {w.builds} vs. {w.naive_builds}; evaluations {w.evaluations} vs. {w.naive_evaluations}; "
        f"embedding model loads {w.embedder_loads}; texts embedded per phase {w.embed_texts}",
        "",
        "Build columns are per conversation, query tokens per question (planner + answer; references have no planner). "
        "Deltas are against `full` in percentage points. `marginal_s` is what the row added to this grid (0 when it reused another row's build and answers: see `build_from`/`answers_from` in the Parquet table).",
        "",
        markdown_table(rows, cols, fmt),
        "## Cost against quality",
        "",
        "![pareto](pareto.png)",
        "",
        statement_eager(facts.get(eager) if eager else None, llm),
        statement_full(facts.get(FULL), llm),
        "",
        "## Per category",
        "",
        CATEGORY_NOTE,
        "",
        markdown_table(rows, cat_cols),
        "![per category](per_category.png)",
        "",
        statement_window(by_name, facts, window),
        "",
        "## Boundary threshold delta",
        "",
        "![quality vs delta](quality_vs_delta.png)" if "delta" in plots else "(fewer than two delta values ran)",
        "",
        statement_delta(delta_rows, grid.spec.paper_delta_spread_pp),
        "",
    ]
    trunc = [r for r in rows if "truncated_questions" in r and r.get("truncated_questions") is not None]
    for r in trunc:
        lines.append(f"- `{r['variant']}`: {r['truncated_questions']} of {r['questions']} questions had their conversation truncated to the context length; {r['dropped_tokens_per_question']:.0f} tokens dropped per question on average.")
    if runner.problems:
        lines += ["", "## Input not used", "", *[f"- {p}" for p in runner.problems]]
    (out / "ablation.md").write_text("\n".join(lines) + "\n")
    return rows
