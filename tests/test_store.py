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
from lychee_ray.schemas import (
    INGEST_TABLES,
    SCHEMA_VERSION,
    BuildStats,
    Conversation,
    MemoryRecord,
    Question,
    Segment,
    Turn,
    table_schemas,
)
from lychee_ray.store.manifest import StoreError
from lychee_ray.store.reader import open_store
from lychee_ray.store.rows import conversation_rows
from lychee_ray.store.writer import (
    StoreWriter,
    batch_id_for,
    finalize_manifest,
    prepare_output,
)

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
    """12 turns in two sessions (May 1 and June 10, 2023), 3 segments, 8 records, 4 nodes."""
    rng = np.random.default_rng(seed)
    turns = []
    for i in range(12):
        day = "2023-05-01T10:00:00" if i < 6 else "2023-06-10T18:30:00"
        text = f"{cid} speaker talks about {WORDS[i % len(WORDS)]} and {WORDS[(i * 3) % len(WORDS)]}"
        turns.append(Turn(f"D{i // 6 + 1}:{i}", i, f"s{i // 6 + 1}", "A" if i % 2 == 0 else "B",
                          "speaker_a" if i % 2 == 0 else "speaker_b", text, day))
    if planted:
        turns[7].text = f"we finally booked the trip to {planted} for the summer"
    segments = [
        Segment(f"{cid}:seg{k}", k, list(range(4 * k, 4 * k + 4)), [2 * k, 2 * k + 1], 40, 0.7, "threshold")
        for k in range(3)
    ]
    times = [("2023-05-01", "2023-05-01"), ("2023-05-20", "2023-05-27"), ("2023-06", "2023-06"),
             (None, None), (None, None), ("2022-01-03", None), (None, None), ("2023-06-10", "2023-06-10")]
    records = []
    for r, (t0, t1) in enumerate(times):
        src = [turns[r].turn_id] if r != 6 else [turns[8].turn_id, turns[9].turn_id]
        text = f"{cid} record {r} mentions {WORDS[(r + 5) % len(WORDS)]}"
        if planted and r == 4:
            text = f"Caroline plans a trip to {planted} in August"
        records.append(MemoryRecord(
            record_id=f"{cid}:r{r:02d}", segment_id=segments[min(r // 3, 2)].segment_id, type="fact",
            text=text, entities=["Caroline"] if r % 2 == 0 else ["Melanie"], topics=[WORDS[r]],
            time_start=t0, time_end=t1, time_granularity="day" if t0 else "none", time_expression=None,
            source_turn_ids=src, backend="rules"))
    nodes = [
        {"node_id": f"{cid}:n:caroline", "kind": "entity", "name": "Caroline", "n_records": 4},
        {"node_id": f"{cid}:n:melanie", "kind": "entity", "name": "Melanie", "n_records": 4},
        {"node_id": f"{cid}:n:group", "kind": "topic", "name": "support group", "n_records": 2},
        {"node_id": f"{cid}:n:2023-05", "kind": "time", "name": "2023-05", "n_records": 2},
    ]
    record_nodes = [(rec.record_id, nodes[0 if i % 2 == 0 else 1]["node_id"]) for i, rec in enumerate(records)]
    record_nodes += [(records[1].record_id, nodes[2]["node_id"]), (records[2].record_id, nodes[2]["node_id"]),
                     (records[0].record_id, nodes[3]["node_id"]), (records[1].record_id, nodes[3]["node_id"])]
    return Conversation(
        conversation_id=cid, source="locomo", source_file="x.json", turns=turns,
        questions=[Question(cid, f"{cid}:q0", "Where is Caroline going?", "Zanzibar", "single_hop",
                            [turns[7].turn_id], "2023-07-01")],
        status=status, error="boom" if status == "error" else None,
        exchanges=[[2 * i, 2 * i + 1] for i in range(6)],
        turn_embeddings=unit(rng, 12), segments=segments, records=records,
        record_embeddings=unit(rng, len(records)), nodes=nodes, node_embeddings=unit(rng, len(nodes)),
        record_nodes=record_nodes,
        stats=BuildStats(llm_calls=3, prompt_tokens=100, completion_tokens=20, backend="rules"),
        errors=[{"kind": "turn_split", "field": "text", "message": "split a long turn"}],
    )


CONVS = {cid: make_conv(cid, seed, planted="zanzibar" if cid == "c1" else None)
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
        "conversations": 1, "turns": 12, "segments": 3, "records": 8, "nodes": 4,
        "record_nodes": 12, "build_stats": 1, "questions": 1, "errors": 2}
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


# ---------------------------------------------------------------------------- query helpers
@pytest.mark.parametrize("table,emb_attr,id_of", [
    ("records", "record_embeddings", lambda c: [r.record_id for r in c.records]),
    ("turns", "turn_embeddings", lambda c: [t.turn_id for t in c.turns]),
    ("nodes", "node_embeddings", lambda c: [n["node_id"] for n in c.nodes]),
])
def test_vector_topk_equals_numpy_bruteforce(store, table, emb_attr, id_of):
    rng = np.random.default_rng(42)
    for cid, conv in CONVS.items():
        for _ in range(3):
            q = rng.standard_normal(DIM).astype(np.float32)
            emb = getattr(conv, emb_attr)
            sims = emb @ q / (np.linalg.norm(emb, axis=1) * np.linalg.norm(q))
            order = np.argsort(-sims, kind="stable")[:5]
            got = store.vector_topk(table, cid, q, 5)
            assert [r[{"records": "record_id", "turns": "turn_id", "nodes": "node_id"}[table]] for r in got] \
                == [id_of(conv)[i] for i in order]
            np.testing.assert_allclose([r["score"] for r in got], sims[order], rtol=1e-5, atol=1e-6)
            assert all(r["conversation_id"] == cid for r in got)


def test_vector_topk_where_filter(store):
    q = CONVS["c1"].record_embeddings[0]
    got = store.vector_topk("records", "c1", q, 10, where={"entities": ["Melanie"]})
    assert got and all("Melanie" in r["entities"] for r in got)
    got = store.vector_topk("records", "c1", q, 10, where={"record_id": ["c1:r00", "c1:r03"]})
    assert [r["record_id"] for r in got] == ["c1:r00", "c1:r03"]
    assert store.vector_topk("records", "c1", q, 10, where={"type": "event"}) == []
    with pytest.raises(ValueError, match="no column"):
        store.vector_topk("records", "c1", q, 3, where={"1=1; --": 1})
    with pytest.raises(ValueError, match="values"):
        store.vector_topk("records", "c1", np.ones(DIM + 1), 3)


def test_helpers_return_only_the_asked_conversation(store):
    conv = CONVS["c2"]
    turn_ids = [t.turn_id for t in conv.turns]  # the same turn ids exist in every conversation
    results = {
        "turns": store.turns("c2"),
        "records": store.records("c2"),
        "bm25_turns": store.bm25_topk("turns", "c2", "speaker talks music apple", 50),
        "bm25_records": store.bm25_topk("records", "c2", "record mentions", 50),
        "window": store.records_in_window("c2", "2000-01-01", "2100-01-01"),
        "turn_window": store.turns_in_window("c2", "2000-01-01", "2100-01-01"),
        "match": store.match_nodes("c2", ["caroline", "melanie"]),
        "node_records": store.node_records("c2", [n["node_id"] for n in conv.nodes]),
        "for_turns": store.records_for_turns("c2", turn_ids),
    }
    for name, rows in results.items():
        assert rows, name
        assert {r["conversation_id"] for r in rows} == {"c2"}, name
    assert [t["turn_id"] for t in results["turns"]] == turn_ids
    assert len(results["records"]) == len(results["for_turns"]) == len(conv.records)
    assert store.conversation_ids() == ["c1", "c2", "c3"]
    ids, emb = store.embeddings("records", "c2")
    assert ids == sorted(r.record_id for r in conv.records)
    np.testing.assert_array_equal(emb, conv.record_embeddings[np.argsort([r.record_id for r in conv.records])])


def test_bm25_ranks_exact_term_match_first(store):
    turns = store.bm25_topk("turns", "c1", "When is the trip to Zanzibar?", 5)
    assert turns[0]["turn_id"] == CONVS["c1"].turns[7].turn_id and turns[0]["score"] > 0
    records = store.bm25_topk("records", "c1", "zanzibar", 5)
    assert [r["record_id"] for r in records] == ["c1:r04"]
    assert store.bm25_topk("turns", "c2", "zanzibar", 5) == []  # planted only in c1
    assert store.bm25_topk("turns", "c1", "the what of", 5) == []  # stopwords only


def test_records_in_window(store):
    got = {r["record_id"]: r for r in store.records_in_window("c1", "2023-05-15", "2023-05-31")}
    # r01 spans May 20-27; r02 is all of June; r03/r04 have no time and source turns on May 1.
    assert set(got) == {"c1:r01"}
    june = store.records_in_window("c1", "2023-06-05", "2023-06-30")
    # r02 (June), r06 (no time, source turns on June 10), r07 (June 10).
    assert [r["record_id"] for r in june] == ["c1:r02", "c1:r06", "c1:r07"]
    assert str(june[1]["window_date"]) == "2023-06-10"
    may1 = [r["record_id"] for r in store.records_in_window("c1", "2023-05-01", "2023-05-01")]
    assert may1 == ["c1:r00", "c1:r03", "c1:r04"]
    assert [r["record_id"] for r in store.records_in_window("c1", None, "2022-12-31")] == ["c1:r05"]
    assert len(store.records_in_window("c1", "2023-06-01", None, k=2)) == 2


def test_turns_in_window(store):
    june = [t["turn_id"] for t in store.turns_in_window("c1", "2023-06-10", "2023-06-10")]
    assert june == [t.turn_id for t in CONVS["c1"].turns[6:]]
    assert len(store.turns_in_window("c1", None, "2023-05-01")) == 6
    assert store.turns_in_window("c1", "2023-05-02", "2023-06-09") == []
    assert len(store.turns_in_window("c1")) == 12


def test_match_nodes_and_node_records(store):
    hits = store.match_nodes("c1", ["The Support-Group's", "CAROLINE", "nobody"])
    assert [n["node_id"] for n in hits] == ["c1:n:caroline", "c1:n:group"]
    assert [n["node_id"] for n in store.match_nodes("c1", ["caroline", "support group"], kinds=["topic"])] \
        == ["c1:n:group"]
    recs = store.node_records("c1", ["c1:n:group", "c1:n:2023-05"])
    assert [r["record_id"] for r in recs] == ["c1:r01", "c1:r00", "c1:r02"]
    assert recs[0]["n_nodes"] == 2 and recs[0]["node_ids"] == ["c1:n:2023-05", "c1:n:group"]
    assert [r["record_id"] for r in store.records_for_turns("c1", ["D2:8"])] == ["c1:r06"]


def test_sql_injection_in_ids_and_text_returns_nothing(store):
    before = {t: count(store, t) for t in INGEST_TABLES}
    q = np.ones(DIM, np.float32)
    assert store.vector_topk("records", INJECT, q, 5) == []
    assert store.turns(INJECT) == [] and store.records(INJECT) == []
    assert store.bm25_topk("turns", INJECT, "speaker", 5) == []
    assert store.bm25_topk("turns", "c1", "'; DROP VIEW turns; --", 5) == []
    assert store.records_in_window(INJECT, None, None) == []
    assert store.turns_in_window(INJECT, None, None) == []
    assert store.match_nodes("c1", ["x' OR '1'='1", "'); DROP VIEW nodes; --"]) == []
    assert store.node_records("c1", ["' OR 1=1 --"]) == []
    assert store.records_for_turns(INJECT, ["D1:0"]) == []
    assert {t: count(store, t) for t in INGEST_TABLES} == before


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


def test_finalize_manifest_counts(store_dir):
    manifest = finalize_manifest(store_dir)
    assert manifest["counts"] == {"conversations": 3, "turns": 36, "segments": 9, "records": 24, "nodes": 12,
                                  "record_nodes": 36, "build_stats": 3, "questions": 3, "errors": 3}
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
        assert s.vector_topk("records", "c1", np.ones(DIM), 3) == []
        assert s.bm25_topk("turns", "c1", "anything", 3) == []


def test_missing_embeddings_are_null_and_skipped(tmp_path):
    conv = make_conv("c9", 9)
    conv.turn_embeddings = None
    out = str(tmp_path / "s")
    prepare_output(out, make_cfg())
    StoreWriter(out, make_cfg()).write_batch([conv])
    with open_store(out) as s:
        assert s.con.execute("SELECT count(*) FROM turns WHERE embedding IS NULL").fetchone()[0] == 12
        assert s.vector_topk("turns", "c9", np.ones(DIM), 3) == []
        assert len(s.vector_topk("records", "c9", np.ones(DIM), 3)) == 3


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
        q = CONVS["c1"].record_embeddings[3]
        assert s.vector_topk("records", "c1", q, 1)[0]["record_id"] == "c1:r03"
        assert s.bm25_topk("records", "c1", "zanzibar", 3)[0]["record_id"] == "c1:r04"
    assert finalize_manifest("bucket/store", filesystem=fs)["counts"]["turns"] == 24


def test_rows_carry_embeddings_as_float32_and_survive_unfinished_caller_results(store):
    store.con.execute("SELECT * FROM turns")  # left unfinished by the caller on purpose
    conv = CONVS["c3"]
    row = store.vector_topk("records", "c3", conv.record_embeddings[5], 1)[0]
    assert row["record_id"] == "c3:r05" and row["embedding"].dtype == np.float32
    np.testing.assert_array_equal(row["embedding"], conv.record_embeddings[5])
    turns = store.turns("c3")
    np.testing.assert_array_equal(np.stack([t["embedding"] for t in turns]), conv.turn_embeddings)


# ------------------------------------------------------------------ a store of the LoCoMo fixture
def read_table(store_dir, table: str) -> pa.Table:
    """A table straight from its Parquet files (no DuckDB): the independent side of a check."""
    return pq.read_table(os.path.join(store_dir, table))


def test_locomo_nodes_all_kinds_with_sane_counts(locomo_dev_store):
    nodes = read_table(locomo_dev_store, "nodes").to_pylist()
    edges = read_table(locomo_dev_store, "record_nodes").to_pylist()
    records = read_table(locomo_dev_store, "records").to_pylist()
    turns = read_table(locomo_dev_store, "turns").to_pylist()
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
        # both speakers are entities and the two most linked ones
        speakers = {t["speaker"] for t in turns if t["conversation_id"] == cid}
        top2 = {n["name"] for n in sorted(by_kind["entity"], key=lambda n: -n["n_records"])[:2]}
        assert top2 == speakers, (cid, top2, speakers)
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
        # keyphrases of each segment now (entity x topic pairs follow them): conv-26 of the fixture
        # has 480 nodes for 230 records, so the bound is 3x, not the lexicon era's 2x.
        assert len(mine) < 3 * n_records, cid
    edge_records = {(e["conversation_id"], e["record_id"]) for e in edges}
    assert all((r["conversation_id"], r["record_id"]) in edge_records for r in records)  # no record unlinked


def test_locomo_vector_topk_equals_numpy_bruteforce(locomo_dev_store):
    """Real MiniLM query vectors against real record/turn vectors: DuckDB's top-k over the
    views is the numpy brute-force top-k over the same vectors read straight from Parquet."""
    from lychee_ray.embedding import Embedder

    cfg = LycheeConfig.model_validate({"embedding": {"model": "bundled:all-MiniLM-L6-v2", "dim": 384}})
    questions = read_table(locomo_dev_store, "questions").to_pylist()
    embedder = Embedder(cfg.embedding)
    k = 25
    with open_store(str(locomo_dev_store), cfg) as store:
        for table, id_col in (("records", "record_id"), ("turns", "turn_id")):
            data = read_table(locomo_dev_store, table).select(["conversation_id", id_col, "embedding"]).to_pylist()
            for cid in store.conversation_ids():
                rows = [r for r in data if r["conversation_id"] == cid]
                ids = [r[id_col] for r in rows]
                mat = np.array([r["embedding"] for r in rows], dtype=np.float64)
                mat /= np.linalg.norm(mat, axis=1, keepdims=True)
                asked = [q["question"] for q in questions if q["conversation_id"] == cid][:3]
                for qv in embedder.encode(asked):
                    sims = mat @ (qv / np.linalg.norm(qv))
                    want = np.sort(sims)[::-1][:k]
                    got = store.vector_topk(table, cid, qv, k)
                    assert len(got) == k
                    np.testing.assert_allclose([g["score"] for g in got], want, atol=1e-5)
                    # each returned id really has the score reported (ties may swap equal ones)
                    sim_of = dict(zip(ids, sims))
                    np.testing.assert_allclose([sim_of[g[id_col]] for g in got], want, atol=1e-5)
                    gap = want[:-1] - want[1:]
                    if gap.min() > 1e-5:  # no near-ties: the exact same order
                        assert [g[id_col] for g in got] == [ids[i] for i in np.argsort(-sims)[:k]]


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
        q = CONVS["c1"].record_embeddings[2]
        assert [r["record_id"] for r in s.vector_topk("records", "c1-copy", q, 4)] == \
            [r["record_id"] for r in orig.vector_topk("records", "c1", q, 4)]
        assert {t: count(s, t) for t in INGEST_TABLES} == {
            t: orig.con.execute(f"SELECT count(*) FROM {t} WHERE conversation_id = 'c1'").fetchall()[0][0]
            for t in INGEST_TABLES}
