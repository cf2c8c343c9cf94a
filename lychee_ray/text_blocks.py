"""The blocks of a long message, with their character spans: fenced code (whole), markdown tables
(whole), list items, paragraphs. The one block splitter: the rules backend picks an assistant's
concrete blocks from it (rules/deliverables.py) and ingest packs blocks into passages for
embedding (ingest/passages.py), so a code block, a table or a list item is never cut where it fits.
Pure, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_FENCE_RE = re.compile(r"```([\w+-]*)[^\n]*\n.*?(?:```[^\n]*|\Z)", re.S)
_PARAGRAPH_BREAK_RE = re.compile(r"\n[ \t]*\n")
_LIST_ITEM_RE = re.compile(r"^[ \t]*(?:[-*\u2022]|\d+[.)])[ \t]+", re.M)
_TABLE_LINE_RE = re.compile(r"^[ \t]*\|.*\|[ \t]*$", re.M)
_SENTENCE_END_RE = re.compile(r"(?<=[^\d\s][.!?])\s+")  # "1." of a list item ends no sentence


@dataclass(frozen=True)
class Block:
    start: int  # character span in the message
    end: int
    kind: str  # code | table | item | paragraph | sentence
    lang: str | None = None  # a code block's language ("" when unnamed)

    def text(self, message: str) -> str:
        return message[self.start : self.end]


def blocks(message: str) -> list[Block]:
    """The message's blocks in order, whitespace-only stretches left out."""
    out: list[Block] = []
    pos = 0
    for m in _FENCE_RE.finditer(message):
        out += _prose(message, pos, m.start())
        out.append(Block(m.start(), m.end(), "code", m.group(1)))
        pos = m.end()
    out += _prose(message, pos, len(message))
    return [b for b in out if message[b.start : b.end].strip()]


def _prose(message: str, start: int, end: int) -> list[Block]:
    out: list[Block] = []
    para_start = start
    for brk in [*_PARAGRAPH_BREAK_RE.finditer(message, start, end), None]:
        para_end = brk.start() if brk else end
        out += _paragraph(message, para_start, para_end)
        para_start = brk.end() if brk else end
    return out


def _paragraph(message: str, start: int, end: int) -> list[Block]:
    text = message[start:end]
    if not text.strip():
        return []
    if all(_TABLE_LINE_RE.fullmatch(line) for line in text.strip().splitlines()):
        return [_trimmed(message, start, end, "table")]
    items = list(_LIST_ITEM_RE.finditer(text))
    if not items:
        return [_trimmed(message, start, end, "paragraph")]
    out = []
    if items[0].start() > 0:  # a lead-in line before the first item
        out.append(_trimmed(message, start, start + items[0].start(), "paragraph"))
    for m, nxt in zip(items, [*items[1:], None]):
        out.append(_trimmed(message, start + m.start(), start + (nxt.start() if nxt else len(text)), "item"))
    return [b for b in out if b.end > b.start]


def _trimmed(message: str, start: int, end: int, kind: str) -> Block:
    while start < end and message[start].isspace():
        start += 1
    while end > start and message[end - 1].isspace():
        end -= 1
    return Block(start, end, kind)


def sentences(message: str, block: Block) -> list[Block]:
    """A prose block's sentences (a code block's or table's lines), as blocks of their own."""
    text = message[block.start : block.end]
    if block.kind in ("code", "table"):
        spans = [(m.start(), m.end()) for m in re.finditer(r"[^\n]+", text)]
    else:
        cuts = [0, *(m.end() for m in _SENTENCE_END_RE.finditer(text)), len(text)]
        spans = list(zip(cuts, cuts[1:]))
    return [_trimmed(message, block.start + a, block.start + b, "sentence") for a, b in spans if text[a:b].strip()]
