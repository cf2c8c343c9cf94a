"""The evaluation report: `report.md` + PNG plots, computed from the answers table in DuckDB.

Everything shown is read back from the committed answers and the store's build_stats, so the
report of a resumed run is the report of the whole run. The output folder may be a path or a
pyarrow.fs URI: answers are read through pyarrow, and matplotlib (which writes local files only)
renders into a temporary folder that is then copied to the output.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import duckdb
import pyarrow.fs as pafs

from lychee_ray.config import LycheeConfig
from lychee_ray.evaluate.answers import ANSWERS
from lychee_ray.evaluate.beam_report import beam_lines
from lychee_ray.io.fs import child_uri, is_part_name, join_path, list_files, resolve_uri
from lychee_ray.plots import bar_chart, line_chart, markdown_table
from lychee_ray.redact import mask_url
from lychee_ray.store.reader import parquet_relation
from lychee_ray.tokens import O200K, tokenizer_name

CATEGORY_ORDER = ("single_hop", "multi_hop", "temporal", "open_domain", "adversarial")
CATEGORY_NOTE = (
    "LoCoMo categories are reported by name with the mapping of upstream `task_eval/evaluation.py`: "
    "1 = multi_hop, 2 = temporal, 3 = open_domain, 4 = single_hop, 5 = adversarial (excluded by default). "
    "The mem0 evaluation numbers them differently (1 = single-hop, 3 = multi-hop; mem0ai/mem0 #2609)."
)


def _answers(out_dir: str, keep: list) -> duckdb.DuckDBPyConnection:
    """A connection with an `answers` view over the committed parts; `keep` holds what a remote
    scan reads from and must outlive the connection's queries."""
    fs, base = resolve_uri(out_dir)
    folder = join_path(base, ANSWERS)
    files = sorted(i.base_name for i in list_files(fs, folder) if is_part_name(i.base_name))
    if not files:
        raise FileNotFoundError(f"no answers under {child_uri(out_dir, ANSWERS)}")
    con = duckdb.connect()
    # DDL cannot take parameters; a relation can
    parquet_relation(con, fs, folder, files, None, keep).create_view("answers")
    return con


# Every question asked counts in the accuracy (Mem0's harness counts a failed judgement as wrong):
# a CORRECT label counts only on a row that answered ok with the model's own answer. A pipeline
# error, a judge that gave no label, and the rules extractive fallback after a failed answer call
# all count as wrong, and the report shows each count beside the accuracy.
CORRECT_SQL = "case when status = 'ok' and not coalesce(answer_fallback, false) and judge_label = 'CORRECT' then 1.0 else 0.0 end"
CATEGORY_SQL = f"""
    select {{group}} category, count(*) n, count(*) filter (where status = 'ok') n_ok,
           avg(coalesce(f1, 0.0)) f1, avg(coalesce(bleu1, 0.0)) bleu1,
           avg({CORRECT_SQL}) acc,
           avg(evidence_recall) recall, avg(naive_rag_recall) naive_recall, avg(bm25_recall) bm25_recall,
           avg(naive_rag_f1) naive_f1, avg(bm25_f1) bm25_f1
    from answers {{group_by}}
"""


def _category_rows(con, has_judge: bool) -> list[dict]:
    """One row per category and one `overall`. Accuracy, F1 and BLEU-1 are over every question
    asked (no answer scores 0); evidence recall is over the questions whose retrieval ran."""
    per_category = CATEGORY_SQL.format(group="category", group_by="group by category")
    overall = CATEGORY_SQL.format(group="'overall'", group_by="")
    rows = con.execute(f"{per_category} union all {overall}").fetchall()
    cols = ("category", "n", "n_ok", "f1", "bleu1", "judge_acc", "recall", "naive_rag_recall", "bm25_recall", "naive_rag_f1", "bm25_f1")
    out = [dict(zip(cols, r)) for r in rows]
    if not has_judge:
        for r in out:
            r["judge_acc"] = None
    rank = {c: i for i, c in enumerate(CATEGORY_ORDER)}
    return sorted(out, key=lambda r: (r["category"] == "overall", rank.get(r["category"], 99), r["category"]))


def _not_counted_as_correct(con, has_judge: bool) -> dict[str, int]:
    """The questions that count as wrong whatever their label, by cause."""
    errors, fallbacks, unjudged = con.execute(
        """select count(*) filter (where status != 'ok'),
                  count(*) filter (where status = 'ok' and coalesce(answer_fallback, false)),
                  count(*) filter (where status = 'ok' and judge_label is null)
           from answers"""
    ).fetchone()
    return {"pipeline_errors": errors, "answer_fallbacks": fallbacks, "judge_failures": unjudged if has_judge else 0}


def longmemeval_lines(con, has_judge: bool) -> list[str]:
    """LongMemEval's own summary, as its official scoring prints it: overall accuracy, accuracy
    averaged over question types (an abstention question counts in its type), and abstention
    accuracy over the `_abs` questions. Empty when no LongMemEval question was asked."""
    if not has_judge:
        return []
    n, acc, task_avg, n_types, abs_acc, n_abs = con.execute(
        f"""with q as (select regexp_replace(category, '_abs$', '') qtype, category like '%\\_abs' escape '\\' abstention,
                              {CORRECT_SQL} correct
                       from answers where benchmark = 'longmemeval'),
                 per_type as (select avg(correct) acc from q group by qtype)
            select (select count(*) from q), (select avg(correct) from q),
                   (select avg(acc) from per_type), (select count(*) from per_type),
                   (select avg(correct) from q where abstention), (select count(*) from q where abstention)"""
    ).fetchone()
    if not n:
        return []
    abstention = f"abstention accuracy {abs_acc:.3f} ({n_abs} questions)" if n_abs else "no abstention questions"
    return [f"- **LongMemEval** ({n} questions): accuracy {acc:.3f}; task-averaged accuracy {task_avg:.3f} over {n_types} question types; {abstention}."]


def _recall_curves(con, budgets: list[int]) -> dict[str, list[float | None]]:
    curves = {}
    for name, col in (("lychee-ray", "recall_curve"), ("naive RAG", "naive_rag_curve"), ("BM25", "bm25_curve")):
        vals = []
        for i in range(len(budgets)):
            v = con.execute(f"select avg({col}[?]) from answers where status = 'ok'", [i + 1]).fetchone()[0]  # col is a fixed name above
            vals.append(v)
        if any(v is not None for v in vals):
            curves[name] = vals
    return curves


def _tokens(con) -> dict:
    r = con.execute(
        """select avg(prompt_tokens + completion_tokens), avg(plan_prompt_tokens), avg(answer_prompt_tokens),
                  avg(completion_tokens), avg(context_tokens), avg(judge_prompt_tokens + judge_completion_tokens), avg(llm_calls),
                  avg(cached_tokens)
           from answers where status = 'ok'"""
    ).fetchone()
    keys = ("query_tokens", "plan_prompt", "answer_prompt", "completion", "context_tokens", "judge_tokens", "llm_calls", "cached_tokens")
    return dict(zip(keys, r))


def _build_stats(store) -> dict:
    r = store.con.execute(
        """select count(*), avg(llm_calls), avg(prompt_tokens), avg(completion_tokens), avg(prompt_tokens + completion_tokens),
                  sum(degraded_segments), any_value(backend), any_value(model)
           from build_stats"""
    ).fetchone()
    keys = ("conversations", "llm_calls", "prompt_tokens", "completion_tokens", "total_tokens", "degraded_segments", "backend", "model")
    return dict(zip(keys, r))


def write_eval_report(cfg: LycheeConfig, store, out_dir: str, data_note: str | None = None) -> tuple[str, str]:
    """Write report.md and its PNGs into `out_dir`; returns (the report's URI or path, headline).
    `data_note`: a sentence on what the data is, shown under the header (e.g. generated data)."""
    keep: list = []
    con = _answers(out_dir, keep)
    with tempfile.TemporaryDirectory(prefix="lychee-report-") as tmp:
        headline = _render(cfg, store, con, Path(tmp), data_note)
        fs, base = resolve_uri(out_dir)
        pafs.copy_files(tmp, base, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=fs)
    return child_uri(out_dir, "report.md"), headline


def backend_label(cfg: LycheeConfig) -> str:
    """How the report names the backend; an endpoint URL is printed with its userinfo masked."""
    if cfg.llm.backend == "rules":
        return "rules (no LLM: extractive answers, rule-based records and plans)"
    return f"LLM {cfg.llm.model} via {mask_url(cfg.llm.base_url) or 'api.openai.com'}"


def judge_label(cfg: LycheeConfig) -> str:
    """How the report names the judge; in bold when the answering model grades itself."""
    if not cfg.asks_judge:
        return "none (F1 and BLEU-1 only)"
    judge = cfg.judge_llm()
    where = f"{judge.model} via {mask_url(judge.base_url) or 'api.openai.com'}"
    if cfg.judge_is_answerer:
        return f"**{where}: the answering model grades its own answers** (the paper judges with gpt-4o-mini; set `judge.model`)"
    return where


def _wrong_lines(wrong: dict[str, int], has_judge: bool) -> list[str]:
    causes = [f"{wrong['pipeline_errors']} pipeline errors", f"{wrong['answer_fallbacks']} answer-call failures answered by the rules fallback"]
    if has_judge:
        causes.append(f"{wrong['judge_failures']} judge calls with no label")
    return [f"- **Counted as wrong whatever they say:** {', '.join(causes)}"]


def _render(cfg: LycheeConfig, store, con, out: Path, data_note: str | None = None) -> str:
    """report.md and the PNGs into the local folder `out`; returns the headline."""
    has_judge = cfg.asks_judge
    cats = _category_rows(con, has_judge)
    wrong = _not_counted_as_correct(con, has_judge)
    budgets = cfg.evaluate.recall_budgets
    curves = _recall_curves(con, budgets)
    tok = _tokens(con)
    build = _build_stats(store)
    errors = con.execute("select question_id, error from answers where status != 'ok' order by question_id limit 20").fetchall()
    n_err = con.execute("select count(*) from answers where status != 'ok'").fetchone()[0]
    backend = backend_label(cfg)
    metric = "judge_acc" if has_judge else "f1"

    plot_rows = [r for r in cats if r["category"] != "overall"]
    series = {"lychee-ray": [r[metric] for r in plot_rows]}
    if not has_judge:
        series.update({"naive RAG": [r["naive_rag_f1"] for r in plot_rows], "BM25": [r["bm25_f1"] for r in plot_rows]})
    bar_chart(out / "per_category.png", [r["category"] for r in plot_rows], series, f"{'Judge accuracy' if has_judge else 'Token F1'} per category ({cfg.llm.backend} backend)", metric)
    recall_series = {"lychee-ray": [r["recall"] for r in plot_rows], "naive RAG": [r["naive_rag_recall"] for r in plot_rows], "BM25": [r["bm25_recall"] for r in plot_rows]}
    bar_chart(out / "recall_per_category.png", [r["category"] for r in plot_rows], recall_series, f"Evidence recall at {cfg.retrieval.context_token_budget} context tokens", "recall")
    if curves:
        line_chart(out / "recall_vs_budget.png", budgets, curves, "Evidence recall vs. context token budget", "context tokens", "evidence recall")

    overall = next(r for r in cats if r["category"] == "overall")
    best_base = max((overall["naive_rag_recall"] or 0), (overall["bm25_recall"] or 0))
    headline = (
        f"  backend: {cfg.llm.backend}; questions asked: {overall['n']} ({overall['n_ok']} ok); "
        + (f"judge accuracy {overall['judge_acc']:.3f} over all asked; " if has_judge else "")
        + f"F1 {overall['f1'] or 0:.3f}; evidence recall {overall['recall'] or 0:.3f} (naive RAG {overall['naive_rag_recall'] or 0:.3f}, BM25 {overall['bm25_recall'] or 0:.3f})"
    )
    fmt = {c: ".3f" for c in ("f1", "bleu1", "judge_acc", "recall", "naive_rag_recall", "bm25_recall", "naive_rag_f1", "bm25_f1")}
    lines = [
        "# lychee-ray evaluation report",
        "",
        *([f"- **Data:** {data_note}"] if data_note else []),
        f"- **Backend:** {backend}",
        f"- **Judge:** {judge_label(cfg)}",
        f"- **Store:** `{store.path}` ({build['conversations']} conversations)",
        f"- **Context budget:** {cfg.retrieval.context_token_budget} tokens; RRF kappa {cfg.retrieval.rrf_kappa}; channels {', '.join(cfg.retrieval.channels)}; rerank {'on' if cfg.retrieval.rerank.enabled else 'off'}",
        f"- **Tokenizer:** {tokenizer_name(cfg.tokenizer_spec)} counts the retrieval context budget, the segmenter's token cap and the encoder's context budget (o200k estimates, compared with the paper, stay {O200K})",
        f"- **Questions:** {overall['n']} asked, {overall['n_ok']} answered ok, {n_err} with errors",
        *_wrong_lines(wrong, has_judge),
        "",
        "## Accuracy and evidence recall per category",
        "",
        CATEGORY_NOTE,
        "",
        (
            "Accuracy = questions the judge labelled CORRECT / all questions asked: a pipeline error, a failed judge call and the rules fallback after a failed answer call count as wrong. "
            if has_judge
            else "No LLM judge under the rules backend: F1 is the quality measure. "
        )
        + "F1 and BLEU-1 score a question with no answer 0. "
        + f"Evidence recall (over the questions whose retrieval ran) = share of gold evidence turns covered by the source turns of the selected context, at {cfg.retrieval.context_token_budget} tokens; the baselines get the same budget.",
        "",
        markdown_table(cats, ["category", "n", "n_ok", "judge_acc", "f1", "bleu1", "recall", "naive_rag_recall", "bm25_recall", "naive_rag_f1", "bm25_f1"], fmt),
        *longmemeval_lines(con, has_judge),
        f"lychee-ray recall minus the better baseline: **{100 * ((overall['recall'] or 0) - best_base):+.1f} pp**.",
        "",
        "![per category](per_category.png)",
        "",
        "![recall per category](recall_per_category.png)",
        "",
        "## Evidence recall against context budget",
        "",
        markdown_table(
            [{"budget": b, **{name: vals[i] for name, vals in curves.items()}} for i, b in enumerate(budgets)],
            ["budget", *curves.keys()],
            {name: ".3f" for name in curves},
        ),
        "![recall vs budget](recall_vs_budget.png)" if curves else "",
        "",
        "## Tokens",
        "",
        f"- Query tokens per question (planner + answer, prompt + completion): **{tok['query_tokens'] or 0:.0f}** "
        f"(planner prompt {tok['plan_prompt'] or 0:.0f}, answer prompt {tok['answer_prompt'] or 0:.0f}, completions {tok['completion'] or 0:.0f}); "
        f"LLM calls per question {tok['llm_calls'] or 0:.2f}. Paper: 4.01K (A-Mem 5.56K).",
        f"- Selected context per question: {tok['context_tokens'] or 0:.0f} tokens ({tokenizer_name(cfg.tokenizer_spec)}).",
        f"- Prompt tokens served from the endpoint's prefix cache per question (part of the prompt tokens above): {tok['cached_tokens'] or 0:.0f}.",
        f"- Judge tokens per question (not part of the query cost): {tok['judge_tokens'] or 0:.0f}.",
        f"- Build tokens per conversation (from build_stats): **{build['total_tokens'] or 0:.0f}** "
        f"({build['prompt_tokens'] or 0:.0f} prompt + {build['completion_tokens'] or 0:.0f} completion) over {build['llm_calls'] or 0:.1f} LLM calls; "
        f"degraded segments: {build['degraded_segments'] or 0}; backend {build['backend']} / {build['model']}. Paper: 204.1K (A-Mem 1,459.9K; Mem0 1,520.8K).",
        "",
    ]
    lines += beam_lines(con, has_judge, out)
    if errors:
        lines += ["## Questions with errors", "", *[f"- `{q}`: {e}" for q, e in errors], ""]
    (out / "report.md").write_text("\n".join(lines))
    return headline
