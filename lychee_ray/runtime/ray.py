"""Starting Ray: join the cluster when there is one, else start a private local instance, then
apply the config's Ray Data settings. Shared by the ingest and evaluate jobs so both start Ray
the same way; `ray` is imported only when called.
"""

from __future__ import annotations

import os

from lychee_ray.config_sections import RayConfig


# --------------------------------------------------------------------------------------------
# Ray
# --------------------------------------------------------------------------------------------
def init_ray(cfg: RayConfig):
    """Join the cluster when there is one (RAY_ADDRESS is set inside `ray job submit`, or
    ray.address is given), else start a private local Ray."""
    import ray

    if ray.is_initialized():
        return
    if cfg.address:
        ray.init(address=cfg.address, log_to_driver=True)
    elif os.environ.get("RAY_ADDRESS"):
        ray.init()
    else:
        # address="local" always starts a fresh local instance (a stale
        # /tmp/ray/ray_current_cluster would otherwise be joined); no token auth on loopback.
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(address="local", num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=True)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = cfg.progress_bars
