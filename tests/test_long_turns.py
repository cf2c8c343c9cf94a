"""Long turns are remembered whole (issue 29): a reply longer than the embedding model reads is
also stored as passages with their own vectors, found by its best passage, and handed to the
answerer as that passage; a grown conversation keeps the passages it had.

Real parts: the chat reader, MiniLM, the rules backend, a local Ray, the Parquet store read back
through DuckDB, and the one retrieval engine.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from lychee_ray.ingest.job import run_ingest
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.evidence import CandidatePool
from lychee_ray.store.reader import open_store

from .support.generated import local_config

FILLER = [
    "Start by listing the services that talk to the old cluster and the owners of each one.",
    "Keep the migration window short and announce it a week ahead in the team channel.",
    "Write the rollback steps down before the first change, and rehearse them once on staging.",
    "Check the disk usage on every node, since the copy needs twice the space while it runs.",
    "Compare the row counts of each table after the copy and keep the report with the ticket.",
]
FACT = "The replica database answers on port 61234 behind the jump host called heron-gate."


def long_reply(paragraphs: int, fact_at: int | None) -> str:
    parts = [f"Step {i + 1}. " + " ".join(FILLER[(i + k) % len(FILLER)] for k in range(3)) for i in range(paragraphs)]
    if fact_at is not None:
        parts[fact_at] = FACT
    return "\n\n".join(parts)


def chat(turns: list[tuple[str, str]]) -> str:
    return json.dumps({"conversation_id": "work-1", "turns": [{"role": r, "content": c} for r, c in turns]}) + "\n"


FIRST = [
    ("user", "How should we move the reporting database to the new cluster?"),
    # about 360 tokens: past MiniLM's 254 word pieces (the fact last), under local.yaml's 512-token
    # turn split, so one turn
    ("assistant", long_reply(6, fact_at=5)),
    ("user", "Thanks, that helps."),
    ("assistant", "Glad to help."),
]
LATER = [
    ("user", "And the cache layer, what do we do with it?"),
    ("assistant", long_reply(5, fact_at=None)),
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory, ray_local):
    tmp = tmp_path_factory.mktemp("long_turns")
    archive = tmp / "chat.jsonl"
    cfg = local_config("ray.progress_bars=false")
    archive.write_text(chat(FIRST))
    run_ingest(cfg, str(archive), str(tmp / "grown"))
    first = _passages(tmp / "grown")
    archive.write_text(chat(FIRST + LATER))
    summary = run_ingest(cfg, str(archive), str(tmp / "grown"))
    run_ingest(cfg, str(archive), str(tmp / "fresh"))
    return tmp, first, summary


def _passages(store_dir) -> list[tuple]:
    with open_store(str(store_dir)) as store:
        return store.con.execute(
            "select turn_id, passage_idx, char_start, char_end, embedding from passages order by turn_id, passage_idx"
        ).fetchall()


def test_a_long_reply_gets_passages_that_cover_it_and_a_short_turn_none(stores):
    tmp, first, _ = stores
    with open_store(str(tmp / "fresh")) as store:
        texts = dict(store.con.execute("select turn_id, text from turns").fetchall())
    rows = _passages(tmp / "fresh")
    by_turn: dict[str, list[tuple]] = {}
    for tid, idx, start, end, _vec in rows:
        by_turn.setdefault(tid, []).append((idx, start, end))
    long_ids = {tid for tid, t in texts.items() if len(t.split()) > 200}
    assert set(by_turn) == long_ids and len(long_ids) == 2
    for tid, spans in by_turn.items():
        assert [i for i, _, _ in spans] == list(range(len(spans))) and len(spans) >= 2
        assert all(a < b for _, a, b in spans) and all(spans[i][2] <= spans[i + 1][1] for i in range(len(spans) - 1))
        covered = "".join(texts[tid][a:b] for _, a, b in spans)
        assert "".join(covered.split()) == "".join(texts[tid].split())  # every word, in order
    assert any(FACT in texts[tid][a:b] for tid, spans in by_turn.items() for _, a, b in spans)


def test_the_fact_deep_in_a_reply_is_found_by_its_passage_and_handed_over_as_that_passage(stores, local_embedder):
    tmp, _, _ = stores
    query = local_embedder.encode(["Which port does the replica database answer on?"])
    with open_store(str(tmp / "fresh")) as store:
        conv = LoadedConversation.load(store, "work-1")
    assert conv.docs.has_passages and len(conv.docs) > conv.turns.n
    best = conv.docs.top(conv.docs.cosine(query)[0], 1)
    assert FACT in conv.docs.text(best[0])
    pool = CandidatePool(conv)
    (key,) = pool.add_docs(best)
    evidence = pool[key]
    assert key.startswith("turn:") and "#" in key
    assert FACT in evidence.text and len(evidence.text) < len(conv.turns.row(int(conv.docs.turn_of[best[0]])).text) / 3
    assert evidence.source_turn_ids == [conv.turns.ids[conv.docs.turn_of[best[0]]]]
    assert np.allclose(evidence.embedding, conv.docs.vector(best[0]))
    bm25 = conv.docs.bm25("replica port heron-gate", 3)
    assert FACT in conv.docs.text(bm25[0])
    assert len({int(conv.docs.turn_of[d]) for d in bm25}) == len(bm25)  # one hit per turn


def test_a_grown_conversation_keeps_its_passages_and_adds_the_new_ones(stores):
    tmp, first, summary = stores
    grown, fresh = _passages(tmp / "grown"), _passages(tmp / "fresh")
    assert [r[:4] for r in grown] == [r[:4] for r in fresh]
    assert {r[0] for r in first} < {r[0] for r in grown}
    kept = {r[:4]: np.asarray(r[4]) for r in grown}
    for row in first:  # the first run's vectors, carried over (not re-embedded differently)
        assert np.allclose(kept[row[:4]], np.asarray(row[4]), atol=1e-6)
