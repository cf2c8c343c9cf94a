"""Session fixtures of generated data (lychee_ray/synth): one labelled archive in LoCoMo's format
and the store built from it once (rules backend, real MiniLM, real local Ray).

The suite holds no benchmark text: where a test needs real-looking conversations it uses these,
and it reads names, questions and evidence from the generator's labels, never from literals.
`GENERATED` fixes the archive: 3 conversations (2 chit-chat between friends, 1 user-assistant
work conversation with long replies), 5 sessions of 12 turns each, 180 turns, ~56 questions of
every category the generator plants. To iterate on a test without rebuilding the store, point
LYCHEE_TEST_STORE at a store built by `lychee-ray synth --out DIR --format locomo --seed 11
--conversations 3 --sessions 5 --turns-per-session 12 --turn-words 16` then `lychee-ray ingest
--config configs/local.yaml --input DIR/archive --out STORE`.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from lychee_ray.synth import SynthParams, write_archive
from tests.conftest import REPO

LOCAL_CONFIG = REPO / "configs" / "local.yaml"
GENERATED = dict(seed=11, conversations=3, sessions=5, turns_per_session=12, turn_words=16, style="mixed")


def local_config(*overrides: str):
    from lychee_ray.config import load_config

    return load_config(LOCAL_CONFIG, ["ray.progress_bars=false", *overrides])


@dataclass
class GeneratedArchive:
    """A generated archive on disk and its labels (lychee_ray/synth/archive.py says what each holds)."""

    root: Path
    questions: list[dict] = field(default_factory=list)  # questions.jsonl rows
    labels: dict = field(default_factory=dict)  # labels.json

    @property
    def archive(self) -> Path:
        """The input folder to ingest."""
        return self.root / "archive"

    @property
    def files(self) -> list[Path]:
        return sorted(p for p in self.archive.rglob("*") if p.is_file())

    @property
    def questions_file(self) -> Path:
        return self.root / "questions.jsonl"

    def conversation_ids(self) -> list[str]:
        return sorted({q["conversation_id"] for q in self.questions})

    def asked(self, category: str, conversation_id: str | None = None) -> list[dict]:
        """The questions of one category (and conversation), in file order."""
        return [q for q in self.questions if q["category"] == category and conversation_id in (None, q["conversation_id"])]

    def facts(self, conversation_id: str | None = None) -> list[dict]:
        return [f for f in self.labels["facts"] if conversation_id in (None, f["conversation_id"])]

    def categories(self) -> Counter:
        return Counter(q["category"] for q in self.questions)


def generate(out: Path, fmt: str, **overrides) -> GeneratedArchive:
    """Write a generated archive in format `fmt` to `out` and read its labels back."""
    params = SynthParams.checked(**{**GENERATED, **overrides, "format": fmt})
    write_archive(out, params)
    questions = [json.loads(line) for line in (out / "questions.jsonl").read_text().splitlines() if line.strip()]
    return GeneratedArchive(out, questions, json.loads((out / "labels.json").read_text()))


@pytest.fixture(scope="session")
def generated_locomo(tmp_path_factory) -> GeneratedArchive:
    """The session's generated archive, in LoCoMo's format (questions inside the file)."""
    return generate(tmp_path_factory.mktemp("generated-locomo"), "locomo")


@pytest.fixture(scope="session")
def synth_store_dir(tmp_path_factory, generated_locomo, ray_local) -> Path:
    """Path of a complete store of the generated archive (every conversation ingested ok)."""
    prebuilt = os.environ.get("LYCHEE_TEST_STORE")
    if prebuilt:
        return Path(prebuilt)
    from lychee_ray.ingest.job import run_ingest

    out = tmp_path_factory.mktemp("generated-store")
    summary = run_ingest(local_config(), str(generated_locomo.archive), str(out))
    assert summary.by_status == {"ok": len(generated_locomo.conversation_ids())}, summary.by_status
    return out


@pytest.fixture(scope="module")
def local_embedder():
    """The real bundled MiniLM, configured as `configs/local.yaml` says, loaded once per module."""
    from lychee_ray.embedding import Embedder

    return Embedder(local_config().embedding)


@pytest.fixture(scope="module")
def synth_store(synth_store_dir):
    """The generated store, opened read-only for one module."""
    from lychee_ray.store.reader import open_store

    with open_store(str(synth_store_dir), local_config()) as s:
        yield s
