"""The LLM path of record links through the fake OpenAI server: the earlier records offered to
each encode call ride in its reference context under short ids, the call's JSON schema allows
only those ids, the reply's `supersedes` / `contradicts` lists become `record_links` rows of the
right records, and it costs no call: one request per segment.

Real parts: the generator's archive (LoCoMo format), its reader, MiniLM, the segmenter, and the
EncodeStage with its LLMClient over HTTP. The fake is honest: it cites an offered id by a fixed
word-overlap rule applied to the prompt (tests/support/fake_openai.py), so the test checks that
every id it cited reaches the store as the record it named, never what is "right"."""

from __future__ import annotations

import copy
import json
import re

import pytest

from lychee_ray.ingest.embed import EmbedTurnsStage
from lychee_ray.ingest.encode import EncodeStage, record_id
from lychee_ray.ingest.links import dropped_ids, reply_links
from lychee_ray.ingest.reference_context import LinkCandidate
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.readers.files import read_file
from lychee_ray.llm.prompts import LINK_CANDIDATES_HEADER, render_turns
from lychee_ray.schemas import EncodedRecord, EncodeOutput, ResolutionState
from lychee_ray.tables import Record
from tests.support.fake_openai import FakeOpenAIServer
from tests.support.generated import generate, local_config

from .test_encode_llm import llm_cfg

OFFERED = re.compile(r"^\[(m\d+)\]\s+(?:\([^)]*\)\s+)?(.+)$")  # an older record: "[m4] (2024-03-01) text"
RECENT = re.compile(r"^- \[[^\]]+\] (.+?)(?: \(\d{4}-\d{2}-\d{2}\))? \[(m\d+)\]$")  # a recent one: "- [fact] text [m1]"


@pytest.fixture(scope="module")
def segmented_convs(tmp_path_factory, local_embedder):
    archive = generate(tmp_path_factory.mktemp("links-llm"), "locomo", conversations=2, sessions=4)
    cfg = local_config()
    convs = list(read_file(str(archive.archive / "locomo.json"), cfg.read_settings))
    convs = EmbedTurnsStage(cfg, local_embedder).process_batch(convs)
    return SegmentStage(cfg).process_batch(convs)


@pytest.fixture(scope="module")
def encoded(segmented_convs):
    with FakeOpenAIServer() as server:
        stage = EncodeStage(llm_cfg(server, "encoder.rule_links=false"))
        stage.setup()
        convs = stage.process_batch(copy.deepcopy(segmented_convs))
        chat = [r for r in server.requests if r["endpoint"] == "chat"]
    return convs, chat


def offered(request) -> dict[str, str]:
    """id -> text of the records one encode prompt offers for links, in the prompt's order."""
    context = request["messages"][1]["content"].split("\n\nSEGMENT\n", 1)[0]
    recent, _, older = context.partition(LINK_CANDIDATES_HEADER)
    found = {m.group(2): m.group(1) for m in map(RECENT.match, recent.splitlines()) if m}
    return found | {m.group(1): m.group(2) for m in map(OFFERED.match, older.splitlines()[1:]) if m}


def test_one_call_per_segment_and_the_candidates_ride_in_the_context(encoded):
    convs, chat = encoded
    assert len(chat) == sum(len(c.segments) for c in convs) == sum(c.stats.llm_calls for c in convs)
    with_candidates = [r for r in chat if offered(r)]
    assert len(with_candidates) == len(chat) - len(convs)  # every segment but each conversation's first
    assert any(LINK_CANDIDATES_HEADER in r["messages"][1]["content"] for r in chat), "no older record beyond rho's recent ones"
    for r in with_candidates:  # ids m1, m2, ... in the prompt's order
        assert list(offered(r)) == [f"m{n}" for n in range(1, len(offered(r)) + 1)]
    for r in chat:
        refs = list(offered(r))
        item = r["schema"]["properties"]["records"]["items"]["properties"]
        for kind in ("supersedes", "contradicts"):
            if refs:  # the schema allows exactly the ids this prompt shows
                assert item[kind]["items"]["enum"] == refs
            else:
                assert item[kind]["maxItems"] == 0 and "enum" not in item[kind]["items"]


def test_every_cited_id_becomes_a_link_to_the_record_it_named(encoded):
    convs, chat = encoded
    by_segment_text = {render_turns([conv.turns[i] for i in seg.turn_idxs]): (conv, seg) for conv in convs for seg in conv.segments}
    expected: dict[str, set] = {c.conversation_id: set() for c in convs}
    cited = 0
    for r in chat:
        segment = r["messages"][1]["content"].split("\n\nSEGMENT\n", 1)[1]
        conv, seg = by_segment_text[segment]
        text_to_id = {" ".join(rec.text.split()): rec.record_id for rec in conv.records}
        refs = offered(r)
        for i, rec in enumerate(json.loads(r["reply"])["records"]):
            later = record_id(conv.conversation_id, seg.segment_id, i, rec["text"])
            for kind in ("supersedes", "contradicts"):
                for ref in rec[kind]:
                    cited += 1
                    expected[conv.conversation_id].add((later, text_to_id[refs[ref]], kind))
    assert cited > 0, "the fake cited nothing: the offered records never overlapped a turn"
    for conv in convs:
        got = {(x.record_id, x.other_record_id, x.kind) for x in conv.links}
        assert got == expected[conv.conversation_id]
        assert all(x.found_by == "llm" for x in conv.links)
        order = {r.record_id: n for n, r in enumerate(conv.records)}
        assert all(order[x.other_record_id] < order[x.record_id] for x in conv.links)
        assert conv.stats.link_ids_dropped == 0


def test_ids_the_call_was_not_shown_are_dropped_and_counted():
    shown = [LinkCandidate("m1", "rec-a", "A lives in B.", "2024-01-01")]
    rec = EncodedRecord(type="fact", text="A moved to C.", entities=[], topics=[], time=None, source_turn_ids=["t"],
                        supersedes=["m1", "m7"], contradicts=["m9"])
    out = EncodeOutput(records=[rec], state=ResolutionState(entities=[], date_anchor=None, open_threads=[]))
    row = Record(conversation_id="c", record_id="rec-new", segment_id="s", type="fact", text=rec.text, entities=[], topics=[],
                 time_start=None, time_end=None, time_granularity="none", time_expression=None, source_turn_ids=["t"], backend="x")
    links = reply_links([row], out, shown)
    assert [(x.record_id, x.other_record_id, x.kind, x.found_by) for x in links] == [("rec-new", "rec-a", "supersedes", "llm")]
    assert dropped_ids(out, shown) == 2
