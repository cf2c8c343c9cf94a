"""Long turns in passages the embedding model reads whole (ingest/passages.py), cut at the blocks
of lychee_ray/text_blocks.py: code, tables and list items stay whole where they fit."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.ingest.passages import passage_spans
from lychee_ray.text_blocks import blocks, sentences


def words(text: str) -> int:
    return len(text.split())


MESSAGE = "\n\n".join([
    "An opening paragraph of exactly ten words, no more, no less.",
    "1. First item with six words.\n2. Second item, also six words.",
    "| col a | col b |\n|---|---|\n| 1 | 2 |",
    "```python\ndef f(x):\n    return x + 1\n```",
    "A closing line.",
])


def test_blocks_are_typed_spans_in_order():
    got = blocks(MESSAGE)
    assert [b.kind for b in got] == ["paragraph", "item", "item", "table", "code", "paragraph"]
    assert got[4].lang == "python" and got[4].text(MESSAGE).endswith("```")
    assert [s.text(MESSAGE) for s in sentences(MESSAGE, got[1])] == ["1. First item with six words."]
    assert all(got[i].end <= got[i + 1].start for i in range(len(got) - 1))


def test_a_short_turn_has_no_passages_and_a_long_one_is_packed_at_block_boundaries():
    assert passage_spans("a short turn", 50, words) == []
    spans = passage_spans(MESSAGE, 14, words)
    texts = [MESSAGE[a:b] for a, b in spans]
    assert all(words(t) <= 14 for t in texts)
    code = next(t for t in texts if "def f(x)" in t)
    assert code.count("```") == 2  # the code block whole in one passage
    table = next(t for t in texts if "col a" in t)
    assert "| 1 | 2 |" in table  # the table whole


def test_an_oversized_block_is_cut_at_sentences_then_words():
    long_sentence = " ".join(f"w{i}" for i in range(30)) + "."
    text = "Short one. " + long_sentence + " Another short one."
    spans = passage_spans(text, 10, words)
    assert all(words(text[a:b]) <= 10 for a, b in spans)
    assert "".join(text[a:b] for a, b in spans).replace(" ", "") == text.replace(" ", "")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(["alpha", "beta.", "```", "\n", "\n\n", "- item", "| a |", "1.", "x" * 12]), min_size=1, max_size=120),
       st.integers(min_value=2, max_value=25))
def test_passages_cover_every_word_in_order_within_the_limit(tokens, limit):
    text = " ".join(tokens)
    spans = passage_spans(text, limit, words)
    if words(text) <= limit:
        assert spans == []
        return
    assert all(a < b for a, b in spans) and all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1))
    assert all(words(text[a:b]) <= limit or words(text[a:b]) == 1 for a, b in spans)
    covered = " ".join(text[a:b] for a, b in spans).split()
    assert covered == text.split()  # nothing lost, nothing repeated, in order
