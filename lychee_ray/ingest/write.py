"""The write step of ingest: processed conversations in, committed store batches and summary rows
out (`WriteSink`, the pipeline's sink).

Each batch becomes one Parquet file per table and a commit marker (store/writer.py). A grown
conversation that failed is not written over the stored one (`resume.keep_stored_on_failure`).
Only the summary rows go back to the driver: counts as committed, the turns the read stage saw,
this run's LLM cost (a grown conversation's stored cost left out) and the stage seconds.
"""

from __future__ import annotations

import json
from functools import partial

from lychee_ray.config import LycheeConfig
from lychee_ray.ingest.resume import keep_stored_on_failure, prior_cost
from lychee_ray.runtime.pipeline import SinkStage
from lychee_ray.runtime.ray import check_driver
from lychee_ray.runtime.stage import Resources
from lychee_ray.schemas import Conversation
from lychee_ray.store.rows import is_withheld, split_turns, turns_in
from lychee_ray.store.writer import StoreWriter, batch_id_for

SUMMARY_KEYS = ("conversation_id", "status", "n_turns", "n_segments", "n_records", "degraded_segments", "turns_in",
                "split_turns", "split_parts", "held_turns", "llm_calls", "prompt_tokens", "completion_tokens", "batch_id", "stage_seconds")
THIS_RUN_COST = ("llm_calls", "prompt_tokens", "completion_tokens")


class WriteSink(SinkStage[Conversation]):
    name = "write"
    row_keys = SUMMARY_KEYS

    def __init__(self, cfg: LycheeConfig, out_dir: str, lease=None):
        self.cfg, self.out_dir = cfg, out_dir
        self.lease = lease  # the driver's actor (`runtime.ray.check_driver`): no commit once the driver is gone
        # a task, not an actor: it holds nothing, and half a CPU is always free beside the pools
        self.resources = Resources(num_cpus=0.5, batch_size=cfg.store.conversations_per_file)

    def consume(self, convs: list[Conversation]) -> list[dict]:
        convs, held = keep_stored_on_failure(convs)
        for c in convs:
            c.stats.wall_s = sum(c.seconds.values())
        check_driver(self.lease)  # before the parts, and again before the commit marker
        summaries = StoreWriter(self.out_dir, self.cfg).write_batch(convs, before_commit=partial(check_driver, self.lease)) if convs else []
        by_id = {c.conversation_id: c for c in convs}
        batch_id = batch_id_for(c.conversation_id for c in convs)  # the driver counts this run's turns by it
        for s in summaries:  # for the run's checks: degraded segments as committed, turns as read
            conv = by_id[s["conversation_id"]]
            s["degraded_segments"] = 0 if is_withheld(conv) else int(conv.stats.degraded_segments)
            s["turns_in"] = turns_in(conv)
            s["split_turns"], s["split_parts"] = split_turns(conv)
            for key, paid in prior_cost(conv).items():  # the summary counts this run's calls only
                if key in THIS_RUN_COST and s.get(key) is not None:
                    s[key] = int(s[key]) - int(paid or 0)
            s["batch_id"] = batch_id
        summaries += [held_summary(c) for c in held]
        seconds = {c.conversation_id: c.seconds for c in convs + held}
        for s in summaries:  # per-stage seconds travel to the driver with the rows, summed in the run summary
            s["stage_seconds"] = json.dumps(seconds.get(s["conversation_id"], {}))
        return [{k: s.get(k) for k in SUMMARY_KEYS} for s in summaries]


def held_summary(conv: Conversation) -> dict:
    """The summary row of a grown conversation left pending and not written (`keep_stored_on_failure`)."""
    n_split, n_parts = split_turns(conv)
    rows = turns_in(conv) - n_split + n_parts  # what the conservation line counts, as the store does
    return {"conversation_id": conv.conversation_id, "status": conv.status, "n_turns": 0, "n_segments": 0, "n_records": 0,
            "degraded_segments": 0, "turns_in": turns_in(conv), "split_turns": n_split, "split_parts": n_parts, "held_turns": rows, "llm_calls": conv.stats.llm_calls,
            "prompt_tokens": conv.stats.prompt_tokens, "completion_tokens": conv.stats.completion_tokens, "batch_id": None}
