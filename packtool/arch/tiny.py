"""A tiny random-weight copy of the user's architecture: the same code path, every layer kind once.

    config.json ──AutoConfig──▶ full config ──widths──▶ tiny config ──from_config──▶ model (random)

`widths` keeps what decides how documents can leak (layer kinds and their order, attention
variants: GQA ratio, qk-norm, sinks, RoPE type and scaling, M-RoPE sections, sliding windows,
chunked scans) and makes every width small (the constants below; key/value heads 1 | 2 | 4 of 4
as the original is MQA | GQA | MHA; a sliding window below the shortest sampled document).

Depth: the full-depth tiny model is built once on the meta device (no memory), each decoder layer
classified by its modules (layers.layer_kinds), and the depth `cut` to the shortest prefix that
still holds every kind (gemma3: 5 sliding + 1 full -> 6 layers; qwen3.5: 3 linear + 1 full -> 4).
Per-layer lists of the config (layer_types, layers_block_type, a hybrid pattern string) are cut
with it; lists of layer indices keep those below the cut.

PRESETS is the one table of the architectures packtool builds itself: model_type -> what its
default config (`AutoConfig.for_model`) is given (verify's isolation check, the tests, benchmarks).
"""

from __future__ import annotations

import copy
import re

from packtool.arch.layers import field as _get

HIDDEN = 64
HEADS = 4
HEAD_DIM = 16
MLP = 128
EXPERT_MLP = 32
EXPERTS = 4
VOCAB = 512
SSM_HEAD_DIM = 16
SSM_STATE = 16
CHUNK = 16  # Mamba-2 scan chunks: documents cross their boundaries, the scan stays cheap
INIT_STD = 0.1  # sharper than the usual 0.02, so a leak moves the logits visibly

# config attribute -> small value (only attributes the config already has are set)
_WIDTHS = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd"), HIDDEN),
    **dict.fromkeys(("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner"), MLP),
    **dict.fromkeys(
        (
            "moe_intermediate_size",
            "shared_expert_intermediate_size",
            "moe_shared_expert_intermediate_size",
            "expert_intermediate_size",
        ),
        EXPERT_MLP,
    ),
    "vocab_size": VOCAB,
    "head_dim": HEAD_DIM,
    "kv_lora_rank": 16,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": HEAD_DIM,
    # gated delta net (qwen3.5 / qwen3-next / olmo-hybrid linear attention)
    **dict.fromkeys(("linear_key_head_dim", "linear_value_head_dim"), HEAD_DIM),
    # Mamba-2 (mamba2, nemotron_h, falcon_h1, bamba, granitemoehybrid, zamba2)
    **dict.fromkeys(("state_size", "ssm_state_size", "mamba_d_state"), SSM_STATE),
    **dict.fromkeys(("mamba_head_dim", "mamba_d_head"), SSM_HEAD_DIM),
    **dict.fromkeys(("chunk_size", "mamba_chunk_size"), CHUNK),
    "time_step_rank": 8,
    "initializer_range": INIT_STD,
    # gemma 3n / 4: per-layer input embeddings, a global head size beside the sliding one
    "hidden_size_per_layer_input": 16,
    "vocab_size_per_layer_input": VOCAB,
    "global_head_dim": 2 * HEAD_DIM,
}
# model_type -> overrides of its default config (see the module docstring)
PRESETS = {
    "llama": {"num_key_value_heads": 8},  # grouped-query, as Llama 3 (tiny: 4 query, 2 kv heads)
    "gpt2": {},
    "qwen3": {},
    "gemma3": {},
    "qwen3_5": {},
    "qwen3_5_text": {},
    "qwen3_next": {},
    "nemotron_h": {},
    "falcon_h1": {},
    "lfm2": {"layer_types": ["conv", "conv", "full_attention"], "num_hidden_layers": 3},  # conv
    "gpt_oss": {},
    "mamba2": {},
    "minimax": {},
}
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_TOPK = ("num_experts_per_tok", "moe_topk", "top_k")
_ONE = ("n_shared_experts", "num_shared_experts", "n_group", "topk_group")  # shared experts, groups
_LAYER_COUNTS = ("num_hidden_layers", "n_layer", "num_layers")
_DROPOUTS = re.compile(r".*(dropout|pdrop)$")


def text_config(config):
    """The language model's config of a multimodal config (qwen3.5, gemma3: text_config), else itself."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    sub = getattr(config, "text_config", None)
    if sub is not None and getattr(sub, "model_type", None) in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return sub
    return config


def _ints(cfg, names) -> list[tuple[str, int]]:
    """(name, value) of each of `names` that the config holds as an int."""
    return [(name, v) for name in names if isinstance(v := _get(cfg, name), int)]


def _set(cfg, name: str, value) -> None:
    if _get(cfg, name) is not None:
        try:
            setattr(cfg, name, value)
        except (AttributeError, TypeError):  # a derived property (falcon's head_dim): left as is
            pass


def _heads(cfg) -> None:
    """Query heads 4, key/value heads keeping the original's kind of sharing (MQA, GQA, MHA)."""
    for q_name, kv_name in (("num_attention_heads", "num_key_value_heads"), ("n_head", None)):
        q = _get(cfg, q_name)
        if not isinstance(q, int):
            continue
        setattr(cfg, q_name, HEADS)
        kv = _get(cfg, kv_name) if kv_name else None
        if isinstance(kv, int):
            setattr(cfg, kv_name, 1 if kv == 1 else HEADS if kv >= q else 2)
    # gated delta net: key heads 2, value heads keep their multiple of the key heads
    k, v = _get(cfg, "linear_num_key_heads"), _get(cfg, "linear_num_value_heads")
    if isinstance(k, int) and isinstance(v, int) and k > 0:
        cfg.linear_num_key_heads = 2
        cfg.linear_num_value_heads = 2 * max(1, v // k)
    # Mamba-2 heads: (expand * hidden) / head_dim, groups dividing the heads
    expand = _get(cfg, "expand") or _get(cfg, "mamba_expand") or 2
    ssm_heads = int(expand * HIDDEN) // SSM_HEAD_DIM
    for name in ("mamba_num_heads", "mamba_n_heads"):
        _set(cfg, name, ssm_heads)
    if getattr(cfg, "model_type", "") == "mamba2":
        cfg.num_heads = ssm_heads
        cfg.head_dim = SSM_HEAD_DIM
    _set(cfg, "mamba_d_ssm", ssm_heads * SSM_HEAD_DIM)
    for name, g in _ints(cfg, ("n_groups", "mamba_n_groups")):
        setattr(cfg, name, 1 if g == 1 else 2)


def _experts(cfg) -> None:
    """EXPERTS experts, top-2 routing; one shared expert and one routing group where more."""
    for name, v in _ints(cfg, (*_EXPERT_COUNTS, *_TOPK, *_ONE)):
        if v > (1 if name in _ONE else 0):
            setattr(
                cfg, name, EXPERTS if name in _EXPERT_COUNTS else min(v, 2) if name in _TOPK else 1
            )


def _rope(cfg) -> None:
    """M-RoPE sections scaled to the tiny rotary width (they must sum to rotary_dim / 2)."""
    partial = _get(cfg, "partial_rotary_factor")
    params = _get(cfg, "rope_parameters") or {}
    if isinstance(params, dict):
        partial = params.get("partial_rotary_factor", partial)
    if partial is not None and partial < 1 and _get(cfg, "head_dim") is not None:
        cfg.head_dim = 2 * HEAD_DIM
    head_dim = _get(cfg, "head_dim") or HIDDEN // HEADS
    half = int(head_dim * (partial or 1.0)) // 2
    for holder in (params, _get(cfg, "rope_scaling") or {}):
        if isinstance(holder, dict) and isinstance(holder.get("mrope_section"), list):
            sec = holder["mrope_section"]
            total = sum(sec)
            new = [max(1, round(s * half / total)) for s in sec]
            new[0] += half - sum(new)
            holder["mrope_section"] = new


def widths(config, *, pack_len: int, window: int):
    """The config at tiny width (full depth): see the module docstring."""
    cfg = copy.deepcopy(text_config(config))
    for name, value in _WIDTHS.items():
        _set(cfg, name, value)
    _heads(cfg)
    _experts(cfg)
    _rope(cfg)
    if isinstance(_get(cfg, "qk_rope_head_dim"), int) and _get(cfg, "head_dim") is not None:
        cfg.head_dim = cfg.qk_rope_head_dim  # multi-head latent attention: RoPE on that part only
    rotary = _get(cfg, "rotary_dim")  # codegen, gpt-j: RoPE on the first rotary_dim
    if isinstance(rotary, int) and rotary > (_get(cfg, "head_dim") or HIDDEN // HEADS):
        cfg.rotary_dim = (_get(cfg, "head_dim") or HIDDEN // HEADS) // 2
    for name, w in _ints(cfg, ("sliding_window", "attention_window_size", "attention_chunk_size")):
        if w > 0:
            setattr(cfg, name, min(w, window))
    per_layer = _get(cfg, "per_layer_config")  # gemma 4: {layer: {"head_dim": ...}}
    if isinstance(per_layer, dict):
        for layer in per_layer.values():
            if isinstance(layer, dict) and "head_dim" in layer:
                layer["head_dim"] = 2 * HEAD_DIM
    for name in list(vars(cfg)):
        if _DROPOUTS.match(name) and isinstance(getattr(cfg, name), float):
            setattr(cfg, name, 0.0)
    for name, v in _ints(cfg, ("max_position_embeddings", "n_positions")):
        setattr(cfg, name, max(v, pack_len))
    for name, v in _ints(cfg, ("bos_token_id", "eos_token_id", "pad_token_id")):
        if v >= VOCAB:
            setattr(cfg, name, VOCAB - 1)
    cfg.use_cache = False
    return cfg


def cut(cfg, layers: int):
    """The config with its first `layers` layers (per-layer lists and patterns cut alike)."""
    full = next((v for _, v in _ints(cfg, _LAYER_COUNTS) if v > 0), None)
    cfg = copy.deepcopy(cfg)
    if full is None or layers >= full:
        return cfg
    for name, _ in _ints(cfg, _LAYER_COUNTS):
        setattr(cfg, name, layers)
    for name, v in list(vars(cfg).items()):
        per_layer = (isinstance(v, list) and all(isinstance(x, str) for x in v)) or (
            isinstance(v, str) and "pattern" in name
        )
        flags = (  # per-layer 0/1 flags (no_rope_layers): cut like a per-layer list
            isinstance(v, list)
            and len(v) == full
            and v
            and all(isinstance(x, int) for x in v)
            and set(v) <= {0, 1}
            and not name.endswith(("_idxs", "_ids", "_indices"))
        )
        if (per_layer or flags) and len(v) == full:
            setattr(cfg, name, v[:layers])
        elif (
            isinstance(v, list)
            and v
            and all(isinstance(i, int) for i in v)
            and name.endswith(("_idxs", "_layers", "_indices"))
        ):
            setattr(cfg, name, [i for i in v if i < layers])
    return cfg


def full(model_type: str):
    """The preset's full-size config (transformers' default for model_type, PRESETS' overrides)."""
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **PRESETS[model_type])


def preset(model_type: str, *, pack_len: int, layers: int):
    """A preset at tiny width, its first `layers` layers (the isolation check's models)."""
    return cut(widths(full(model_type), pack_len=pack_len, window=pack_len), layers)


def build(cfg, attn: str, device, dtype: str, seed: int):
    """The model of a tiny config: seeded random weights, attention `attn`, on `device` in `dtype`."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
    return model.to(device=device, dtype=getattr(torch, dtype)).eval()
