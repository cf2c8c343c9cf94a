"""BEAM's layout (../shared/data/beam/README.md): a bucket folder holding conversations 1..n,
each `chat.json` (batches of message groups), `probing_questions/probing_questions.json` (the
ten abilities) and `topic.json`.

- chat.json: a list of batches {batch_number, time_anchor, turns: [[message, ...], ...]}, one
  batch per session and one group per user message and its reply. As in BEAM's own files the
  batch's time_anchor is null and the first message of the batch carries it ("March-15-2024").
  A message is {role, id, content}; `id` counts messages from 0 across the conversation, and the
  labels name turns by it. A user message that opens an exchange also has `index` ("<batch>,<n>")
  and `question_type` "main_question", and its text ends with " ->-> <batch>,<n>"; one that
  follows up on the reply before it has `question_type` "followup_question" and neither.
- probing_questions.json: {ability: [question]} for all ten abilities (an ability with no
  question has an empty list). A question has `question`, `difficulty`, `rubric` (nuggets), its
  reference under the key BEAM uses for the ability, and `source_chat_ids`: a flat list of
  message ids, or a dict by role for knowledge_update, contradiction_resolution and
  temporal_reasoning; abstention questions have none.
"""

from __future__ import annotations

from pathlib import Path

from lychee_ray.synth.calendar import beam_anchor
from lychee_ray.synth.formats import Written, role, write_json
from lychee_ray.synth.labels import Labels, beam_turn_id, conversation_labels, message_index
from lychee_ray.synth.model import Conversation, Question, Session

BUCKET = "synth"
ABILITIES = (
    "abstention", "contradiction_resolution", "event_ordering", "information_extraction", "instruction_following",
    "knowledge_update", "multi_session_reasoning", "preference_following", "summarization", "temporal_reasoning",
)  # fmt: skip
# the key of the reference answer, per ability, as BEAM's files have it
REFERENCE_KEY = {
    "abstention": "ideal_response", "contradiction_resolution": "ideal_answer", "summarization": "ideal_summary",
    "instruction_following": "expected_compliance", "preference_following": "expected_compliance",
}  # fmt: skip
ROLE_KEYED = {"knowledge_update", "contradiction_resolution", "temporal_reasoning"}


def ability(q: Question) -> str:
    if q.category == "temporal":
        return "temporal_reasoning" if "first_event" in q.roles else "information_extraction"
    return {
        "abstention": "abstention", "contradiction": "contradiction_resolution", "event_ordering": "event_ordering",
        "instruction": "instruction_following", "knowledge_update": "knowledge_update", "multi_hop": "multi_session_reasoning",
        "preference": "preference_following", "summarization": "summarization",
    }.get(q.category, "information_extraction")  # fmt: skip


def chat_batches(conv: Conversation) -> list[dict]:
    return [{"batch_number": s.number, "time_anchor": None, "turns": _groups(conv, s)} for s in conv.sessions]


def _groups(conv: Conversation, session: Session) -> list[list[dict]]:
    groups: list[list[dict]] = []
    opened = 0  # exchanges opened by a main question in this batch
    for t in session.turns:
        message: dict = {"role": role(conv, t), "id": message_index(conv, t.ref)}
        if t.ref.position == 1:
            message["time_anchor"] = beam_anchor(session.start)
        content = t.text
        if message["role"] == "user":
            if t.followup:
                message["question_type"] = "followup_question"
            else:
                opened += 1
                message["index"] = f"{session.number},{opened}"
                message["question_type"] = "main_question"
                content = f"{t.text} ->-> {session.number},{opened}"
            groups.append([])
        message["content"] = content
        groups[-1].append(message)
    return groups


def probing_question(conv: Conversation, q: Question) -> dict:
    kind = ability(q)
    entry = {"question": q.question, REFERENCE_KEY.get(kind, "answer"): q.answer, "difficulty": q.difficulty}
    evidence = q.evidence()
    if kind in ROLE_KEYED:
        by_role: dict[str, list[int]] = {}
        for ref, r in evidence:
            by_role.setdefault(r, []).append(message_index(conv, ref))
        entry["source_chat_ids"] = by_role
    elif kind != "abstention":
        entry["source_chat_ids"] = [message_index(conv, ref) for ref, _ in evidence]
    entry["rubric"] = q.rubric or [f"The answer states: {q.answer}"]
    return entry


def probing_questions(conv: Conversation) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {a: [] for a in ABILITIES}
    for q in conv.questions:
        found[ability(q)].append(probing_question(conv, q))
    return found


def write_beam(convs: list[Conversation], archive: Path, seed: int) -> Written:
    files, labels, folders = [], Labels(), {}
    for n, conv in enumerate(convs, start=1):
        folder = archive / BUCKET / str(n)
        files.append(write_json(folder / "chat.json", chat_batches(conv)))
        files.append(write_json(folder / "probing_questions" / "probing_questions.json", probing_questions(conv)))
        topic = {"id": n, "category": "Coding" if conv.style == "work" else "Chit-chat", "title": conv.title, "theme": conv.title, "subtopics": []}
        files.append(write_json(folder / "topic.json", topic))
        labels.extend(conversation_labels(conv, beam_turn_id))
        folders[conv.conversation_id] = f"{BUCKET}/{n}"
    return Written(files, labels, len(convs), sum(len(c.turns()) for c in convs), {"beam_folders": folders})
