"""Filesystem helpers: every path goes through pyarrow.fs, so ``s3://`` (or gs://, hdfs://)
works like a local path.

Also the atomic-write convention (write under a dot-prefixed temp name beside the target, then
rename), the names that tell a committed part from a killed writer's debris, and the one place
that turns a filesystem failure on an output folder into one sentence (`PathProblem`). Its own
module because the store's writer and reader and evaluate's answers and report all share it.
"""

from __future__ import annotations

import os
import re
import uuid
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

TMP_MARK = ".tmp-"
_PART_RE = re.compile(r"^part-[0-9a-f]+\.parquet$")
_OWNER_RE = re.compile(r"^[0-9a-f]{8,64}$")
_OS_DETAIL = re.compile(r"Detail: \[errno \d+\] (.+)$")


class PathProblem(RuntimeError):
    """An output path that cannot be used as asked (a file where a folder should be, no write
    permission, a read-only mount); the message is one sentence for the user."""


# --------------------------------------------------------------------------------------------
# Filesystem: everything goes through pyarrow.fs so s3:// (or gs://, hdfs://) works like a path.
# Public because evaluate's answers and report use the same helpers.
# --------------------------------------------------------------------------------------------
def resolve_uri(uri: str, filesystem: pafs.FileSystem | None = None) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path without trailing slash). A URI's query (``?endpoint_override=...``)
    configures the filesystem and is not part of the path, so paths joined onto it stay clean."""
    if filesystem is not None:
        return filesystem, uri.rstrip("/")
    if "://" not in uri:
        uri = os.path.abspath(uri)  # from_uri only takes absolute local paths
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs, path.rstrip("/") or "/"


def is_local(fs: pafs.FileSystem) -> bool:
    return isinstance(fs, pafs.LocalFileSystem)


def join_path(*parts: str) -> str:
    return "/".join(p.strip("/") if i else p.rstrip("/") for i, p in enumerate(parts))


def child_uri(uri: str, name: str) -> str:
    """`name` inside the folder `uri`, as the user would write it: a plain path stays a path and
    a URI keeps its query after the new path (``s3://b/x?scheme=http`` -> ``s3://b/x/name?...``)."""
    if "://" not in uri:
        return os.path.join(uri, name)
    head, sep, query = uri.partition("?")
    return f"{head.rstrip('/')}/{name}{sep}{query}"


def display_uri(uri: str) -> str:
    """`uri` as messages and stored rows may show it: a plain path as given; a URI without its
    user info and query (``s3://key:secret@b/x?endpoint_override=...`` -> ``s3://b/x``), so no
    credential lands in a log, an error row or the store."""
    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}"


def comparable_path(uri: str) -> str:
    """The filesystem path of `uri` in a form two spellings of one file agree on: a local path
    resolved (links, `..`, relative to the working folder), any other the path inside its store."""
    fs, path = resolve_uri(uri)
    return os.path.realpath(path) if is_local(fs) else path


def walk_files(fs: pafs.FileSystem, folder: str) -> list[tuple[str, int | None]]:
    """(path, size) of every file under `folder`, recursively. A local folder is walked with
    os.walk, which does not descend into links to folders (a link loop cannot hang the listing;
    a link to a file is listed, a broken one with no size); other filesystems list recursively."""
    if not is_local(fs):
        infos = fs.get_file_info(pafs.FileSelector(folder, recursive=True, allow_not_found=True))
        return [(i.path, i.size) for i in infos if i.type == pafs.FileType.File]
    found = []
    for parent, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(parent, name)
            try:
                found.append((path, os.stat(path).st_size))
            except OSError:  # a broken link: still input, its read names the problem
                found.append((path, None))
    return found


def open_input(uri: str) -> pa.NativeFile:
    """`uri` (a path or any filesystem URI) opened for random-access reading."""
    fs, path = resolve_uri(uri)
    return fs.open_input_file(path)


def is_part_name(name: str) -> bool:
    """A committed data file: `part-<hex>.parquet` (store tables and evaluate's answers)."""
    return _PART_RE.match(name) is not None


def is_temp_name(name: str) -> bool:
    """A file `write_atomic` had not renamed yet: the debris of a killed writer."""
    return name.startswith(".") and TMP_MARK in name


def is_own_temp_name(name: str, owner: str | None) -> bool:
    """A temp file that `write_atomic(..., owner=owner)` made: debris we may delete. A name that
    merely looks like a temp file (someone else's `.x.tmp-y`) is not ours."""
    return bool(owner) and name.startswith(".") and f"{TMP_MARK}{owner}-" in name


def _tmp_path(path: str, owner: str | None = None) -> str:
    # Same folder (so the rename stays on one filesystem), dot-prefixed and not ending in
    # .parquet/.json, so no reader glob and no commit ever matches a half-written file. The
    # owner tag (a store's id) is what lets a later cleanup prove the debris is its own.
    head, _, name = path.rpartition("/")
    tag = f"{owner}-" if owner and _OWNER_RE.match(owner) else ""
    return f"{head}/.{name}{TMP_MARK}{tag}{uuid.uuid4().hex[:12]}"


def _rename(fs: pafs.FileSystem, src: str, dst: str) -> None:
    if is_local(fs):
        os.replace(src, dst)  # atomic on POSIX, replaces an older version of the same part
    else:
        fs.move(src, dst)  # object stores: copy+delete; safe because the commit comes last


def write_atomic(fs: pafs.FileSystem, path: str, write, owner: str | None = None) -> None:
    """`write(sink)` into a temp name beside `path`, then rename: a killed writer leaves no half
    file at `path`, only debris that `is_temp_name` (and, given `owner`, `is_own_temp_name`)
    recognises."""
    tmp = _tmp_path(path, owner)
    try:
        with fs.open_output_stream(tmp) as sink:
            write(sink)
        _rename(fs, tmp, path)
    except BaseException:
        delete_quietly(fs, tmp)
        raise


def delete_quietly(fs: pafs.FileSystem, path: str) -> None:
    try:
        fs.delete_file(path)
    except (FileNotFoundError, OSError):
        pass


def list_files(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return [i for i in infos if i.type == pafs.FileType.File]


def is_empty_dir(fs: pafs.FileSystem, folder: str) -> bool:
    return not fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))


def os_reason(exc: OSError) -> str:
    """The OS's reason for an OSError, without Python's "[Errno N]" or pyarrow's wrapping (which
    puts the reason after "Detail:"), lower-cased and without a final period."""
    text = exc.strerror or str(exc)
    detail = _OS_DETAIL.search(text)
    reason = (detail.group(1) if detail else text).rstrip(".")
    return f"{reason[:1].lower()}{reason[1:]}"


def os_problem(exc: OSError, where: str) -> str:
    """One sentence for an OSError on writing to `where`."""
    return f"cannot write to {where}: {os_reason(exc)}."


def make_output_dir(fs: pafs.FileSystem, folder: str, where: str) -> None:
    """Create `folder` (and its parents), or raise one PathProblem sentence saying why not."""
    kind = fs.get_file_info(folder).type
    if kind == pafs.FileType.File:
        raise PathProblem(f"{where} is a file, not a folder; give a folder as the output.")
    try:
        fs.create_dir(folder, recursive=True)
    except NotADirectoryError:
        raise PathProblem(f"cannot create {where}: a part of its parent path is a file, not a folder.") from None
    except OSError as exc:
        raise PathProblem(os_problem(exc, where)) from None


def check_writable(fs: pafs.FileSystem, folder: str, where: str, owner: str | None = None) -> None:
    """Write and delete a small probe file, so a read-only folder is one sentence before any
    work starts instead of a traceback from a worker halfway through a run."""
    probe = _tmp_path(join_path(folder, "write-probe"), owner)  # a fresh name: never anyone else's file
    try:
        with fs.open_output_stream(probe) as sink:
            sink.write(b"probe")
    except OSError as exc:
        raise PathProblem(os_problem(exc, where)) from None
    delete_quietly(fs, probe)
