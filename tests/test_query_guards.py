"""Inputs that used to give a plausible-looking wrong result: an empty question, and evidence
ids given as one string."""

from __future__ import annotations

import pytest

from lychee_ray.config import LycheeConfig
from lychee_ray.evaluate.questions import as_id_list
from lychee_ray.query.memory import Memory, QueryError


class StoreWithOneConversation:
    """Just enough of a Store for Memory to be built; any query would fail loudly."""

    def conversation_ids(self):
        return ["c1"]

    def __getattr__(self, name):
        raise AssertionError(f"the store was touched ({name}) for a question that has no words")


@pytest.mark.parametrize("question", ["", "   ", "?!", "...", "¿¡"])
def test_a_question_without_words_is_refused_before_any_search(question):
    memory = Memory(LycheeConfig(), StoreWithOneConversation())
    with pytest.raises(QueryError, match="has no words"):
        memory.search("c1", question)
    with pytest.raises(QueryError):
        memory.answer("c1", question)


@pytest.mark.parametrize(
    ("raw", "ids"),
    [
        ("D1:3", ["D1:3"]),
        ("D1:3, D2:7;D4:1", ["D1:3", "D2:7", "D4:1"]),
        (["D1:3", "D2:7"], ["D1:3", "D2:7"]),
        (None, []),
        ([], []),
        (["D1:3", None], ["D1:3"]),
    ],
)
def test_evidence_ids_are_never_split_into_characters(raw, ids):
    assert as_id_list(raw) == ids
