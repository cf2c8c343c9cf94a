"""cluster.yaml (Ray autoscaler) and configs/cluster.yaml (the job config) are valid and agree.

No cluster is started: the autoscaler file is checked against the schema that ships inside the
installed ray package and against Ray's own config validation; the job config is loaded with
lychee_ray.config.load_config; and the resources the Serve LLM deployment asks for
(lychee_ray/llm/serve_llm.py) are checked against what the GPU node type advertises.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

from lychee_ray.config import load_config
from lychee_ray.llm import serve_llm

from .conftest import REPO

CLUSTER_YAML = REPO / "cluster.yaml"
JOB_CONFIG = REPO / "configs" / "cluster.yaml"


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load(CLUSTER_YAML.read_text())


@pytest.fixture(scope="module")
def ray_schema() -> dict:
    return json.loads((Path(ray.__file__).parent / "autoscaler" / "ray-schema.json").read_text())


def _types(cluster: dict) -> tuple[dict, dict, dict]:
    nodes = cluster["available_node_types"]
    return nodes[cluster["head_node_type"]], nodes["cpu_worker"], nodes["gpu_worker"]


def test_validates_against_ray_schema(cluster, ray_schema):
    jsonschema.validate(cluster, ray_schema)


def test_schema_check_is_not_vacuous(cluster, ray_schema):
    bad = copy.deepcopy(cluster)
    bad["available_node_types"]["gpu_worker"]["resources"]["llm"] = 0.5  # schema: integers only
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, ray_schema)
    bad = copy.deepcopy(cluster)
    bad["worker_nodes"] = {}  # unknown top-level key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, ray_schema)


def test_ray_validate_config(cluster):
    # Ray's own checks on top of the schema: head type exists, min_workers fit max_workers.
    from ray.autoscaler._private.util import validate_config

    validate_config(copy.deepcopy(cluster))
    assert cluster["provider"]["type"] == "aws"


def test_node_types_and_resources(cluster):
    head, cpu, gpu = _types(cluster)
    assert head["resources"] == {"CPU": 0}
    assert cpu["resources"].get("CPU", 0) >= 1 and "GPU" not in cpu["resources"]
    res = gpu["resources"]
    assert res["GPU"] >= 1
    assert res["llm"] == res["GPU"], "one llm unit per GPU: each engine shard takes GPU 1 + llm 1"
    assert res["llm_ingress"] >= 1
    assert res["CPU"] == 0, "GPU nodes lack the package's venv: no CPU task may land there"
    assert "llm" not in cpu["resources"] and "llm" not in head["resources"]
    assert gpu.get("min_workers", 0) <= gpu["max_workers"]
    assert cluster["max_workers"] >= cpu["max_workers"] + gpu["max_workers"]


def test_labels_are_valid_ray_node_labels(cluster):
    from ray._private.label_utils import (
        validate_node_label_syntax,
        validate_node_labels,
    )

    for node_type in cluster["available_node_types"].values():
        validate_node_label_syntax(node_type["labels"])  # raises on a malformed key or value
        validate_node_labels(node_type["labels"])  # raises on Ray's reserved prefix
    with pytest.raises(ValueError):
        validate_node_label_syntax({"lychee pool": "llm"})
    assert cluster["available_node_types"]["gpu_worker"]["labels"]["lychee-pool"] == "llm"


def test_setup_commands_install_as_readme(cluster):
    setup = " && ".join(cluster["setup_commands"])
    assert "git clone" in setup and "make venv" in setup
    # CPU nodes: the CPU wheel satisfies pyproject's torch pin, so make venv keeps it.
    pin = re.search(r'"torch==([^"]+)"', (REPO / "pyproject.toml").read_text()).group(1)
    assert f"torch=={pin} --index-url https://download.pytorch.org/whl/cpu" in setup
    # GPU nodes: their own list replaces setup_commands + worker_setup_commands for that type.
    gpu_setup = " && ".join(cluster["available_node_types"]["gpu_worker"]["worker_setup_commands"])
    assert f"'ray[llm]=={ray.__version__}'" in gpu_setup
    assert "git clone" in gpu_setup and "make venv" not in gpu_setup
    assert "ln -sfn ~/lychee-ray/.venv-serve-llm ~/ray-env" in gpu_setup
    head_setup = " && ".join(cluster["head_setup_commands"])
    assert f"'ray[serve]=={ray.__version__}'" in head_setup and "boto3" in head_setup
    assert "ln -sfn ~/lychee-ray/.venv ~/ray-env" in head_setup
    worker_setup = " && ".join(cluster["worker_setup_commands"])
    assert "$RAY_HEAD_IP lychee-head" in worker_setup
    for cmd in cluster["head_start_ray_commands"] + cluster["worker_start_ray_commands"]:
        if "ray start" in cmd or "ray stop" in cmd:
            assert "~/ray-env/bin/ray" in cmd


def test_job_config_loads_and_points_at_serve(cluster):
    cfg = load_config(JOB_CONFIG)
    assert cfg.ray.address == "auto"
    assert cfg.llm.backend == "openai"
    assert cfg.llm.model == (cfg.serve.served_model_name or cfg.serve.model)
    assert cfg.llm.base_url == f"http://lychee-head:{cfg.serve.port}/v1"
    assert cfg.serve.host == "0.0.0.0"  # the head's proxy serves the workers
    assert cfg.embedding.num_gpus_per_actor == 0.0 and cfg.embedding.device == "cpu"
    # Concurrency the encoder offers vs. what max_replicas engines can batch.
    offered = cfg.encoder.num_actors * min(cfg.llm.max_in_flight, cfg.encoder.conversations_in_flight)
    assert offered >= cfg.serve.max_num_seqs
    # Embedding actors x threads fit the CPU workers (min_workers of them at least one node).
    _, cpu, _ = _types(cluster)
    assert (cfg.embedding.num_threads or 1) <= cpu["resources"]["CPU"]


def test_serve_resources_exist_on_gpu_node_type(cluster):
    mod = serve_llm
    _, _, gpu = _types(cluster)
    res = gpu["resources"]
    assert mod.LLM_RESOURCE in res and mod.INGRESS_RESOURCE in res
    cfg = load_config(JOB_CONFIG)
    serve_cfg = mod.build_serve_llm_config(cfg)
    app = serve_cfg["applications"][0]["args"]
    llm = app["llm_configs"][0]
    pg = llm["placement_group_config"]
    bundles = [pg["bundle_per_worker"]] * cfg.serve.tensor_parallel_size
    # Replica actor merges into bundle 0 (num_cpus 0), so each bundle must fit, and STRICT_PACK
    # needs all of them on one node.
    assert pg["strategy"] == "STRICT_PACK"
    total = {}
    for b in bundles:
        for k, v in b.items():
            total[k] = total.get(k, 0) + v
    total["CPU"] = total.get("CPU", 0) + llm["deployment_config"]["ray_actor_options"]["num_cpus"]
    for key, need in total.items():
        assert res.get(key, 0) >= need, f"GPU node type lacks {key}: needs {need}, has {res.get(key, 0)}"
    ingress = app["ingress_deployment_config"]["ray_actor_options"]
    assert ingress["num_cpus"] <= res["CPU"]
    for key, need in ingress["resources"].items():
        assert res.get(key, 0) >= need
    # max_replicas engines must fit the GPU node pool.
    per_node = res[mod.LLM_RESOURCE] // cfg.serve.tensor_parallel_size
    assert llm["deployment_config"]["autoscaling_config"]["max_replicas"] <= per_node * gpu["max_workers"]
