"""The two tiny random-weight decoders the isolation check runs (transformers configs, no download).

llama   LlamaForCausalLM   RoPE (relative: barely moved by positions that keep counting),
                           grouped-query attention (HEADS query heads, KV_HEADS key/value heads)
gpt2    GPT2LMHeadModel    learned absolute position embeddings: any position error moves its logits

LAYERS x HIDDEN, vocab VOCAB (real token ids are taken modulo it), weights ~ N(0, INIT_STD)
seeded, no dropout, use_cache=False; on the backend's device, in its dtype, attention through
its attn_implementation (backends.py)
"""

from __future__ import annotations

from packtool.verify.backends import Backend

VOCAB = 1024  # tiny vocabulary: real ids are taken modulo this
HIDDEN = 64
LAYERS = 2  # attention layers per model: a varlen backend makes LAYERS varlen calls per forward
HEADS = 4
KV_HEADS = 2  # the Llama model uses grouped-query attention (GPT-2 has HEADS)
INIT_STD = 0.1  # larger than the usual 0.02 so attention is sharp and the control has power
MODELS = ("llama", "gpt2")


def build_model(kind: str, backend: Backend, pack_len: int, seed: int):
    """A tiny random-weight decoder from a transformers config (no download)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    common = {"attn_implementation": backend.attn_implementation, "use_cache": False}
    if kind == "llama":
        cfg = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=HIDDEN,
            intermediate_size=2 * HIDDEN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            max_position_embeddings=max(pack_len, 64),
            initializer_range=INIT_STD,
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=None,
            **common,
        )
        model = LlamaForCausalLM(cfg)
    elif kind == "gpt2":
        cfg = GPT2Config(
            vocab_size=VOCAB,
            n_embd=HIDDEN,
            n_layer=LAYERS,
            n_head=HEADS,
            n_positions=max(pack_len, 64),
            initializer_range=INIT_STD,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=None,
            eos_token_id=None,
            **common,
        )
        model = GPT2LMHeadModel(cfg)
    else:
        raise ValueError(kind)
    dtype = getattr(torch, backend.dtype)
    return model.to(device=backend.device, dtype=dtype).eval()


def model_desc(kind: str) -> str:
    pos = "RoPE" if kind == "llama" else "learned absolute positions"
    return (
        f"{kind} {LAYERS}x{HIDDEN}, {HEADS} heads, vocab {VOCAB}, {pos}, random init std {INIT_STD}"
    )


def tf_version() -> str:
    import transformers

    return transformers.__version__


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
