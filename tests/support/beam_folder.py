"""Small BEAM-shaped folders with invented text, written by the tests themselves (the shared BEAM
data is never read by a test): a chat of batches, probing questions, and a topic file."""

from __future__ import annotations

import json
from pathlib import Path


def message(mid, role, text, **extra) -> dict:
    return {"role": role, "id": mid, "content": text, **extra}


def batch(number, anchor, turns, *, anchor_on="message") -> dict:
    """A batch whose anchor sits on its first message (as BEAM writes it) or on the batch."""
    out = {"batch_number": number, "time_anchor": anchor if anchor_on == "batch" else None, "turns": turns}
    if anchor_on == "message" and turns and turns[0] and isinstance(turns[0][0], dict):
        turns[0][0]["time_anchor"] = anchor
    return out


def small_chat() -> list:
    """Two batches, six messages (ids 0-5), generation markers at the end of user text."""
    return [
        batch(1, "April-02-2024", [
            [message(0, "user", "I am planning a rooftop garden for basil and chili peppers. ->-> 1,1", index="1,1"),
             message(1, "assistant", "Start with deep planters and a drip line.")],
            [message(2, "user", "The planters are cedar, 40 cm deep. ->->  1,2"), message(3, "assistant", "Cedar works well.")],
        ]),
        batch(2, "May-20-2024", [
            [message(4, "user", "I moved the chili peppers to the sunny corner ->-> 2,1"), message(5, "assistant", "Good, they like heat.")],
        ]),
    ]  # fmt: skip


def small_questions() -> dict:
    return {
        "information_extraction": [
            {"question": "How deep are the planters?", "answer": "40 cm", "difficulty": "easy", "rubric": ["says 40 cm"], "source_chat_ids": [2]},
        ],
        "knowledge_update": [
            {"question": "Where are the chili peppers now?", "answer": "the sunny corner", "difficulty": "medium",
             "rubric": ["sunny corner"], "source_chat_ids": {"original_info": [0], "updated_info": [4]}},
        ],
        "event_ordering": [
            {"question": "In what order did the garden steps happen?", "answer": "planters, then moving", "difficulty": "hard",
             "rubric": ["planters first", "moving second"], "source_chat_ids": [[0, 2], [4]]},
        ],
        "summarization": [{"question": "Sum up the garden talk.", "ideal_summary": "A rooftop garden.", "difficulty": "medium", "rubric": ["garden"], "source_chat_ids": []}],
        "abstention": [{"question": "What soil brand was bought?", "ideal_response": "Not mentioned.", "difficulty": "clear", "rubric": ["abstains"]}],
        "instruction_following": [{"question": "List the plants.", "difficulty": "easy", "rubric": ["a list"], "source_chat_ids": [0]}],
    }  # fmt: skip


def write_beam(folder: Path, chat=None, questions=None, *, truncated=None, topic=True) -> Path:
    """A BEAM conversation folder: chat.json, optionally chat_trunecated.json, the questions file
    (None: `small_questions`; a str is written as it is; False leaves probing_questions/ empty) and topic.json."""
    (folder / "probing_questions").mkdir(parents=True, exist_ok=True)
    (folder / "chat.json").write_text(chat if isinstance(chat, str) else json.dumps(small_chat() if chat is None else chat, indent=1))
    if truncated is not None:
        (folder / "chat_trunecated.json").write_text(json.dumps(truncated))
    if questions is not False:
        q = small_questions() if questions is None else questions
        (folder / "probing_questions" / "probing_questions.json").write_text(q if isinstance(q, str) else json.dumps(q))
    if topic:
        (folder / "topic.json").write_text(json.dumps({"id": 1, "title": "A rooftop garden"}))
    return folder
