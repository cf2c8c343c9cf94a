"""embedding.runtime on the bundled MiniLM: ONNX Runtime and OpenVINO give torch's vectors (cosine
>= 0.9999), a runtime whose vectors drift is refused with the fix, an export is made once, whole,
outside site-packages and reused, and `auto` falls back to torch."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from lychee_ray import embedding_runtime as er
from lychee_ray.config_sections import EmbeddingConfig
from lychee_ray.embedding import Embedder, EmbeddingError, resolve_model_path

REPO = Path(__file__).resolve().parents[1]
er_export, er_probe = er.export, er._probe_vectors  # the real ones, for the counting wrappers
# Not the probe texts: the runtime must agree on texts its check never saw.
TEXTS = [
    "The kettle whistled twice before anyone noticed.",
    "Noor booked the ferry for the 14th; the return leg is still open.",
    "naïve façade über straße — ça marche? 東京タワー",
    "for i in range(3): print(i ** 2)",
    " ".join(["the orchard ledger repeats itself"] * 90),  # past the 256-word-piece cut
]


def cfg(runtime: str, cache: Path) -> EmbeddingConfig:
    return EmbeddingConfig(runtime=runtime, cache_dir=str(cache))


def model_files() -> list[tuple[str, int]]:
    root = Path(resolve_model_path("bundled:all-MiniLM-L6-v2"))
    return sorted((str(p.relative_to(root)), p.stat().st_mtime_ns) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def torch_embedder() -> Embedder:
    return Embedder(EmbeddingConfig(runtime="torch"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> tuple[Path, list]:
    """One export of each runtime for the module (an export takes seconds), and the bundled
    model's files as they were before it."""
    before = model_files()
    cache = tmp_path_factory.mktemp("emb-cache")
    for runtime in ("onnx", "openvino"):
        Embedder(cfg(runtime, cache))
    return cache, before


@pytest.fixture
def two_runtime_order(monkeypatch):
    """auto's order as the mechanism tests need it (two runtimes, so "moves on" is visible); the
    shipped AUTO_ORDER is a measurement and may hold one."""
    monkeypatch.setattr(er, "AUTO_ORDER", ("onnx", "openvino"))


@pytest.fixture
def cache_copy(exported, tmp_path) -> Path:
    """A private copy of the exports, without their check outcomes (so a test's check runs)."""
    cache = tmp_path / "cache"
    shutil.copytree(exported[0], cache, ignore=shutil.ignore_patterns("check-*.json"))
    return cache


def digest(torch_embedder: Embedder) -> str:
    return er.network_digest(torch_embedder.model[0].model)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_runtime_gives_torchs_vectors_on_the_bundled_model(runtime, exported, torch_embedder):
    cache, before = exported
    emb = Embedder(cfg(runtime, cache))
    assert emb.runtime == runtime
    assert isinstance(emb.model[0].model, er.runtime_network_class())  # torch's network is gone
    got, want = emb.encode(TEXTS), torch_embedder.encode(TEXTS)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert min(er.probe_cosines(want, got)) >= er.MIN_COSINE
    # the check ran on every probe and was stored beside the export
    (check,) = (cache / digest(torch_embedder) / runtime).glob("check-*.json")
    cosines = json.loads(check.read_text())["cosines"]
    assert len(cosines) == len(er.PROBE_TEXTS) and min(cosines) >= er.MIN_COSINE
    assert model_files() == before, "nothing may be written beside the bundled model (site-packages)"


def test_a_runtime_whose_vectors_drift_is_refused_with_the_fix(cache_copy, monkeypatch, caplog, two_runtime_order):
    real = er.open_network

    def noisy(runtime, folder, threads):
        run, rng = real(runtime, folder, threads), np.random.default_rng(0)
        return lambda feed: (h := run(feed)) + rng.normal(0, 0.05, h.shape).astype(np.float32)

    monkeypatch.setattr(er, "open_network", noisy)
    with pytest.raises(EmbeddingError) as exc:
        Embedder(cfg("onnx", cache_copy))
    text = str(exc.value)
    found = re.fullmatch(r"embedding\.runtime=onnx gives vectors as far from torch's as cosine (0\.\d{6}) on the probe texts \(every probe needs >= 0\.9999\): set embedding\.runtime: torch", text)
    assert found, text
    assert float(found.group(1)) < er.MIN_COSINE
    # auto passes over both drifting runtimes and says why, in one line
    caplog.set_level(logging.INFO, logger=er.__name__)
    assert Embedder(cfg("auto", cache_copy)).runtime == "torch"
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding runtime:")]
    assert line.startswith("embedding runtime: torch (auto: onnx: ") and "openvino: " in line, line


def test_export_is_made_once_whole_and_reused(torch_embedder, tmp_path, monkeypatch):
    parent = tmp_path / digest(torch_embedder)
    # What killed exports leave behind: a temp folder, one of them hours old. Neither may be
    # loaded (garbage that an export.json makes look whole); the next export clears the old one.
    for name, age in ((".onnx.tmp-killed", 0), (".onnx.tmp-old", 7200)):
        (parent / name).mkdir(parents=True)
        (parent / name / "model.onnx").write_bytes(b"not a model")
        (parent / name / "export.json").write_text('{"inputs": ["input_ids"]}')
        os.utime(parent / name, (time.time() - age, time.time() - age))

    # An export that dies half-way leaves no runtime folder, and says so.
    def dies(model, path):
        path.write_bytes(b"half a mo")
        raise RuntimeError("killed")

    monkeypatch.setattr(er, "export_onnx", dies)
    with pytest.raises(EmbeddingError, match=r"embedding\.runtime=onnx could not export the network \(RuntimeError: killed\)"):
        Embedder(cfg("onnx", tmp_path))
    assert sorted(p.name for p in parent.iterdir()) == [".onnx.tmp-killed"]
    monkeypatch.undo()

    exports, probes = [], []
    monkeypatch.setattr(er, "export", lambda *a: exports.append(a) or er_export(*a))
    monkeypatch.setattr(er, "_probe_vectors", lambda m: probes.append(1) or er_probe(m))
    first = Embedder(cfg("onnx", tmp_path))
    assert first.runtime == "onnx" and len(exports) == 1 and len(probes) == 2  # torch's and onnx's
    assert sorted(p.name for p in parent.iterdir()) == [".onnx.tmp-killed", "onnx"]
    model = parent / "onnx" / "model.onnx"
    mtime = model.stat().st_mtime_ns

    second = Embedder(cfg("onnx", tmp_path))
    assert second.runtime == "onnx"
    assert len(exports) == 1 and model.stat().st_mtime_ns == mtime  # not exported again
    assert len(probes) == 2  # the cached check outcome: no probe encode at all
    assert np.allclose(first.encode(TEXTS), second.encode(TEXTS), atol=1e-6)


def test_a_damaged_export_is_refused_and_auto_moves_on(cache_copy, torch_embedder, two_runtime_order):
    (cache_copy / digest(torch_embedder) / "onnx" / "model.onnx").write_bytes(b"bit rot")
    with pytest.raises(EmbeddingError, match=r"embedding\.runtime=onnx could not load the export in .*delete that folder"):
        Embedder(cfg("onnx", cache_copy))
    assert Embedder(cfg("auto", cache_copy)).runtime == "openvino"


def test_auto_falls_back_to_torch_when_a_runtime_is_missing(cache_copy, tmp_path, monkeypatch, caplog, torch_embedder, two_runtime_order):
    caplog.set_level(logging.INFO, logger=er.__name__)
    real = er.missing_modules
    monkeypatch.setattr(er, "missing_modules", lambda runtime: ["onnxruntime"] if runtime == "onnx" else real(runtime))
    assert Embedder(cfg("auto", cache_copy)).runtime == "openvino"  # the next in AUTO_ORDER

    monkeypatch.setattr(er, "missing_modules", lambda runtime: ["onnxruntime" if runtime == "onnx" else "openvino"])
    empty = tmp_path / "empty"
    assert Embedder(cfg("auto", empty)).runtime == "torch"
    assert not empty.exists()  # nothing exported for a runtime that cannot run
    last = [r.getMessage() for r in caplog.records if r.getMessage().startswith("embedding runtime:")][-1]
    assert last.startswith("embedding runtime: torch (auto: onnx: embedding.runtime=onnx needs onnxruntime"), last
    # set explicitly, a missing runtime fails at construction with the exact install line
    with pytest.raises(EmbeddingError, match=re.escape("`pip install onnxruntime==1.32.0 onnx==1.23.2 onnxscript==0.7.2`")):
        Embedder(cfg("onnx", empty))
    # off the CPU, auto is torch and a set runtime is an error (no GPU needed: decided before any work)
    assert er.apply_runtime(torch_embedder.model, "auto", cache_dir=str(empty), device="cuda", num_threads=1) == "torch"
    with pytest.raises(EmbeddingError, match="embedding.runtime=openvino runs on the CPU"):
        er.apply_runtime(torch_embedder.model, "openvino", cache_dir=str(empty), device="cuda", num_threads=1)


def test_config_takes_the_four_runtimes_only():
    assert [EmbeddingConfig(runtime=r).runtime for r in ("torch", "onnx", "openvino", "auto")] == ["torch", "onnx", "openvino", "auto"]
    assert EmbeddingConfig().runtime == "auto"  # the default: the fastest runtime that passes
    # an endpoint backend takes the default (nothing runs locally) but refuses a set local runtime
    assert EmbeddingConfig(backend="openai", model="text-embedding-3-small").runtime == "auto"
    with pytest.raises(ValidationError, match="runtime"):
        EmbeddingConfig(runtime="tensorrt")
    with pytest.raises(ValidationError, match="embedding.runtime and embedding.cache_dir apply to the local model only"):
        EmbeddingConfig(backend="openai", model="text-embedding-3-small", runtime="onnx")


def test_install_lines_pin_what_pyproject_pins():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["embed-cpu"]
    assert sorted(set(er.INSTALL["onnx"]) | set(er.INSTALL["openvino"])) == sorted(extra)
