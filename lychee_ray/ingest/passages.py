"""Passages: a long turn cut into pieces the embedding model reads whole.

MiniLM reads 256 word pieces; a 2,000-token assistant reply embedded as one text is embedded by
its first few sentences, and whatever it says later is found by BM25 alone. So a turn longer than
`embedding.passage_tokens` (counted by the embedding model's own tokenizer) is packed into
passages: consecutive blocks (lychee_ray/text_blocks.py: a code block, a table or a list item is
kept whole where it fits) up to the limit, a block over the limit cut at its sentences (lines of
code), a sentence over it at words. Each passage is a character span of the turn's text, stored
with its vector (the `passages` table); a turn is found by its best passage, and the raw-turn
evidence of a long turn is the passage, not the whole turn. Pure, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lychee_ray.tables import Passage, Turn
from lychee_ray.text_blocks import Block, blocks, sentences

Span = tuple[int, int]


@dataclass
class TurnPassage:
    row: Passage  # its row (no conversation id: the rows builder sets it)
    text: str  # the turn's text[char_start:char_end], what is embedded


def turn_passages(turns: Sequence[Turn], limit: int | None, count_many: Callable[[list[str]], list[int]]) -> list[TurnPassage]:
    """The passages of every turn longer than `limit` tokens (by `count_many`, the embedding
    model's tokenizer), in turn order; none when `limit` is None."""
    if not limit or not turns:
        return []
    sizes = count_many([t.text for t in turns])
    out: list[TurnPassage] = []
    for turn, size in zip(turns, sizes):
        if size <= limit:
            continue
        spans = passage_spans(turn.text, limit, lambda piece: count_many([piece])[0])
        for k, (start, end) in enumerate(spans):
            row = Passage(turn_id=turn.turn_id, passage_idx=k, char_start=start, char_end=end)
            out.append(TurnPassage(row, turn.text[start:end]))
    return out


def passage_spans(text: str, limit: int, count: Callable[[str], int]) -> list[Span]:
    """Character spans of `text`'s passages, in order, each at most `limit` tokens by `count`
    (a single word over it stays alone); [] when the whole text fits one passage."""
    if count(text) <= limit:
        return []
    pieces: list[Span] = []
    for block in blocks(text):
        pieces += _fitting(text, block, limit, count)
    return _packed(text, pieces, limit, count)


def _fitting(text: str, block: Block, limit: int, count) -> list[Span]:
    """The block as one piece when it fits, else its sentences (lines), else their words."""
    if count(text[block.start : block.end]) <= limit:
        return [(block.start, block.end)]
    out: list[Span] = []
    for sent in sentences(text, block):
        if count(text[sent.start : sent.end]) <= limit:
            out.append((sent.start, sent.end))
        else:
            out += _words(text, sent.start, sent.end, limit, count)
    return out


def _words(text: str, start: int, end: int, limit: int, count) -> list[Span]:
    words = [(start + m.start(), start + m.end()) for m in re.finditer(r"\S+", text[start:end])]
    return _packed(text, words, limit, count)


def _packed(text: str, pieces: list[Span], limit: int, count) -> list[Span]:
    """Consecutive pieces joined greedily while the joined span stays within `limit`."""
    out: list[Span] = []
    for start, end in pieces:
        if out and count(text[out[-1][0] : end]) <= limit:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out
