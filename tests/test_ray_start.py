"""Starting a local Ray on a loaded machine (issue 31): a start that misses Ray's own deadline is
cleaned up and tried again, and a start that keeps failing is one sentence with rc 1, not Ray's
traceback."""

from __future__ import annotations

import json

import pytest
import ray

from lychee_ray.cli import main
from lychee_ray.config_sections import RayConfig
from lychee_ray.runtime import ray as ray_start
from lychee_ray.runtime.ray import RayStartError, start_local_ray

from .conftest import REPO

RAY_TIMEOUT = "The current node timed out during startup. This could happen because some of the raylet failed to startup or the GCS has become overloaded."


class FlakyInit:
    """ray.init that fails like an overloaded start `fails` times, then succeeds."""

    def __init__(self, fails: int):
        self.fails, self.calls, self.shutdowns = fails, 0, 0

    def init(self, **kwargs):
        self.calls += 1
        if self.calls <= self.fails:
            raise Exception(RAY_TIMEOUT + "\n  File raylet.out ...\n(many lines of log)")

    def shutdown(self):
        self.shutdowns += 1


@pytest.fixture
def flaky(monkeypatch):
    def make(fails):
        fake = FlakyInit(fails)
        monkeypatch.setattr(ray, "init", fake.init)
        monkeypatch.setattr(ray, "shutdown", fake.shutdown)
        monkeypatch.setattr(ray, "is_initialized", lambda: False)
        monkeypatch.setattr(ray_start.time, "sleep", lambda s: None)
        monkeypatch.setattr(ray_start, "start_reaper", lambda: None)  # no Ray was started
        return fake

    return make


def test_a_start_that_times_out_is_cleaned_up_and_retried(flaky):
    fake = flaky(2)
    start_local_ray(RayConfig(start_attempts=3))
    assert fake.calls == 3 and fake.shutdowns == 2


def test_a_start_that_keeps_failing_is_one_sentence(flaky):
    fake = flaky(5)
    with pytest.raises(RayStartError) as err:
        start_local_ray(RayConfig(start_attempts=2))
    assert fake.calls == 2
    text = str(err.value)
    assert "\n" not in text and text.startswith("could not start a local Ray in 2 attempt(s) (the last said: The current node timed out")
    assert "ray.address=auto" in text


def test_the_cli_prints_the_sentence_and_exits_1(flaky, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    flaky(9)
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"conversation_id": "c", "turns": [{"role": "user", "content": "Hello there."}]}) + "\n")
    rc = main(["ingest", "--config", str(REPO / "configs" / "local.yaml"), "--input", str(inp), "--out", str(tmp_path / "out"),
               "--set", "ray.start_attempts=2", "--set", "ray.progress_bars=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[-1].startswith("lychee-ray ingest: could not start a local Ray in 2 attempt(s)")
    assert not any("Traceback" in line for line in err)
