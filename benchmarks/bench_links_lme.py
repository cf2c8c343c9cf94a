"""Record links on LongMemEval's knowledge-update questions, validity off and on.

LongMemEval marks the turns that hold a question's answer (`has_answer`) but not which of them is
old and which new. For a knowledge-update question the new value is the one said last, so the
evidence turns said at the latest time are taken as `updated_info` and the others as
`original_info`; the question is then judged as `bench_links_beam` judges BEAM's: the context
(`Memory.recall`) holds the new statement while the old one is absent or marked superseded. The
script also says whether a `supersedes` link joins a record citing a new turn to one citing an
old turn (what the detector found, whatever retrieval did with it).

The file is read at run time from --data (LongMemEval's format; never copied) and ingested in this
process with the rules backend (--llm: through the fake OpenAI server as well, whose links come
from a mechanical word-overlap rule: the LLM path's wiring, not a model's judgement).

    python -m benchmarks.bench_links_lme [--data FILE] [--llm] [--out DIR]

Prints the figures and writes them to benchmarks/results/links_lme.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.bench_links_beam import _nothing, judge, link_counts
from benchmarks.links_common import build_store, config, fake_llm_overrides, fake_server, link_rows, save_report, segmented
from lychee_ray.embedding import Embedder
from lychee_ray.query.memory import Memory
from lychee_ray.store.reader import open_store

DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "longmemeval" / "longmemeval_excerpt_dev.json"
KNOWLEDGE_UPDATE = "knowledge-update"


def update_questions(store_dir: Path, cfg) -> list[dict]:
    """The knowledge-update questions, each with `evidence_roles` derived from its evidence
    turns' times (module docstring) and `category` in BEAM's spelling, which `judge` reads."""
    with open_store(str(store_dir), cfg) as store:
        asked = store.sql(f"SELECT conversation_id, question_id, question, evidence_turn_ids FROM questions "
                          f"WHERE category = '{KNOWLEDGE_UPDATE}' ORDER BY question_id")
        said = {(r["conversation_id"], r["turn_id"]): r["timestamp"]
                for r in store.sql("SELECT conversation_id, turn_id, max(timestamp) AS timestamp FROM turns GROUP BY ALL")}
    return [q | {"category": "knowledge_update",
                 "evidence_roles": roles_by_time([said.get((q["conversation_id"], t)) for t in q["evidence_turn_ids"] or []])}
            for q in asked]


def roles_by_time(times: list) -> list[str]:
    """Per evidence turn (its time, None if unknown): updated_info for those said at the latest
    time, original_info for the rest."""
    latest = max((t for t in times if t is not None), default=None)
    return ["updated_info" if t is not None and t == latest else "original_info" for t in times]


def linked(q: dict, links: list[dict]) -> bool:
    """A `supersedes` link from a record citing one of q's new turns to one citing an old turn."""
    new = {t for t, r in zip(q["evidence_turn_ids"], q["evidence_roles"]) if r == "updated_info"}
    old = set(q["evidence_turn_ids"]) - new
    return any(link["kind"] == "supersedes" and link["conversation_id"] == q["conversation_id"]
               and new & set(link["new_turns"]) and old & set(link["old_turns"]) for link in links)


def measure(store_dir: Path, overrides: list[str], embedder: Embedder) -> dict:
    cfg = config(*overrides)
    asked, links = update_questions(store_dir, cfg), link_rows(store_dir, cfg)
    out: dict = {"questions": len(asked), "linked": sum(linked(q, links) for q in asked)}
    for label, validity in (("before", "false"), ("after", "true")):
        cfg = config(*overrides, f"retrieval.validity={validity}")
        with Memory(cfg, open_store(str(store_dir), cfg), embedder=embedder) as memory:
            rows = [judge(q, memory.recall(q["conversation_id"], q["question"]).items) for q in asked]
        out[label] = {key: sum(r[key] for r in rows) for key in ("new_in_context", "old_absent_or_marked", "ok")}
    return out


def run(args) -> dict:
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-links-lme-"))
    embedder = Embedder(config().embedding)
    convs = segmented(config(), args.data, embedder)
    report: dict = {"data": args.data, "conversations": len(convs)}
    with fake_server() if args.llm else _nothing() as server:
        for name in ("rules", "fake_llm") if args.llm else ("rules",):
            extra = fake_llm_overrides(server.base_url) if name == "fake_llm" else []
            build_store(config(*extra), convs, work / name, embedder)
            report[name] = {**link_counts(work / name, config(*extra)), **measure(work / name, extra, embedder)}
    report["work_dir"] = str(work)
    return report


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=str(DATA), help="a LongMemEval JSON file (read only)")
    p.add_argument("--llm", action="store_true", help="also ingest through the fake OpenAI server")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    if not Path(args.data).is_file():
        raise SystemExit(f"bench_links_lme: no LongMemEval file at {args.data} (pass --data FILE)")
    report = run(args)
    save_report("links_lme", report)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
