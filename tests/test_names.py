"""One name normalisation: the Python key (organize, rules) and the SQL macro (node matching)
agree, so a node built at ingest is found by the query that names it."""

from __future__ import annotations

import duckdb
from hypothesis import given, settings
from hypothesis import strategies as st

from lychee_ray.config import OrganizeConfig
from lychee_ray.ingest.organize import build_nodes
from lychee_ray.names import NORMALIZE_NAME_SQL, normalize_name
from lychee_ray.schemas import Conversation, MemoryRecord

# ASCII, Latin-1 letters and the typographic apostrophe. Outside that, Python's and DuckDB's
# Unicode case mappings differ on a few letters (e.g. "İ" lowers to "i" + a combining dot in
# Python): names are compared within one store, so only agreement on real names matters.
NAME_CHARS = st.sampled_from(list("abcXYZ '’-_.,!?&0123456789sSTtheHEaAnN") + list("éÉüÜñçß"))


def _sql():
    con = duckdb.connect()
    con.execute(NORMALIZE_NAME_SQL)
    return con


def test_known_names():
    for raw, key in [
        ("The Support-Group's", "support group"),
        ("support group", "support group"),
        ("The Expanse", "expanse"),
        ("Dr. Seuss", "dr seuss"),
        ("Mel’s", "mel"),
        ("  café  ", "café"),
        ("an apple", "apple"),
        ("Theatre", "theatre"),
    ]:
        assert normalize_name(raw) == key


@settings(max_examples=200, deadline=None)
@given(st.text(NAME_CHARS, max_size=30))
def test_sql_macro_equals_python(name):
    con = _sql()
    assert con.execute("SELECT lychee_norm(?)", [name]).fetchone()[0] == normalize_name(name)


def _record(rid: str, entities: list[str], topics: list[str]) -> MemoryRecord:
    return MemoryRecord(rid, "s0", "fact", "text", entities, topics, None, None, "none", None, [], "rules")


def test_organize_keys_nodes_by_the_one_normalisation():
    """'The Expanse' / 'Expanse' and 'self-acceptance' / 'Self acceptance' are one node each;
    an alias counts as its entity; shown names stay readable."""
    conv = Conversation("c", "chat_jsonl", "x.jsonl", entity_aliases={"mel": "Melanie"})
    conv.records = [
        _record("r1", ["The Expanse", "Mel"], ["self-acceptance"]),
        _record("r2", ["Expanse", "Melanie"], ["Self acceptance"]),
    ]
    nodes, edges = build_nodes(conv, OrganizeConfig())
    by_kind: dict[str, list[dict]] = {}
    for n in nodes:
        by_kind.setdefault(n["kind"], []).append(n)
    assert sorted(n["n_records"] for n in by_kind["entity"]) == [2, 2]
    assert len(by_kind["topic"]) == 1 and by_kind["topic"][0]["n_records"] == 2
    assert by_kind["topic"][0]["name"] in ("self-acceptance", "self acceptance")
    assert {n["name"] for n in by_kind["entity_topic"]} <= {
        "the expanse / self-acceptance", "expanse / self acceptance", "melanie / self-acceptance", "melanie / self acceptance"}
    assert len(by_kind["entity_topic"]) == 2
    assert len(edges) == len(set(edges))


def test_node_names_match_query_names_in_sql():
    """The store's node matching finds the node built from another spelling of the name."""
    con = _sql()
    key_of_node = normalize_name("The Support-Group's")
    assert con.execute("SELECT lychee_norm(?) = ?", ["support group", key_of_node]).fetchone()[0]
