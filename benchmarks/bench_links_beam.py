"""Record links on BEAM 100K: knowledge_update and contradiction_resolution, validity off and on.

BEAM's probing questions name, by role, the message that was superseded and the one that
superseded it (knowledge_update: original_info / updated_info) or the two statements that
conflict (contradiction_resolution: first_statement / second_statement). For each such question
the script retrieves the context an answerer would get (`Memory.recall`: the rules planner, the
channels, fusion, MMR under retrieval.context_token_budget) twice, with `retrieval.validity` off
(before) and on (after), and counts:
- knowledge_update: the share of questions whose context holds the new statement (an item citing
  an updated_info message) while the old one is absent or marked superseded (every item citing
  an original_info message carries a `[was: ... now: ...]` mark);
- contradiction_resolution: the share whose context holds both statements and marks them as
  conflicting (an item citing each carries a conflict mark; when BEAM names one message for both
  roles, that message's item must be marked);
- evidence recall (evaluate/metrics.py) of every question of the folders run, whatever its
  ability, before and after: the validity unit must not cost recall (it brings successors and
  partners in under the same budget, so it may evict something).
From the links alone (no retrieval): the share of the two abilities' questions whose labelled pair
a link joins (knowledge_update: a `supersedes` link from a record citing an updated_info message to
one citing an original_info one; contradiction_resolution: a `contradicts` link between the two
statements, either way), and the share of links that join some question's labelled pair. BEAM
labels only the changes it asks about, so that second share is a lower bound on precision.
Every figure is given for all folders and for two fixed parts: folders 1-10 (tune: the detector's
wording may be read and changed on them) and 11-20 (check: report only).
A message split into parts by the reader ("66#p2") counts as its message. The labels were written
by BEAM's generating LLM and are noisy (see the data README); the shares are over every question
of the two abilities in the folders run, whatever the label quality.

The folders are ingested in this process (rules backend, or --llm through the fake OpenAI server:
its links come from a mechanical word-overlap rule, so that run shows the LLM path's wiring, not a
model's judgement). BEAM 100K is read at run time from --beam (never copied); ingesting all 20
folders takes hours on a small shared machine, so --folders picks a subset and the report names it.

    python -m benchmarks.bench_links_beam --folders 1,2,3,4 [--llm] [--out DIR]
    python -m benchmarks.bench_links_beam --store DIR   # a store already built, e.g. beam_recall's

Prints the figures and writes them to benchmarks/results/links_beam.json.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from benchmarks.links_common import build_cost, build_store, config, fake_llm_overrides, fake_server, link_rows, save_report, segmented
from lychee_ray.embedding import Embedder
from lychee_ray.evaluate.metrics import evidence_recall
from lychee_ray.query.memory import Memory
from lychee_ray.store.reader import open_store

BEAM = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "beam" / "100K"
ABILITIES = ("knowledge_update", "contradiction_resolution")
PAIR_ROLES = {"knowledge_update": ("supersedes", "original_info", "updated_info"),
              "contradiction_resolution": ("contradicts", "first_statement", "second_statement")}
TUNE_FOLDERS = frozenset(str(n) for n in range(1, 11))  # 11-20: the check part


def part_of(conversation_id: str) -> str:
    """tune (folders 1-10) or check (11-20), from the reader's name beam-100K-<folder>."""
    return "tune" if conversation_id.rsplit("-", 1)[-1] in TUNE_FOLDERS else "check"


def message(turn_id: str) -> str:
    return re.sub(r"#p\d+$", "", turn_id)


def questions(store_dir: Path, cfg) -> list[dict]:
    """Every question of the store (all abilities: evidence recall is measured on each)."""
    with open_store(str(store_dir), cfg) as store:
        return store.sql("SELECT conversation_id, question_id, question, category, evidence_turn_ids, evidence_roles FROM questions")


def by_role(q: dict) -> dict[str, set[str]]:
    roles: dict[str, set[str]] = {}
    for tid, role in zip(q["evidence_turn_ids"] or [], q["evidence_roles"] or []):
        roles.setdefault(role, set()).add(message(tid))
    return roles


def judge(q: dict, items) -> dict:
    """What one question's context shows (module docstring)."""
    roles = by_role(q)
    citing = lambda ids: [i for i in items if ids & {message(t) for t in i.source_turn_ids}]  # noqa: E731
    if q["category"] == "knowledge_update":
        new, old = citing(roles.get("updated_info", set())), citing(roles.get("original_info", set()) - roles.get("updated_info", set()))
        new_in = bool(new)
        old_ok = all(i.note is not None and i.note.now for i in old)
        return {"new_in_context": new_in, "old_absent_or_marked": old_ok, "old_in_context": bool(old), "ok": new_in and old_ok}
    first, second = citing(roles.get("first_statement", set())), citing(roles.get("second_statement", set()))
    both = bool(first) and bool(second)
    marked = any(i.note is not None and i.note.conflicts for i in first) and any(i.note is not None and i.note.conflicts for i in second)
    return {"both_in_context": both, "marked_conflicting": marked, "ok": both and marked}


def joins(link: dict, q: dict) -> bool:
    """Whether a link (link_rows' shape) joins q's labelled pair (module docstring)."""
    kind, old_role, new_role = PAIR_ROLES[q["category"]]
    if link["kind"] != kind or link["conversation_id"] != q["conversation_id"]:
        return False
    roles = by_role(q)
    old, new = roles.get(old_role, set()), roles.get(new_role, set())
    said_old, said_new = {message(t) for t in link["old_turns"]}, {message(t) for t in link["new_turns"]}
    return bool(new & said_new and old & said_old) or (kind == "contradicts" and bool(old & said_new and new & said_old))


def pair_figures(qs: list[dict], links: list[dict]) -> dict:
    """Per part: the share of each ability's questions whose pair a link joins, and the share of
    links joining some labelled pair (a lower bound on precision)."""
    asked = [q for q in qs if q["category"] in ABILITIES]
    out = {}
    for part, keep in (("all", lambda c: True), ("tune", lambda c: part_of(c) == "tune"), ("check", lambda c: part_of(c) == "check")):
        mine = [x for x in links if keep(x["conversation_id"])]
        on_pair = sum(any(joins(x, q) for q in asked) for x in mine)
        out[part] = {"links": len(mine), "links_on_a_labelled_pair": on_pair, **{
            a: {"n": len(rows), "pair_linked": sum(any(joins(x, q) for x in mine) for q in rows)}
            for a in ABILITIES for rows in [[q for q in asked if q["category"] == a and keep(q["conversation_id"])]]}}
    return out


def measure(store_dir: Path, cfg_overrides: list[str], embedder: Embedder) -> dict:
    cfg = config(*cfg_overrides)
    out: dict = {"pairs": pair_figures(questions(store_dir, cfg), link_rows(store_dir, cfg))}
    for label, validity in (("before", "false"), ("after", "true")):
        cfg = config(*cfg_overrides, f"retrieval.validity={validity}")
        per_q = []
        with Memory(cfg, open_store(str(store_dir), cfg), embedder=embedder) as memory:
            for q in questions(store_dir, cfg):
                items = memory.recall(q["conversation_id"], q["question"]).items
                per_q.append(judged(q, items))
        out[label] = summarize(per_q)
        for part in ("tune", "check"):
            out[label][part] = summarize([r for r in per_q if part_of(r["conversation_id"]) == part])
        out[label]["questions"] = per_q
    return out


def judged(q: dict, items) -> dict:
    """One question's row: its evidence recall, and for the two abilities what `judge` says."""
    retrieved = [t for i in items for t in i.source_turn_ids]
    row = {"question_id": q["question_id"], "conversation_id": q["conversation_id"], "category": q["category"],
           "evidence_recall": evidence_recall(q["evidence_turn_ids"] or [], retrieved)}
    return row | (judge(q, items) if q["category"] in ABILITIES else {})


def summarize(per_q: list[dict]) -> dict:
    """Per ability the share of questions with each flag true (and the mean evidence recall of
    those with evidence); `evidence_recall`: the mean over every question with evidence."""
    out = {}
    for ability in ABILITIES:
        rows = [r for r in per_q if r["category"] == ability]
        keys = [k for k in (rows[0] if rows else {}) if k not in ("question_id", "conversation_id", "category")]
        out[ability] = {"n": len(rows), **{k: _mean([r[k] for r in rows]) for k in keys}} if rows else {"n": 0}
    with_evidence = [r["evidence_recall"] for r in per_q if r["evidence_recall"] is not None]
    out["evidence_recall"] = {"n": len(with_evidence), "mean": _mean(with_evidence)}
    return out


def _mean(values: list) -> float | None:
    values = [float(v) for v in values if v is not None]
    return round(sum(values) / len(values), 3) if values else None


def link_counts(store_dir: Path, cfg) -> dict:
    with open_store(str(store_dir), cfg) as store:
        rows = store.sql("SELECT kind, found_by, count(*) AS n FROM record_links GROUP BY ALL ORDER BY ALL")
        records = store.sql("SELECT count(*) AS n FROM records")[0]["n"]
    return {"records": records, "links": {f"{r['kind']}/{r['found_by']}": r["n"] for r in rows}}


def run_on_store(args) -> dict:
    """The measure on a store already built (e.g. `beam_recall`'s whole bucket), no ingest: its
    rules-backend links as they were written."""
    store_dir, cfg = Path(args.store), config()
    embedder = Embedder(cfg.embedding)
    with open_store(str(store_dir), cfg) as store:
        convs = [r["conversation_id"] for r in store.sql("SELECT DISTINCT conversation_id FROM conversations ORDER BY 1")]
    return {"store": str(store_dir), "conversations": convs,
            "rules": {**link_counts(store_dir, cfg), **measure(store_dir, [], embedder)}}


def run(args) -> dict:
    if args.store:
        return run_on_store(args)
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-links-beam-"))
    folders = [f.strip() for f in args.folders.split(",") if f.strip()]
    embedder = Embedder(config().embedding)
    # each folder read in place (the reader names it beam-100K-<folder>); nothing is copied
    convs = segmented(config(), [str(Path(args.beam) / f) for f in folders], embedder)
    report: dict = {"folders": folders, "conversations": [c.conversation_id for c in convs]}
    variants = [("rules", lambda url: [])]
    if args.llm:
        variants.append(("fake_llm", lambda url: fake_llm_overrides(url)))
    with fake_server() if args.llm else _nothing() as server:
        for name, overrides in variants:
            extra = overrides(server.base_url if server else "")
            cfg = config(*extra)
            build = build_store(cfg, convs, work / name, embedder)
            report[name] = {"build_s": round(build["wall_s"], 1), "cost": build_cost(work / name, cfg), **link_counts(work / name, cfg),
                            **measure(work / name, extra, embedder)}
    report["work_dir"] = str(work)
    return report


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--folders", default="1,2,3,4", help="BEAM 100K conversation folders to run (comma-separated)")
    p.add_argument("--beam", default=str(BEAM), help="the BEAM 100K folder (read only)")
    p.add_argument("--llm", action="store_true", help="also ingest through the fake OpenAI server")
    p.add_argument("--out", default=None)
    p.add_argument("--store", default=None, help="measure this existing store instead of ingesting --folders (--llm ignored)")
    args = p.parse_args(argv)
    report = run(args)
    save_report("links_beam", report)
    brief = {k: ({kk: vv for kk, vv in v.items() if kk not in ("before", "after")} | {
        "before": {a: v["before"][a] for a in (*ABILITIES, "evidence_recall", "tune", "check")},
        "after": {a: v["after"][a] for a in (*ABILITIES, "evidence_recall", "tune", "check")}} if isinstance(v, dict) and "before" in v else v)
        for k, v in report.items()}
    print(json.dumps(brief, indent=2))
    return report


if __name__ == "__main__":
    main()
