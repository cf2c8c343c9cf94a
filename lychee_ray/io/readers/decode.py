"""Bytes -> text a reader can parse, decided by content, never failing.

Gzip and zstd are unpacked by their magic bytes (a truncated stream still gives what came before
the damage), Parquet is recognised by its magic, bad UTF-8 is replaced and recorded per line, and
JSON nested deeper than the parser can follow is cut to null at MAX_DEPTH instead of raising.
`files.read_file` runs these in order; each returns its problem instead of raising, so one bad
file is one error row. Files are opened through pyarrow's filesystems (`io.fs`), so a path and an
``s3://`` or ``gs://`` URI read alike.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path

from lychee_ray.io.fs import open_input
from lychee_ray.io.readers.common import ErrorEntry

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd")
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}
_PARQUET_MAGIC = b"PAR1"
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark: no JSON, dropped from the start of a file
# Deeper than this, an array or object is cut to null when the parser runs out of recursion:
# well under Python's limit of 1,000 frames, so parsing and printing what is left is safe.
MAX_DEPTH = 400
_CHUNK = 1 << 16
RANGE_CHUNK = 4 << 20  # bytes per read of a byte range: one request each from an object store
_MAX_UTF8_ROWS = 100  # a binary file would otherwise give one bad_utf8 row per "line"
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{}]')  # strings whole (possessive: no backtracking), brackets


def bytes_unless_parquet(uri: str) -> bytes | None:
    """The file's bytes, or None for Parquet, which pyarrow reads from the file (not loaded whole
    here). `uri`: a path or any pyarrow filesystem URI."""
    with open_input(uri) as fh:
        if fh.read(4) == _PARQUET_MAGIC:
            return None
        fh.seek(0)
        return fh.read()


def iter_range_lines(uri: str, start: int, end: int) -> Iterator[bytes]:
    """The lines (without their newline) of bytes [start, end) of a file that start there, read
    in chunks: memory holds one chunk and the line being cut, never the range. `start` is a line
    start (`plan` cuts there); a last line with no newline is yielded too."""
    with open_input(uri) as fh:
        fh.seek(start)
        left, pending = end - start, []  # pending: the pieces of a line not ended yet
        while left > 0 and (chunk := fh.read(min(RANGE_CHUNK, left))):
            left -= len(chunk)
            cut = chunk.find(b"\n")
            if cut < 0:
                pending.append(chunk)
                continue
            pending.append(chunk[:cut])
            lines = chunk[cut + 1 :].split(b"\n")
            yield b"".join(pending)
            yield from lines[:-1]
            pending = [lines[-1]]
        if any(pending):
            yield b"".join(pending)


def count_newlines(uri: str, start: int, end: int) -> int:
    """How many lines end in bytes [start, end) of a file, read in chunks like `iter_range_lines`."""
    with open_input(uri) as fh:
        fh.seek(start)
        left, count = end - start, 0
        while left > 0 and (chunk := fh.read(min(RANGE_CHUNK, left))):
            left -= len(chunk)
            count += chunk.count(b"\n")
        return count


def split_lines(raw: bytes) -> Iterator[bytes]:
    """`raw.split(b"\\n")`, one line at a time (no second copy of a whole file in memory)."""
    pos = 0
    while (cut := raw.find(b"\n", pos)) >= 0:
        yield raw[pos:cut]
        pos = cut + 1
    yield raw[pos:]


def is_packed(head: bytes) -> bool:
    """Whether a file starting with `head` is Parquet, gzip or zstd: not text to cut at newlines."""
    return head[:4] == _PARQUET_MAGIC or head[:2] in _MAGIC or head[:4] in _MAGIC


def unpacked(raw: bytes) -> tuple[bytes, list[str], str | None]:
    """Gzip or zstd content unpacked (by magic bytes, nested up to 3 deep): (bytes, codecs, problem)."""
    codecs: list[str] = []
    while len(codecs) < 3 and (codec := _MAGIC.get(raw[:2]) or _MAGIC.get(raw[:4])):
        codecs.append(codec)
        raw, problem = (_gunzip if codec == "gzip" else _unzstd)(raw)
        if problem:
            return raw, codecs, problem
    return raw, codecs, None


def _gunzip(raw: bytes) -> tuple[bytes, str | None]:
    """gzip (zlib's gzip mode: the gzip module drops the part it had decoded when the stream
    breaks), fed in chunks so a truncated or corrupt file still gives what came before the damage;
    a file may hold several gzip members one after another."""
    out: list[bytes] = []
    rest = raw
    while rest[:2] == b"\x1f\x8b":
        member = zlib.decompressobj(wbits=31)
        pos = 0
        try:
            while not member.eof and pos < len(rest):
                out.append(member.decompress(rest[pos : pos + _CHUNK]))
                pos += _CHUNK
        except zlib.error as exc:
            return b"".join(out), f"is corrupt ({exc})"
        if not member.eof:
            return b"".join(out), "is truncated"
        rest = member.unused_data + rest[pos:]
    return b"".join(out), None


def _unzstd(raw: bytes) -> tuple[bytes, str | None]:
    import pyarrow as pa

    out = bytearray()
    try:
        with pa.CompressedInputStream(pa.BufferReader(raw), "zstd") as stream:
            while chunk := stream.read(_CHUNK):
                out += chunk
    except (pa.ArrowException, OSError) as exc:
        return bytes(out), f"is corrupt or truncated ({exc})"
    return bytes(out), None


def inner_suffix(path: str) -> str:
    """The suffix that names the content: "a.jsonl.gz" -> ".jsonl"."""
    suffixes = [s.lower() for s in Path(path).suffixes]
    while suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def sniff_format(raw: bytes, suffix: str) -> str:
    """"parquet", "json" or "unsupported", from the content first and the name second."""
    if raw[:4] == _PARQUET_MAGIC:
        return "parquet"
    if raw[:4096].removeprefix(b"\xef\xbb\xbf").lstrip()[:1] in (b"{", b"["):
        return "json"
    if suffix in JSON_SUFFIXES:
        return "json"  # broken JSON still gives its errors line by line
    if suffix == ".parquet":
        return "parquet"  # a broken Parquet file: read_turn_parquet names the problem
    return "unsupported"


def unsupported_message(path: str, codecs: list[str]) -> str:
    suffix = "".join(Path(path).suffixes[-2:]) or "suffix-less"
    after = f" (after {'+'.join(codecs)} decompression)" if codecs else ""
    return f"{path}: a {suffix} file whose content is not JSON, JSON Lines or Parquet{after}; not read"


def decode_utf8(raw: bytes, path: str) -> tuple[str, list[ErrorEntry]]:
    """UTF-8 decode that keeps going: bad bytes become U+FFFD and each bad line is recorded."""
    try:
        return raw.decode("utf-8"), []
    except UnicodeDecodeError:
        pass
    errors = []
    for lineno, line in enumerate(raw.split(b"\n"), start=1):
        if (note := decode_line(line, path, lineno)[1]) is not None:
            errors.append(note)
    if len(errors) > _MAX_UTF8_ROWS:
        rest = len(errors) - _MAX_UTF8_ROWS
        errors = errors[:_MAX_UTF8_ROWS] + [ErrorEntry(path, None, None, "bad_utf8", f"{path}: {rest} more lines hold invalid UTF-8, replaced with U+FFFD (not listed one by one)")]
    return raw.decode("utf-8", errors="replace"), errors


def decode_line(raw: bytes, path: str, lineno: int) -> tuple[str, ErrorEntry | None]:
    """One line's UTF-8 decode that keeps going: (text with bad bytes as U+FFFD, the `bad_utf8`
    entry naming the line, or None when the line was valid)."""
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as exc:
        note = ErrorEntry(path, lineno, None, "bad_utf8", f"{path}:{lineno}: invalid UTF-8 at byte {exc.start} of the line; replaced with U+FFFD")
        return raw.decode("utf-8", errors="replace"), note


def json_layout(text: str, suffix: str) -> tuple[str, object]:
    """("document", (value, cuts)) for one JSON value; ("lines", None) for JSON Lines: several
    values, or text that does not parse as a whole but has a line that is an object on its own
    (JSON Lines with broken lines); ("broken", the error) for one document that does not parse.
    The suffix only breaks the tie for broken text: a .jsonl file is read line by line."""
    try:
        return "document", loads_any_depth(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        several = isinstance(exc, json.JSONDecodeError) and exc.msg == "Extra data"
        if several or suffix in (".jsonl", ".ndjson") or any(_is_object_line(line) for line in text.split("\n")):
            return "lines", None
        return "broken", exc


def _is_object_line(line: str) -> bool:
    if not line.lstrip().startswith("{"):
        return False
    try:
        return isinstance(json.loads(line, strict=False), dict)
    except json.JSONDecodeError:
        return False
    except RecursionError:
        return True  # an object on one line, only too deep: a JSON Lines line all the same


def loads_any_depth(text: str) -> tuple[object, list[int]]:
    """json.loads that survives any depth: when the parser runs out of recursion, every array or
    object deeper than MAX_DEPTH is cut to null first. (value, offsets of the cuts in `text`)."""
    try:
        return json.loads(text, strict=False), []
    except RecursionError:
        cut, offsets = _cut_deep(text, MAX_DEPTH)
        return json.loads(cut, strict=False), offsets


def _cut_deep(text: str, limit: int) -> tuple[str, list[int]]:
    """`text` with every array or object that opens deeper than `limit` replaced by null.
    Iterative (a regex over strings and brackets), so no depth can exhaust it."""
    pieces, offsets = [], []
    depth, kept_to, cut_from = 0, 0, None
    for m in _STRUCTURE.finditer(text):
        token = m.group()
        if token[0] == '"':
            continue
        if token in "[{":
            depth += 1
            if depth == limit + 1:
                cut_from = m.start()
            continue
        if depth == limit + 1 and cut_from is not None:
            pieces += [text[kept_to:cut_from], "null"]
            offsets.append(cut_from)
            kept_to, cut_from = m.end(), None
        depth = max(depth - 1, 0)
    if cut_from is not None:  # never closed: cut to the end, the parser then names what is missing
        pieces += [text[kept_to:cut_from], "null"]
        offsets.append(cut_from)
        kept_to = len(text)
    pieces.append(text[kept_to:])
    return "".join(pieces), offsets
