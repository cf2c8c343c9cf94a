"""BM25 without DuckDB extensions: one index over one conversation's turn texts, built when
retrieval loads the conversation (query/conversation.py), and its ranking rule (`bm25_order`).

Extensions (checked on this machine, duckdb 2.0.1, no internet except PyPI):
- ``INSTALL fts`` / ``INSTALL vss`` fail: the download from the extension repository is refused.
- PyPI ships the binaries only for older DuckDB: duckdb-ext-fts/-vss 1.4.4.20260205 and
  duckdb-extension-fts/-vss 1.5.5 (the newest; there is none for 2.x). With
  ``allow_unsigned_extensions``, LOAD refuses each one ("built specifically for DuckDB version
  v1.4.4 / v1.5.5"); with ``allow_extensions_metadata_mismatch`` as well, fts 1.4.4 fails in its
  init function, vss 1.4.4 and fts 1.5.5 segfault the process, and vss 1.5.5 hangs.
- So BM25 uses `bm25s` (pinned, pure numpy), and vector similarity is numpy over the loaded
  conversation's vectors.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

import bm25s
import numpy as np
from bm25s.stopwords import STOPWORDS_EN_PLUS

# bm25s sets its own logger to DEBUG on import, which puts "Building index" lines on a user's
# stderr (e.g. under `lychee-ray query`); leave its level to the application's root logger.
logging.getLogger("bm25s").setLevel(logging.NOTSET)


# --------------------------------------------------------------------------------------------
# Reading
# --------------------------------------------------------------------------------------------
_TOKEN_RE = re.compile(r"(?u)\b\w\w+\b")
_STOPWORDS = frozenset(STOPWORDS_EN_PLUS)


def tokenize(text: str) -> list[str]:
    return [t for t in _TOKEN_RE.findall((text or "").lower()) if t not in _STOPWORDS]


@dataclass
class Bm25Index:
    rows: list[dict]
    model: bm25s.BM25 | None  # None when no row has a single indexable token


def build_bm25(rows: list[dict], text_key: str) -> Bm25Index:
    corpus = [tokenize(r[text_key]) for r in rows]
    if not any(corpus):
        return Bm25Index(rows, None)
    model = bm25s.BM25()
    model.index(corpus, show_progress=False)
    return Bm25Index(rows, model)


def bm25_order(index: Bm25Index, query_text: str, k: int) -> list[tuple[int, float]]:
    """(row position, score) of the top-k rows sharing a query term, best first, ties in stored
    order."""
    terms = tokenize(query_text)
    if index.model is None or not terms or k <= 0:
        return []
    scores = index.model.get_scores(terms)
    order = np.lexsort((np.arange(len(scores)), -scores))  # score desc, then stored order
    return [(int(i), float(scores[i])) for i in order[:k] if scores[i] > 0]
