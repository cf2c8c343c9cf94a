"""Bytes -> text a reader can parse, decided by content, never failing.

Gzip and zstd are unpacked by their magic bytes (a truncated stream still gives what came before
the damage), Parquet is recognised by its magic, bad UTF-8 is replaced and recorded per line, and
JSON nested deeper than the parser can follow is cut to null at MAX_DEPTH instead of raising.
`files.read_file` runs these in order; each returns its problem instead of raising, so one bad
file is one error row.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

from lychee_ray.io.readers.common import ErrorEntry

JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".zst", ".zstd")
_MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd"}
_PARQUET_MAGIC = b"PAR1"
# Deeper than this, an array or object is cut to null when the parser runs out of recursion:
# well under Python's limit of 1,000 frames, so parsing and printing what is left is safe.
MAX_DEPTH = 400
_CHUNK = 1 << 16
_MAX_UTF8_ROWS = 100  # a binary file would otherwise give one bad_utf8 row per "line"
_STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*+"|[\[\]{}]')  # strings whole (possessive: no backtracking), brackets


def bytes_unless_parquet(path: str) -> bytes | None:
    """The file's bytes, or None for Parquet, which pyarrow reads by path (not loaded whole here)."""
    with open(path, "rb") as fh:
        if fh.read(4) == _PARQUET_MAGIC:
            return None
        fh.seek(0)
        return fh.read()


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
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.append(
                ErrorEntry(path, lineno, None, "bad_utf8", f"{path}:{lineno}: invalid UTF-8 at byte {exc.start} of the line; replaced with U+FFFD")
            )
    if len(errors) > _MAX_UTF8_ROWS:
        rest = len(errors) - _MAX_UTF8_ROWS
        errors = errors[:_MAX_UTF8_ROWS] + [ErrorEntry(path, None, None, "bad_utf8", f"{path}: {rest} more lines hold invalid UTF-8, replaced with U+FFFD (not listed one by one)")]
    return raw.decode("utf-8", errors="replace"), errors


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
