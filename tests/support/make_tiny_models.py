# mypy: ignore-errors
# (runs only in the vLLM venv; torch/transformers/tokenizers are not installed in the project venv)
"""Build tiny random-weight models for the vLLM test server. Run with the vLLM venv's python:

    python make_tiny_models.py OUTDIR

Writes OUTDIR/tiny-llama (dense) and OUTDIR/tiny-mixtral (8 experts, top-2), each with a byte-level
BPE tokenizer trained here on synthetic text and a chat template. Nothing is downloaded.
Not type-checked with the project (it imports torch/transformers, which live only in the vLLM venv).
"""

import os
import random
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
    PreTrainedTokenizerFast,
)

TARGET_VOCAB = 2048
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}\n{{ message['content'] }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}"
)


def corpus(rng: random.Random, count: int) -> list[str]:
    base = [
        "a",
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "it",
        "for",
        "on",
        "with",
        "as",
        "at",
        "by",
        "from",
        "this",
        "that",
        "be",
        "or",
        "are",
        "was",
        "we",
        "you",
        "they",
        "server",
        "request",
        "token",
        "latency",
        "queue",
        "cache",
        "batch",
        "prompt",
        "decode",
        "prefill",
        "expert",
        "memory",
        "kernel",
        "hello",
        "world",
        "please",
        "explain",
        "write",
        "tell",
        "story",
        "code",
        "model",
        "metric",
        "tune",
        "vllm",
    ]
    parts = ["ba", "ko", "ri", "sen", "tu", "mo", "la", "vi", "dra", "pe", "qui", "zan", "el", "or", "th"]
    vocab = base + ["".join(rng.choice(parts) for _ in range(rng.randint(1, 4))) for _ in range(2500)]
    vocab += [str(n) for n in range(100)] + list(".,;:!?()[]{}-+=*/'\"#%&_")
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(4, 18))) + "." for _ in range(count)]


def build_tokenizer(rng: random.Random) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TARGET_VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(rng, 15000), trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save(model: torch.nn.Module, tokenizer: PreTrainedTokenizerFast, path: str) -> None:
    model = model.to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(path)


def main(out: str) -> None:
    rng = random.Random(1234)
    torch.manual_seed(1234)
    tokenizer = build_tokenizer(rng)
    shared = dict(
        vocab_size=len(tokenizer),  # equal to the tokenizer so every sampled id decodes
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
    )
    llama = LlamaConfig(**shared)
    llama.dtype = "bfloat16"
    save(LlamaForCausalLM(llama), tokenizer, os.path.join(out, "tiny-llama"))
    mixtral = MixtralConfig(**shared, num_local_experts=8, num_experts_per_tok=2)
    mixtral.dtype = "bfloat16"
    save(MixtralForCausalLM(mixtral), tokenizer, os.path.join(out, "tiny-mixtral"))


if __name__ == "__main__":
    main(sys.argv[1])
