"""What runs the local sentence-transformers model on the CPU (`embedding.runtime`): PyTorch as
loaded, or the same fp32 weights run by ONNX Runtime or OpenVINO.

Why not sentence-transformers' own `backend="onnx"|"openvino"`: it goes through Optimum, and on
PyPI the only optimum-onnx (0.1.0) needs transformers<4.58, while optimum-intel 2.2.0 replaces
torch and transformers; neither installs beside the pinned torch 2.13.0 and transformers 5.24.0.
So the model's transformer network is exported here with torch's own exporter (torch.export
based, the one torch recommends) and only that network is swapped: tokenization, length-sorted
batching, truncation, pooling and normalization stay sentence-transformers' own code.

Export: once per network and runtime, into `<cache_dir>/<network hash>/<runtime>/`. It is built
in a temporary sibling folder and renamed into place, so a killed export leaves no half model and
actors racing to export either win the rename or use the winner's folder. Nothing is written
beside the model (the bundled one lives in site-packages).

Check: a runtime runs only if every probe text's vector is within cosine MIN_COSINE of torch's.
The outcome is stored beside the export, keyed by runtime, library versions, machine and probes,
so a later load (every Ray actor) reuses it instead of encoding the probes twice.

`auto`: the first runtime of AUTO_ORDER that is installed and passes the check, else torch; it
never times anything at load. One log line says which runtime runs and why.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import json
import logging
import os
import platform
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

RUNTIMES = ("torch", "onnx", "openvino")
# auto's preference, fastest first; torch after these. Measured on a quiet 2-core box
# (benchmarks/bench_embed_runtime.py, 3,000 texts, 5 rounds, 2026-12-06): openvino 1.13x torch,
# onnx 0.87x (slower than torch, so auto never picks it), all three min cosine 1.00000000 to torch.
AUTO_ORDER = ("openvino",)
MIN_COSINE = 0.9999
# Pinned as in pyproject.toml's `embed-cpu` extra (tests/test_embedding_runtime.py checks they agree).
_EXPORTER = ("onnx==1.23.2", "onnxscript==0.7.2")
INSTALL = {"onnx": ("onnxruntime==1.32.0", *_EXPORTER), "openvino": ("openvino==2026.4.1", *_EXPORTER)}
_NETWORK_OUTPUT = "last_hidden_state"
_STALE_TEMP_S = 3600  # an export takes seconds; a temp folder this old belongs to a killed one

# Short and long (past the 256-word-piece cut), padded together in one batch, non-ASCII, code,
# numbers and the empty string Embedder may be given: the places an export could part from torch.
PROBE_TEXTS = (
    "ok",
    "",
    "Mira moved her pottery class to Thursday evenings after the studio changed owners.",
    " ".join(f"Sentence {i} of a long archived note lists the shelf, the colour {i % 7} and the box." for i in range(40)),
    "Café crème à 7 h, réunion déplacée; Zoë n'a pas répondu. Привет, как дела? 今日は雨です。😀👍",
    "def merge(a: dict, b: dict) -> dict:\n    out = {**a}\n    for k, v in b.items():\n        out[k] = v\n    return out",
    "ORDER #4471 shipped 2023-05-07 14:32 UTC, $1,299.00 (qty 3) -> tracking ZX9-001-Q",
    "B: haha yes!! we did it 🎉 see you Sat?? 👀",
)


class EmbeddingError(RuntimeError):
    pass


class RuntimeRefused(EmbeddingError):
    """This runtime cannot run here (missing, unexportable, or failed the check); `auto` moves on."""


def install_line(runtime: str) -> str:
    return "pip install " + " ".join(INSTALL[runtime])


def missing_modules(runtime: str) -> list[str]:
    names = ["onnxruntime" if runtime == "onnx" else "openvino", "onnx", "onnxscript"]
    return [n for n in names if importlib.util.find_spec(n) is None]


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lychee-ray" / "embeddings"


def apply_runtime(model, runtime: str, *, cache_dir: str | None, device: str, num_threads: int) -> str:
    """Swap `model`'s transformer network for `runtime`'s (auto: its choice); returns what runs."""
    if runtime == "torch":
        return "torch"
    if device != "cpu":
        if runtime == "auto":
            log.info("embedding runtime: torch (auto: the model runs on %s; the exported runtimes are CPU-only)", device)
            return "torch"
        raise EmbeddingError(f"embedding.runtime={runtime} runs on the CPU, but the model is on {device}: set embedding.device: cpu or embedding.runtime: torch")
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    if runtime != "auto":
        min_cos = _use(model, runtime, folder, num_threads)
        log.info("embedding runtime: %s (set; min cosine to torch %.6f on %d probes)", runtime, min_cos, len(PROBE_TEXTS))
        return runtime
    passed_over = []
    for name in AUTO_ORDER:
        try:
            min_cos = _use(model, name, folder, num_threads)
        except RuntimeRefused as exc:
            passed_over.append(f"{name}: {exc}")
            continue
        why = f"; passed over {' | '.join(passed_over)}" if passed_over else ""
        log.info("embedding runtime: %s (auto: first of %s installed and passing the check, min cosine %.6f%s)", name, "/".join(AUTO_ORDER), min_cos, why)
        return name
    log.info("embedding runtime: torch (auto: %s)", " | ".join(passed_over))
    return "torch"


def _use(model, runtime: str, cache_dir: Path, num_threads: int) -> float:
    """Swap in `runtime` after its check; the min cosine. RuntimeRefused leaves torch in place."""
    missing = missing_modules(runtime)
    if missing:
        raise RuntimeRefused(f"embedding.runtime={runtime} needs {', '.join(missing)}: `{install_line(runtime)}` (or set embedding.runtime: torch)")
    transformer = _transformer(model, runtime)
    torch_net = transformer.model
    folder = cache_dir / network_digest(torch_net) / runtime
    if not (folder / "export.json").is_file():
        try:
            export(model, runtime, folder)
        except Exception as exc:  # the exporters raise many types; auto must still fall back to torch
            first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise RuntimeRefused(f"embedding.runtime={runtime} could not export the network ({type(exc).__name__}: {first}): set embedding.runtime: torch") from exc
    try:
        run = open_network(runtime, folder, num_threads)
    except Exception as exc:  # a damaged export, or one this runtime's version cannot read
        raise RuntimeRefused(f"embedding.runtime={runtime} could not load the export in {folder} ({type(exc).__name__}): "
                             "delete that folder to export again, or set embedding.runtime: torch") from exc
    runtime_net = runtime_network_class()(run, _input_names(folder), torch_net.config)
    check_file = folder / f"check-{_check_key(runtime)}.json"
    cosines = _read_cosines(check_file)
    if cosines is None:
        torch_vecs = _probe_vectors(model)
        transformer.model = runtime_net
        try:
            cosines = probe_cosines(torch_vecs, _probe_vectors(model))
        finally:
            transformer.model = torch_net
        _write_json(check_file, {"runtime": runtime, "versions": _versions(runtime), "machine": platform.machine(), "cosines": cosines})
    min_cos = min(cosines)
    if not min_cos >= MIN_COSINE:  # `not >=`: a NaN cosine is refused too
        raise RuntimeRefused(
            f"embedding.runtime={runtime} gives vectors as far from torch's as cosine {min_cos:.6f} on the probe texts "
            f"(every probe needs >= {MIN_COSINE}): set embedding.runtime: torch"
        )
    transformer.model = runtime_net  # the torch network is dropped: one copy of the weights per actor
    return min_cos


def _transformer(model, runtime: str):
    first = model[0] if len(model) else None
    text = getattr(first, "modality_config", {}).get("text", {})
    if getattr(first, "model", None) is None or text != {"method": "forward", "method_output_name": _NETWORK_OUTPUT}:
        raise RuntimeRefused(
            f"embedding.runtime={runtime} supports models whose first module is a text Transformer giving "
            f"{_NETWORK_OUTPUT}, which {type(first).__name__} is not: set embedding.runtime: torch"
        )
    return first


def network_digest(net) -> str:
    """Hash of the network that an export is made from (config + every tensor), whatever path or
    hub name the model was loaded by."""
    import torch

    h = hashlib.sha256(net.config.to_json_string(use_diff=False).encode())
    for name, tensor in sorted(net.state_dict().items()):
        h.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
        h.update(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:20]


# -- export ----------------------------------------------------------------------------------
def export(model, runtime: str, folder: Path) -> None:
    """Export `model`'s network for `runtime` into `folder`, atomically (module docstring)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(folder)
    tmp = Path(tempfile.mkdtemp(prefix=f".{runtime}.tmp-", dir=folder.parent))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide a shared cache_dir from other users
        start = time.perf_counter()
        with _quiet_exporters():
            names = export_onnx(model, tmp / "model.onnx")
        if runtime == "openvino":
            import openvino as ov

            # compress_to_fp16=False: save_model halves the weights by default; fp32 only here.
            ov.save_model(ov.convert_model(tmp / "model.onnx"), tmp / "model.xml", compress_to_fp16=False)
            (tmp / "model.onnx").unlink()
        meta = {"runtime": runtime, "inputs": names, "versions": _versions(runtime), "seconds": round(time.perf_counter() - start, 1)}
        (tmp / "export.json").write_text(json.dumps(meta, indent=1))  # written last: marks a whole export
        try:
            tmp.rename(folder)
        except OSError:
            if not (folder / "export.json").is_file():  # not a racing actor's finished export
                raise
        log.info("exported embedding network for %s to %s in %.1f s", runtime, folder, meta["seconds"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def export_onnx(model, path: Path) -> list[str]:
    """The transformer network as fp32 ONNX at `path`, batch and length dynamic; its input names."""
    import torch

    net = model[0].model
    sample = model.preprocess(list(PROBE_TEXTS[2:4]))  # batch 2, lengths differ: nothing specialises to 1
    accepted = inspect.signature(net.forward).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    names = [k for k, v in sample.items() if torch.is_tensor(v) and (takes_any or k in accepted)]

    class Network(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, *tensors):
            return getattr(self.net(**dict(zip(names, tensors)), return_dict=True), _NETWORK_OUTPUT)

    batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
    with torch.no_grad():
        program = torch.onnx.export(
            Network().eval(), tuple(sample[k] for k in names), dynamo=True, verbose=False,
            input_names=names, output_names=[_NETWORK_OUTPUT], dynamic_shapes=(tuple({0: batch, 1: length} for _ in names),),  # one entry: *tensors
        )
    program.save(str(path))
    return names


@contextlib.contextmanager
def _quiet_exporters():
    """The exporters log every graph pass at INFO and warn about axis names; an export is one
    log line of ours (its errors still raise)."""
    loggers = [logging.getLogger(n) for n in ("onnx_ir", "onnxscript", "torch.onnx", "torch.export", "torch._dynamo")]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for lg in loggers:
            lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)


def _remove_stale_temps(folder: Path) -> None:
    for tmp in folder.parent.glob(f".{folder.name}.tmp-*"):
        try:
            if time.time() - tmp.stat().st_mtime > _STALE_TEMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass  # another actor removed it first


# -- running an export -----------------------------------------------------------------------
def open_network(runtime: str, folder: Path, num_threads: int) -> Callable[[dict[str, np.ndarray]], np.ndarray]:
    """feed (input name -> int64 array) -> last_hidden_state, for the export in `folder`."""
    if runtime == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        # ONNX Runtime's own pool, not OpenMP: Ray's OMP_NUM_THREADS=1 would not reach it anyway.
        options.intra_op_num_threads = num_threads
        options.log_severity_level = 3
        session = ort.InferenceSession(str(folder / "model.onnx"), options, providers=["CPUExecutionProvider"])
        return lambda feed: session.run([_NETWORK_OUTPUT], feed)[0]
    import openvino as ov

    # f32: on a CPU with bf16 units OpenVINO would otherwise infer in bf16 (different vectors).
    compiled = ov.Core().compile_model(
        str(folder / "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": num_threads}
    )
    # A request per call: one request is not safe to share across threads (a Memory embeds from
    # several); outputs are copied out of it (share_outputs defaults to False).
    return lambda feed: compiled.create_infer_request().infer(feed)[0]


def _input_names(folder: Path) -> list[str]:
    return json.loads((folder / "export.json").read_text())["inputs"]


@functools.cache
def runtime_network_class():
    """The module that stands where sentence-transformers keeps the transformers network (a
    torch Module, as sentence-transformers requires); built on first use so that importing
    this module does not import torch."""
    import torch

    class RuntimeNetwork(torch.nn.Module):
        device = torch.device("cpu")  # sentence-transformers asks the network where inputs go

        def __init__(self, run, input_names: list[str], config):
            super().__init__()
            self._run, self.input_names, self.config = run, input_names, config

        def forward(self, **features):
            hidden = self._run({n: features[n].numpy() for n in self.input_names})
            return {_NETWORK_OUTPUT: torch.from_numpy(hidden)}

    return RuntimeNetwork


# -- the check -------------------------------------------------------------------------------
def _probe_vectors(model) -> np.ndarray:
    # One batch: the long and short probes are padded together, as in real batches.
    return model.encode(list(PROBE_TEXTS), batch_size=len(PROBE_TEXTS), convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)


def probe_cosines(reference: np.ndarray, candidate: np.ndarray) -> list[float]:
    a, b = reference.astype(np.float64), candidate.astype(np.float64)
    cos = (a * b).sum(axis=1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-300)
    return [float(c) for c in cos]


def _versions(runtime: str) -> dict[str, str]:
    packages = ["torch", "transformers", "sentence-transformers", "onnx", "onnxscript", "onnxruntime" if runtime == "onnx" else "openvino"]
    return {p: importlib.metadata.version(p) for p in packages}


def _check_key(runtime: str) -> str:
    key = {"runtime": runtime, "versions": _versions(runtime), "machine": platform.machine(), "probes": PROBE_TEXTS}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def _read_cosines(path: Path) -> list[float] | None:
    try:
        return [float(c) for c in json.loads(path.read_text())["cosines"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent or unreadable: check again


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)
