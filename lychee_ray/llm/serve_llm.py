"""Ray Serve LLM: the configured open model on the cluster's GPU nodes (the cluster counterpart of
`lychee-ray serve`; jobs/serve_llm.py is its `ray job submit` entry point).

It deploys `serve.model` as an OpenAI-compatible app (`ray.serve.llm.build_openai_app`) so the
encoder, planner, answer and judge stages reach it at `llm.base_url` like any vLLM server. vLLM's
continuous batching and prefix caching form the GPU batches; Serve autoscaling adds replicas (GPU
nodes) while requests queue and removes them when the job is done.

Placement (resource names are defined in /cluster.yaml, see `LLM_RESOURCE`/`INGRESS_RESOURCE`):
- GPU nodes run a different Python environment from the rest: `ray[llm]==2.60.0`, which pins
  vllm 0.29 and its CUDA torch and cannot live in the package's venv. So everything that
  imports vllm is pinned to them: the engine bundles ask for `{"GPU": 1, "llm": 1}` per
  tensor-parallel worker, the OpenAI ingress replicas and the task that builds the app ask for
  `llm_ingress`. The driver (on the head, package venv) never imports `ray.serve.llm`.
- GPU nodes advertise `CPU: 0`, so no Ray Data task (which would need the package's
  dependencies) lands there; the Serve replicas therefore ask for `num_cpus: 0`.
- The HTTP proxy runs on the head only (`proxy_location: HeadOnly`), bound to `serve.host`;
  clients use `http://<head>:<serve.port>/v1` (configs/cluster.yaml uses the `lychee-head`
  alias that cluster.yaml writes into /etc/hosts on every node).

`build_serve_llm_config` is pure (no Ray, no vllm) and returns a Serve deploy config (the schema
of `serve deploy` files, `ray.serve.schema.ServeDeploySchema`); the engine arguments come from
the same mapping as the local server's (`serve.engine_args`). `deploy` deploys it. The Serve app
outlives the job; deploy again after a config change to update it in place, or `serve shutdown`.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from typing import Any

from lychee_ray.config import LycheeConfig
from lychee_ray.llm.serve import TYPED_ENGINE_ARGS, cli_args_to_engine_kwargs, engine_args

# Custom resources of the GPU worker type in /cluster.yaml. `llm`: one unit per GPU, consumed
# by vLLM engine workers. `llm_ingress`: slots for the OpenAI ingress replicas and the deploy
# task, which must run where vllm is importable but must not take an engine's `llm` unit.
LLM_RESOURCE = "llm"
INGRESS_RESOURCE = "llm_ingress"
APP_NAME = "lychee-llm"
IMPORT_PATH = "ray.serve.llm:build_openai_app"

# Keys Ray Serve LLM sets itself (model/served_model_name come from model_loading_config) or
# that belong to the proxy (host/port), and the ones ServeConfig has a typed field for.
_RESERVED_ENGINE_KEYS = {
    "model": "serve.model",
    "served_model_name": "serve.served_model_name",
    "host": "serve.host",
    "port": "serve.port",
    **TYPED_ENGINE_ARGS,
}


def model_id(cfg: LycheeConfig) -> str:
    """The name clients send as `model` (vLLM's served model name, Serve LLM's model_id)."""
    return cfg.serve.served_model_name or cfg.serve.model


def build_serve_llm_config(
    cfg: LycheeConfig,
    *,
    min_replicas: int = 1,
    max_replicas: int = 4,
    target_fraction: float = 0.75,
    app_name: str = APP_NAME,
) -> dict[str, Any]:
    """Serve deploy config (ServeDeploySchema as a dict) for `cfg.serve`; pure, needs no Ray.

    Autoscaling: a replica is one vLLM engine whose batch holds `max_num_seqs` sequences.
    Serve adds replicas when the average ongoing requests per replica exceed
    `target_fraction * max_num_seqs`, and lets each replica hold 25% more than its batch so the
    engine always has the next request queued when a sequence finishes.
    """
    s = cfg.serve
    mid = model_id(cfg)
    if cfg.llm.backend == "openai" and cfg.llm.model != mid:
        raise ValueError(
            f"llm.model is {cfg.llm.model!r} but the served model name is {mid!r}: "
            "every request would be answered 404 (set serve.served_model_name or llm.model)"
        )
    if min_replicas < 0 or max_replicas < max(1, min_replicas):
        raise ValueError(f"need 0 <= min_replicas <= max_replicas and max_replicas >= 1, got {min_replicas}, {max_replicas}")
    if not 0 < target_fraction <= 1:
        raise ValueError(f"target_fraction must be in (0, 1], got {target_fraction}")
    if s.tensor_parallel_size < 1:
        raise ValueError("serve.tensor_parallel_size must be >= 1")

    extra = cli_args_to_engine_kwargs(list(s.extra_args))
    for key in extra:
        if key in _RESERVED_ENGINE_KEYS:
            raise ValueError(f"serve.extra_args must not set --{key.replace('_', '-')}: use {_RESERVED_ENGINE_KEYS[key]}")

    engine_kwargs = {**engine_args(s), **extra}

    target = max(1, int(s.max_num_seqs * target_fraction))
    llm_config = {
        "model_loading_config": {"model_id": mid, "model_source": s.model},
        "engine_kwargs": engine_kwargs,
        # One bundle per tensor-parallel worker; STRICT_PACK keeps a replica's shards on one
        # node (TP over the network is slower than one more replica).
        "placement_group_config": {
            "bundle_per_worker": {"GPU": 1, LLM_RESOURCE: 1},
            "strategy": "STRICT_PACK",
        },
        "deployment_config": {
            "autoscaling_config": {
                "min_replicas": min_replicas,
                "initial_replicas": max(1, min_replicas),
                "max_replicas": max_replicas,
                "target_ongoing_requests": target,
                # A new replica costs minutes (node start, weights, CUDA graphs): scale up on
                # sustained load only, and keep replicas through short lulls between stages.
                "upscale_delay_s": 60,
                "downscale_delay_s": 600,
            },
            "max_ongoing_requests": max(target + 1, s.max_num_seqs + s.max_num_seqs // 4),
            # GPU nodes advertise CPU 0 (cluster.yaml); the replica merges into bundle 0.
            "ray_actor_options": {"num_cpus": 0},
            "health_check_timeout_s": 60,
        },
    }
    return {
        "proxy_location": "HeadOnly",
        "http_options": {"host": s.host, "port": s.port},
        "applications": [
            {
                "name": app_name,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": {
                    "llm_configs": [llm_config],
                    # The ingress imports vllm's protocol models: it must run on a GPU node.
                    "ingress_deployment_config": {
                        "ray_actor_options": {"num_cpus": 0, "resources": {INGRESS_RESOURCE: 1}},
                    },
                },
            }
        ],
    }


def _deploy_on_llm_node(serve_config: dict[str, Any]) -> str:
    """Runs as a Ray task on a GPU node, where `ray[llm]` (and so vllm) is installed.

    Self-contained on purpose: it is pickled by value and must not need lychee_ray there.
    """
    import ray
    from ray import serve
    from ray.serve.llm import build_openai_app

    serve.start(proxy_location=serve_config["proxy_location"], http_options=serve_config["http_options"])
    app = serve_config["applications"][0]
    # Returns once every deployment is healthy: replicas placed, weights loaded, engine up.
    serve.run(build_openai_app(app["args"]), name=app["name"], route_prefix=app["route_prefix"])
    return ray.util.get_node_ip_address()


def _head_ip(ray_mod) -> str:
    for node in ray_mod.nodes():
        if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
            return node["NodeManagerAddress"]
    raise RuntimeError("no live head node in ray.nodes()")


def _served_models(url: str, timeout_s: float) -> list[str]:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return [m.get("id") for m in json.loads(resp.read()).get("data", [])]


def deploy(cfg: LycheeConfig, serve_config: dict[str, Any], app_name: str = APP_NAME, check: bool = True) -> int:
    """Deploy `serve_config` from a Ray task on a GPU node, wait until it runs, check that it
    serves the model; 0 when it does, 1 with one sentence on stderr when not."""
    import ray

    ray.init(address=cfg.ray.address or "auto")
    on_gpu_node = ray.remote(_deploy_on_llm_node).options(
        num_cpus=0, resources={INGRESS_RESOURCE: 1}, max_retries=0, name="lychee-serve-llm-deploy"
    )
    t0 = time.monotonic()
    ref = on_gpu_node.remote(serve_config)
    try:
        # A GPU node may have to be launched first (autoscaler), then ~15 GB of weights loaded.
        node_ip = ray.get(ref, timeout=cfg.serve.ready_timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref, force=True)
        print(
            f"serve_llm: the app was not running after {cfg.serve.ready_timeout_s:.0f} s (serve.ready_timeout_s). "
            f"Check `ray status` for pending '{LLM_RESOURCE}'/'{INGRESS_RESOURCE}' demand (no GPU node type, "
            "quota) and `serve status` for replica errors.",
            file=sys.stderr,
        )
        return 1
    except ray.exceptions.RayError as exc:
        print(f"serve_llm: deployment failed: {exc}", file=sys.stderr)
        return 1

    host, port = cfg.serve.host, cfg.serve.port
    # A loopback bind answers only on the head itself; a job's driver runs there.
    probe_host = "127.0.0.1" if host in ("127.0.0.1", "localhost") else _head_ip(ray)
    base_url = f"http://{probe_host}:{port}/v1"
    print(f"deployed {model_id(cfg)!r} ({app_name}) in {time.monotonic() - t0:.0f} s; built on {node_ip}", flush=True)
    if check:
        try:
            models = _served_models(f"http://{probe_host}:{port}/v1/models", timeout_s=30)
        except OSError as exc:
            print(f"serve_llm: the app is running but GET {base_url}/models failed: {exc}", file=sys.stderr)
            return 1
        if model_id(cfg) not in models:
            print(f"serve_llm: {base_url}/models lists {models}, not {model_id(cfg)!r}", file=sys.stderr)
            return 1
    print(f"OpenAI-compatible endpoint: {base_url} (llm.base_url; configs/cluster.yaml uses http://lychee-head:{port}/v1)")
    print(base_url, flush=True)  # last line on stdout: the URL alone, for scripts
    return 0
