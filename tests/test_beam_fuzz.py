"""Hypothesis fuzz of the BEAM reader: folders with batches that are no objects, missing or
wrong-type keys, bad anchors, messages without id or text, repeated ids, junk questions and
evidence ids that name no message.

Invariants: the read never raises; the folder is one `beam` conversation; every message of a
batch is a turn or a dropped-turn errors row (`store.rows.is_dropped_turn`), and every batch that
is no object, and every `turns` that is no list, has its own row; every question object with a
question text is a question whose evidence ids are stored turns with a role each; no generation
marker is left in a turn; every errors row names one of the folder's two files.

LYCHEE_FUZZ_EXAMPLES raises the example count for a nightly run (default 25, CI-sized).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.files import iter_conversations, list_input_files
from lychee_ray.store.rows import is_dropped_turn

from .support.beam_folder import write_beam

CFG = ReadConfig(max_turn_tokens=64)
junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=False), st.text(max_size=6), st.lists(st.integers(0, 9), max_size=3), st.just({}))
words = st.text(st.characters(whitelist_categories=("L", "Nd", "Zs", "P")), min_size=1, max_size=30)
anchors = st.one_of(st.sampled_from(["March-15-2024", "December-01-2023", "May-2-2024", "February-30-2024", "soon", ""]), junk)


@st.composite
def message(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(junk)  # a message that is no object
    m = {}
    if draw(st.booleans()) or draw(st.booleans()):
        m["id"] = draw(st.one_of(st.integers(0, 40), st.integers(0, 40).map(str), junk))
    if draw(st.integers(0, 5)):
        m["role"] = draw(st.sampled_from(["user", "assistant", ""]) | junk)
    if draw(st.integers(0, 6)):
        text = draw(words)
        m["content"] = draw(st.sampled_from([text, f"{text} ->-> 1,{len(text)}", f"{text}->->  2,3 ", "  ->-> 4,4"]) | junk)
    if draw(st.booleans()):
        m["time_anchor"] = draw(anchors)
    return m


@st.composite
def batch(draw):
    if draw(st.integers(0, 7)) == 0:
        return draw(junk)
    b = {}
    if draw(st.integers(0, 4)):
        b["batch_number"] = draw(st.integers(1, 4) | junk)
    if draw(st.booleans()):
        b["time_anchor"] = draw(anchors)
    if draw(st.integers(0, 6)):
        groups = st.lists(st.lists(message(), max_size=4) | message(), max_size=4)
        b["turns"] = draw(groups | junk)
    return b


@st.composite
def question(draw):
    if draw(st.integers(0, 8)) == 0:
        return draw(junk)
    q = {"question": draw(words | junk), "difficulty": draw(st.sampled_from(["easy", "hard"]) | junk)}
    ids = st.lists(st.integers(0, 40) | st.integers(0, 40).map(str) | junk, max_size=4)
    q["source_chat_ids"] = draw(ids | st.lists(ids, max_size=2) | st.dictionaries(st.sampled_from(["first_event", "updated_info"]), ids, max_size=2) | junk)
    q["rubric"] = draw(st.lists(words | junk, max_size=3) | junk)
    q[draw(st.sampled_from(["answer", "ideal_answer", "ideal_response", "ideal_summary", "other"]))] = draw(words | junk)
    if draw(st.integers(0, 5)) == 0:
        q["question_date"] = draw(anchors)
    return q


questions_doc = st.one_of(
    st.dictionaries(st.sampled_from(["abstention", "knowledge_update", "event_ordering", "not_an_ability"]), st.lists(question(), max_size=3) | junk, max_size=4),
    junk,
)


def messages_in(chat: list) -> int:
    """The messages BEAM's schema holds: every item of a batch's `turns` list, or of its lists."""
    n = 0
    for b in chat:
        if isinstance(b, dict) and isinstance(b.get("turns"), list):
            n += sum(len(g) if isinstance(g, list) else 1 for g in b["turns"])
    return n


@settings(max_examples=int(os.environ.get("LYCHEE_FUZZ_EXAMPLES", "25")), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chat=st.lists(batch(), max_size=5), questions=questions_doc)
def test_no_beam_folder_raises_and_every_message_is_accounted_for(chat, questions):
    with tempfile.TemporaryDirectory() as tmp:
        folder = write_beam(Path(tmp) / "100K" / "1", json.dumps(chat), json.dumps(questions))  # as written: null too
        (conv,) = list(iter_conversations(list_input_files(tmp), CFG, root=tmp))
        assert (conv.conversation_id, conv.source) == ("beam-100K-1", "beam")
        files = {str(folder / "chat.json"), str(folder / "probing_questions" / "probing_questions.json")}
        assert all(e["source_file"] in files and e["conversation_id"] == conv.conversation_id for e in conv.errors)
        whole = [t for t in conv.turns if "#p" not in t.turn_id]  # a split turn counts once
        assert len(whole) + sum(is_dropped_turn(e) for e in conv.errors) == messages_in(chat)
        fields = {e["field"] for e in conv.errors}
        for k, b in enumerate(chat):
            if not isinstance(b, dict):
                assert f"[{k}]" in fields
            elif not isinstance(b.get("turns"), list):
                assert f"[{k}].turns" in fields
        assert not any("->->" in t.text for t in conv.turns)
        stored = {t.turn_id for t in conv.turns}
        for q in conv.questions:
            assert set(q.evidence_turn_ids) <= stored and len(q.evidence_roles) == len(q.evidence_turn_ids)
        asked = [q for items in (questions.values() if isinstance(questions, dict) else []) if isinstance(items, list) for q in items]
        assert len(conv.questions) == sum(1 for q in asked if isinstance(q, dict) and isinstance(q.get("question"), (str, int, float)) and not isinstance(q.get("question"), bool) and str(q["question"]).strip())
