"""Starting Ray: join the cluster when there is one, else start a private local instance, then
apply the config's Ray Data settings. Shared by the ingest and evaluate jobs so both start Ray
the same way; `ray` is imported only when called.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from lychee_ray.config_sections import RayConfig

log = logging.getLogger(__name__)


class RayStartError(RuntimeError):
    """Ray could not be started or joined; the message is one sentence for the user."""


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
        start_local_ray(cfg)
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = cfg.progress_bars


def start_local_ray(cfg: RayConfig) -> None:
    """Start a private local Ray, `cfg.start_attempts` times at most. On a loaded machine the
    GCS or the raylet can miss Ray's own startup deadlines (a fixed 30 s for the raylet); such
    a start is cleaned up and tried again after a pause, and the last failure is one sentence."""
    import ray

    last: BaseException | None = None
    for attempt in range(1, cfg.start_attempts + 1):
        try:
            ray.init(address="local", num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=True)
            start_reaper()
            return
        except Exception as exc:  # Ray raises Exception, RuntimeError or TimeoutError here
            last = exc
            log.warning("starting a local Ray failed (attempt %d of %d): %s", attempt, cfg.start_attempts, first_line(exc))
            ray.shutdown()  # stops what the failed start left running
            if attempt < cfg.start_attempts:
                time.sleep(cfg.start_retry_s * attempt)
    raise RayStartError(
        f"could not start a local Ray in {cfg.start_attempts} attempt(s) (the last said: {first_line(last)}); "
        f"the machine may be overloaded: retry when it is quieter, raise ray.start_attempts, "
        f"or join a running cluster with --set ray.address=auto"
    )


_reaper: subprocess.Popen | None = None  # kept: it runs as long as this driver does


def start_reaper() -> None:
    """`runtime/reaper.py` beside this driver: if it is killed, its local Ray goes with it."""
    global _reaper
    if not os.path.isdir("/proc"):
        return
    _reaper = subprocess.Popen([sys.executable, "-m", "lychee_ray.runtime.reaper", str(os.getpid())],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def first_line(exc: BaseException | None) -> str:
    """An exception as one short line: Ray's startup errors run to pages of log tails."""
    text = str(exc).strip().splitlines()[0] if exc is not None and str(exc).strip() else type(exc).__name__
    return text[:300].rstrip(".")


# --------------------------------------------------------------------------------------------
# A run's workers stop with its driver
# --------------------------------------------------------------------------------------------
class RunAbandoned(RuntimeError):
    """The driver of this run is gone: a worker must not commit anything more."""


def check_driver(lease, timeout_s: float = 60.0) -> None:
    """Raise `RunAbandoned` unless the run's driver is alive. `lease`: a handle to an actor the
    driver created (Ray kills it when its owner dies) and that answers `alive()`; None: no check
    (a run in one process). A worker that keeps writing after a `kill -9` of its driver would
    commit batches of a run that no longer exists, racing a rerun's cleanup of the same store."""
    if lease is None:
        return
    import ray

    try:
        ray.get(lease.alive.remote(), timeout=timeout_s)
    except Exception as exc:  # the actor died with its owner, or the raylet/GCS is gone, or no answer in time
        raise RunAbandoned(f"the driver of this run is gone ({type(exc).__name__}): nothing more is committed") from None
