"""Ray job: serve the configured open model on the cluster's GPU nodes with Ray Serve LLM
(lychee_ray/llm/serve_llm.py says how and where).

    ray job submit --working-dir . -- python jobs/serve_llm.py --config configs/cluster.yaml

`--dump FILE` writes the Serve deploy config as YAML (`-`: stdout) and exits.
"""

from __future__ import annotations

import argparse
import sys

import yaml

from lychee_ray.config import load_config
from lychee_ray.config_sections import ConfigError
from lychee_ray.llm.serve_llm import APP_NAME, build_serve_llm_config, deploy


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="jobs/serve_llm.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/cluster.yaml", help="lychee-ray config (serve: and llm: sections)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, repeatable")
    p.add_argument("--min-replicas", type=int, default=1, help="0 releases every GPU node when idle")
    p.add_argument("--max-replicas", type=int, default=4, help="<= GPU nodes x GPUs per node / tensor_parallel_size")
    p.add_argument("--app-name", default=APP_NAME)
    p.add_argument("--dump", metavar="FILE", help="write the Serve config as YAML ('-': stdout) and exit")
    p.add_argument("--no-check", action="store_true", help="skip the GET /v1/models check after deploying")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        cfg = load_config(args.config, args.set)
        serve_config = build_serve_llm_config(cfg, min_replicas=args.min_replicas, max_replicas=args.max_replicas, app_name=args.app_name)
    except (ConfigError, ValueError) as exc:
        print(f"serve_llm: {exc}", file=sys.stderr)
        return 2
    if args.dump:
        text = yaml.safe_dump(serve_config, sort_keys=False)
        if args.dump == "-":
            sys.stdout.write(text)
        else:
            with open(args.dump, "w") as f:
                f.write(text)
        return 0
    return deploy(cfg, serve_config, args.app_name, check=not args.no_check)


if __name__ == "__main__":
    sys.exit(main())
