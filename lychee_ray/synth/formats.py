"""Writers for the formats the project reads, each in the layout its reader takes
(`lychee_ray/io/readers/`): LoCoMo JSON, LongMemEval JSON, generic chat JSONL, turn rows (JSON
Lines, one file per day, and Parquet). BEAM's folders are `beam`'s.

Each writer returns what it wrote (`Written`): the files, the labels with the turn and
conversation ids its reader will give, and the conversations and turns the reader will find.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from lychee_ray.synth.calendar import locomo_stamp, longmemeval_stamp
from lychee_ray.synth.labels import Labels, conversation_labels, locomo_turn_id, session_turn_id
from lychee_ray.synth.model import Conversation, Question, Session, Turn

# LoCoMo's numbering (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial) as
# best fits; the exact category stays in questions.jsonl.
LOCOMO_CATEGORY = {
    "multi_hop": 1, "knowledge_update": 1, "contradiction": 1, "temporal": 2, "event_ordering": 2,
    "summarization": 3, "preference": 3, "instruction": 3, "single_hop": 4, "coreference": 4,
    "assistant_recall": 4, "abstention": 5,
}  # fmt: skip
# LongMemEval's question types; abstention keeps the type and gets the "_abs" id suffix
LONGMEMEVAL_TYPE = {
    "single_hop": "single-session-user", "coreference": "single-session-user", "abstention": "single-session-user",
    "assistant_recall": "single-session-assistant", "preference": "single-session-preference",
    "instruction": "single-session-preference", "multi_hop": "multi-session", "contradiction": "multi-session",
    "summarization": "multi-session", "temporal": "temporal-reasoning", "event_ordering": "temporal-reasoning",
    "knowledge_update": "knowledge-update",
}  # fmt: skip


@dataclass
class Written:
    files: list[Path]
    labels: Labels
    conversations: int  # as the reader will find them (LongMemEval: one per question)
    turns: int
    extra: dict = field(default_factory=dict)  # more for labels.json (BEAM's folders)


def write_json(path: Path, value) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    return path


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def role(conv: Conversation, turn: Turn) -> str:
    """user/assistant; a chit-chat's first speaker is the user where a format knows only roles."""
    if conv.style == "work":
        return turn.speaker
    return "user" if turn.speaker == conv.speaker_a else "assistant"


def speaker_name(conv: Conversation, turn: Turn) -> str:
    if conv.style == "work":
        return conv.speaker_a if turn.speaker == "user" else conv.speaker_b
    return turn.speaker


def all_labels(convs: list[Conversation], name) -> Labels:
    labels = Labels()
    for conv in convs:
        labels.extend(conversation_labels(conv, name))
    return labels


# --------------------------------------------------------------------------------------------
# LoCoMo
# --------------------------------------------------------------------------------------------
def write_locomo(convs: list[Conversation], archive: Path, seed: int) -> Written:
    samples = []
    for conv in convs:
        body: dict = {"speaker_a": conv.speaker_a, "speaker_b": conv.speaker_b}
        for s in conv.sessions:
            body[f"session_{s.number}_date_time"] = locomo_stamp(s.start)
            body[f"session_{s.number}"] = [
                {"speaker": speaker_name(conv, t), "dia_id": locomo_turn_id(conv, t.ref), "text": t.text} for t in s.turns
            ]
        qa = [{"question": q.question, "answer": q.answer, "evidence": [locomo_turn_id(conv, r) for r, _ in q.evidence()],
               "category": LOCOMO_CATEGORY[q.category]} for q in conv.questions]  # fmt: skip
        samples.append({"sample_id": conv.conversation_id, "conversation": body, "qa": qa})
    path = write_json(archive / "locomo.json", samples)
    return Written([path], all_labels(convs, locomo_turn_id), len(convs), sum(len(c.turns()) for c in convs))


# --------------------------------------------------------------------------------------------
# LongMemEval: one instance per question, the whole conversation as its haystack
# --------------------------------------------------------------------------------------------
def write_longmemeval(convs: list[Conversation], archive: Path, seed: int) -> Written:
    items, labels, turns = [], Labels(), 0
    for conv in convs:
        for q in conv.questions:
            instance = q.question_id + ("_abs" if q.category == "abstention" else "")
            items.append(longmemeval_instance(conv, q, instance, random.Random(f"{seed}:{instance}")))
            labels.extend(conversation_labels(conv, session_turn_id, instance, [(q, instance)]))
            turns += len(conv.turns())
    path = write_json(archive / "longmemeval.json", items)
    return Written([path], labels, len(items), turns)


def longmemeval_instance(conv: Conversation, q: Question, instance: str, rng: random.Random) -> dict:
    """The haystack in shuffled order, as LongMemEval's is not chronological (its reader sorts
    sessions by date); `has_answer` on the evidence turns."""
    evidence = {ref for ref, _ in q.evidence()}
    order = list(range(len(conv.sessions)))
    rng.shuffle(order)
    sessions = [conv.sessions[i] for i in order]

    def messages(s: Session) -> list[dict]:
        return [{"role": role(conv, t), "content": t.text, "has_answer": t.ref in evidence} for t in s.turns]

    session_id = {s.number: f"{conv.conversation_id}-s{s.number}" for s in conv.sessions}
    return {
        "question_id": instance,
        "question_type": LONGMEMEVAL_TYPE[q.category],
        "question": q.question,
        "answer": q.answer,
        "question_date": longmemeval_stamp(conv.question_date),
        "haystack_dates": [longmemeval_stamp(s.start) for s in sessions],
        "haystack_session_ids": [session_id[s.number] for s in sessions],
        "haystack_sessions": [messages(s) for s in sessions],
        "answer_session_ids": [session_id[n] for n in sorted({ref.session for ref in evidence})],
    }


# --------------------------------------------------------------------------------------------
# Generic chat JSONL: chit-chat as {turns: [{speaker, text}]}, work as OpenAI-style {messages}
# --------------------------------------------------------------------------------------------
def chat_line(conv: Conversation) -> dict:
    def item(s: Session, t: Turn) -> dict:
        common = {"turn_id": session_turn_id(conv, t.ref), "session_id": f"s{s.number}"}
        when = s.turn_time(t.ref.position).isoformat()
        if conv.style == "work":
            return {**common, "role": t.speaker, "content": t.text, "timestamp": when}
        return {**common, "speaker": t.speaker, "text": t.text, "timestamp": when}

    key = "messages" if conv.style == "work" else "turns"
    return {"conversation_id": conv.conversation_id, "title": conv.title, key: [item(s, t) for s in conv.sessions for t in s.turns]}


def write_chat(convs: list[Conversation], archive: Path, seed: int) -> Written:
    path = write_jsonl(archive / "conversations.jsonl", [chat_line(c) for c in convs])
    return Written([path], all_labels(convs, session_turn_id), len(convs), sum(len(c.turns()) for c in convs))


# --------------------------------------------------------------------------------------------
# Turn rows: one turn per row, JSON Lines one file per day (a conversation spans files), Parquet
# --------------------------------------------------------------------------------------------
def turn_rows(convs: list[Conversation]) -> list[dict]:
    """Every turn as a row, in time order across conversations, as a log would hold them."""
    rows = []
    for conv in convs:
        for idx, t in enumerate(conv.turns()):
            s = conv.sessions[t.ref.session - 1]
            rows.append({
                "conversation_id": conv.conversation_id, "turn_id": session_turn_id(conv, t.ref), "session_id": f"s{s.number}",
                "turn_idx": idx, "speaker": speaker_name(conv, t), "role": t.speaker if conv.style == "work" else None,
                "text": t.text, "timestamp": s.turn_time(t.ref.position),
            })  # fmt: skip
    return sorted(rows, key=lambda r: (r["timestamp"], r["conversation_id"], r["turn_idx"]))


def write_turns(convs: list[Conversation], archive: Path, seed: int) -> Written:
    by_day: dict[str, list[dict]] = {}
    for row in turn_rows(convs):
        line = {k: v for k, v in row.items() if v is not None}
        line["timestamp"] = row["timestamp"].isoformat()
        by_day.setdefault(row["timestamp"].date().isoformat(), []).append(line)
    files = [write_jsonl(archive / f"{day}.jsonl", rows) for day, rows in sorted(by_day.items())]
    return Written(files, all_labels(convs, session_turn_id), len(convs), sum(len(c.turns()) for c in convs))


TURN_SCHEMA = pa.schema([
    ("conversation_id", pa.string()), ("turn_id", pa.string()), ("session_id", pa.string()), ("turn_idx", pa.int64()),
    ("speaker", pa.string()), ("role", pa.string()), ("text", pa.string()), ("timestamp", pa.timestamp("s")),
])  # fmt: skip


def write_turns_parquet(convs: list[Conversation], archive: Path, seed: int) -> Written:
    path = archive / "turns.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(turn_rows(convs), schema=TURN_SCHEMA), path)
    return Written([path], all_labels(convs, session_turn_id), len(convs), sum(len(c.turns()) for c in convs))
