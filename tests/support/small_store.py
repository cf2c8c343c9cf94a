"""A small synthetic store (three conversations of 12 turns, 2 passages, 8 records, 4 nodes and
1 record link each, 16-d vectors), shared by the store tests and the retrieval-channel tests."""

from __future__ import annotations

import numpy as np
import pytest

from lychee_ray.config import LycheeConfig
from lychee_ray.schemas import Conversation, Segment
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.tables import BuildStats, Node, Passage, Question, Record, RecordLink, Turn

DIM = 16
INJECT = "c1' OR '1'='1"


def make_cfg(dim: int = DIM, model: str = "test-model", row_group_rows: int = 8) -> LycheeConfig:
    return LycheeConfig.model_validate(
        {"embedding": {"model": model, "dim": dim}, "store": {"row_group_rows": row_group_rows}}
    )


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


WORDS = "apple river music garden travel piano coffee soccer novel camera".split()


def make_conv(cid: str, seed: int, status: str = "ok", planted: str | None = None) -> Conversation:
    """12 turns in two sessions (May 1 and June 10, 2023), the last one in 2 passages, 3
    segments, 8 records, 4 nodes."""
    rng = np.random.default_rng(seed)
    turns = []
    for i in range(12):
        day = "2023-05-01T10:00:00" if i < 6 else "2023-06-10T18:30:00"
        text = f"{cid} speaker talks about {WORDS[i % len(WORDS)]} and {WORDS[(i * 3) % len(WORDS)]}"
        turns.append(Turn(turn_id=f"D{i // 6 + 1}:{i}", turn_idx=i, session_id=f"s{i // 6 + 1}", speaker="A" if i % 2 == 0 else "B",
                          role="speaker_a" if i % 2 == 0 else "speaker_b", text=text, timestamp=day))
    if planted:
        turns[7].text = f"we finally booked the trip to {planted} for the summer"
    cut = turns[11].text.index(" and ")
    passages = [Passage(turn_id=turns[11].turn_id, passage_idx=0, char_start=0, char_end=cut),
                Passage(turn_id=turns[11].turn_id, passage_idx=1, char_start=cut + 1, char_end=len(turns[11].text))]
    segments = [
        Segment(f"{cid}:seg{k}", k, list(range(4 * k, 4 * k + 4)), [2 * k, 2 * k + 1], 40, 0.7, "threshold")
        for k in range(3)
    ]
    times = [("2023-05-01", "2023-05-01"), ("2023-05-20", "2023-05-27"), ("2023-06", "2023-06"),
             (None, None), (None, None), ("2022-01-03", None), (None, None), ("2023-06-10", "2023-06-10")]
    records = []
    STANDING = {3: "preference", 5: "constraint"}  # what the standing channel ranks among
    for r, (t0, t1) in enumerate(times):
        src = [turns[r].turn_id] if r != 6 else [turns[8].turn_id, turns[9].turn_id]
        text = f"{cid} record {r} mentions {WORDS[(r + 5) % len(WORDS)]}"
        if planted and r == 4:
            text = f"Ysolde plans a trip to {planted} in August"
        records.append(Record(
            conversation_id=cid, record_id=f"{cid}:r{r:02d}", segment_id=segments[min(r // 3, 2)].segment_id, type=STANDING.get(r, "fact"),
            text=text, entities=["Ysolde"] if r % 2 == 0 else ["Brannoc"], topics=[WORDS[r]],
            time_start=t0, time_end=t1, time_granularity="day" if t0 else "none", time_expression=None,
            source_turn_ids=src, backend="rules"))
    nodes = [
        Node(node_id=f"{cid}:n:ysolde", kind="entity", name="Ysolde", n_records=4),
        Node(node_id=f"{cid}:n:brannoc", kind="entity", name="Brannoc", n_records=4),
        Node(node_id=f"{cid}:n:group", kind="topic", name="pottery club", n_records=2),
        Node(node_id=f"{cid}:n:2023-05", kind="time", name="2023-05", n_records=2),
    ]
    record_nodes = [(rec.record_id, nodes[0 if i % 2 == 0 else 1].node_id) for i, rec in enumerate(records)]
    record_nodes += [(records[1].record_id, nodes[2].node_id), (records[2].record_id, nodes[2].node_id),
                     (records[0].record_id, nodes[3].node_id), (records[1].record_id, nodes[3].node_id)]
    conv = Conversation(
        conversation_id=cid, source="locomo", source_file="x.json", turns=turns,
        questions=[Question(conversation_id=cid, question_id=f"{cid}:q0", question="Where is Ysolde going?", answer="Quillmoor",
                            category="single_hop", evidence_turn_ids=[turns[7].turn_id], question_date="2023-07-01")],
        status=status, error="boom" if status == "error" else None,
        exchanges=[[2 * i, 2 * i + 1] for i in range(6)],
        turn_embeddings=unit(rng, 12), passages=passages, segments=segments, records=records,
        record_embeddings=unit(rng, len(records)), nodes=nodes, node_embeddings=unit(rng, len(nodes)),
        record_nodes=record_nodes,
        # record 6 (said on 10 June) replaces record 5: every table of the store has rows
        links=[RecordLink(record_id=records[6].record_id, other_record_id=records[5].record_id, kind="supersedes", found_by="rules")],
        stats=BuildStats(llm_calls=3, prompt_tokens=100, completion_tokens=20, backend="rules"),
        errors=[{"kind": "turn_split", "field": "text", "message": "split a long turn"}],
    )
    conv.passage_embeddings = unit(rng, len(passages))  # drawn last: the other vectors stay as they were
    return conv


CONVS = {cid: make_conv(cid, seed, planted="quillmoor" if cid == "c1" else None)
         for seed, cid in enumerate(["c2", "c1", "c3"])}


@pytest.fixture()
def store_dir(tmp_path):
    cfg = make_cfg()
    out = str(tmp_path / "store")
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    writer.write_batch([CONVS["c2"], CONVS["c1"]])
    writer.write_batch([CONVS["c3"]])
    return out


@pytest.fixture()
def store(store_dir):
    with open_store(store_dir, make_cfg()) as s:
        yield s
