"""Read planning: the parts of the input that read tasks take, and which copy of an id is first.

Every input file is one part, read whole by one task and by its content (any format, compressed
or not), and so is every BEAM conversation folder (its files read together), except a plain JSON
Lines file larger than `read.split_bytes`: that one is cut into byte
ranges of about that size at line starts, each read by a task of its own and streamed
(`decode.iter_range_lines`). A range must know the number of its first line, since messages,
error ids and anonymous ids name lines: each range but a file's last is counted by a cheap task
(`count_newlines`: bytes, no parsing) and `number_parts` adds the counts up. Whether a file is
JSON Lines is decided as a whole-file read decides it (`decode.json_layout`), without parsing the
file: its first line is a JSON value of its own and more follows, so the file cannot be one JSON
document. Anything else (a document, compressed or Parquet data, a first line longer than the
peek) stays one part. The driver plans (`plan_parts`), tasks read.

`Place` is where one copy of a conversation was read: the file's rank in the sorted listing and
its line or item. `FirstCopies` keeps, per conversation id, the first place in each file: that is
how a read split into many parts, run in any order, keeps the same copy as a one-task read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import NamedTuple

from lychee_ray.io.fs import display_uri, resolve_uri
from lychee_ray.io.readers.common import source_key
from lychee_ray.io.readers.decode import BOM, is_packed, loads_any_depth

_JSON_SPACE = b" \t\r\n"  # what a JSON parser skips between values (str.strip would skip more)
_SCAN = 1 << 16  # bytes read at a time while looking for the next line start


@dataclass(frozen=True)
class FilePart:
    """What one read task takes: a whole file, or the byte range [start, end) of a JSON Lines
    file, which begins at a line start and whose first line is number `first_line`."""

    uri: str  # what the task opens: a path or a URI, with any credentials and query it needs
    path: str  # how messages and `source_file` name the file (`display_uri`: no credentials)
    key: str  # `source_key`: the path relative to the input root, which ids hash
    index: int = 0  # the file's rank in the sorted listing: orders the copies of an id
    start: int = 0
    end: int | None = None  # None: the whole file, read by content
    first_line: int = 1  # 0 for a range not numbered yet (`number_parts`)
    folder: str | None = None  # a folder read as one conversation: its format ("beam")

    @property
    def is_range(self) -> bool:
        return self.end is not None


class Place(NamedTuple):
    """Where one copy of a conversation was read; copies compare by file rank, then line."""

    index: int
    where: int  # line (JSON Lines, Parquet row) or 1-based item (a JSON document); 0: unknown
    path: str
    key: str
    unit: str = "line"  # what `where` counts: "line" or "item"

    @property
    def line(self) -> int | None:
        return self.where or None

    def __str__(self) -> str:
        if not self.where:
            return self.path
        return f"{self.path}:{self.where}" if self.unit == "line" else f"{self.path} item {self.where}"


def whole_part(uri: str, index: int = 0, root: str | None = None) -> FilePart:
    return FilePart(uri=uri, path=display_uri(uri), key=source_key(uri, root), index=index)


# --------------------------------------------------------------------------------------------
# Planning (driver)
# --------------------------------------------------------------------------------------------
def plan_parts(files: Iterable[str], root: str | None, split_bytes: int) -> list[FilePart]:
    """One part per file, or several ranges for a JSON Lines file over `split_bytes` (0: never);
    one part per folder the listing marks as read whole (`listing.InputFile.folder`: BEAM). A
    file's size comes from the listing (`listing.InputFile.size`) when it knows it."""
    parts: list[FilePart] = []
    for index, uri in enumerate(files):
        part = whole_part(str(uri), index, root)
        if folder := getattr(uri, "folder", None):
            parts.append(replace(part, folder=folder))
        else:
            parts += _ranges(part, getattr(uri, "size", None), split_bytes)
    return parts


def _ranges(part: FilePart, size: int | None, split_bytes: int) -> list[FilePart]:
    if not split_bytes or (size is not None and size <= split_bytes):
        return [part]
    try:
        fs, path = resolve_uri(part.uri)
        size = fs.get_file_info(path).size if size is None else size
        if size is None or size <= split_bytes:
            return [part]
        with fs.open_input_file(path) as fh:
            if not _is_json_lines(fh.read(min(size, _peek_bytes(split_bytes)))):
                return [part]
            bounds = _line_starts(fh, size, split_bytes)
    except OSError:
        return [part]  # its read task names the problem
    if len(bounds) < 3:  # no line start after the first cut: one range is the whole file
        return [part]
    return [replace(part, start=a, end=b, first_line=1 if a == 0 else 0) for a, b in zip(bounds, bounds[1:])]


def _peek_bytes(split_bytes: int) -> int:
    # the first line must end within this; 16 MiB at most: the driver parses that line
    return max(1 << 16, min(split_bytes, 16 << 20))


def _is_json_lines(head: bytes) -> bool:
    """Whether a file starting with `head` reads as JSON Lines whatever follows: its first line
    with content is one whole JSON value and more content follows it. A whole-file read then
    finds "extra data" after that value and reads line by line too (`decode.json_layout`)."""
    if is_packed(head):
        return False
    text, pos = head.removeprefix(BOM), 0
    while (cut := text.find(b"\n", pos)) >= 0:
        line, pos = text[pos:cut], cut + 1
        if not line.strip(_JSON_SPACE):
            continue
        if not text[pos:].strip(_JSON_SPACE):
            return False  # nothing after it within the peek: it may be a one-line document
        try:
            loads_any_depth(line.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):
            return False
        return True
    return False


def _line_starts(fh, size: int, split_bytes: int) -> list[int]:
    """0, the first line start at or after each multiple of `split_bytes`, and `size`."""
    bounds = [0]
    for cut in range(split_bytes, size, split_bytes):
        if cut <= bounds[-1]:
            continue  # a long line already took the range past this cut
        start = _next_line_start(fh, cut)
        if start >= size:
            break
        bounds.append(start)
    return bounds + [size]


def _next_line_start(fh, cut: int) -> int:
    """The first line start at or after `cut`: just past the first newline at or after cut - 1."""
    pos = cut - 1
    fh.seek(pos)
    while chunk := fh.read(_SCAN):
        if (nl := chunk.find(b"\n")) >= 0:
            return pos + nl + 1
        pos += len(chunk)
    return pos


def parts_to_count(parts: list[FilePart]) -> list[FilePart]:
    """The ranges whose newline count the next range's first line needs: all but each file's last."""
    return [p for p, nxt in zip(parts, parts[1:]) if p.is_range and nxt.is_range and nxt.uri == p.uri and nxt.start == p.end]


def number_parts(parts: list[FilePart], counts: list[int]) -> list[FilePart]:
    """`parts` with every range's first line set, from the newline counts of `parts_to_count`."""
    lines_in = {(p.uri, p.start): n for p, n in zip(parts_to_count(parts), counts)}
    numbered, line = [], 1
    for part in parts:
        if part.is_range:
            line = 1 if part.start == 0 else line
            numbered.append(replace(part, first_line=line))
            line += lines_in.get((part.uri, part.start), 0)
        else:
            numbered.append(part)
    return numbered


# --------------------------------------------------------------------------------------------
# Which copy of a conversation id is kept
# --------------------------------------------------------------------------------------------
class FirstCopies:
    """Per conversation id, the first place it was read in each file. A later copy is told the
    place of the copy kept before it: the first in its own file when there is an earlier one
    there (what a read of that one file says), else the first anywhere. Places compare by
    listing order, not by arrival, so tasks that finish in any order agree with a one-task read
    once every copy is registered. Plain Python: the ingest job runs it as a Ray actor."""

    def __init__(self):
        self.places: dict[str, list[Place]] = {}  # id -> first place per file (mostly one)

    def register(self, ids: list[str], places: list[Place]) -> None:
        for cid, place in zip(ids, places):
            seen = self.places.setdefault(cid, [])
            for k, old in enumerate(seen):
                if old.key == place.key:
                    seen[k] = min(old, place)
                    break
            else:
                seen.append(place)

    def firsts(self, ids: list[str], places: list[Place]) -> list[Place | None]:
        """For each copy: None when it is the one kept, else the place of the one kept before it."""
        out = []
        for cid, place in zip(ids, places):
            seen = self.places.get(cid, [])
            same = next((p for p in seen if p.key == place.key), None)
            first = same if same is not None and same < place else min(seen, default=None)
            out.append(first if first is not None and first < place else None)
        return out

    def claim(self, ids: list[str], places: list[Place]) -> list[Place | None]:
        """`register` then `firsts`: in order, so of two copies in one call the later is told."""
        self.register(ids, places)
        return self.firsts(ids, places)

    def group_firsts(self, ids: list[str], places: list[Place]) -> list[Place | None]:
        """For conversations made of turn rows: a conversation object read under the same id is
        kept over them (the one in the group's first file, if any), wherever its rows lie."""
        out = []
        for cid, place in zip(ids, places):
            seen = self.places.get(cid, [])
            out.append(next((p for p in seen if p.key == place.key), min(seen, default=None)))
        return out
