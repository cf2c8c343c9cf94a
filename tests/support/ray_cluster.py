"""A private multi-node Ray cluster on 127.0.0.1, started with `ray start`, for tests and benchmarks.

Other engineers' (and CI's) Ray instances may be running on the same machine, so nothing here
uses a default port or the default /tmp/ray, and nothing calls a bare `ray stop` (which kills
every Ray process of the machine). Each node gets ports picked free at start and a temp dir of
its own under one short root (/tmp/lyr-XXXX: Ray's Unix socket paths must stay under ~107
characters). Stopping finds this cluster's processes by that root in their command lines (plus
their children) and ends only those, by PID.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

HOST = "127.0.0.1"
# Ray's start-up and job commands are in the same bin folder as the interpreter running us.
BIN = Path(sys.executable).parent
WORKER_PORT_SPAN = 60  # one port per worker process of a node; a few dozen at most here


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def free_port_range(span: int, rng: random.Random, taken: frozenset[int] | set[int] = frozenset()) -> tuple[int, int]:
    """A run of `span` consecutive free ports, none of them in `taken` (Ray takes worker ports as a
    min..max range)."""
    for _ in range(200):
        low = rng.randrange(20000, 60000 - span)
        if all(p not in taken and _port_is_free(p) for p in range(low, low + span)):
            return low, low + span - 1
    raise RuntimeError(f"no {span} consecutive free ports found on {HOST}")


def free_port_outside(taken: set[int]) -> int:
    """A free port not in `taken`: the OS may hand out a port inside the worker-port range picked
    just before (both lie in the ephemeral range), and `ray start` refuses a port used twice."""
    for _ in range(200):
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port
    raise RuntimeError(f"no free port outside {len(taken)} taken ones on {HOST}")


def _node_port_flags(rng: random.Random, taken: set[int] | None = None) -> list[str]:
    """Every port a node opens, all distinct; `taken` holds ports already chosen for it."""
    taken = taken if taken is not None else set()
    low, high = free_port_range(WORKER_PORT_SPAN, rng, taken)
    taken |= set(range(low, high + 1))
    flags = [f"--min-worker-port={low}", f"--max-worker-port={high}"]
    for name in ("node-manager-port", "object-manager-port", "dashboard-agent-grpc-port",
                 "dashboard-agent-listen-port", "metrics-export-port", "runtime-env-agent-port"):
        flags.append(f"--{name}={free_port_outside(taken)}")
    return flags


@dataclass
class LocalRayCluster:
    """`start_head()`, then `add_node()` for each worker node; `stop()` in a finalizer."""

    root: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="lyr-", dir="/tmp"))
    gcs_port: int = 0
    dashboard_port: int = 0
    nodes: int = 0
    log: list[str] = field(default_factory=list)

    def __post_init__(self):
        self._rng = random.Random()
        self._ports: set[int] = set()  # every port handed to a node of this cluster, kept distinct
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_ADDRESS")}
        # No token auth on loopback (DESIGN.md); `python` in a job entrypoint is this venv's.
        env.update(RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
        self.env = env

    @property
    def gcs_address(self) -> str:
        return f"{HOST}:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://{HOST}:{self.dashboard_port}"

    def _ray(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        proc = subprocess.run([str(BIN / "ray"), *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        self.log.append(f"$ ray {' '.join(args)}\n{proc.stdout}\n{proc.stderr}")
        print(self.log[-1][-6000:])  # pytest shows it when a test fails
        if proc.returncode != 0:
            raise RuntimeError(f"`ray {args[0]}` failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        return proc

    def _node_temp_dir(self) -> str:
        path = os.path.join(self.root, f"n{self.nodes}")
        os.makedirs(path, exist_ok=True)
        self.nodes += 1
        return path

    def start_head(self, num_cpus: int, resources: dict[str, float] | None = None) -> None:
        taken = self._ports
        self.gcs_port, self.dashboard_port = free_port_outside(taken), free_port_outside(taken)
        client_port = free_port_outside(taken)  # not Ray's fixed 10001: another run may hold it
        node_flags = _node_port_flags(self._rng, taken)
        self._ray(
            "start", "--head", f"--node-ip-address={HOST}", f"--port={self.gcs_port}",
            f"--ray-client-server-port={client_port}",
            "--include-dashboard=true", f"--dashboard-host={HOST}", f"--dashboard-port={self.dashboard_port}",
            f"--temp-dir={self._node_temp_dir()}",
            f"--num-cpus={num_cpus}", "--num-gpus=0", f"--resources={json.dumps(resources or {})}",
            "--disable-usage-stats", *node_flags,
        )

    def add_node(self, num_cpus: int, resources: dict[str, float] | None = None, attempts: int = 3) -> None:
        """Join a node. Ray gives a raylet a fixed 30 s to register with the GCS, which a loaded
        2-core machine can miss; a failed attempt's processes are stopped before the retry."""
        for attempt in range(1, attempts + 1):
            node_dir = self._node_temp_dir()
            try:
                self._ray(
                    "start", f"--address={self.gcs_address}", f"--node-ip-address={HOST}",
                    f"--temp-dir={node_dir}", f"--num-cpus={num_cpus}", "--num-gpus=0",
                    f"--resources={json.dumps(resources or {})}", "--disable-usage-stats", *_node_port_flags(self._rng, self._ports),
                )
                return
            except RuntimeError:
                _terminate(self.processes(node_dir + os.sep))
                if attempt == attempts:
                    raise

    def alive_nodes(self) -> list[dict]:
        """The cluster's live nodes as the GCS reports them (resources included)."""
        code = (
            "import json, ray; ray.init(address=%r, log_to_driver=False); "
            "print(json.dumps([n for n in ray.nodes() if n['Alive']], default=str))" % self.gcs_address
        )
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True, timeout=120, check=True).stdout
        return json.loads(out.strip().splitlines()[-1])

    def submit(self, entrypoint: list[str], working_dir: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """`ray job submit --working-dir DIR -- ENTRYPOINT`, waiting for the job; raises on failure."""
        return self._ray(
            "job", "submit", f"--address={self.dashboard_url}", f"--working-dir={working_dir}", "--", *entrypoint,
            timeout=timeout,
        )

    # ----------------------------------------------------------------------------------------
    # Stopping: only our own processes, found by our temp root
    # ----------------------------------------------------------------------------------------
    def processes(self, under: str | None = None) -> list[psutil.Process]:
        """This cluster's processes (or one node's: `under` = its temp dir), children included."""
        mark = under or self.root
        ours: dict[int, psutil.Process] = {}
        for proc in psutil.process_iter(["cmdline"]):
            try:
                if any(mark in part for part in proc.info["cmdline"] or ()):
                    ours[proc.pid] = proc
                    for child in proc.children(recursive=True):
                        ours[child.pid] = child
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        ours.pop(os.getpid(), None)
        return list(ours.values())

    def stop(self, grace_s: float = 15) -> None:
        _terminate(self.processes(), grace_s)
        shutil.rmtree(self.root, ignore_errors=True)


def _terminate(procs: list[psutil.Process], grace_s: float = 15) -> None:
    """SIGTERM, then SIGKILL what is left after `grace_s`: only the PIDs given."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass
        _, procs = psutil.wait_procs(procs, timeout=grace_s)
        if not procs:
            return
