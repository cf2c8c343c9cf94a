"""The segmenter's hard token cap holds for every segment (issue 16).

A turn over `read.max_turn_tokens` is split by the reader into parts X, X#p2, X#p3...; the split
size never exceeds the cap (the config lowers it), and any exchange over the cap is split into
runs of its turns (`cap_exchanges`) before segmentation. The end-to-end test ingests a
200K-character turn between normal ones (the issue reports one segment of 44,455 tokens under a
1,024-token cap from such a turn).
"""

from __future__ import annotations

import json
import random
import re

import numpy as np

from lychee_ray.config import load_config
from lychee_ray.ingest.job import run_ingest
from lychee_ray.ingest.segment import SegmentStage
from lychee_ray.io.exchanges import cap_exchanges, group_exchanges
from lychee_ray.schemas import Conversation
from lychee_ray.store.reader import open_store
from lychee_ray.tables import Turn
from lychee_ray.tokens import count_many, count_tokens

from .conftest import REPO

LOCAL = REPO / "configs" / "local.yaml"
WORDS = "the garden tomatoes grew tall while Wenna painted the fence blue and talked about Paris".split()


def long_text(n_chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    sentences = []
    while sum(len(s) + 1 for s in sentences) < n_chars:
        sentences.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 25))).capitalize() + ".")
    return " ".join(sentences)[:n_chars]


def turn(tid: str, speaker: str, text: str = "hello there.", session: str = "s1") -> Turn:
    return Turn(turn_id=tid, turn_idx=0, session_id=session, speaker=speaker, role=speaker, text=text, timestamp=None)


# ------------------------------------------------------------------------------ exchange grouping
def test_the_parts_of_a_split_turn_are_cut_into_exchanges_under_the_cap():
    """The reader's parts (X, X#p2, X#p3 of one speaker) group into one exchange like any run
    of turns; capping then cuts it so that no exchange is over the cap."""
    turns = [turn("t1", "user"), turn("t2", "assistant"), turn("t2#p2", "assistant"), turn("t2#p3", "assistant"),
             turn("t3", "user"), turn("t4", "assistant")]
    tokens = [10, 1000, 1000, 300, 10, 10]
    grouped = group_exchanges(turns, "role")
    assert grouped == [[0, 1, 2, 3], [4, 5]]
    capped = cap_exchanges(grouped, tokens, 1024)
    assert capped == [[0, 1], [2], [3], [4, 5]]
    assert all(sum(tokens[i] for i in ex) <= 1024 for ex in capped)


def test_an_exchange_over_the_cap_is_split_into_runs_of_its_turns():
    assert cap_exchanges([[0, 1], [2, 3, 4]], [800, 800, 100, 200, 300], 1024) == [[0], [1], [2, 3, 4]]
    assert cap_exchanges([[0, 1, 2]], [2000, 10, 10], 1024) == [[0], [1, 2]]  # an over-cap turn stays alone


def test_turns_are_never_split_above_the_segment_cap():
    cfg = load_config(LOCAL, ["read.max_turn_tokens=4096", "segmenter.token_cap=700"])
    assert cfg.read.max_turn_tokens == 4096  # the user's config is as written...
    assert cfg.resolve().max_turn_tokens == cfg.read_settings.max_turn_tokens == 700  # ...the readers get the cap
    assert load_config(LOCAL).read_settings.max_turn_tokens == 512  # below the cap: kept as configured


def test_segmenter_cuts_a_pair_of_two_long_turns():
    """Two 800-token turns of one pair: one exchange of 1,600 tokens before, two units now."""
    cfg = load_config(LOCAL)
    texts = [long_text(20_000, seed=i) for i in range(2)]
    texts = [" ".join(t.split()[: 800 - 10]) for t in texts]
    while any(count_tokens(t) > 800 for t in texts):
        texts = [" ".join(t.split()[:-5]) if count_tokens(t) > 800 else t for t in texts]
    conv = Conversation(conversation_id="c", source="chat_jsonl", source_file="x",
                        turns=[turn("a", "user", texts[0]), turn("b", "assistant", texts[1])])
    conv.exchanges = group_exchanges(conv.turns, "pair")
    assert conv.exchanges == [[0, 1]]  # over the cap: the stage must cut it
    conv.turn_embeddings = np.eye(2, 8, dtype=np.float32)
    SegmentStage(cfg).process(conv)
    assert all(s.n_tokens <= cfg.segmenter.token_cap for s in conv.segments), [s.n_tokens for s in conv.segments]
    assert sorted(i for s in conv.segments for i in s.turn_idxs) == [0, 1]


# ------------------------------------------------------------------------------------ end to end
def test_a_200k_character_turn_leaves_no_segment_over_the_cap(tmp_path, ray_local):
    big = long_text(200_000)
    turns = [("user", "I planted tomatoes in the garden last week."), ("assistant", "Lovely, how are they doing?"),
             ("user", big), ("assistant", "That is a lot of detail about the garden."),
             ("user", "Wenna will paint the fence tomorrow."), ("assistant", "Blue would suit it.")]
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"conversation_id": "c-big", "turns": [{"role": r, "content": c} for r, c in turns]}) + "\n")
    cfg = load_config(LOCAL, ["ray.progress_bars=false"])
    cap = cfg.segmenter.token_cap
    summary = run_ingest(cfg, str(inp), str(tmp_path / "store"))
    assert summary.by_status == {"ok": 1}
    with open_store(str(tmp_path / "store")) as store:
        con = store.con
        stored = con.execute("select turn_id, text from turns order by turn_idx").fetchall()
        segments = con.execute("select segment_id, turn_ids, n_tokens from segments order by segment_id").fetchall()
        kinds = {k for (k,) in con.execute("select kind from errors").fetchall()}
    text_of = dict(stored)
    # no segment over the cap, by its own count and by a recount of its turns' text
    for seg_id, turn_ids, n_tokens in segments:
        assert n_tokens <= cap, (seg_id, n_tokens)
        assert sum(count_many([text_of[t] for t in turn_ids])) <= cap, seg_id
    # every stored turn in exactly one segment
    in_segments = [t for _, ids, _ in segments for t in ids]
    assert sorted(in_segments) == sorted(text_of) and len(in_segments) == len(set(in_segments))
    # every input turn accounted for: as itself, or as parts that keep its id
    base = {re.sub(r"#p\d+$", "", tid) for tid in text_of}
    assert len(base) == len(turns)
    parts = [tid for tid in text_of if tid.startswith(stored[2][0])]
    assert len(parts) > 40 and parts[1] == f"{stored[2][0]}#p2"
    assert sum(len(text_of[p]) for p in parts) >= 0.95 * len(big)
    assert "turn_split" in kinds
