"""The labels as rows: questions, facts, changes and abstentions, with every turn named the way
the project's reader of the written format names it.

- LoCoMo: the `dia_id` "D<session>:<position>";
- LongMemEval: "s<rank>:<position>", rank being the session's place in date order (the reader
  renames sessions so; ours are dated in order, so the rank is the session number);
- generic chat and turn rows: the `turn_id` the files carry, "s<session>:<position>" too;
- BEAM: the message `id`, the message's 0-based index in the conversation, as text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from lychee_ray.synth.model import Conversation, Question, TurnRef

TurnNamer = Callable[[Conversation, TurnRef], str]


def locomo_turn_id(conv: Conversation, ref: TurnRef) -> str:
    return f"D{ref.session}:{ref.position}"


def session_turn_id(conv: Conversation, ref: TurnRef) -> str:
    return f"s{ref.session}:{ref.position}"


def message_index(conv: Conversation, ref: TurnRef) -> int:
    return sum(len(s.turns) for s in conv.sessions[: ref.session - 1]) + ref.position - 1


def beam_turn_id(conv: Conversation, ref: TurnRef) -> str:
    return str(message_index(conv, ref))


@dataclass
class Labels:
    questions: list[dict] = field(default_factory=list)
    facts: list[dict] = field(default_factory=list)
    changes: list[dict] = field(default_factory=list)
    abstentions: list[dict] = field(default_factory=list)

    def extend(self, other: "Labels") -> None:
        self.questions += other.questions
        self.facts += other.facts
        self.changes += other.changes
        self.abstentions += other.abstentions


def conversation_labels(conv: Conversation, name: TurnNamer, conversation_id: str | None = None,
                        questions: list[tuple[Question, str]] | None = None) -> Labels:
    """Every label of `conv` under `conversation_id` (the reader's id for it); `questions`:
    (question, its id) when a format names them otherwise, else all of them."""
    cid = conversation_id or conv.conversation_id
    asked = questions if questions is not None else [(q, q.question_id) for q in conv.questions]
    return Labels(
        questions=[question_row(conv, q, name, cid, qid) for q, qid in asked],
        facts=[
            {
                "conversation_id": cid, "fact_id": f.fact_id, "subject": f.subject, "attribute": f.attribute, "value": f.value,
                "turn_id": name(conv, f.ref), "kind": f.kind, "expression": f.expression,
                "date": f.date.isoformat() if f.date else None, "session_date": conv.session_date(f.ref).isoformat(),
            }
            for f in conv.facts
        ],
        changes=[
            {
                "conversation_id": cid, "subject": c.subject, "attribute": c.attribute, "kind": c.kind,
                "old_turn_id": name(conv, c.old.ref), "new_turn_id": name(conv, c.new.ref), "old_value": c.old.value,
                "new_value": c.new.value, "old_fact_id": c.old.fact_id, "new_fact_id": c.new.fact_id,
            }
            for c in conv.changes
        ],
        abstentions=[{"conversation_id": cid, "question_id": qid, "never_said": q.never_said} for q, qid in asked if q.never_said],
    )  # fmt: skip


def question_row(conv: Conversation, q: Question, name: TurnNamer, conversation_id: str, question_id: str) -> dict:
    """One line of questions.jsonl, which `lychee-ray evaluate --questions` reads."""
    evidence = q.evidence()
    return {
        "conversation_id": conversation_id,
        "question_id": question_id,
        "question": q.question,
        "answer": q.answer,
        "category": q.category,
        "evidence_turn_ids": [name(conv, ref) for ref, _ in evidence],
        "evidence_roles": [role for _, role in evidence],
        "question_date": conv.question_date.isoformat(),
        "fact_ids": [f.fact_id for f in q.facts],
    }
