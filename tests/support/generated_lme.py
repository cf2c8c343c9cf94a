"""One generated LongMemEval instance with its sessions named the way LongMemEval names them.

The generator (lychee_ray/synth) writes LongMemEval's format with neutral session ids
("<conversation>-s<n>"). LongMemEval's own ids are labels: `answer_<hash>_<n>` marks an
evidence session, `sharegpt_...` / `ultrachat_...` a filler one. The reader must rename
sessions so that no such label reaches a turn id, a prompt or a record, and a test of that needs
the labels in the input: `labelled_instance` puts them there (the naming scheme only, no
benchmark text).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from tests.support.generated import generate

LABEL_MARKERS = ("answer_", "sharegpt_", "ultrachat_")


@dataclass
class LabelledInstance:
    path: Path  # a LongMemEval JSON file holding this one instance
    instance: dict  # as written, session ids labelled
    question: dict  # its questions.jsonl row (evidence_turn_ids, category, ...)
    change: dict | None  # the planted change it asks about (knowledge_update), else None


def session_labels(instance: dict) -> dict[str, str]:
    """Neutral session id -> LongMemEval-style label: evidence sessions `answer_<hash>_<k>`,
    the others `sharegpt_<hash>_<k>`, numbered in file order."""
    digest = hashlib.sha1(instance["question_id"].encode()).hexdigest()[:8]
    evidence = set(instance["answer_session_ids"])
    labels = {}
    for k, sid in enumerate(instance["haystack_session_ids"], start=1):
        labels[sid] = f"{'answer' if sid in evidence else 'sharegpt'}_{digest}_{k}"
    return labels


def labelled_instance(tmp: Path, category: str = "knowledge_update", **overrides) -> LabelledInstance:
    """The first generated `category` question whose evidence turns are all the user's, as a
    one-instance LongMemEval file at `tmp/longmemeval.json` with labelled session ids."""
    params = {"conversations": 1, "sessions": 3, "style": "chitchat", **overrides}
    archive = generate(tmp / "generated", "longmemeval", **params)
    items = {i["question_id"]: i for i in json.loads((archive.archive / "longmemeval.json").read_text())}
    question, instance = next(
        (q, items[q["conversation_id"]]) for q in archive.asked(category) if _evidence_roles(items[q["conversation_id"]]) == {"user"}
    )
    labels = session_labels(instance)
    instance["haystack_session_ids"] = [labels[s] for s in instance["haystack_session_ids"]]
    instance["answer_session_ids"] = [labels[s] for s in instance["answer_session_ids"]]
    change = next((c for c in archive.labels["changes"] if c["conversation_id"] == question["conversation_id"]
                   and {c["old_turn_id"], c["new_turn_id"]} == set(question["evidence_turn_ids"])), None)  # fmt: skip
    path = tmp / "longmemeval.json"
    path.write_text(json.dumps([instance]))
    return LabelledInstance(path, instance, question, change)


def _evidence_roles(instance: dict) -> set[str]:
    return {t["role"] for s in instance["haystack_sessions"] for t in s if t.get("has_answer")}
