"""Stages for the runtime's scale tests (tests/test_pipeline_scale.py): one that asks the whole
2-CPU cluster for its actor and works slowly, one that hangs, and a sink that commits a file
per batch. Module level, so Ray workers import them by name."""

from __future__ import annotations

import json
import time
from pathlib import Path

from lychee_ray.runtime.pipeline import SinkStage
from lychee_ray.runtime.stage import Resources, Stage
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Turn


def conversation(cid: str, n_turns: int) -> Conversation:
    turns = [Turn(turn_id=f"t{i}", turn_idx=i, session_id="s1", speaker="a", role="user", text=f"turn {i} of {cid}") for i in range(n_turns)]
    return Conversation(conversation_id=cid, source="chat_jsonl", source_file="x.jsonl", turns=turns)


class Greedy(Stage[Conversation]):
    """An actor pool that asks for every CPU of the cluster and takes `seconds` per batch,
    writing when each batch ended into `log_dir` (the test compares with the commits)."""

    name = "greedy"

    def __init__(self, log_dir: str, seconds: float, cpus: float = 2.0):
        self.log_dir, self.seconds = Path(log_dir), seconds
        self.resources = Resources(num_cpus=cpus, num_actors=1, batch_size=None)

    def process_batch(self, items):
        time.sleep(self.seconds)
        (self.log_dir / f"stage-{items[0].conversation_id}.json").write_text(json.dumps(time.time()))
        return items


class Hang(Stage[Conversation]):
    """Hangs for `seconds` on the conversation named `stuck`, passes the others at once."""

    name = "hang"

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.resources = Resources(num_cpus=0.5, num_actors=1, batch_size=None)

    def process_batch(self, items):
        if any(c.conversation_id == "stuck" for c in items):
            time.sleep(self.seconds)
        return items


class CommitSink(SinkStage[Conversation]):
    """A commit per batch: a file named after its first conversation, holding when it was written."""

    name = "commit"
    row_keys = ("conversation_id", "n_turns")

    def __init__(self, log_dir: str):
        self.log_dir = Path(log_dir)
        self.resources = Resources(num_cpus=0.5, batch_size=1)

    def consume(self, items):
        (self.log_dir / f"commit-{items[0].conversation_id}.json").write_text(json.dumps(time.time()))
        return [{"conversation_id": c.conversation_id, "n_turns": len(c.turns)} for c in items]
