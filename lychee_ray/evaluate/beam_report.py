"""The BEAM section of report.md: per ability and per bucket, evidence recall beside naive RAG and
BM25, the authors' scores (the rubric score with an LLM judge; event ordering's normalized
Kendall tau-b, which needs none), and abstention. Empty when no BEAM question was asked.
"""

from __future__ import annotations

from pathlib import Path

from lychee_ray.evaluate.beam_scoring import BEAM_ABILITIES, abstains, bucket_of
from lychee_ray.plots import bar_chart, markdown_table

_PER_GROUP = """
    select {group} as "group", count(*) n,
           avg(evidence_recall) recall, avg(naive_rag_recall) naive_rag, avg(bm25_recall) bm25,
           avg(coalesce(rubric_score, 0)) filter (where rubric is not null) rubric_score,
           avg(order_tau) order_tau
    from (select *, coalesce(len(rubric_grades) > 0, false) as rubric from answers where benchmark = 'beam') a
    group by {group} order by {group}
"""


def beam_lines(con, has_judge: bool, out: Path) -> list[str]:
    if not con.execute("select count(*) from answers where benchmark = 'beam'").fetchone()[0]:
        return []
    by_ability = [dict(zip(("ability", "n", "recall", "naive_rag", "bm25", "rubric_score", "order_tau"), r))
                  for r in con.execute(_PER_GROUP.format(group="category")).fetchall()]
    rank = {a: i for i, a in enumerate(BEAM_ABILITIES)}
    by_ability.sort(key=lambda r: rank.get(r["ability"], 99))
    by_bucket = _by_bucket(con)
    abstention = _abstention(con)
    cols = ["ability", "n", "recall", "naive_rag", "bm25", "order_tau"] + (["rubric_score"] if has_judge else [])
    fmt = {c: ".3f" for c in ("recall", "naive_rag", "bm25", "rubric_score", "order_tau")}
    bar_chart(out / "beam_recall_per_ability.png", [r["ability"] for r in by_ability],
              {"lychee-ray": [r["recall"] for r in by_ability], "naive RAG": [r["naive_rag"] for r in by_ability],
               "BM25": [r["bm25"] for r in by_ability]}, "BEAM: evidence recall per ability", "recall")
    return [
        "## BEAM: per ability and per bucket",
        "",
        "Evidence recall at the context budget (abstention questions have no evidence), beside naive RAG and BM25; "
        "`order_tau`: event ordering scored as the BEAM authors do (the answer's lines aligned to the reference items by "
        "MiniLM cosine >= 0.65, Kendall tau-b, (tau + 1) / 2), which needs no LLM. "
        + ("`rubric_score`: each rubric nugget graded 0 / 0.5 / 1 by the judge, averaged (a failed call counts 0): the authors' score."
           if has_judge else "The authors' rubric score needs an LLM judge (`judge:` and `llm.backend: openai`); the rules backend reports recall and order only."),
        "",
        markdown_table(by_ability, cols, fmt),
        "",
        markdown_table(by_bucket, ["bucket", "n", "recall", "naive_rag", "bm25"], fmt),
        "",
        abstention,
        "",
        "![BEAM recall per ability](beam_recall_per_ability.png)",
        "",
    ]


def _by_bucket(con) -> list[dict]:
    rows = con.execute("select conversation_id, evidence_recall, naive_rag_recall, bm25_recall from answers where benchmark = 'beam'").fetchall()
    groups: dict[str, list[tuple]] = {}
    for cid, *vals in rows:
        groups.setdefault(bucket_of(cid) or "?", []).append(vals)
    out = []
    for bucket, vals in sorted(groups.items()):
        cols = list(zip(*vals))
        mean = [None if not [v for v in c if v is not None] else sum(v for v in c if v is not None) / len([v for v in c if v is not None]) for c in cols]
        out.append({"bucket": bucket, "n": len(vals), "recall": mean[0], "naive_rag": mean[1], "bm25": mean[2]})
    return out


def _abstention(con) -> str:
    rows = con.execute("select category, prediction from answers where benchmark = 'beam' and status = 'ok'").fetchall()
    asked = [p for c, p in rows if c == "abstention"]
    other = [p for c, p in rows if c != "abstention"]
    if not asked:
        return "- No abstention questions."
    right = sum(abstains(p) for p in asked)
    wrong = sum(abstains(p) for p in other)
    return (f"- Abstention, as abstention: {right} of {len(asked)} abstention answers decline for lack of information; "
            f"{wrong} of {len(other)} other answers decline (a sign that retrieval missed).")
