"""Which input there is: the files (and BEAM folders) under an input path, never a store.

The driver lists the input (`list_input_files`) before planning the read: every file under a
folder or URI, sorted, except the files of a lychee-ray store inside it (an output written there)
and of the run's own output folder. A BEAM conversation folder (`beam.beam_folders`) is listed as
one entry, read as one part; its files are never listed again one by one.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pyarrow.fs as pafs

from lychee_ray.io.fs import child_uri, display_uri, is_local, join_path, resolve_uri, walk_files
from lychee_ray.io.readers.beam import beam_folders
from lychee_ray.io.readers.common import InputError, short
from lychee_ray.tables import MANIFEST, STORE_FORMAT

log = logging.getLogger(__name__)


class InputFile(str):
    """An input file's path or URI as the user would write it, which also knows its size from the
    listing (planning byte ranges then needs no second request per file to an object store) and
    whether it is a folder read as one conversation (`folder`: its format, "beam")."""

    def __new__(cls, uri: str, size: int | None = None, folder: str | None = None):
        obj = super().__new__(cls, uri)
        obj.size = size
        obj.folder = folder
        return obj


def list_input_files(path: str, exclude: str | None = None) -> list[InputFile]:
    """Every file under `path` (a file or a folder, searched recursively; a path or any pyarrow
    filesystem URI, whose query configures the filesystem), sorted, each named under `path` as
    given (a URI keeps its query); a BEAM folder is one entry in place of its files. A folder
    holding a lychee-ray store, and `exclude` (the run's output), are never input: a rerun with
    the output inside the input must not read its own manifest and Parquet parts. An `exclude`
    that is `path` itself is refused: nothing would be left to read."""
    shown = display_uri(path)
    try:
        fs, base = resolve_uri(path)
        info = fs.get_file_info(base)
    except (OSError, ValueError) as exc:  # an unknown scheme, an endpoint that does not answer
        raise InputError(f"input {shown} cannot be opened: {short(str(exc))}") from None
    if info.type == pafs.FileType.File:
        return [InputFile(path if "://" in path else str(Path(path)), info.size)]
    if info.type != pafs.FileType.Directory:
        raise InputError(f"input {shown} does not exist")
    out = _output_folder(fs, base, exclude) if exclude else None
    if out == base:
        raise InputError(f"the output folder {display_uri(exclude)} is the input folder {shown}: a run's output is never read as its input; choose another --out")
    found = walk_files(fs, base)
    skipped = _stores(fs, found) + ([out] if out else [])
    found = [(name, size) for name, size in found if not any(name.startswith(f"{s}/") for s in skipped)]
    folders = beam_folders(fs, found)
    entries = [(name, size, None) for name, size in found if not any(name.startswith(f"{f}/") for f in folders)]
    entries += [(folder, None, "beam") for folder in folders]
    # sorted by path, not by the URI: a query after the path must not change the order
    files = [InputFile(_under(path, base, name), size, folder) for name, size, folder in sorted(entries)]
    if not files:
        raise InputError(f"input directory {shown} holds no files (a lychee-ray store in it is not input)")
    return files


def _under(path: str, base: str, name: str) -> str:
    """`name` (a path of the listing) as the user would write it: under `path` as given."""
    rel = name[len(base) :].lstrip("/")
    return child_uri(path, rel) if rel else path


def _stores(fs: pafs.FileSystem, found: list[tuple[str, int | None]]) -> list[str]:
    """The folders of the listing that hold a lychee-ray store: their files are not input."""
    stores = {name.rpartition("/")[0] for name, _ in found if name.rpartition("/")[2] == MANIFEST}
    skipped = [folder for folder in sorted(stores) if is_store(fs, folder)]
    for folder in skipped:
        log.info("not reading %s as input: it is a lychee-ray store", folder)
    return skipped


def _output_folder(fs: pafs.FileSystem, base: str, exclude: str) -> str | None:
    """`exclude` as a folder of the listing under `base` when it lies there (or is `base`)."""
    try:
        out_fs, out = resolve_uri(exclude)
    except (OSError, ValueError):
        return None
    if out_fs.type_name != fs.type_name:
        return None
    if is_local(fs):  # compare resolved paths, then name the folder as the listing does
        real_base, real_out = os.path.realpath(base), os.path.realpath(out)
        if real_out != real_base and not real_out.startswith(real_base.rstrip("/") + "/"):
            return None
        out = os.path.normpath(join_path(base, os.path.relpath(real_out, real_base)))
    if out != base and not out.startswith(base.rstrip("/") + "/"):
        return None
    return out


def is_store(fs: pafs.FileSystem, folder: str) -> bool:
    """Whether `folder` holds a lychee-ray store: a manifest.json with the store's format tag."""
    try:
        with fs.open_input_file(join_path(folder, MANIFEST)) as fh:
            manifest = json.loads(fh.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(manifest, dict) and manifest.get("format") == STORE_FORMAT
