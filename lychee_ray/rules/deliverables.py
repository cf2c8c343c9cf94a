"""What the rules backend remembers of an assistant's reply: what it concretely proposed or
delivered (names, numbers, commands, versions, settings, file names, code), not its generic
advice.

A long assistant reply is mostly explanation ("Make sure to test your changes"); one record per
sentence turned a BEAM conversation of 380 turns into ~10,000 records of boilerplate. Here the
reply is cut into blocks (lychee_ray/text_blocks.py: paragraphs, list items, tables, fenced code
kept whole), each block keeps only
its sentences that hold something concrete, and the most concrete blocks become the records:
at most `MAX_ASSISTANT_RECORDS` per reply, in reply order. Pure, no I/O.
"""

from __future__ import annotations

import re

from lychee_ray.text_blocks import Block, blocks, sentences

MAX_ASSISTANT_RECORDS = 6  # per reply: what a reader would note down from one long answer
MAX_BLOCK_CHARS = 400  # a record's text, as the LLM schema bounds it (encoder.max_record_chars)
_ITEM_MARKER_RE = re.compile(r"^(?:[-*\u2022]|\d+[.)])\s+")

# what makes a sentence concrete: a value a user could later ask back
_CONCRETE = [
    re.compile(r"`[^`\n]+`"),  # inline code: a command, a name, a setting
    re.compile(r"\b\d+(?:\.\d+){1,3}\b"),  # a version or dotted number
    re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:%|ms|s|sec|secs|seconds|min|minutes|h|hours|days|weeks|KB|MB|GB|TB|k|K|x|px|USD|EUR)\b"),
    re.compile(r"[$\u20ac\u00a3]\s?\d"),  # an amount
    re.compile(r"\b\d{2,}\b"),  # a number worth remembering (ports, counts, sizes)
    re.compile(r"\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"),  # snake_case identifiers
    re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]+\b|\b[A-Z][a-z]+[A-Z][A-Za-z]+\b"),  # camelCase, PascalCase names
    re.compile(r"\b[\w./-]+\.(?:py|js|ts|tsx|java|go|rs|rb|json|ya?ml|toml|ini|cfg|txt|md|sql|sh|csv|html|css|lock)\b"),
    re.compile(r"https?://\S+|\b[\w-]+/[\w./-]+\b"),  # URLs and paths
    re.compile(r"(?<=[a-z,] )[A-Z][A-Za-z0-9]{2,}(?:\s[A-Z][A-Za-z0-9]+)*"),  # a capitalized name inside a sentence
]


def concreteness(text: str) -> int:
    """How many concrete things the text names (see `_CONCRETE`)."""
    return sum(len(rx.findall(text)) for rx in _CONCRETE)


def condensed(message: str, block: Block) -> str:
    """A block as a record's text: code as its language and lines joined, prose as its concrete
    sentences (a list item's marker dropped); cut to MAX_BLOCK_CHARS at a word boundary."""
    if block.kind == "code":
        lines = [s.text(message).strip() for s in sentences(message, block)]
        lines = [line for line in lines if not line.startswith(("```", "#"))]
        text = f"code ({block.lang or 'text'}): " + "; ".join(lines)
    else:
        parts = [s.text(message) for s in sentences(message, block)]
        text = " ".join(" ".join(p.split()) for p in parts if concreteness(p))
        text = _ITEM_MARKER_RE.sub("", text)
    if len(text) > MAX_BLOCK_CHARS:
        text = text[:MAX_BLOCK_CHARS].rsplit(" ", 1)[0] + " ..."
    return text.replace("**", "")


def deliverables(reply: str, limit: int = MAX_ASSISTANT_RECORDS) -> list[str]:
    """The texts of an assistant reply worth a record: its most concrete blocks (ties to the
    earlier one), at most `limit`, in reply order. Empty when nothing in it is concrete."""
    scored = [(concreteness(b.text(reply)), i, b) for i, b in enumerate(blocks(reply))]
    kept = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:limit]
    return [text for _, _, b in sorted(kept, key=lambda s: s[1]) if (text := condensed(reply, b))]
