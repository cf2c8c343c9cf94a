"""Budgets and the segmenter's cap count with the served model's tokenizer (issue 14).

A tiny byte-level BPE tokenizer is trained here and saved as a transformers tokenizer folder
(no download): its vocabulary is a few dozen merges, so it cuts text far finer than o200k, and a
turn that fits the cap in o200k does not fit it in this tokenizer.
"""

from __future__ import annotations

import numpy as np
import pytest

from lychee_ray.config import load_config
from lychee_ray.ingest.reference_context import ReferenceContext
from lychee_ray.ingest.summary import IngestSummary
from lychee_ray.ingest.segment import SegmentStage, capped_exchange_tokens
from lychee_ray.io.exchanges import group_exchanges
from lychee_ray.schemas import Conversation, EncodedRecord
from lychee_ray.tables import Turn
from lychee_ray.tokens import (
    HFCounter,
    O200kCounter,
    TokenizerError,
    count_many,
    count_tokens,
    token_counter,
    tokenizer_name,
    truncate_to_tokens,
)

from .conftest import REPO

LOCAL = REPO / "configs" / "local.yaml"
CORPUS = [
    "The garden tomatoes grew tall while Wenna painted the fence blue.",
    "Orrin went to the pottery workshop on Tuesday and talked about Paris.",
    "Tessaly is planning a canoe trip with her nephews next summer.",
]
TEXT = "Wenna painted the fence blue while the tomatoes grew tall in the garden behind the old mill."


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer=trainer)
    out = tmp_path_factory.mktemp("tiny-tokenizer")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return token_counter(str(tiny_dir))


def turn(tid: str, speaker: str, text: str) -> Turn:
    return Turn(turn_id=tid, turn_idx=0, session_id="s1", speaker=speaker, role=speaker, text=text, timestamp=None)


# ------------------------------------------------------------------------------------ counters
def test_o200k_is_the_default_and_keeps_the_module_functions(tiny):
    for spec in (None, "o200k", "o200k_base"):
        c = token_counter(spec)
        assert isinstance(c, O200kCounter) and c.name == "o200k_base"
        assert c.count(TEXT) == count_tokens(TEXT) and c.count_many([TEXT, "a b"]) == count_many([TEXT, "a b"])
        assert c.truncate(TEXT, 5) == truncate_to_tokens(TEXT, 5)
    assert token_counter(None) is token_counter(None)  # cached per spec


def test_an_hf_tokenizer_counts_with_its_own_vocabulary(tiny_dir, tiny):
    from transformers import AutoTokenizer

    ref = AutoTokenizer.from_pretrained(str(tiny_dir), local_files_only=True)
    assert isinstance(tiny, HFCounter) and tiny.name == f"hf:{tiny_dir}" == tokenizer_name(str(tiny_dir))
    assert tiny.count(TEXT) == len(ref(TEXT, add_special_tokens=False)["input_ids"])  # no BOS/EOS counted
    assert tiny.count(TEXT) > 2 * count_tokens(TEXT)  # far finer than o200k: the counts differ
    assert tiny.count_many([TEXT, "", "Paris"]) == [tiny.count(TEXT), 0, tiny.count("Paris")]
    assert tiny.count_many([]) == []
    assert token_counter(str(tiny_dir)) is tiny


@pytest.mark.parametrize("cap", [0, 1, 7, 20, 40])
def test_truncate_respects_the_cap_and_keeps_a_prefix(tiny, cap):
    assert tiny.count(TEXT) > 40  # longer than every cap, so each cap cuts
    out = tiny.truncate(TEXT, cap)
    assert tiny.count(out) <= cap
    assert TEXT.startswith(out)
    assert cap == 0 or tiny.count(out) >= cap - 1  # cut at the cap, not far below it
    assert tiny.truncate(TEXT, 10_000) == TEXT


def test_an_unknown_spec_is_a_clear_error(tmp_path):
    for spec in (str(tmp_path / "no-such-model"), "nobody/no-such-model-xyz"):
        with pytest.raises(TokenizerError) as err:
            token_counter(spec)
        msg = str(err.value)
        assert repr(spec) in msg and "llm.tokenizer" in msg and "local directory" in msg and "o200k" in msg


# ------------------------------------------------------------------------------ config resolution
def test_config_resolves_the_tokenizer(tiny_dir, tmp_path):
    assert load_config(LOCAL).tokenizer_spec is None  # rules backend: o200k
    assert tokenizer_name(load_config(LOCAL).tokenizer_spec) == "o200k_base"
    # rules backend, model a tokenizer folder: still o200k unless llm.tokenizer says otherwise
    assert load_config(LOCAL, [f"llm.model={tiny_dir}"]).tokenizer_spec is None
    assert load_config(LOCAL, [f"llm.tokenizer={tiny_dir}"]).tokenizer_spec == str(tiny_dir)
    served = ["llm.backend=openai", "llm.base_url=http://127.0.0.1:9/v1"]
    cfg = load_config(LOCAL, [*served, f"llm.model={tiny_dir}"])
    assert cfg.tokenizer_spec == str(tiny_dir)
    assert token_counter(cfg.tokenizer_spec).name == f"hf:{tiny_dir}"
    # explicit o200k wins over the served model's folder
    for forced in ("o200k", "o200k_base"):
        assert load_config(LOCAL, [*served, f"llm.model={tiny_dir}", f"llm.tokenizer={forced}"]).tokenizer_spec is None
    # a served name that is no local folder nor cached model: o200k
    assert load_config(LOCAL, [*served, "llm.model=gpt-4.1-mini"]).tokenizer_spec is None
    empty = tmp_path / "weights-only"
    empty.mkdir()
    assert load_config(LOCAL, [*served, f"llm.model={empty}"]).tokenizer_spec is None
    # vLLM's --served-model-name: the tokenizer is serve.model's
    cfg = load_config(LOCAL, [*served, "llm.model=tiny", "serve.served_model_name=tiny", f"serve.model={tiny_dir}"])
    assert cfg.tokenizer_spec == str(tiny_dir)


# ------------------------------------------------------------------------------ the segment cap
def two_turn_conversation(tiny) -> Conversation:
    """Two turns of one pair that fit a 200-token cap together in o200k but not in `tiny`."""
    texts = [" ".join([CORPUS[i % 3]] * 4) for i in range(2)]
    o200k_counts, tiny_counts = count_many(texts), tiny.count_many(texts)
    assert sum(o200k_counts) <= 200 < sum(tiny_counts) and max(tiny_counts) <= 200, (o200k_counts, tiny_counts)
    conv = Conversation(conversation_id="c", source="chat_jsonl", source_file="x",
                        turns=[turn("a", "user", texts[0]), turn("b", "assistant", texts[1])])
    conv.exchanges = group_exchanges(conv.turns, "pair")
    assert conv.exchanges == [[0, 1]]
    conv.turn_embeddings = np.eye(2, 8, dtype=np.float32)
    return conv


def test_the_segment_cap_counts_with_the_configured_tokenizer(tiny_dir, tiny):
    base = ["segmenter.token_cap=200"]
    # o200k (rules backend): the pair fits the cap, one segment of both turns
    cfg = load_config(LOCAL, base)
    conv = two_turn_conversation(tiny)
    SegmentStage(cfg).process(conv)
    assert [s.turn_idxs for s in conv.segments] == [[0, 1]]
    assert conv.segments[0].n_tokens == sum(count_many([t.text for t in conv.turns]))
    # the served model's tokenizer: the same pair is over the cap, so it is cut into two units
    cfg = load_config(LOCAL, [*base, "llm.backend=openai", f"llm.model={tiny_dir}"])
    conv = two_turn_conversation(tiny)
    stage = SegmentStage(cfg)
    stage.setup()
    assert stage.counter is tiny
    stage.process(conv)
    assert [s.turn_idxs for s in conv.segments] == [[0], [1]]
    assert [s.n_tokens for s in conv.segments] == tiny.count_many([t.text for t in conv.turns])
    assert all(s.n_tokens <= 200 for s in conv.segments)


def test_capped_exchange_tokens_defaults_to_o200k(tiny):
    conv = two_turn_conversation(tiny)
    assert capped_exchange_tokens(conv, 200) == [sum(count_many([t.text for t in conv.turns]))]
    conv = two_turn_conversation(tiny)
    assert capped_exchange_tokens(conv, 200, tiny) == tiny.count_many([t.text for t in conv.turns])


def test_a_segment_stage_with_an_unloadable_tokenizer_fails_at_setup(tmp_path):
    stage = SegmentStage(load_config(LOCAL, [f"llm.tokenizer={tmp_path / 'missing'}"]))
    with pytest.raises(TokenizerError):
        stage.setup()


# --------------------------------------------------------------------------- the context budget
def test_the_context_budget_counts_with_the_given_counter(tiny):
    ctx = ReferenceContext(recent=[EncodedRecord(type="fact", text=f"{CORPUS[i % 3]} ({i})", entities=[], topics=[], time=None, source_turn_ids=["t"]) for i in range(8)])
    budget = 120
    o200k_text, tiny_text = ctx.render(budget), ctx.render(budget, tiny)
    assert o200k_text == ctx.render(budget, token_counter(None))
    # render budgets the record lines (a newline each), not its "recent records:" header
    assert sum(count_tokens(line) + 1 for line in o200k_text.split("\n")[1:]) <= budget
    assert sum(tiny.count(line) + 1 for line in tiny_text.split("\n")[1:]) <= budget
    assert tiny_text.count("\n- [") < o200k_text.count("\n- [")  # fewer records fit in the finer tokenizer
    assert o200k_text.endswith(tiny_text.split("\n", 1)[1])  # newest records kept in both


def test_the_encoder_resolves_its_counter_from_the_config(tiny_dir, tiny):
    from lychee_ray.ingest.encode import EncodeStage

    assert EncodeStage(load_config(LOCAL)).counter.name == "o200k_base"
    assert EncodeStage(load_config(LOCAL, [f"llm.tokenizer={tiny_dir}"])).counter is tiny


def test_the_ingest_summary_names_the_tokenizer():
    assert "tokenizer for the segment cap and context budget: o200k_base" in IngestSummary(out_dir="x").render()
    assert "hf:/m/tok" in IngestSummary(out_dir="x", tokenizer="hf:/m/tok").render()
