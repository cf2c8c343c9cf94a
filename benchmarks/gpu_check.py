"""GPU check (issue 31): the encode stage's real prompts through (a) our batched client against a
vLLM OpenAI server and (b) vLLM's own offline `LLM.generate`, on one GPU, with a 7B-shaped model.

Model: Qwen2-7B's published sizes (hidden 3584, 28 layers, 28 heads, 4 KV heads, intermediate
18944, vocab 152064) with random weights (vLLM `load_format="dummy"`: nothing is downloaded or
read), bf16; the folder (config + a stand-in tokenizer) and the prompts come from
benchmarks/gpu_prompts.py (the encode stage's exact messages and JSON schema per segment).

Run: (a) `lychee_ray.llm.client.LLMClient` sends every prompt at once (one request per prompt,
JSON-schema structured output, no repairs) to `python -m vllm.entrypoints.openai.api_server`
started here on 127.0.0.1 with the dummy model; then the server is stopped and (b) `LLM.generate`
runs the same prompts (chat template applied by the same tokenizer, token ids in, the same schema
per prompt, the same completion cap, greedy). Each gives (prompt + completion) tokens/s; (a) over
(b) is the ratio. GPU memory used is nvidia-smi's while each engine is up (both reserve
`--gpu-memory-utilization` of the card for weights + KV cache); time to first token is a streamed
request to the idle server (median of 3 after a warm-up). A random model's JSON is nonsense and
mostly runs to the completion cap: "JSON ok" says nothing about quality.

Interpreters: (a) imports lychee_ray, whose package imports the store (duckdb, bm25s, ...); the
server and (b) need vLLM. One Python with both, or `--vllm-python` naming vLLM's (the project
keeps vLLM in .venv-vllm).

One command, one hard timeout (`--timeout-s`, default 540 s): the GPU work runs in a child
process group that is killed at the deadline, and the report says what finished. Output: a
Markdown table on stdout and in `<out-dir>/gpu_check.md` (default benchmarks/results/), logs and
gpu_check.json beside it.

    python benchmarks/gpu_check.py --dry-run     # here, on the CPU: model folder + prompts, no vLLM
    python benchmarks/gpu_check.py               # on the GPU box, with --work-dir carried there
    python benchmarks/gpu_check.py --smoke-cpu --vllm-python .venv-vllm/bin/python --timeout-s 1500
        # the same plumbing on vLLM's CPU build with a 2-layer model: proves the script, measures nothing
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script (`python benchmarks/gpu_check.py`): import the repo's packages
    sys.path.insert(0, str(REPO))

from benchmarks.gpu_prompts import build_model_dir, check_model_dir, load_prompts, prompt_token_counts  # noqa: E402

LOCOMO = REPO.parent / "shared" / "data" / "locomo" / "locomo_dev.json"
RESULTS = REPO / "benchmarks" / "results"
SERVED = "dummy-qwen2-7b"
# Without disable_any_whitespace a random model fills the grammar's whitespace (tests/support/tiny_vllm.py).
STRUCTURED = {"backend": "xgrammar", "disable_any_whitespace": True}
# (a) imports lychee_ray (its package imports the store: duckdb, bm25s...); vLLM may live in another interpreter
NEEDED_HERE = ("torch", "transformers", "openai", "pydantic", "yaml", "duckdb", "bm25s", "tiktoken", "pyarrow")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--input", type=Path, default=LOCOMO, help="conversations to build prompts from (default: LoCoMo dev)")
    p.add_argument("--work-dir", type=Path, default=RESULTS / "gpu_check_work", help="model folder + prompts.json (carry it to the GPU box)")
    p.add_argument("--out-dir", type=Path, default=RESULTS, help="where gpu_check.md and the logs go")
    p.add_argument("--max-prompts", type=int, default=192, help="encode prompts used (default 192)")
    p.add_argument("--max-tokens", type=int, default=256, help="completion cap per request, both paths (default 256)")
    p.add_argument("--max-model-len", type=int, default=8192)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    p.add_argument("--compile", action="store_true", help="CUDA graphs + torch.compile (default: --enforce-eager, faster to start)")
    p.add_argument("--timeout-s", type=float, default=540.0, help="hard limit for the whole run (default 540 s)")
    p.add_argument("--dry-run", action="store_true", help="build model folder and prompts, check them; start no vLLM")
    p.add_argument("--rebuild", action="store_true", help="rebuild prompts.json even if present")
    p.add_argument("--vllm-python", default=sys.executable,
                   help="interpreter with vLLM, for the server and (b) (default: this one; the project keeps vLLM in .venv-vllm)")
    p.add_argument("--smoke-cpu", action="store_true",
                   help="check this script's plumbing on vLLM's CPU build: a 2-layer model of the same vocab, float32, few prompts")
    p.add_argument("--child", choices=["gpu", "offline"], help=argparse.SUPPRESS)
    p.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.smoke_cpu:
        args.max_prompts, args.max_tokens, args.max_model_len = min(args.max_prompts, 6), min(args.max_tokens, 16), 4096
    args.model_dir = args.work_dir / ("model-tiny" if args.smoke_cpu else "model")
    args.prompts_file = args.work_dir / "prompts.json"
    return args


def child_argv(args, role: str) -> list[str]:
    """This script's command line for a child process (`role`), same settings, same deadline."""
    python = sys.executable if role == "gpu" else args.vllm_python
    return [python, str(Path(__file__).resolve()), "--child", role, "--deadline", str(args.deadline), "--input", str(args.input),
            "--work-dir", str(args.work_dir), "--out-dir", str(args.out_dir), "--max-prompts", str(args.max_prompts),
            "--max-tokens", str(args.max_tokens), "--max-model-len", str(args.max_model_len), "--vllm-python", args.vllm_python,
            "--gpu-memory-utilization", str(args.gpu_memory_utilization), *(["--compile"] if args.compile else []),
            *(["--smoke-cpu"] if args.smoke_cpu else [])]


# --------------------------------------------------------------------------------------------
# GPU side: the "gpu" child runs (a) in this interpreter and (b) in an "offline" child under
# --vllm-python; both write into <out-dir>/gpu_check.json as soon as they have a result
# --------------------------------------------------------------------------------------------
def gpu_memory() -> dict:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        name, used, total = [x.strip() for x in out.split(",")]
        return {"gpu": name, "used_mib": int(used), "total_mib": int(total)}
    except (OSError, IndexError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"gpu": f"none seen ({type(exc).__name__})", "used_mib": None, "total_mib": None}


def new_api(version: str) -> bool:
    """vLLM >= 0.11 calls it structured outputs (older: guided decoding)."""
    major, minor = (int(x) for x in version.split(".")[:2])
    return (major, minor) >= (0, 11)


def vllm_version(python: str) -> str:
    out = subprocess.run([python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{python} cannot import vllm: {out.stderr.strip()[-300:]}")
    return out.stdout.strip().splitlines()[-1]


def engine_settings(args) -> dict:
    """What both engines get, so (a) and (b) run the same model the same way."""
    return {"dtype": "float32" if args.smoke_cpu else "bfloat16", "max_model_len": args.max_model_len, "seed": 0,
            "gpu_memory_utilization": args.gpu_memory_utilization, "enforce_eager": not args.compile,
            "max_num_seqs": max(1, min(256, args.max_prompts))}


def engine_env(args) -> dict:
    # vLLM's CPU build sizes its KV cache from this (GiB) instead of the card; CI_ENV stops it
    # from sizing itself to the whole machine (tests/support/tiny_vllm.py)
    return {**os.environ, **({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_CI_ENV": "1"} if args.smoke_cpu else {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(args, port: int, version: str) -> list[str]:
    e = engine_settings(args)
    cmd = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(args.model_dir), "--served-model-name", SERVED,
           "--host", "127.0.0.1", "--port", str(port), "--load-format", "dummy", "--dtype", e["dtype"],
           "--max-model-len", str(e["max_model_len"]), "--seed", str(e["seed"]), "--max-num-seqs", str(e["max_num_seqs"])]
    if not args.smoke_cpu:
        cmd += ["--gpu-memory-utilization", str(e["gpu_memory_utilization"])]
    if new_api(version):
        cmd += ["--structured-outputs-config", json.dumps(STRUCTURED)]
    else:
        cmd += ["--guided-decoding-backend", "xgrammar:disable-any-whitespace"]
    return cmd + (["--enforce-eager"] if e["enforce_eager"] else [])


def wait_ready(proc: subprocess.Popen, base_url: str, deadline: float, log: Path) -> None:
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {proc.returncode}; see {log.name}")
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(base_url + "/models", timeout=2) as resp:
                if SERVED in resp.read().decode():
                    return
        time.sleep(2)
    raise TimeoutError(f"the vLLM server was not ready before the deadline; see {log.name}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


def wait_memory_freed(baseline_mib: int | None, timeout_s: float = 60) -> None:
    """The offline engine needs the card the server held: wait until nvidia-smi shows it back."""
    end = time.time() + timeout_s
    while baseline_mib is not None and time.time() < end:
        used = gpu_memory()["used_mib"]
        if used is None or used <= baseline_mib + 1024:
            return
        time.sleep(2)


def response_format(prompt: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "EncodeOutput", "schema": prompt["schema"], "strict": True}}


def time_to_first_token(base_url: str, prompts: list[dict], max_tokens: int) -> list[float]:
    """Streamed requests one at a time to the idle server: seconds to the first content chunk."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="EMPTY", timeout=120, max_retries=0)
    client.chat.completions.create(model=SERVED, messages=prompts[0]["messages"], response_format=response_format(prompts[0]), max_tokens=4)  # warm-up
    out = []
    for p in prompts[1:4]:
        start = time.perf_counter()
        stream = client.chat.completions.create(model=SERVED, messages=p["messages"], response_format=response_format(p),
                                                max_tokens=max_tokens, temperature=0.0, stream=True)
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                out.append(time.perf_counter() - start)
                break
        stream.close()
    return out


def run_client_path(args, prompts: list[dict], log: Path) -> dict:
    """(a): LLMClient sends every prompt at once to a vLLM server started here."""
    from lychee_ray.config_sections import LLMConfig
    from lychee_ray.llm.client import LLMClient, run_closing
    from lychee_ray.schemas import EncodeOutput

    version = vllm_version(args.vllm_python)
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    idle = gpu_memory()
    with log.open("wb") as out:
        proc = subprocess.Popen(server_command(args, port, version), stdout=out, stderr=subprocess.STDOUT, env=engine_env(args))
    try:
        start = time.time()
        wait_ready(proc, base_url, args.deadline - 90, log)  # leave (b) a chance
        row = {"vllm": version, "startup_s": time.time() - start, "ttft_s": time_to_first_token(base_url, prompts, args.max_tokens)}
        left = max(60.0, args.deadline - time.time())
        cfg = LLMConfig(backend="openai", base_url=base_url, model=SERVED, max_in_flight=len(prompts), repair_retries=0,
                        max_retries=0, timeout_s=left, call_deadline_s=left, temperature=0.0, schema_dialect="vllm")
        client = LLMClient(cfg)

        async def every_prompt():
            return await asyncio.gather(*(client.structured(p["messages"], EncodeOutput, schema=p["schema"], max_tokens=args.max_tokens, tag=p["id"])
                                          for p in prompts))

        start = time.perf_counter()
        results = run_closing(every_prompt(), client)
        row["seconds"] = time.perf_counter() - start
        row["memory"] = gpu_memory()
        row.update(requests=len(results), ok=sum(r.ok for r in results), errors=sorted({(r.error or "")[:100] for r in results if not r.ok})[:3],
                   prompt_tokens=sum(r.usage.prompt_tokens for r in results), completion_tokens=sum(r.usage.completion_tokens for r in results))
        return row
    finally:
        stop(proc)
        wait_memory_freed(idle["used_mib"])


def run_offline_path(args, prompts: list[dict]) -> dict:
    """(b): vLLM's offline engine on the same prompts (runs under --vllm-python)."""
    import vllm
    from vllm import LLM, SamplingParams

    kwargs = {"model": str(args.model_dir), "load_format": "dummy", **engine_settings(args)}
    if args.smoke_cpu:
        kwargs.pop("gpu_memory_utilization")
    if new_api(vllm.__version__):
        from vllm.sampling_params import StructuredOutputsParams

        kwargs["structured_outputs_config"] = dict(STRUCTURED)

        def params(p):
            return SamplingParams(temperature=0.0, max_tokens=args.max_tokens, structured_outputs=StructuredOutputsParams(json=p["schema"]))
    else:
        from vllm.sampling_params import GuidedDecodingParams

        kwargs["guided_decoding_backend"] = "xgrammar:disable-any-whitespace"

        def params(p):
            return SamplingParams(temperature=0.0, max_tokens=args.max_tokens, guided_decoding=GuidedDecodingParams(json=p["schema"]))

    # The chat template applied as the server applies it, then token ids: LLM.generate sees what (a) sent.
    inputs = [{"prompt_token_ids": ids} for ids in prompt_token_counts(args.model_dir, prompts)]
    start = time.time()
    llm = LLM(**kwargs)
    row = {"vllm": vllm.__version__, "startup_s": time.time() - start}
    llm.generate(inputs[:1], [params(prompts[0])], use_tqdm=False)  # warm-up: kernels, grammar compiler
    start = time.perf_counter()
    outs = llm.generate(inputs, [params(p) for p in prompts], use_tqdm=False)
    row["seconds"] = time.perf_counter() - start
    row["memory"] = gpu_memory()
    ok = 0
    for o in outs:
        with contextlib.suppress(ValueError):
            json.loads(o.outputs[0].text)
            ok += 1
    row.update(requests=len(outs), ok=ok, prompt_tokens=sum(len(o.prompt_token_ids) for o in outs),
               completion_tokens=sum(len(o.outputs[0].token_ids) for o in outs))
    return row


def save_result(args, key: str, row: dict) -> None:
    path = args.out_dir / "gpu_check.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    results[key] = row
    path.write_text(json.dumps(results, indent=1))


def guarded(args, key: str, step) -> None:
    """Run one path unless too little time is left; its failure is its row, not the run's end."""
    if args.deadline - time.time() < 90:
        save_result(args, key, {"error": "not started: too little time left before --timeout-s"})
        return
    try:
        save_result(args, key, step())
    except Exception as exc:
        save_result(args, key, {"error": f"{type(exc).__name__}: {str(exc)[:300]}"})


def gpu_child(args) -> None:
    prompts, _ = load_prompts(args)
    save_result(args, "idle", gpu_memory())
    guarded(args, "a", lambda: run_client_path(args, prompts, args.out_dir / "gpu_check_server.log"))
    log = args.out_dir / "gpu_check_offline.log"

    def offline():
        with log.open("wb") as out:
            proc = subprocess.run(child_argv(args, "offline"), stdout=out, stderr=subprocess.STDOUT, env=engine_env(args),
                                  timeout=max(1.0, args.deadline - time.time()))
        row = json.loads((args.out_dir / "gpu_check.json").read_text()).get("b")
        if row is None:
            raise RuntimeError(f"the offline child ended with {proc.returncode} and no result; see {log.name}")
        return row

    guarded(args, "b", offline)


def offline_child(args) -> None:
    prompts = json.loads(args.prompts_file.read_text())["prompts"][: args.max_prompts]
    save_result(args, "b", run_offline_path(args, prompts))


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------
def rate(row: dict) -> float | None:
    if "seconds" not in row:
        return None
    return (row["prompt_tokens"] + row["completion_tokens"]) / row["seconds"]


def render(args, prompts, source, tokens, check, results, note) -> list[str]:
    lengths = [len(t) for t in tokens]
    mode = "dry run: no vLLM started" if args.dry_run else "smoke run on vLLM's CPU build: not a measurement" if args.smoke_cpu else "GPU run"
    shape = "2-layer stand-in of Qwen2-7B's vocab (--smoke-cpu)" if args.smoke_cpu else "Qwen2-7B sizes"
    lines = [
        f"# GPU check: our batched client vs vLLM offline, 7B-shaped dummy model ({mode})", "",
        f"Command: `python benchmarks/gpu_check.py {' '.join(sys.argv[1:])}`", "",
        f"- model: {shape} ({check.get('class', '?')}, {check.get('params', 0) / 1e9:.2f} B parameters), random weights "
        f"(vLLM load_format=dummy), {engine_settings(args)['dtype']}, {'CUDA graphs' if args.compile else 'enforce_eager'}, "
        f"max_model_len {args.max_model_len}, gpu_memory_utilization {args.gpu_memory_utilization}",
        f"- tokenizer: cl100k_base's vocabulary as a Qwen2 tokenizer with ChatML ({check.get('tokenizer_vocab', '?')} ids; a stand-in for Qwen2's own)",
        f"- prompts: {len(prompts)} encode prompts from `{source}`; prompt tokens (chat template applied) mean "
        f"{statistics.mean(lengths):.0f}, max {max(lengths)}, total {sum(lengths):,}; completion cap {args.max_tokens}; "
        "per-segment JSON schema (xgrammar, no whitespace), greedy",
    ]
    if results is not None:
        idle = results.get("idle", {})
        used = f"{idle['used_mib']} of {idle['total_mib']} MiB used before any engine" if idle.get("used_mib") is not None else "no nvidia-smi reading"
        lines += [f"- device: {idle.get('gpu')}, {used}; vLLM {results.get('a', {}).get('vllm') or results.get('b', {}).get('vllm') or '?'}", "",
                  "| path | requests | JSON ok | prompt tokens | completion tokens | seconds | (prompt+completion) tokens/s | GPU MiB used | start-up s | TTFT s (median of 3) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for key, label in (("a", "(a) LLMClient -> vLLM server"), ("b", "(b) vLLM LLM.generate offline")):
            row = results.get(key, {"error": "no result (see the note below)"})
            if "seconds" not in row:
                lines.append(f"| {label} | {row.get('error', 'no result')} |  |  |  |  |  |  |  |  |")
                continue
            ttft = f"{statistics.median(row['ttft_s']):.3f}" if row.get("ttft_s") else "n/a"
            lines.append(f"| {label} | {row['requests']} | {row['ok']} | {row['prompt_tokens']:,} | {row['completion_tokens']:,} | "
                         f"{row['seconds']:.1f} | {rate(row):,.0f} | {row['memory']['used_mib'] if row['memory']['used_mib'] is not None else 'n/a'} | {row['startup_s']:.0f} | {ttft} |")
        ra, rb = rate(results.get("a", {})), rate(results.get("b", {}))
        lines += ["", f"Ratio (a) / (b), tokens/s: {ra / rb:.2f}" if ra and rb else "Ratio: n/a (a path did not finish)"]
        if results.get("a", {}).get("errors"):
            lines.append(f"(a) reply errors (a random model's JSON): {results['a']['errors']}")
    return lines + (["", note] if note else [])


# --------------------------------------------------------------------------------------------
# main: prepare here, run the GPU part in a child process group under the hard deadline
# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    args.deadline = args.deadline or time.time() + args.timeout_s
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.child == "gpu":
        gpu_child(args)
        return args.out_dir / "gpu_check.json"
    if args.child == "offline":
        offline_child(args)
        return args.out_dir / "gpu_check.json"
    build_model_dir(args.model_dir, tiny=args.smoke_cpu)
    prompts, source = load_prompts(args)
    if not prompts:
        raise SystemExit(f"no encode prompts came from {source}")
    tokens = prompt_token_counts(args.model_dir, prompts)
    try:
        check = check_model_dir(args.model_dir)
    except Exception as exc:  # a report without the check beats no GPU run
        check = {"class": f"unchecked: {type(exc).__name__}: {str(exc)[:120]}"}
    results, note = None, ""
    if args.dry_run:
        missing = [m for m in NEEDED_HERE if importlib.util.find_spec(m) is None]
        note = (f"Dry run. The GPU run needs {', '.join(NEEDED_HERE)} in this interpreter (missing here: {', '.join(missing) or 'none'}) "
                f"and vllm in --vllm-python ({args.vllm_python}). Longest prompt + cap = {max(map(len, tokens)) + args.max_tokens} tokens "
                f"(max_model_len {args.max_model_len}).")
    else:
        results, note = run_child(args)
    out = args.out_dir / ("gpu_check_smoke.md" if args.smoke_cpu else "gpu_check.md")
    text = "\n".join(render(args, prompts, source, tokens, check, results, note)) + "\n"
    out.write_text(text)
    print(text)
    return out


def run_child(args) -> tuple[dict, str]:
    (args.out_dir / "gpu_check.json").unlink(missing_ok=True)
    log = args.out_dir / "gpu_check_child.log"
    note = ""
    with log.open("wb") as out:
        # its own process group: the deadline kills the child, the server and the engines' workers at once
        proc = subprocess.Popen(child_argv(args, "gpu"), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=max(1.0, args.deadline - time.time()))
        except subprocess.TimeoutExpired:
            note = f"**Stopped at the {args.timeout_s:.0f} s deadline**: what finished is above."
        finally:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, sig)
                    time.sleep(5 if sig == signal.SIGTERM else 0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
    path = args.out_dir / "gpu_check.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    if proc.returncode != 0 or any("error" in results.get(k, {"error": 1}) for k in ("a", "b")):
        tail = log.read_text(errors="replace")[-2500:]
        note += f" Logs: {log.name}, gpu_check_server.log, gpu_check_offline.log; the end of {log.name}:\n\n```\n{tail}\n```"
    return results, note.strip()


if __name__ == "__main__":  # vLLM starts worker processes by spawn: they must not rerun this
    main()
