"""Killing a run the way an operator's kill -9 does: the driver and every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def session_pids(sid: int) -> list[int]:
    """Processes in session `sid` (field 6 of /proc/<pid>/stat): the killed run's driver and
    every Ray process it started, whatever process group they moved to."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if entry.name.isdigit() and int(fields[3]) == sid and fields[0] != "Z":  # a zombie is already dead
            pids.append(int(entry.name))
    return pids


def kill_session(proc: subprocess.Popen) -> None:
    """kill -9 the driver and its local Ray (an orphaned worker could still commit a batch after
    the driver died, and the test must count what was on disk when everything stopped)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # the group is gone already: nothing of the run is left
        pass
    proc.wait()
    for _ in range(300):  # bounded: at most ~60 s of retries
        if not (pids := session_pids(proc.pid)):
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
