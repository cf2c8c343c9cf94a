"""The real vLLM engine on CPU with a tiny random-weight model, for tests of the LLM path.

No model weights can be downloaded here, so the tests make one (DESIGN.md, "Testing the LLM
path without a real model"): a 2-layer LlamaForCausalLM (hidden 128, 2 heads, so head_dim 64:
the CPU attention kernel rejects 16) with a byte-level BPE tokenizer trained at test time and a
chat template. It produces nonsense, but under xgrammar's constrained decoding that nonsense is
valid JSON for the requested schema, which is what the client, the parser and the pipeline
need to be exercised against the real server.

The model is built by vLLM's own interpreter (env LYCHEE_VLLM_PYTHON, default
.venv-vllm/bin/python) so it is saved with the transformers version vLLM loads it with. The
server is started the way users start it, through `python -m lychee_ray.llm.serve` (the
`lychee-ray serve` command), so one server start also smoke-tests `serve()`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import yaml

from lychee_ray.llm.serve import die_with_parent

REPO = Path(__file__).resolve().parents[2]
DEFAULT_VLLM_PYTHON = str(REPO / ".venv-vllm" / "bin" / "python")
SERVED_NAME = "tiny"
# vLLM CPU settings from DESIGN.md: 1 GiB KV cache is plenty for a 2-layer model, and the CI
# env flag keeps vLLM from sizing itself to the whole machine.
VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_CI_ENV": "1"}
TINY_ARGS = [
    "--dtype",
    "float32",
    "--enforce-eager",
    # Without disable_any_whitespace a random model emits only whitespace inside the grammar.
    "--structured-outputs-config",
    json.dumps({"backend": "xgrammar", "disable_any_whitespace": True}),
]


def vllm_python() -> str:
    return os.environ.get("LYCHEE_VLLM_PYTHON", DEFAULT_VLLM_PYTHON)


def vllm_available() -> bool:
    return Path(vllm_python()).exists()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------
# The tiny model
# --------------------------------------------------------------------------------------------
_BUILD_SCRIPT = textwrap.dedent(
    r'''
    import string, sys
    from pathlib import Path

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)

    # Byte-level BPE: every byte is in the alphabet, so any JSON text can be produced.
    specials = ["<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]
    corpus = [
        string.printable,
        '{"records": [{"type": "fact", "text": "", "entities": [], "topics": [], "time": null}]}',
        '{"state": {"entities": [], "date_anchor": null, "open_threads": []}, "source_turn_ids": []}',
        "[D1:3] Orrin (2023-03-16): I went to the pottery workshop yesterday.",
        "[D1:4] Tessaly (2023-03-16): That sounds lovely! What did you make?",
        "routes goal search_terms answer label CORRECT WRONG granularity day week month year none",
    ] * 4
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus, trainer=trainer)

    template = (
        "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
    )
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", chat_template=template
    )
    hf_tok.save_pretrained(out)

    ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>", "<pad>")}
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64: the CPU attention kernel rejects 16
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=ids["<s>"],
        eos_token_id=ids["</s>"],
        pad_token_id=ids["<pad>"],
    )
    model = LlamaForCausalLM(config)
    # float16 on disk keeps the model under 1 MB; vLLM runs it as float32 (--dtype float32).
    model.to(torch.float16).save_pretrained(out)
    print("built", out)
    '''
)


def build_tiny_model(model_dir: str | Path, *, python: str | None = None, timeout_s: float = 600) -> Path:
    """Write the tiny model + tokenizer into `model_dir` (idempotent) and return the path."""
    model_dir = Path(model_dir)
    if (model_dir / "config.json").exists() and (model_dir / "tokenizer.json").exists():
        return model_dir
    proc = subprocess.run(
        [python or vllm_python(), "-c", _BUILD_SCRIPT, str(model_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the tiny model failed (rc={proc.returncode}):\n{proc.stderr[-4000:]}")
    return model_dir


def dir_size(path: str | Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


# --------------------------------------------------------------------------------------------
# The server, started through `lychee-ray serve`
# --------------------------------------------------------------------------------------------
@dataclass
class VLLMServer:
    base_url: str  # http://127.0.0.1:PORT/v1
    model: str  # served model name
    port: int
    log_path: Path  # the vLLM log (written by serve)
    serve_log_path: Path  # stdout/stderr of the serve process itself
    process: subprocess.Popen


def serve_config_for(model_dir: str | Path, port: int, *, python: str | None = None) -> dict:
    """The `serve` section that starts the tiny model on CPU (see TINY_ARGS)."""
    return {
        "model": str(model_dir),
        "served_model_name": SERVED_NAME,
        "host": "127.0.0.1",
        "port": port,
        "max_num_seqs": 16,
        "max_model_len": 4096,
        "python": python or vllm_python(),
        "extra_args": list(TINY_ARGS),
        "ready_timeout_s": 600,
    }


@contextlib.contextmanager
def start_vllm_server(
    model_dir: str | Path, port: int | None = None, *, workdir: str | Path | None = None, ready_timeout_s: float = 600
) -> Iterator[VLLMServer]:
    """Run `python -m lychee_ray.llm.serve --config <yaml>` for the tiny model; yield when ready.

    On exit the serve process gets SIGTERM, as a user's Ctrl-C would; it must stop vLLM and exit
    0. If it does not, the whole process group is killed and RuntimeError says what went wrong,
    so a broken shutdown fails the test session instead of leaving a server behind.
    """
    port = port or free_port()
    workdir = Path(workdir) if workdir else Path(model_dir).parent
    workdir.mkdir(parents=True, exist_ok=True)
    cfg_path = workdir / f"serve-{port}.yaml"
    cfg_path.write_text(yaml.safe_dump({"serve": serve_config_for(model_dir, port)}))
    vllm_log = workdir / f"vllm-{port}.log"
    serve_log = workdir / f"serve-{port}.log"
    env = {**os.environ, **VLLM_ENV, "PYTHONPATH": str(REPO)}
    with open(serve_log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lychee_ray.llm.serve", "--config", str(cfg_path), "--log", str(vllm_log)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
            start_new_session=True,  # one group to kill if shutdown fails
            # A pytest killed hard (no fixture teardown) takes the server down with it; serve
            # does the same for its vLLM child, so no engine outlives the test session.
            preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
        )
    server = VLLMServer(
        base_url=f"http://127.0.0.1:{port}/v1",
        model=SERVED_NAME,
        port=port,
        log_path=vllm_log,
        serve_log_path=serve_log,
        process=proc,
    )
    try:
        _wait_ready(server, ready_timeout_s)
        yield server
    finally:
        _stop(server)


def _wait_ready(server: VLLMServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"lychee-ray serve exited with {server.process.returncode}:\n{_tails(server)}")
        if models_answer(server.base_url):
            return
        time.sleep(1.0)
    raise RuntimeError(f"vLLM was not ready after {timeout_s:.0f} s:\n{_tails(server)}")


def models_answer(base_url: str, timeout_s: float = 2.0) -> list[str] | None:
    """Model ids from GET /v1/models, or None when nothing answers."""
    try:
        with urllib.request.urlopen(base_url + "/models", timeout=timeout_s) as resp:
            return [m["id"] for m in json.loads(resp.read())["data"]]
    except (OSError, ValueError, KeyError):
        return None


def _stop(server: VLLMServer, grace_s: float = 60) -> None:
    proc = server.process
    problem = None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            problem = f"lychee-ray serve did not stop within {grace_s:.0f} s of SIGTERM"
    if problem is None and proc.returncode != 0:
        problem = f"lychee-ray serve exited with {proc.returncode} on SIGTERM"
    if problem is None and _port_open(server.port):
        problem = "vLLM still listens after lychee-ray serve stopped"
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a failed shutdown, if any
    if problem:
        raise RuntimeError(f"{problem}:\n{_tails(server)}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tails(server: VLLMServer, n: int = 3000) -> str:
    parts = []
    for path in (server.serve_log_path, server.log_path):
        text = path.read_text(errors="replace") if path.exists() else "(no log)"
        parts.append(f"--- {path.name} ---\n{text[-n:]}")
    return "\n".join(parts)
