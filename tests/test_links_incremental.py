"""Incremental ingest appends links: a stored conversation that grew keeps the links of the
segments it reuses, and its new segments link to records the store already held, exactly as a
fresh build of the whole conversation links them. Nothing stored is rewritten in place: the grown
conversation's commit supersedes the old one in the views.

Real parts, in this process (the pipeline's own stages, no Ray): the generator's archive cut to its
first sessions and then whole, the LoCoMo reader, the read side's classification against the
store, MiniLM, the segmenter, the rules encoder and detector, and the Parquet store read back
through DuckDB. The test then asks `lychee-ray query --history` about a planted change."""

from __future__ import annotations

import json

import pytest

from lychee_ray.cli import main
from lychee_ray.ingest.pipeline import ingest_pipeline
from lychee_ray.ingest.resume import ExtendFrom, classify
from lychee_ray.io.readers.files import read_file
from lychee_ray.store.reader import open_store
from lychee_ray.store.stored_state import stored_digests
from lychee_ray.store.writer import finalize_manifest, prepare_output
from tests.support.generated import LOCAL_CONFIG, generate, local_config
from tests.support.locomo_cut import cut_locomo

CUT = 3  # sessions in the first run
LINK_COLS = "conversation_id, record_id, other_record_id, kind, found_by, stated_at"


def ingest(cfg, archive, out, embedder) -> None:
    """What `lychee-ray ingest` does, in this process: classify against the store, then the pipeline."""
    done = prepare_output(str(out), cfg)
    stored = {}
    if done:
        with open_store(str(out), cfg) as s:
            stored = stored_digests(s)
    convs = [c for c in (classify(c, stored, "error") for c in read_file(str(archive), cfg.read_settings)) if c is not None]
    resume = any(isinstance(c.prior, ExtendFrom) for c in convs)
    ingest_pipeline(cfg, str(out), resume=resume, embedder=embedder).in_process(convs)
    finalize_manifest(str(out))


def links(store_dir, cfg) -> set[tuple]:
    with open_store(str(store_dir), cfg) as s:
        rows = s.con.execute(f"SELECT {LINK_COLS} FROM record_links").fetchall()
        assert len(rows) == len(set(rows)), "a link appears twice in the view"
        return set(rows)


@pytest.fixture(scope="module")
def built(tmp_path_factory, local_embedder):
    tmp = tmp_path_factory.mktemp("links-incremental")
    gen = generate(tmp / "gen", "locomo", conversations=2, sessions=5)
    full = gen.archive / "locomo.json"
    archive = tmp / "in" / "locomo.json"
    archive.parent.mkdir()
    cfg = local_config()
    cut_locomo(full, archive, conversations=2, sessions=CUT)
    ingest(cfg, archive, tmp / "store", local_embedder)
    first = links(tmp / "store", cfg)
    with open_store(str(tmp / "store"), cfg) as s:
        first_records = {r[0] for r in s.con.execute("SELECT record_id FROM records").fetchall()}
    archive.write_text(full.read_text())
    ingest(cfg, archive, tmp / "store", local_embedder)
    ingest(cfg, full, tmp / "fresh", local_embedder)
    return {"cfg": cfg, "gen": gen, "store": tmp / "store", "fresh": tmp / "fresh", "first": first, "first_records": first_records}


def session_of(turn_id: str) -> int:
    return int(turn_id.split(":")[0].removeprefix("D"))


def test_the_grown_conversation_links_like_a_fresh_build(built):
    grown, fresh = links(built["store"], built["cfg"]), links(built["fresh"], built["cfg"])
    assert grown == fresh
    assert built["first"] < grown, "growing added links and kept the stored ones"


def test_new_segments_link_to_records_the_store_already_held(built):
    across = [c for c in built["gen"].labels["changes"] if session_of(c["old_turn_id"]) <= CUT < session_of(c["new_turn_id"])]
    assert across, "the generator planted no change across the cut: pick another seed"
    grown = links(built["store"], built["cfg"])
    appended = [x for x in grown - built["first"] if x[2] in built["first_records"] and x[1] not in built["first_records"]]
    assert appended
    with open_store(str(built["store"]), built["cfg"]) as s:
        sources = dict(s.con.execute("SELECT record_id, source_turn_ids FROM records").fetchall())
    planted = {(c["conversation_id"], c["old_turn_id"], c["new_turn_id"], c["kind"]) for c in across}
    hit = {(x[0], o, n, x[3]) for x in appended for o in sources[x[2]] for n in sources[x[1]]}
    assert planted & hit, "a planted change across the cut was linked"


def test_query_history_shows_the_chain_of_a_planted_change(built, capsys):
    change = next(c for c in built["gen"].labels["changes"] if c["kind"] == "supersedes")
    question = next(q for q in built["gen"].questions if q["category"] == "knowledge_update" and q["conversation_id"] == change["conversation_id"]
                    and set(q["evidence_turn_ids"]) == {change["old_turn_id"], change["new_turn_id"]})
    rc = main(["query", "--config", str(LOCAL_CONFIG), "--set", "ray.progress_bars=false", "--store", str(built["store"]),
               "--conversation", change["conversation_id"], "--history", "--json", question["question"]])
    assert rc == 0
    history = json.loads(capsys.readouterr().out)["history"]
    turns = [t for h in history for t in h["source_turn_ids"]]
    assert change["old_turn_id"] in turns and change["new_turn_id"] in turns
    old = next(h for h in history if change["old_turn_id"] in h["source_turn_ids"])
    new = next(h for h in history if change["new_turn_id"] in h["source_turn_ids"])
    assert old["superseded_by"] == new["record_id"] and old["valid_until"] == new["valid_from"] and new["current"]
