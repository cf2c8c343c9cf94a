"""Chat formats beyond the benchmarks (issue 13): ShareGPT, OpenAI chat `messages` JSONL and the
ChatGPT data export, each read from a hand-made fixture (tests/fixtures/formats/), detected from
content whatever the file is called; and anonymous conversation ids that hash the file's path
relative to the input root, the position and the content.

Turn accounting, for every format: the turns in the file = stored turns + one errors row per
turn not stored (skipped system/tool turns, ChatGPT nodes with no text or on another branch,
turns that fail validation).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lychee_ray.config_sections import ReadConfig
from lychee_ray.io.readers.common import SKIP_KINDS
from lychee_ray.io.readers.files import iter_conversations, list_input_files, read_file

from .conftest import FIXTURES

FORMATS = FIXTURES / "formats"
SHAREGPT, OPENAI, CHATGPT = FORMATS / "sharegpt.json", FORMATS / "openai_chat.jsonl", FORMATS / "chatgpt_conversations.json"
# errors rows that stand for an input turn not stored (the others note a problem of a kept turn)
LOSS_KINDS = set(SKIP_KINDS) | {"bad_turn"}


def read_all(path, root=None, **cfg):
    return list(read_file(str(path), ReadConfig(**cfg), None if root is None else str(root)))


def lost(conv) -> list[dict]:
    """The rows that each stand for one input turn of `conv` that was not stored."""
    return [e for e in conv.errors if e["kind"] in LOSS_KINDS or (e["kind"] == "missing_field" and (e["field"] or "").endswith(".text"))]


def stored(conv) -> int:
    """Stored input turns: an oversized turn split into parts (`id#p2`, ...) is one input turn."""
    return sum("#p" not in t.turn_id for t in conv.turns)


# --------------------------------------------------------------------------------------------
# ShareGPT
# --------------------------------------------------------------------------------------------
def test_sharegpt_fixture_maps_roles_and_counts_the_system_turn():
    raw = json.loads(SHAREGPT.read_text())
    convs = read_all(SHAREGPT)
    assert [(c.conversation_id, c.source, c.status) for c in convs] == [("QWJhYvA_0", "sharegpt", "ok"), ("i6IyJda_12", "sharegpt", "ok"), ("bard_7781", "sharegpt", "ok")]
    tutor, pharmacy, bard = convs
    assert [(t.speaker, t.role) for t in tutor.turns] == [("user", "user"), ("assistant", "assistant")] * 2
    assert [t.text for t in tutor.turns] == [
        "How do I say 'I would like a coffee' in Italian?",
        "Vorrei un caffè, per favore.",
        "And how do I ask for the bill at the end?",
        "Il conto, per favore. In a bar you often pay at the till first, then show the receipt at the counter.",
    ]
    assert [t.turn_id for t in tutor.turns] == ["session_1:2", "session_1:3", "session_1:4", "session_1:5"]  # positions in the source
    assert all(t.timestamp is None for c in convs for t in c.turns)  # ShareGPT has no dates
    (row,) = tutor.errors
    assert (row["kind"], row["field"], row["line"], row["source_file"]) == ("skipped_system", "conversations[0]", 1, str(SHAREGPT))
    assert "QWJhYvA_0" in row["message"] and row["conversation_id"] == "QWJhYvA_0"
    assert [t.role for t in pharmacy.turns] == ["user", "assistant", "user", "assistant"] and pharmacy.errors == []  # "chatgpt"
    assert [t.role for t in bard.turns] == ["user", "assistant"] and bard.turns[1].text.startswith("Try Azul")
    assert tutor.exchanges == pharmacy.exchanges == [[0, 1], [2, 3]]
    for item, conv in zip(raw, convs):
        assert len(item["conversations"]) == stored(conv) + len(lost(conv))
    assert sum(len(item["conversations"]) for item in raw) == 11 and sum(stored(c) for c in convs) == 10


def test_sharegpt_odd_turns_are_named_and_every_turn_is_accounted_for(tmp_path):
    turns = [
        {"from": "human", "value": "I moved to Lisbon in May."},
        {"from": "tool", "value": "{\"ok\": true}"},
        {"from": "observation", "value": "done"},
        "not a turn",
        {"from": "gpt"},
        {"value": "no sender"},
        {"from": "Alice", "value": "Welcome to Lisbon!"},
    ]
    f = tmp_path / "odd.jsonl"
    f.write_text(json.dumps({"id": "odd", "conversations": turns}) + "\n")
    (conv,) = read_all(f)
    assert [(t.speaker, t.role, t.text) for t in conv.turns] == [
        ("user", "user", "I moved to Lisbon in May."),
        ("unknown", "unknown", "no sender"),
        ("Alice", "Alice", "Welcome to Lisbon!"),  # a name that is no known role is kept as it is
    ]
    assert {(e["field"], e["kind"]) for e in lost(conv)} == {
        ("conversations[1]", "skipped_tool"), ("conversations[2]", "skipped_tool"),
        ("conversations[3]", "bad_turn"), ("conversations[4].text", "missing_field"),
    }  # fmt: skip
    assert len(turns) == stored(conv) + len(lost(conv))


# --------------------------------------------------------------------------------------------
# OpenAI chat `messages` JSONL
# --------------------------------------------------------------------------------------------
def test_openai_messages_read_content_parts_and_count_empty_system_and_tool_calls():
    lines = [json.loads(line) for line in OPENAI.read_text().splitlines()]
    convs = read_all(OPENAI)
    assert [c.source for c in convs] == ["chat"] * 3 and all(c.status == "ok" for c in convs)
    assert all(c.conversation_id.startswith("anon-") for c in convs) and len({c.conversation_id for c in convs}) == 3
    shop, chain, weather = convs
    # a system prompt with text is a turn like any other (the generic chat rule)
    assert [(t.role, t.text) for t in shop.turns][0] == ("system", "You are a concise assistant for a bike shop.") and shop.errors == []
    # content parts: the text parts joined, the image part counted
    assert [(t.role, t.text) for t in chain.turns] == [
        ("user", "What is wrong with this chain?"),
        ("assistant", "It is rusted and stretched past 0.75%.\nReplace it together with the cassette."),
    ]
    assert [(e["field"], e["kind"], e["line"]) for e in chain.errors] == [("messages[0]", "skipped_system", 2), ("messages[1].content", "non_text_content", 2)]
    assert "image_url" in chain.errors[1]["message"]
    # the assistant's tool call (no text) is skipped and counted; the tool's reply has text and stays
    assert [t.role for t in weather.turns] == ["user", "tool", "assistant"]
    assert [(e["field"], e["kind"], e["line"]) for e in weather.errors] == [("messages[1]", "skipped_tool", 3)]
    assert weather.exchanges == [[0, 1, 2]]
    for line, conv in zip(lines, convs):
        assert len(line["messages"]) == stored(conv) + len(lost(conv))


def test_content_parts_with_no_text_are_named_with_their_types(tmp_path):
    f = tmp_path / "img.jsonl"
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, {"role": "assistant", "content": [{"type": "text", "text": {"value": "A cat."}}]}]
    f.write_text(json.dumps({"messages": msgs}) + "\n")
    (conv,) = read_all(f)
    assert [t.text for t in conv.turns] == ["A cat."]  # the Assistants API's {"value": ...} text
    (row,) = lost(conv)
    assert (row["field"], row["kind"]) == ("messages[0].text", "missing_field") and "image_url" in row["message"]


# --------------------------------------------------------------------------------------------
# ChatGPT data export
# --------------------------------------------------------------------------------------------
def test_chatgpt_export_reads_the_current_branch_with_utc_times():
    raw = json.loads(CHATGPT.read_text())
    sourdough, invoices = read_all(CHATGPT)
    assert (sourdough.conversation_id, sourdough.source, sourdough.status) == ("6f1c2a9e-0b7d-4c1e-9a51-3d2f8e7b1c01", "chatgpt", "ok")
    assert invoices.conversation_id == "c0ffee42-9b8a-4c7d-8e6f-5a4b3c2d1e0f"  # `id` when there is no conversation_id
    assert [(t.speaker, t.role, t.timestamp) for t in sourdough.turns] == [
        ("user", "user", "2023-11-19T16:00:12+00:00"),
        ("assistant", "assistant", "2023-11-19T16:00:55+00:00"),
        ("user", "user", "2023-11-19T16:02:00+00:00"),
        ("assistant", "assistant", "2023-11-19T16:03:01+00:00"),
    ]
    assert sourdough.turns[0].text == "My sourdough starter smells like nail polish remover. Is it dead?"
    assert sorted((e["field"], e["kind"]) for e in sourdough.errors) == [
        ("mapping.2f0e9c51-8a3b-4d62-b7c4-1e5a9f0d3c02", "skipped_system"),
        ("mapping.aaa1a0b2-5c1e-4f7e-9d41-0c7e2b6d1f01", "skipped_no_text"),  # the root: no message
    ]
    # the regenerated answer is read, the original (first child, another branch) is not
    assert [(t.role, t.timestamp, t.text[:24]) for t in invoices.turns] == [
        ("user", "2024-04-01T09:50:30+00:00", "Here is a screenshot of "),
        ("assistant", "2024-04-01T09:53:30+00:00", "Row 14 repeats invoice 1"),
        ("user", "2024-04-01T09:54:00+00:00", "Can you plot the monthly"),
        ("assistant", "2024-04-01T09:55:40+00:00", "Here is the chart: Janua"),
    ]
    assert not any("headers included" in t.text for t in invoices.turns)
    assert sorted((e["field"], e["kind"]) for e in invoices.errors) == [
        ("mapping.b1d2e3f4-0a1b-4c2d-8e3f-4a5b6c7d8e01.content", "non_text_content"),  # the screenshot
        ("mapping.b2a0c1d2-3e4f-4a5b-9c6d-7e8f9a0b1c02", "off_branch"),  # the first answer
        ("mapping.b5a6b7c8-9d0e-4f1a-b2c3-4d5e6f7a8b05", "skipped_tool"),  # code sent to python
        ("mapping.b6b7c8d9-0e1f-4a2b-c3d4-5e6f7a8b9c06", "skipped_tool"),  # python's output
        ("mapping.client-created-root", "skipped_no_text"),
    ]
    assert all(e["line"] == 2 and e["source_file"] == str(CHATGPT) for e in invoices.errors)  # item 2 of the list
    assert sourdough.exchanges == invoices.exchanges == [[0, 1], [2, 3]]
    for item, conv in zip(raw, (sourdough, invoices)):
        assert len(item["mapping"]) == stored(conv) + len(lost(conv))


def write_json(path: Path, value) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_chatgpt_without_current_node_reads_the_longest_branch_and_says_so(tmp_path):
    item = json.loads(CHATGPT.read_text())[1]
    del item["current_node"]
    (conv,) = read_all(write_json(tmp_path / "c.json", [item]))
    assert [t.timestamp for t in conv.turns][-1] == "2024-04-01T09:55:40+00:00" and len(conv.turns) == 4
    assert ("current_node", "no_current_node") in {(e["field"], e["kind"]) for e in conv.errors}
    assert len(item["mapping"]) == stored(conv) + len(lost(conv))
    # on a tie the first child's branch is read; a current_node that names no node is named too
    # (cut the long branch after the regenerated answer: both answers are then leaves at depth 3)
    item = json.loads(CHATGPT.read_text())[1]
    user = item["mapping"]["b1d2e3f4-0a1b-4c2d-8e3f-4a5b6c7d8e01"]
    for k in ("b4f5a6b7-8c9d-4e0f-a1b2-3c4d5e6f7a04", "b5a6b7c8-9d0e-4f1a-b2c3-4d5e6f7a8b05", "b6b7c8d9-0e1f-4a2b-c3d4-5e6f7a8b9c06", "b7c8d9e0-1f2a-4b3c-d4e5-6f7a8b9c0d07"):
        del item["mapping"][k]
    item["mapping"]["b3e4f5a6-7b8c-4d9e-a0f1-2b3c4d5e6f03"]["children"] = []
    item["current_node"] = "no-such-node"
    (conv,) = read_all(write_json(tmp_path / "tie.json", [item]))
    assert [t.text for t in conv.turns][-1].startswith("The March total probably")  # user["children"][0]
    assert user["children"][0] == "b2a0c1d2-3e4f-4a5b-9c6d-7e8f9a0b1c02"
    assert ("current_node", "bad_field") in {(e["field"], e["kind"]) for e in conv.errors}
    assert len(item["mapping"]) == stored(conv) + len(lost(conv))


def test_chatgpt_parent_cycle_and_bad_nodes_end_in_rows_not_hangs(tmp_path):
    mapping = {
        "a": {"message": {"author": {"role": "user"}, "content": {"content_type": "text", "parts": ["Hi, I am Ana."]}, "create_time": "yesterday"}, "parent": "c", "children": ["b"]},
        "b": {"message": {"author": {"role": "assistant"}, "content": {"content_type": "text", "parts": ["Hello Ana!"]}, "create_time": 1e20}, "parent": "a", "children": ["c"]},
        "c": {"message": "oops", "parent": "b", "children": ["a"]},
        "d": ["not", "a", "node"],
    }
    (conv,) = read_all(write_json(tmp_path / "cycle.json", [{"id": "cyc", "mapping": mapping, "current_node": "b"}]))
    assert [t.text for t in conv.turns] == ["Hi, I am Ana.", "Hello Ana!"]
    assert all(t.timestamp is None for t in conv.turns)
    got = {(e["field"], e["kind"]) for e in conv.errors}
    assert {("mapping.a.timestamp", "bad_timestamp"), ("mapping.b.timestamp", "bad_timestamp"), ("mapping.c.message", "bad_turn"), ("mapping.d", "off_branch")} <= got
    assert any(e["kind"] == "bad_field" and "loop" in e["message"] for e in conv.errors)
    assert len(mapping) == stored(conv) + len(lost(conv))


# --------------------------------------------------------------------------------------------
# Detection from content, not the file name
# --------------------------------------------------------------------------------------------
def test_each_format_is_detected_from_content_under_a_misleading_name(tmp_path):
    named = {
        "conversations.json": (SHAREGPT, "sharegpt"),  # the ChatGPT export's file name
        "sharegpt.txt": (CHATGPT, "chatgpt"),
        "turns.parquet": (OPENAI, "chat"),
        "locomo_dev": (SHAREGPT, "sharegpt"),
    }
    for name, (src, _) in named.items():
        shutil.copy(src, tmp_path / name)
    for name, (src, source) in named.items():
        convs = read_all(tmp_path / name, tmp_path)
        assert convs and all(c.source == source and c.status == "ok" for c in convs), name
    # the benchmarks and the generic shapes are still told apart from the new ones
    f = tmp_path / "mixed.data"
    lines = [
        {"conversation_id": "g", "turns": [{"role": "user", "content": "hello"}]},
        {"id": "s", "conversations": [{"from": "human", "value": "hello"}]},
        {"conversation_id": "x", "speaker": "Ann", "text": "a turn row"},
        {"conversation_id": "e", "mapping": {}, "title": "empty export"},
        {"sample_id": "l", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}], "session_1_date_time": "4:27 pm on 2 April, 2024"}},
    ]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    got = {c.conversation_id: c.source for c in read_all(f)}
    assert got == {"g": "chat", "s": "sharegpt", "x": "turns", "e": "chatgpt", "l": "locomo"}


# --------------------------------------------------------------------------------------------
# Anonymous ids
# --------------------------------------------------------------------------------------------
def anon_archive(root: Path) -> None:
    same = json.dumps({"messages": [{"role": "user", "content": "Same words, different day."}, {"role": "assistant", "content": "Noted."}]})
    row = json.dumps({"conversation_id": None, "role": "user", "content": "a turn row with no id"})
    for day in ("a", "b"):
        (root / day).mkdir(parents=True)
        (root / day / "chat.jsonl").write_text(same + "\n" + same + "\n")
        (root / day / "rows.jsonl").write_text(row + "\n")


def read_ids(root: Path) -> list[str]:
    return [c.conversation_id for c in iter_conversations(list_input_files(str(root)), ReadConfig(), root=str(root))]


def test_anonymous_ids_differ_across_folders_and_lines_and_agree_across_runs(tmp_path):
    root = tmp_path / "in"
    anon_archive(root)
    ids = read_ids(root)
    assert len(ids) == 6 and all(i.startswith("anon-") for i in ids)
    assert len(set(ids)) == 6  # a/chat.jsonl vs b/chat.jsonl, line 1 vs line 2, the turn rows
    assert read_ids(root) == ids  # a rerun agrees
    # the key is the path relative to the input root: the archive moved elsewhere keeps its ids,
    # and the root spelled differently gives the same ids
    moved = tmp_path / "elsewhere" / "in"
    shutil.copytree(root, moved)
    assert read_ids(moved) == ids
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        assert [c.conversation_id for c in iter_conversations(list_input_files("in"), ReadConfig(), root="in")] == ids
    finally:
        os.chdir(cwd)
    # different content at the same place gets a different id
    (root / "a" / "chat.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "Other words."}]}) + "\n")
    assert read_ids(root)[0] not in ids


def test_an_anonymous_sharegpt_and_chatgpt_conversation_gets_a_stable_id(tmp_path):
    sg = json.loads(SHAREGPT.read_text())[0]
    cg = json.loads(CHATGPT.read_text())[0]
    del sg["id"], cg["id"], cg["conversation_id"]
    write_json(tmp_path / "sg.json", [sg, sg])
    write_json(tmp_path / "cg.json", [cg])
    first = [(c.conversation_id, c.source) for c in iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path))]
    assert [s for _, s in first] == ["chatgpt", "sharegpt", "sharegpt"]
    assert len({i for i, _ in first}) == 3 and all(i.startswith("anon-") for i, _ in first)
    assert first == [(c.conversation_id, c.source) for c in iter_conversations(list_input_files(str(tmp_path)), ReadConfig(), root=str(tmp_path))]


# --------------------------------------------------------------------------------------------
# Hypothesis: random ShareGPT-ish and ChatGPT-ish objects never crash and conserve turns
# --------------------------------------------------------------------------------------------
FUZZ = settings(max_examples=int(os.environ.get("LYCHEE_FUZZ_EXAMPLES", "25")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
junk = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), text, st.lists(st.integers(), max_size=2), st.just({}))
good_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30).filter(str.strip)
good_sharegpt_turn = st.fixed_dictionaries({"from": st.sampled_from(["human", "gpt", "chatgpt", "system"]), "value": good_text})
sharegpt_turn = st.one_of(
    good_sharegpt_turn,
    good_sharegpt_turn,
    good_sharegpt_turn,
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": good_text}),
    st.fixed_dictionaries(
        {},
        optional={
            "from": st.sampled_from(["human", "gpt", "GPT", "system", "tool", "observation", "bard", "Alice", ""]) | junk,
            "value": text | junk | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": text}), max_size=2),
            "timestamp": st.sampled_from(["2024-01-02T10:00:00", "soon", 1700000000]),
        },
    ),
    junk,
)
sharegpt_item = st.fixed_dictionaries({"conversations": st.lists(sharegpt_turn, min_size=1, max_size=6)}, optional={"id": st.sampled_from(["dup", "x1"]) | junk})


def read_items(items: list, layout: str):
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "in.data"
        if layout == "json":
            f.write_text(json.dumps(items))
        else:
            f.write_text("\n".join(json.dumps(x) for x in items) + "\n")
        return list(iter_conversations([str(f)], ReadConfig(max_turn_tokens=64), root=tmp))


def check_accounting(items: list, convs: list, n_turns) -> None:
    """One conversation (or one error row for the whole item) per item, in order; no reader
    crash; every input turn of a read item is stored or named by one loss row."""
    assert len(convs) == len(items)
    assert not [e for c in convs for e in c.errors if e["kind"] == "reader_error"]
    ids = [c.conversation_id for c in convs]
    assert len(ids) == len(set(ids))
    for item, conv in zip(items, convs):
        if conv.status == "error":  # only the whole item named: an unknown shape
            assert conv.errors[0]["kind"] == "unknown_format", conv.errors
            continue
        if conv.status == "duplicate":  # a later copy of an id: its turns are counted on its row
            assert any(e["kind"] == "duplicate_id" for e in conv.errors), conv.errors
            continue
        assert n_turns(item) == stored(conv) + len(lost(conv)), (item, conv.turns, conv.errors)


@FUZZ
@given(st.lists(sharegpt_item, min_size=1, max_size=4), st.sampled_from(["json", "jsonl"]))
def test_random_sharegpt_objects_never_crash_and_conserve_turns(items, layout):
    convs = read_items(items, layout)
    check_accounting(items, convs, lambda item: len(item["conversations"]))
    assert all(c.source == "sharegpt" for c in convs if c.status != "error")


KEYS = ["n0", "n1", "n2", "n3", "n4"]
ref = st.sampled_from(KEYS + ["gone"]) | st.none() | st.integers(0, 3)
good_message = st.fixed_dictionaries(
    {
        "author": st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"])}),
        "content": st.fixed_dictionaries({"content_type": st.just("text"), "parts": st.lists(good_text, min_size=1, max_size=2)}),
        "create_time": st.floats(1.5e9, 1.8e9),
    }
)
message = good_message | good_message | st.fixed_dictionaries(
    {
        "author": st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system", "tool", "critic"]) | junk}) | junk,
        "content": st.fixed_dictionaries(
            {"content_type": st.sampled_from(["text", "multimodal_text", "code", "execution_output"]) | junk},
            optional={"parts": st.lists(text | st.just({"content_type": "image_asset_pointer"}) | junk, max_size=3) | junk},
        )
        | junk,
    },
    optional={"create_time": st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(10**12), 10**12) | junk, "recipient": st.sampled_from(["all", "python", "bio"]) | junk},
)
node = st.one_of(
    st.fixed_dictionaries({"message": message, "parent": ref, "children": st.lists(ref, max_size=3)}),
    st.fixed_dictionaries({"message": message | st.none() | junk}, optional={"parent": ref, "children": st.lists(ref, max_size=3) | junk}),
    junk,
)


@st.composite
def chatgpt_tree(draw):
    """A well-formed export conversation (a random tree, current_node mostly a node of it), now
    and then with one node replaced by a random one."""
    keys = KEYS[: draw(st.integers(2, len(KEYS)))]
    parents = {k: (keys[draw(st.integers(0, i - 1))] if i else None) for i, k in enumerate(keys)}
    mapping = {k: {"id": k, "message": draw(good_message | message) if i else None, "parent": parents[k], "children": [c for c in keys if parents[c] == k]} for i, k in enumerate(keys)}
    if draw(st.integers(0, 3)) == 0:
        mapping[draw(st.sampled_from(keys))] = draw(node)
    leaves = [k for k in reversed(keys) if not isinstance(mapping[k], dict) or not mapping[k].get("children")]
    item = {"mapping": mapping, "current_node": draw(st.sampled_from(leaves or keys) | st.sampled_from(keys) | ref)}
    if draw(st.booleans()):
        item["id"] = draw(st.sampled_from(["c1", "c2"]))
    return item


chatgpt_item = chatgpt_tree() | chatgpt_tree() | st.fixed_dictionaries(
    {"mapping": st.dictionaries(st.sampled_from(KEYS), node, max_size=5)},
    optional={"current_node": ref, "id": st.sampled_from(["c1", "c2"])},
)


@FUZZ
@given(st.lists(chatgpt_item, min_size=1, max_size=3), st.sampled_from(["json", "jsonl"]))
def test_random_chatgpt_exports_never_crash_or_hang_and_account_for_every_node(items, layout):
    convs = read_items(copy.deepcopy(items), layout)
    check_accounting(items, convs, lambda item: len(item["mapping"]))
    assert all(c.source == "chatgpt" for c in convs if c.status != "error")
