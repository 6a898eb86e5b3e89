"""packtool.stats.flops: parameter counts from config.json by hand, FLOPs and GPU-hours."""

from __future__ import annotations

import pytest

from packtool.errors import PacktoolError, UsageError
from packtool.stats import flops

LLAMA2_7B = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
}


def test_model_from_llama_config():
    m = flops.model_from_config(LLAMA2_7B)
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008
    assert (
        m.total_params == 32 * per_layer + 2 * 32000 * 4096 == 6_738_149_376
    )  # HF: 6,738,415,616 with norms
    assert (
        m.matmul_params == 32 * per_layer + 32000 * 4096
    )  # LM head counted once, embedding lookup not
    assert (m.layers, m.d_attn) == (32, 4096)


def test_model_gqa_tied_and_moe():
    gqa = dict(LLAMA2_7B, num_key_value_heads=8, tie_word_embeddings=True, head_dim=128)
    m = flops.model_from_config(gqa)
    attn = 4096 * 4096 * 2 + 2 * 4096 * 8 * 128
    assert m.total_params == 32 * (attn + 3 * 4096 * 11008) + 32000 * 4096
    moe = dict(LLAMA2_7B, num_local_experts=8, num_experts_per_tok=2)
    mm = flops.model_from_config(moe)
    assert mm.matmul_params == 32 * (4 * 4096**2 + 2 * 3 * 4096 * 11008) + 32000 * 4096
    assert any("MoE" in n for n in mm.notes)
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
    g = flops.model_from_config(gpt2)
    assert g.matmul_params == 12 * (4 * 768**2 + 2 * 768 * 3072) + 50257 * 768


def test_model_config_errors():
    with pytest.raises(PacktoolError, match="no hidden size"):
        flops.model_from_config(
            {"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10}
        )
    with pytest.raises(PacktoolError, match="num_hidden_layers=-1"):
        flops.model_from_config(dict(LLAMA2_7B, num_hidden_layers=-1))
    with pytest.raises(UsageError, match="--layers 0"):
        flops.model_from_params(7e9, 0, 4096)


def test_training_flops_by_hand():
    m = flops.model_from_params(1e9, 2, 8)
    lin, att = flops.training_flops(m, slots=10, attention_work=30)
    assert lin == 6 * 1e9 * 10
    assert att == 12 * 2 * 8 * 30


def test_gpu_hours_and_specs():
    h100 = flops.gpu_spec("H100")
    assert h100.peak_tflops == 989.4
    assert flops.gpu_hours(989.4e12 * 0.4 * 3600, h100, 0.4) == pytest.approx(1.0)
    assert flops.gpu_spec("600").peak_tflops == 600
    with pytest.raises(UsageError, match="not a known GPU"):
        flops.gpu_spec("h1000")
    with pytest.raises(UsageError, match="positive"):
        flops.gpu_spec("-5")
