"""Store: write batches of synthetic conversations, open them with DuckDB, check every helper."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from lychee_ray.config import LycheeConfig
from lychee_ray.query.conversation import LoadedConversation
from lychee_ray.query.memory import RECORD_COLUMNS, TURN_COLUMNS, VALIDITY_COLUMNS, select_records, select_turns
from lychee_ray.rules.lexicon import ROLE_SPEAKERS
from lychee_ray.store.manifest import StoreError, committed_view, load_commits
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import conversation_rows
from lychee_ray.store.writer import (
    StoreWriter,
    batch_id_for,
    finalize_manifest,
    prepare_output,
)
from lychee_ray.tables import INGEST_TABLES, SCHEMA_VERSION, table_schemas

from .support.small_store import CONVS, DIM, make_cfg, make_conv, store, store_dir  # noqa: F401  (fixtures)


def same_schema(got: pa.Schema, want: pa.Schema) -> bool:
    """Equal up to the child name of list types: Parquet's compliant nesting calls it "element"."""
    def norm(t: pa.DataType) -> str:  # and Parquet stores timestamp[s] as timestamp[ms]
        return "timestamp" if pa.types.is_timestamp(t) else str(t).replace("<element:", "<item:")
    return got.names == want.names and [norm(f.type) for f in got] == [norm(f.type) for f in want]


def count(store, table: str) -> int:
    return store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


# ---------------------------------------------------------------------------- rows and files
def test_conversation_rows_maps_indexes_times_and_errors():
    conv = make_conv("cx", 0)
    conv.turns[3].timestamp = "yesterday-ish"
    rows = conversation_rows(conv, DIM)
    assert {t: len(r) for t, r in rows.items()} == {
        "conversations": 1, "turns": 12, "passages": 2, "segments": 3, "records": 8, "nodes": 4,
        "record_nodes": 12, "record_links": 1, "build_stats": 1, "questions": 1, "errors": 2}
    turn5 = rows["turns"][5]
    assert (turn5["exchange_idx"], turn5["segment_id"]) == (2, "cx:seg1")
    assert rows["turns"][0]["timestamp"].isoformat() == "2023-05-01T10:00:00"
    assert rows["turns"][3]["timestamp"] is None
    seg = rows["segments"][1]
    assert (seg["start_idx"], seg["end_idx"], seg["turn_ids"][0], seg["n_exchanges"]) == (4, 7, "D1:4", 2)
    month = rows["records"][2]  # "2023-06" widens to the whole month
    assert (str(month["time_start"]), str(month["time_end"])) == ("2023-06-01", "2023-06-30")
    stats = rows["build_stats"][0]
    assert (stats["llm_calls"], stats["cached_tokens"], stats["wall_s"], stats["model"]) == (3, 0, 0.0, None)
    kinds = sorted(e["kind"] for e in rows["errors"])
    assert kinds == ["bad_timestamp", "turn_split"]
    assert all(e["conversation_id"] == "cx" and e["source_file"] == "x.json" for e in rows["errors"])


def test_files_have_exact_schema_sorted_rows_and_duckdb_sees_float_d(store_dir, store):
    schemas = table_schemas(DIM)
    parts = sorted(os.listdir(os.path.join(store_dir, "turns")))
    assert parts == sorted(f"part-{batch_id_for(ids)}.parquet" for ids in (["c1", "c2"], ["c3"]))
    for table in INGEST_TABLES:
        for name in os.listdir(os.path.join(store_dir, table)):
            path = os.path.join(store_dir, table, name)
            assert same_schema(pq.read_schema(path), schemas[table]), (table, pq.read_schema(path))
            ids = pq.read_table(path, columns=["conversation_id"]).column(0).to_pylist()
            assert ids == sorted(ids)
    big = os.path.join(store_dir, "turns", f"part-{batch_id_for(['c1', 'c2'])}.parquet")
    assert pq.ParquetFile(big).metadata.num_row_groups == 3  # 24 rows, row_group_rows=8
    for table in ("turns", "records", "nodes"):
        assert store.con.execute(f"SELECT DISTINCT typeof(embedding) FROM {table}").fetchall() == [(f"FLOAT[{DIM}]",)]
    for table in INGEST_TABLES:
        cols = [r[0] for r in store.con.execute(f"DESCRIBE {table}").fetchall()]
        assert cols == schemas[table].names
    types = dict(r[:2] for r in store.con.execute("DESCRIBE turns").fetchall())
    assert types["timestamp"] == "TIMESTAMP" and types["turn_idx"] == "BIGINT"


def test_write_batch_returns_summaries_and_rejects_duplicates(tmp_path):
    cfg = make_cfg()
    writer = StoreWriter(str(tmp_path / "s"), cfg)
    out = writer.write_batch([CONVS["c3"], CONVS["c1"]])
    assert [o["conversation_id"] for o in out] == ["c1", "c3"]
    assert out[0] == {"conversation_id": "c1", "status": "ok", "n_turns": 12, "n_segments": 3,
                      "n_records": 8, "llm_calls": 3, "prompt_tokens": 100, "completion_tokens": 20}
    commit = json.loads((tmp_path / "s" / "_commits" / f"{batch_id_for(['c1', 'c3'])}.json").read_text())
    assert commit["files"]["turns"] == {"path": f"turns/part-{batch_id_for(['c1', 'c3'])}.parquet", "rows": 24}
    assert [c["conversation_id"] for c in commit["conversations"]] == ["c1", "c3"]
    with pytest.raises(ValueError, match="more than once"):
        writer.write_batch([CONVS["c1"], CONVS["c1"]])


def test_conversation_filter_prunes_row_groups(store):
    plan = store.con.execute(
        "EXPLAIN ANALYZE SELECT count(*) FROM turns WHERE conversation_id = $cid", {"cid": "c2"}
    ).fetchall()[0][1]
    scanned = [tuple(map(int, m)) for m in re.findall(r"Row Groups Scanned: (\d+) / (\d+)", plan)]
    assert scanned and sum(s for s, _ in scanned) < sum(t for _, t in scanned)


# ---------------------------------------------------------------------------- resume and safety
def test_orphans_of_a_killed_write_are_invisible_and_removed(tmp_path):
    cfg = make_cfg()
    out = str(tmp_path / "s")
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    writer.write_batch([CONVS["c1"]])
    # A killed write: c2's table files landed, its commit marker never did; plus a temp file.
    killed = batch_id_for(["c2"])
    for table in ("conversations", "turns", "records"):
        writer._write_table(table, killed, conversation_rows(CONVS["c2"], DIM)[table])
    # a killed writer's temp file carries the store's id (only files that do are ever deleted)
    owner = json.loads((tmp_path / "s" / "manifest.json").read_text())["store_id"]
    tmp = tmp_path / "s" / "records" / f".part-abc.parquet.tmp-{owner}-123"
    tmp.write_bytes(b"half")
    with open_store(out) as s:
        assert s.conversation_ids() == ["c1"] and count(s, "turns") == 12
    assert prepare_output(out, cfg) == {"c1"}
    assert sorted(os.listdir(tmp_path / "s" / "turns")) == [f"part-{batch_id_for(['c1'])}.parquet"]
    assert os.listdir(tmp_path / "s" / "records") == [f"part-{batch_id_for(['c1'])}.parquet"]


def test_rewriting_the_same_batch_is_idempotent(store_dir):
    with open_store(store_dir) as s:
        before = {t: count(s, t) for t in INGEST_TABLES}
    StoreWriter(store_dir, make_cfg()).write_batch([CONVS["c1"], CONVS["c2"]])
    with open_store(store_dir) as s:
        assert {t: count(s, t) for t in INGEST_TABLES} == before
        assert s.con.execute("SELECT count(DISTINCT turn_id || conversation_id) FROM turns").fetchone()[0] == 36
    assert len(os.listdir(os.path.join(store_dir, "_commits"))) == 2


def test_redone_conversation_newest_commit_wins(tmp_path):
    cfg = make_cfg()
    out = str(tmp_path / "s")
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    writer.write_batch([make_conv("c1", 0, status="error"), CONVS["c2"]])
    assert prepare_output(out, cfg, redo_statuses={"error"}) == {"c2"}
    writer.write_batch([CONVS["c1"]])  # the driver redoes c1 in a batch of its own
    with open_store(out) as s:
        assert s.sql("SELECT conversation_id, status FROM conversations ORDER BY 1") == [
            {"conversation_id": "c1", "status": "ok"}, {"conversation_id": "c2", "status": "ok"}]
        assert count(s, "turns") == 24
    manifest = finalize_manifest(out)
    assert manifest["n_conversations_by_status"] == {"ok": 2}
    assert manifest["counts"]["records"] == 16


def test_a_conversation_loads_from_its_own_part_with_the_views_rows_and_types(tmp_path):
    """A conversation's load reads the one part its newest commit wrote, not every part: the
    same rows and types as the view (a redone conversation's hidden rows stay hidden), and it
    still loads when every other part is gone; so do Memory.records and Memory.turns."""
    cfg = make_cfg()
    out = str(tmp_path / "s")
    prepare_output(out, cfg)
    writer = StoreWriter(out, cfg)
    writer.write_batch([make_conv("c1", 0, status="error"), CONVS["c2"]])
    writer.write_batch([CONVS["c1"]])  # c1 redone: its first rows stay in the part it shared with c2
    quiet = make_conv("c4", 4)
    quiet.links, quiet.errors = [], []
    writer.write_batch([quiet])
    quiet_batch = committed_view(load_commits(pafs.LocalFileSystem(), out)).owner["c4"]
    with open_store(out, cfg) as s:
        assert s.conversation_ids() == [r["conversation_id"] for r in s.sql("SELECT conversation_id FROM conversations ORDER BY 1")]
        for cid in ("c1", "c2", "c4"):
            for t in INGEST_TABLES:
                got = s.conversation_arrow(t, cid)
                want = s.con.sql(f"SELECT * FROM {t} WHERE conversation_id = $cid", params={"cid": cid}).to_arrow_table()
                assert got.schema == want.schema, t
                assert sorted(map(repr, got.to_pylist())) == sorted(map(repr, want.to_pylist())), (cid, t)
        assert s.conversation_arrow("turns", "c1").num_rows == 12
        assert [r["turn_idx"] for r in s.turns("c1")] == list(range(12))
        ids, vecs = s.embeddings("records", "c1")
        assert len(ids) == 8 and vecs.shape == (8, DIM)
        records_by_view = _records_by_view(s, "c1")
        turns_by_view = s.con.sql("SELECT * EXCLUDE (embedding) FROM turns WHERE conversation_id = 'c1' ORDER BY turn_idx").to_arrow_table()
    first = min(load_commits(pafs.LocalFileSystem(), out), key=lambda c: c["committed_at"])
    with open_store(out, cfg) as s:
        for info in first["files"].values():
            os.remove(os.path.join(out, info["path"]))
        assert len(LoadedConversation.load(s, "c1").records.ids) == 8
        assert len(s.records("c1")) == 8
        # Memory.records (with the validity its links give) and Memory.turns read the own part too
        assert select_records(s, "c1").to_pylist() == records_by_view
        assert select_turns(s, "c1").to_pylist() == turns_by_view.select(list(TURN_COLUMNS)).to_pylist()
        assert [t["turn_idx"] for t in select_turns(s, "c1", ["D1:3", "D1:1", "nope"]).to_pylist()] == [1, 3]
        with pytest.raises(Exception):  # the view over every part does need the removed ones
            s.sql("SELECT count(*) FROM turns")
        # A table the newest commit wrote no file of holds none of the conversation's rows: read
        # as empty, not through the view (whose parts are gone here).
        for commit in load_commits(pafs.LocalFileSystem(), out):
            if commit["batch_id"] != quiet_batch:
                for info in commit["files"].values():
                    if os.path.exists(os.path.join(out, info["path"])):
                        os.remove(os.path.join(out, info["path"]))
        assert s.conversation_arrow("record_links", "c4").num_rows == 0
        assert s.conversation_arrow("errors", "c4").num_rows == 0
        assert select_records(s, "c4").column("superseded_by").null_count == 8


def _records_by_view(s, cid: str) -> list[dict]:
    """Memory.records' rows as the views over every part give them."""
    columns = ", ".join([*(f'r."{c}"' for c in RECORD_COLUMNS), *(f'v."{c}"' for c in VALIDITY_COLUMNS)])
    return s.con.sql(f"SELECT {columns} FROM records r JOIN record_validity v USING (conversation_id, record_id) "
                     "WHERE r.conversation_id = $cid ORDER BY r.segment_id, r.record_id", params={"cid": cid}).to_arrow_table().to_pylist()


def test_the_planners_entity_names_are_the_conversations_entity_nodes_most_linked_first(store):
    from lychee_ray.query.retrieve import entity_names

    seen = 0
    for cid in store.conversation_ids():
        want = store.sql("SELECT name, n_records FROM nodes WHERE conversation_id = $cid AND kind = 'entity'", {"cid": cid})
        got = entity_names(store, cid)
        assert sorted(got) == sorted(r["name"] for r in want)
        links = {r["name"]: r["n_records"] or 0 for r in want}
        assert [links[n] for n in got] == sorted(links.values(), reverse=True)
        seen += len(got)
    assert seen > 0


def test_finalize_manifest_counts(store_dir):
    manifest = finalize_manifest(store_dir)
    assert manifest["counts"] == {"conversations": 3, "turns": 36, "passages": 6, "segments": 9, "records": 24, "nodes": 12,
                                  "record_nodes": 36, "record_links": 3, "build_stats": 3, "questions": 3, "errors": 3}
    assert manifest["n_conversations"] == 3 and manifest["build_hashes"] == [make_cfg().build_hash()]
    on_disk = json.loads(open(os.path.join(store_dir, "manifest.json")).read())
    assert on_disk["counts"] == manifest["counts"] and on_disk["embedding_dim"] == DIM


def test_manifest_mismatch_is_one_clear_store_error(store_dir):
    with pytest.raises(StoreError, match=r"dim 16\), but the config uses 'test-model' \(dim 32\)"):
        prepare_output(store_dir, make_cfg(dim=32))
    with pytest.raises(StoreError, match="embedding model 'test-model'"):
        open_store(store_dir, make_cfg(model="other-model"))
    path = os.path.join(store_dir, "manifest.json")
    manifest = json.loads(open(path).read())
    manifest["schema_version"] = 999
    open(path, "w").write(json.dumps(manifest))
    for call in (lambda: open_store(store_dir), lambda: prepare_output(store_dir, make_cfg())):
        with pytest.raises(StoreError, match=f"has schema version 999, but this lychee-ray uses schema version {SCHEMA_VERSION}"):
            call()


def test_bad_paths_are_store_errors(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        open_store(str(tmp_path / "nope"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="not a lychee-ray store"):
        open_store(str(tmp_path / "plain"))


def test_empty_store_has_typed_empty_views(tmp_path):
    out = str(tmp_path / "s")
    prepare_output(out, make_cfg())
    with open_store(out) as s:
        assert count(s, "records") == 0
        assert s.con.execute("SELECT typeof(embedding) FROM records").fetchall() == []
        assert [r[1] for r in s.con.execute("DESCRIBE nodes").fetchall()][-1] == f"FLOAT[{DIM}]"
        assert dict(r[:2] for r in s.con.execute("DESCRIBE turns").fetchall())["timestamp"] == "TIMESTAMP"
        empty = LoadedConversation.load(s, "c1")
        assert (empty.records.n, empty.turns.n, empty.nodes.n) == (0, 0, 0)
        assert empty.records.top(empty.records.cosine(np.ones((1, DIM), np.float32))[0], 3) == []
        assert empty.bm25("anything", 3) == []


def test_missing_embeddings_are_null_and_skipped(tmp_path):
    conv = make_conv("c9", 9)
    conv.turn_embeddings = None
    out = str(tmp_path / "s")
    prepare_output(out, make_cfg())
    StoreWriter(out, make_cfg()).write_batch([conv])
    with open_store(out) as s:
        assert s.con.execute("SELECT count(*) FROM turns WHERE embedding IS NULL").fetchone()[0] == 12
        conv = LoadedConversation.load(s, "c9")
        q = np.ones((1, DIM), np.float32)
        assert conv.turns.top(conv.turns.cosine(q)[0], 3) == [] and conv.turns.row(0).embedding is None
        assert len(conv.records.top(conv.records.cosine(q)[0], 3)) == 3


def test_non_local_filesystem_path(tmp_path):
    """Everything through pyarrow.fs: a filesystem that is not LocalFileSystem takes the
    move-based rename and the Arrow-dataset read path that s3:// uses."""
    fs = pafs._MockFileSystem()
    cfg = make_cfg()
    prepare_output("bucket/store", cfg, filesystem=fs)
    writer = StoreWriter("bucket/store", cfg, filesystem=fs)
    writer.write_batch([CONVS["c1"], CONVS["c2"]])
    assert prepare_output("bucket/store", cfg, filesystem=fs) == {"c1", "c2"}
    with open_store("bucket/store", cfg, filesystem=fs) as s:
        assert s.conversation_ids() == ["c1", "c2"]
        assert s.con.execute("SELECT DISTINCT typeof(embedding) FROM records").fetchall() == [(f"FLOAT[{DIM}]",)]
        conv = LoadedConversation.load(s, "c1")
        q = CONVS["c1"].record_embeddings[3][None, :]
        assert conv.records.ids[conv.records.top(conv.records.cosine(q)[0], 1)[0]] == "c1:r03"
        assert conv.turns.ids[conv.bm25("quillmoor", 3)[0]] == "D2:7"
        # two remote parts (records, record_links) registered side by side in one query
        assert select_records(s, "c1").to_pylist() == _records_by_view(s, "c1")
        assert select_records(s, "c1", current_only=True).num_rows == 7
        assert select_turns(s, "c2", ["D2:7"]).column("text").to_pylist() == [CONVS["c2"].turns[7].text]
    assert finalize_manifest("bucket/store", filesystem=fs)["counts"]["turns"] == 24


def test_rows_carry_embeddings_as_float32_and_survive_unfinished_caller_results(store):
    store.con.execute("SELECT * FROM turns")  # left unfinished by the caller on purpose
    conv = CONVS["c3"]
    loaded = LoadedConversation.load(store, "c3")
    row = loaded.records.row(loaded.records.top(loaded.records.cosine(conv.record_embeddings[5][None, :])[0], 1)[0])
    assert row.record_id == "c3:r05" and row.embedding.dtype == np.float32
    np.testing.assert_array_equal(row.embedding, conv.record_embeddings[5])
    turns = store.turns("c3")
    np.testing.assert_array_equal(np.stack([t["embedding"] for t in turns]), conv.turn_embeddings)


# ------------------------------------------------------------------ the generated store (tests/support/generated.py)
def read_table(store_dir, table: str) -> pa.Table:
    """A table straight from its Parquet files (no DuckDB): the independent side of a check."""
    return pq.read_table(os.path.join(store_dir, table))


def test_generated_store_nodes_all_kinds_with_sane_counts(synth_store_dir):
    nodes = read_table(synth_store_dir, "nodes").to_pylist()
    edges = read_table(synth_store_dir, "record_nodes").to_pylist()
    records = read_table(synth_store_dir, "records").to_pylist()
    turns = read_table(synth_store_dir, "turns").to_pylist()
    records_of: dict[tuple, list[str]] = {}
    for e in edges:
        records_of.setdefault((e["conversation_id"], e["node_id"]), []).append(e["record_id"])
    edge_count = {key: len(ids) for key, ids in records_of.items()}
    topics_of = {r["record_id"]: {" ".join(t.split()).casefold() for t in r["topics"]} for r in records}
    assert len({n["node_id"] for n in nodes}) == len(nodes)
    for cid in sorted({n["conversation_id"] for n in nodes}):
        mine = [n for n in nodes if n["conversation_id"] == cid]
        by_kind: dict[str, list[dict]] = {}
        for n in mine:
            by_kind.setdefault(n["kind"], []).append(n)
        assert set(by_kind) == {"entity", "topic", "entity_topic", "time", "event_frame"}, cid
        n_records = sum(r["conversation_id"] == cid for r in records)
        sessions = {t["session_id"] for t in turns if t["conversation_id"] == cid}
        # every node is linked, and n_records is its true edge count
        assert all(n["n_records"] == edge_count.get((cid, n["node_id"]), 0) >= 1 for n in mine), cid
        # the named speakers are entities and the most linked ones; a role ("Assistant" of a
        # work conversation) is no entity
        speakers = {t["speaker"] for t in turns if t["conversation_id"] == cid}
        named = {s for s in speakers if s.lower() not in ROLE_SPEAKERS}
        assert named, cid
        top = {n["name"] for n in sorted(by_kind["entity"], key=lambda n: -n["n_records"])[:len(named)]}
        assert top == named, (cid, top, named)
        assert not {n["name"] for n in by_kind["entity"]} & (speakers - named), cid
        # time nodes are day or month buckets; event frames at least one per session
        assert all(re.fullmatch(r"\d{4}-\d{2}(-\d{2})?", n["name"]) for n in by_kind["time"]), cid
        assert len(sessions) <= len(by_kind["event_frame"]) <= n_records, cid
        # an entity-topic node pairs an entity node with a topic that each of its records has
        entities = {n["name"].casefold() for n in by_kind["entity"]}
        for n in by_kind["entity_topic"]:
            ent, _, top = n["name"].partition(" / ")
            assert ent in entities, (cid, n["name"])
            linked = [topics_of[rid] for rid in records_of[(cid, n["node_id"])]]
            assert all(top in t for t in linked), (cid, n["name"])
        # organize summarizes, it does not explode: nodes stay linear in records. Topics are YAKE
        # keyphrases of each segment now (entity x topic pairs follow them): a LoCoMo conversation
        # had 480 nodes for 230 records (the generated chit-chat ones about 1.6 per record), so the
        # bound is 3x, not the lexicon era's 2x.
        assert len(mine) < 3 * n_records, cid
    edge_records = {(e["conversation_id"], e["record_id"]) for e in edges}
    assert all((r["conversation_id"], r["record_id"]) in edge_records for r in records)  # no record unlinked


def test_generated_store_vector_top_equals_numpy_bruteforce(synth_store_dir):
    """Real MiniLM query vectors against real record/turn vectors: the loaded conversation's
    top-k is the float64 brute-force top-k over the same vectors read straight from Parquet."""
    from lychee_ray.embedding import Embedder

    cfg = LycheeConfig.model_validate({"embedding": {"model": "bundled:all-MiniLM-L6-v2", "dim": 384}})
    questions = read_table(synth_store_dir, "questions").to_pylist()
    embedder = Embedder(cfg.embedding)
    k = 25
    with open_store(str(synth_store_dir), cfg) as store:
        for table, id_col in (("records", "record_id"), ("turns", "turn_id")):
            data = read_table(synth_store_dir, table).select(["conversation_id", id_col, "embedding"]).to_pylist()
            for cid in store.conversation_ids():
                rows = [r for r in data if r["conversation_id"] == cid]
                ids = [r[id_col] for r in rows]
                mat = np.array([r["embedding"] for r in rows], dtype=np.float64)
                mat /= np.linalg.norm(mat, axis=1, keepdims=True)
                asked = [q["question"] for q in questions if q["conversation_id"] == cid][:3]
                loaded = getattr(LoadedConversation.load(store, cid), table)
                for qv in embedder.encode(asked):
                    sims = mat @ (qv / np.linalg.norm(qv))
                    want = np.sort(sims)[::-1][:k]
                    got = [loaded.ids[i] for i in loaded.top(loaded.cosine(qv[None, :])[0], k)]
                    assert len(got) == k
                    # each returned id has the k-th best scores (ties may swap equal ones)
                    sim_of = dict(zip(ids, sims))
                    np.testing.assert_allclose([sim_of[g] for g in got], want, atol=1e-5)
                    gap = want[:-1] - want[1:]
                    if gap.min() > 1e-5:  # no near-ties: the exact same order
                        assert got == [ids[i] for i in np.argsort(-sims)[:k]]


def test_write_tables_commits_relabelled_rows_like_a_batch(store_dir, tmp_path):
    """Copy c1's stored rows under a new id with write_tables: the copy reads back like c1."""
    import pyarrow.compute as pc

    out = str(tmp_path / "copy")
    prepare_output(out, make_cfg())
    copied = {}
    for table in INGEST_TABLES:
        data = pq.read_table(os.path.join(store_dir, table))
        data = data.filter(pc.equal(data.column("conversation_id"), "c1"))
        idx = data.schema.get_field_index("conversation_id")
        copied[table] = data.set_column(idx, "conversation_id", pa.array(["c1-copy"] * data.num_rows))
    StoreWriter(out, make_cfg()).write_tables(copied, {"c1-copy": "ok"})
    with open_store(out, make_cfg()) as s, open_store(store_dir, make_cfg()) as orig:
        assert s.conversation_ids() == ["c1-copy"]
        q = CONVS["c1"].record_embeddings[2][None, :]
        copy, first = LoadedConversation.load(s, "c1-copy").records, LoadedConversation.load(orig, "c1").records
        assert [copy.ids[i] for i in copy.top(copy.cosine(q)[0], 4)] == [first.ids[i] for i in first.top(first.cosine(q)[0], 4)]
        assert {t: count(s, t) for t in INGEST_TABLES} == {
            t: orig.con.execute(f"SELECT count(*) FROM {t} WHERE conversation_id = 'c1'").fetchall()[0][0]
            for t in INGEST_TABLES}
