"""A hand-written conversation whose vectors come from a concept embedder, for the retrieval
mechanisms' unit tests: every cosine is readable off the text.

`concept_embed` maps each word to a concept axis (`CONCEPTS`; unknown words add nothing) and
returns the unit mean of a text's concept vectors, so "What hobbies does Ada have?" is the
direction (ada + leisure) and "I restore old clocks" is (leisure). `concept_store(turns)` writes a
store of one conversation: one record per turn (the turn's text with "I" resolved to its speaker,
as the rules encoder would), an entity node per speaker, every record linked to the nodes of
the names it holds, and each session a day in May 2023.
"""

from __future__ import annotations

import re

import numpy as np

from lychee_ray.config import LycheeConfig, load_config
from lychee_ray.schemas import Conversation, Segment
from lychee_ray.store.reader import open_store
from lychee_ray.store.writer import StoreWriter, prepare_output
from lychee_ray.tables import BuildStats, Node, Record, Turn

AXES = ("ada", "bo", "leisure", "work", "food", "travel", "family", "health", "music", "pets")
CONCEPTS = {
    "ada": "ada", "ada's": "ada", "bo": "bo", "bo's": "bo",
    "hobby": "leisure", "hobbies": "leisure", "weekend": "leisure", "clocks": "leisure", "restore": "leisure",
    "holiday": "leisure", "enjoy": "leisure", "fun": "leisure",
    "work": "work", "job": "work", "office": "work", "project": "work", "deadline": "work",
    "eat": "food", "cook": "food", "soup": "food", "bread": "food", "dinner": "food",
    "trip": "travel", "train": "travel", "lisbon": "travel", "visit": "travel",
    "kids": "family", "children": "family", "son": "family", "daughter": "family", "mother": "family",
    "doctor": "health", "run": "health", "knee": "health",
    "piano": "music", "song": "music", "choir": "music",
    "cat": "pets", "dog": "pets", "parrot": "pets",
}
DIM = len(AXES)
SPEAKERS = ("Ada", "Bo")


def concept_vector(text: str) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    for w in re.findall(r"[a-z']+", text.lower()):
        if w in CONCEPTS:
            v[AXES.index(CONCEPTS[w])] += 1.0
    n = np.linalg.norm(v)
    return v / n if n else np.full(DIM, 1.0 / np.sqrt(DIM), np.float32)  # no concept: equally far from all


def concept_embed(texts: list[str]) -> np.ndarray:
    return np.stack([concept_vector(t) for t in texts]) if texts else np.zeros((0, DIM), np.float32)


def config(*sets: str) -> LycheeConfig:
    """The defaults with this embedder's width, and `--set`-style overrides."""
    return load_config(None, ["embedding.model=concept-test", f"embedding.dim={DIM}", *sets])


def resolve(text: str, speaker: str) -> str:
    """The rules encoder's pronoun step, enough for these tests: "I"/"my" -> the speaker."""
    text = re.sub(r"\bI\b", speaker, text)
    return re.sub(r"\b[Mm]y\b", f"{speaker}'s", text)


def conversation(cid: str, turns: list[tuple[int, str, str]]) -> Conversation:
    """`turns`: (session, speaker, text); one record per turn, cited by it."""
    rows = [Turn(turn_id=f"D{s}:{i}", turn_idx=i, session_id=f"s{s}", speaker=sp, role="speaker_a" if sp == SPEAKERS[0] else "speaker_b",
                 text=text, timestamp=f"2023-05-{s:02d}T10:00:00") for i, (s, sp, text) in enumerate(turns)]
    records = []
    for t in rows:
        text = resolve(t.text, t.speaker)
        names = [n for n in SPEAKERS if re.search(rf"\b{n}\b", text)]
        records.append(Record(conversation_id=cid, record_id=f"{cid}:r{t.turn_idx:03d}", segment_id=f"{cid}:seg0", type="fact",
                              text=text, entities=names, topics=[], time_start=None, time_end=None, time_granularity="none",
                              time_expression=None, source_turn_ids=[t.turn_id], backend="rules", stated_at=t.timestamp[:10]))
    nodes = [Node(node_id=f"{cid}:n:{n.lower()}", kind="entity", name=n, n_records=sum(n in r.entities for r in records)) for n in SPEAKERS]
    edges = [(r.record_id, f"{cid}:n:{n.lower()}") for r in records for n in r.entities]
    n = len(rows)
    return Conversation(
        conversation_id=cid, source="generic", source_file="concept.json", turns=rows, status="ok",
        exchanges=[[i] for i in range(n)], turn_embeddings=concept_embed([t.text for t in rows]),
        segments=[Segment(f"{cid}:seg0", 0, list(range(n)), list(range(n)), 10 * n, 1.0, "end")],
        records=records, record_embeddings=concept_embed([r.text for r in records]),
        nodes=nodes, node_embeddings=concept_embed([x.name for x in nodes]), record_nodes=edges,
        stats=BuildStats(llm_calls=0, prompt_tokens=0, completion_tokens=0, backend="rules"),
    )


def concept_store(tmp_path, cid: str, turns: list[tuple[int, str, str]]):
    """An opened store holding the one conversation (close it, or use it in a `with`)."""
    cfg = config()
    out = str(tmp_path / "store")
    prepare_output(out, cfg)
    StoreWriter(out, cfg).write_batch([conversation(cid, turns)])
    return open_store(out, cfg)
