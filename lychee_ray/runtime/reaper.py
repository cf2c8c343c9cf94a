"""Stops the local Ray of a driver that was killed: `kill -9` skips `ray.shutdown()`, and the Ray
processes the driver started (raylet, GCS, agents, workers busy in a task) would live on; a
worker in the middle of a write would even go on committing batches of a run that is gone.

`python -m lychee_ray.runtime.reaper PID` is started by `runtime.ray.start_local_ray` beside the
driver PID. It notes the Ray processes descended from the driver every half second, and once
the driver is gone kills the ones it noted (each checked by its start time, so a reused process
id is never hit), then exits. Linux only (it reads /proc); elsewhere it is not started.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

PROC = Path("/proc")
POLL_S = 0.5


def stat(pid: int) -> tuple[int, int, str] | None:
    """(parent pid, start time, state) of a live process, None when it is gone or a zombie."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else (int(fields[1]), int(fields[19]), fields[0])


def descendants(root: int) -> dict[int, int]:
    """Every live descendant of `root` with its start time."""
    children: dict[int, list[tuple[int, int]]] = {}
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (st := stat(int(entry.name))):
            children.setdefault(st[0], []).append((int(entry.name), st[1]))
    out, todo = {}, [root]
    while todo:
        for pid, start in children.get(todo.pop(), []):
            if pid not in out:
                out[pid] = start
                todo.append(pid)
    return out


def is_ray(pid: int) -> bool:
    try:
        return b"ray" in (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def watch(driver: int) -> list[int]:
    """Wait for `driver` to end, then kill the Ray processes noted under it; the pids killed."""
    first = stat(driver)
    if first is None:
        return []
    me, noted = os.getpid(), {}
    while (st := stat(driver)) is not None and st[1] == first[1]:
        for pid, start in descendants(driver).items():
            if pid != me and pid not in noted and is_ray(pid):
                noted[pid] = start
        time.sleep(POLL_S)
    killed = []
    for pid, start in noted.items():
        st = stat(pid)
        if st is not None and st[1] == start:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    return killed


if __name__ == "__main__":
    watch(int(sys.argv[1]))
