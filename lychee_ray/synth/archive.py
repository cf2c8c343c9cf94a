"""`write_archive`: generate and write one archive, and say what was written.

The output folder holds
- `archive/`: the conversations in the chosen format (what `lychee-ray ingest --input` reads);
- `questions.jsonl`: every question, one per line, as `lychee-ray evaluate --questions` reads it
  (conversation_id, question_id, question, answer, category, evidence_turn_ids, evidence_roles,
  question_date, fact_ids), ids named as the format's reader names them;
- `labels.json`: the generator and its parameters, the planted facts (each with the turn that
  states it), the planted changes (`supersedes` / `contradicts`, old and new turn and value),
  the abstention questions with the term no turn contains, and for BEAM the folder of each
  conversation.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lychee_ray.synth.beam import write_beam
from lychee_ray.synth.formats import Written, write_chat, write_json, write_jsonl, write_locomo, write_longmemeval, write_turns, write_turns_parquet
from lychee_ray.synth.generate import generate
from lychee_ray.synth.model import Conversation
from lychee_ray.synth.params import SynthError, SynthParams

GENERATOR = "lychee_ray.synth"
ARCHIVE, QUESTIONS, LABELS = "archive", "questions.jsonl", "labels.json"
WRITERS = {
    "locomo": write_locomo, "longmemeval": write_longmemeval, "chat": write_chat, "turns": write_turns,
    "turns-parquet": write_turns_parquet, "beam": write_beam,
}  # fmt: skip
# every category the generator plants, by style (README of the categories: lychee_ray/synth/__init__.py)
CATEGORIES = {
    "chitchat": ("single_hop", "coreference", "multi_hop", "temporal", "knowledge_update", "contradiction", "abstention"),
    "work": ("single_hop", "assistant_recall", "preference", "instruction", "multi_hop", "temporal", "event_ordering",
             "knowledge_update", "contradiction", "summarization", "abstention"),
}  # fmt: skip


@dataclass
class ArchiveSummary:
    out: Path
    params: SynthParams
    styles: Counter
    written: Written

    def question_counts(self) -> Counter:
        return Counter(q["category"] for q in self.written.labels.questions)

    def render(self) -> str:
        p, w = self.params, self.written
        styles = ", ".join(f"{n} {s}" for s, n in sorted(self.styles.items()))
        files = [str(f.relative_to(self.out)) for f in w.files]
        shown = files[:6] + ([f"... and {len(files) - 6} more files"] if len(files) > 6 else [])
        changes = Counter(c["kind"] for c in w.labels.changes)
        lines = [
            f"synth archive in {self.out} (seed {p.seed}, format {p.format}): {p.conversations} conversations ({styles}), "
            f"{p.sessions} sessions of {p.turns_per_session} turns, turns of at least {p.turn_words} words",
            "files: " + ", ".join(shown + [QUESTIONS, LABELS]),
            f"as read: {w.conversations} conversations, {w.turns} turns",
            f"questions: {len(w.labels.questions)}",
            *[f"  {category:<17} {n}" for category, n in sorted(self.question_counts().items())],
            f"changes: {len(w.labels.changes)} ({', '.join(f'{n} {k}' for k, n in sorted(changes.items())) or 'none'})",
            f"facts: {len(w.labels.facts)}",
            f"ingest:   lychee-ray ingest --input {self.out / ARCHIVE} --out STORE",
            f"evaluate: lychee-ray evaluate --store STORE --questions {self.out / QUESTIONS} --out EVAL",
        ]
        return "\n".join(lines)


def write_archive(out: str | Path, params: SynthParams) -> ArchiveSummary:
    out = Path(out)
    _clear(out)
    conversations = generate(params)
    written = WRITERS[params.format](conversations, out / ARCHIVE, params.seed)
    write_jsonl(out / QUESTIONS, written.labels.questions)
    write_json(out / LABELS, labels_document(params, conversations, written))
    return ArchiveSummary(out, params, Counter(c.style for c in conversations), written)


def labels_document(params: SynthParams, conversations: list[Conversation], written: Written) -> dict:
    return {
        "generator": GENERATOR,
        "params": params.model_dump(),
        "input": ARCHIVE,
        "conversations": [
            {"conversation_id": c.conversation_id, "style": c.style, "title": c.title, "sessions": len(c.sessions), "turns": len(c.turns())}
            for c in conversations
        ],
        "facts": written.labels.facts,
        "changes": written.labels.changes,
        "abstentions": written.labels.abstentions,
        **written.extra,
    }


def _clear(out: Path) -> None:
    """An empty or new folder is used as is; one holding an earlier synth archive has it
    replaced; anything else is refused, so no one's files are deleted."""
    if not out.exists():
        return
    if not out.is_dir():
        raise SynthError(f"{out} is a file, not a folder")
    if not any(out.iterdir()):
        return
    try:
        earlier = json.loads((out / LABELS).read_text(encoding="utf-8")).get("generator")
    except (OSError, ValueError, AttributeError):
        earlier = None
    if earlier != GENERATOR:
        raise SynthError(f"{out} is not empty and holds no synth archive; choose an empty or new folder")
    shutil.rmtree(out / ARCHIVE, ignore_errors=True)
    for name in (QUESTIONS, LABELS):
        (out / name).unlink(missing_ok=True)
