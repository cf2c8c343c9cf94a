"""Record links on the generator's planted change chains: precision and recall, and what they cost.

1. `lychee-ray synth` writes a labelled archive; its labels.json lists every planted change
   (conversation, subject, attribute, kind supersedes | contradicts, old and new turn).
2. The archive is ingested in this process with the rules backend (the slot detector's links)
   and, with --llm, through the fake OpenAI server (the LLM path's links: the fake cites offered
   ids by a mechanical word-overlap rule, so those numbers show the wiring, not a model's skill).
3. A stored link counts as true when its later record cites the change's new turn, its earlier
   record the change's old turn, and its kind is the change's. Precision: true links / links;
   recall: changes with a true link / changes. Per kind, and per finder (found_by).
4. Build cost: LLM calls per segment and prompt tokens per call with link candidates offered
   (encoder.link_candidates, default 8) and without (0): under rules the o200k estimate of what an
   LLM encoder would be sent (build_stats.est_prompt_tokens), through the fake server the tokens
   it counted.

    python -m benchmarks.bench_links [--conversations 12] [--sessions 6] [--seed 5] [--llm] [--out DIR]

Prints the figures and writes them to benchmarks/results/links.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from benchmarks.links_common import build_cost, build_store, config, fake_llm_overrides, fake_server, link_rows, save_report, segmented
from lychee_ray.embedding import Embedder


def synth(out: Path, args) -> dict:
    cmd = [sys.executable, "-m", "lychee_ray.cli", "synth", "--out", str(out), "--format", "locomo", "--seed", str(args.seed),
           "--conversations", str(args.conversations), "--sessions", str(args.sessions), "--turns-per-session", "12", "--turn-words", "16"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads((out / "labels.json").read_text())


def score(links: list[dict], changes: list[dict]) -> dict:
    """Precision and recall of the links against the planted changes (module docstring, 3): all,
    per kind, and per finder (`by_finder`: each finder's links against every change)."""
    def true_for(link: dict) -> list[int]:
        return [n for n, c in enumerate(changes)
                if c["conversation_id"] == link["conversation_id"] and c["kind"] == link["kind"]
                and c["new_turn_id"] in (link["new_turns"] or []) and c["old_turn_id"] in (link["old_turns"] or [])]

    def block(mine: list[dict], planted: list[int]) -> dict:
        hits = [true_for(x) for x in mine]
        found = {n for h in hits for n in h} & set(planted)
        true_links = sum(1 for h in hits if h)
        return {"links": len(mine), "true_links": true_links, "changes": len(planted), "changes_found": len(found),
                "precision": round(true_links / len(mine), 3) if mine else None,
                "recall": round(len(found) / len(planted), 3) if planted else None}

    out: dict = {"all": block(links, list(range(len(changes))))}
    for kind in ("supersedes", "contradicts"):
        out[kind] = block([x for x in links if x["kind"] == kind], [n for n, c in enumerate(changes) if c["kind"] == kind])
    out["by_finder"] = {finder: block([x for x in links if x["found_by"] == finder], list(range(len(changes))))
                        for finder in sorted({x["found_by"] for x in links})}
    out["found_by"] = dict(Counter(x["found_by"] for x in links))
    out["false_links"] = [{"kind": x["kind"], "old_turns": x["old_turns"], "new_turns": x["new_turns"], "conversation_id": x["conversation_id"]}
                          for x in links if not true_for(x)][:20]
    return out


def per_call(cost: dict) -> dict:
    calls, segments = cost["calls"], cost["segments"]
    return {
        "segments": segments, "llm_calls": calls, "calls_per_segment": round(calls / segments, 3) if segments else None,
        "prompt_tokens_per_call": round(cost["prompt_tokens"] / calls, 1) if calls else None,
        "est_prompt_tokens_per_segment": round(cost["est_prompt_tokens"] / segments, 1) if segments else None,
        "est_completion_tokens_per_segment": round(cost["est_completion_tokens"] / segments, 1) if segments else None,
        "link_ids_dropped": cost["dropped"],
    }


def run(args) -> dict:
    work = Path(args.out or tempfile.mkdtemp(prefix="bench-links-"))
    labels = synth(work / "synth", args)
    archive = str(work / "synth" / "archive")
    embedder = Embedder(config().embedding)
    convs = segmented(config(), archive, embedder)
    report: dict = {"archive": {"seed": args.seed, "conversations": args.conversations, "sessions": args.sessions,
                                "changes": dict(Counter(c["kind"] for c in labels["changes"]))}}
    for name, overrides in (("rules", []), ("rules_no_candidates", ["encoder.link_candidates=0"])):
        cfg = config(*overrides)
        build = build_store(cfg, convs, work / name, embedder)
        report[name] = {"build_s": round(build["wall_s"], 1), "cost": per_call(build_cost(work / name, cfg))}
        if name == "rules":
            report[name]["links"] = score(link_rows(work / name, cfg), labels["changes"])
    if args.llm:
        with fake_server() as server:
            for name, overrides in (("fake_llm", []), ("fake_llm_no_candidates", ["encoder.link_candidates=0", "encoder.rule_links=false"]),
                                    ("fake_llm_only", ["encoder.rule_links=false"])):
                cfg = config(*fake_llm_overrides(server.base_url), *overrides)
                build = build_store(cfg, convs, work / name, embedder)
                report[name] = {"build_s": round(build["wall_s"], 1), "cost": per_call(build_cost(work / name, cfg)),
                                "links": score(link_rows(work / name, cfg), labels["changes"])}
    report["work_dir"] = str(work)
    return report


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--conversations", type=int, default=12)
    p.add_argument("--sessions", type=int, default=6)
    p.add_argument("--seed", type=int, default=5)
    p.add_argument("--llm", action="store_true", help="also ingest through the fake OpenAI server (the LLM path's wiring)")
    p.add_argument("--out", default=None, help="work folder (default: a temporary one)")
    args = p.parse_args(argv)
    report = run(args)
    save_report("links", report)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
