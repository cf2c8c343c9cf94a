"""One name normalisation (lychee_ray/names.py): organize keys nodes by it and retrieval matches
query names by it, so a node built at ingest is found by the query that names it."""

from __future__ import annotations

from lychee_ray.config_sections import OrganizeConfig
from lychee_ray.ingest.evidence_nodes import build_nodes
from lychee_ray.names import normalize_name
from lychee_ray.schemas import Conversation
from lychee_ray.tables import Record

def test_known_names():
    for raw, key in [
        ("The Pottery-Club's", "pottery club"),
        ("pottery club", "pottery club"),
        ("The Hollow Stair", "hollow stair"),
        ("Dr. Vantrell", "dr vantrell"),
        ("Bran’s", "bran"),
        ("  café  ", "café"),
        ("an apple", "apple"),
        ("Theatre", "theatre"),
    ]:
        assert normalize_name(raw) == key


def _record(rid: str, entities: list[str], topics: list[str]) -> Record:
    return Record(conversation_id="c", record_id=rid, segment_id="s0", type="fact", text="text", entities=entities, topics=topics,
                  time_start=None, time_end=None, time_granularity="none", time_expression=None, source_turn_ids=[], backend="rules")


def test_organize_keys_nodes_by_the_one_normalisation():
    """'The Hollow Stair' / 'Hollow Stair' and 'rock-climbing' / 'Rock climbing' are one node each;
    an alias counts as its entity; shown names stay readable."""
    conv = Conversation("c", "chat_jsonl", "x.jsonl", entity_aliases={"bran": "Brannoc"})
    conv.records = [
        _record("r1", ["The Hollow Stair", "Bran"], ["rock-climbing"]),
        _record("r2", ["Hollow Stair", "Brannoc"], ["Rock climbing"]),
    ]
    nodes, edges = build_nodes(conv, OrganizeConfig())
    by_kind: dict[str, list[dict]] = {}
    for n in nodes:
        by_kind.setdefault(n.kind, []).append(n)
    assert sorted(n.n_records for n in by_kind["entity"]) == [2, 2]
    assert len(by_kind["topic"]) == 1 and by_kind["topic"][0].n_records == 2
    assert by_kind["topic"][0].name in ("rock-climbing", "rock climbing")
    assert {n.name for n in by_kind["entity_topic"]} <= {
        "the hollow stair / rock-climbing", "hollow stair / rock climbing", "brannoc / rock-climbing", "brannoc / rock climbing"}
    assert len(by_kind["entity_topic"]) == 2
    assert len(edges) == len(set(edges))


def test_node_names_match_query_names_through_the_loaded_conversation():
    """Retrieval finds the node built from another spelling of the name (query/conversation.py
    keys both by `normalize_name`)."""
    conv = Conversation("c", "chat_jsonl", "x.jsonl")
    conv.records = [_record("r1", ["The Pottery-Club's"], [])]
    nodes, _ = build_nodes(conv, OrganizeConfig())
    assert {normalize_name(n.name) for n in nodes if n.kind == "entity"} == {normalize_name("pottery club")}
