"""The training-FLOP model: a model's shape, a GPU's peak, FLOPs and GPU-hours. Pure Python.

    config.json                       ─ model_from_config ─┐
    --params N --layers L --hidden D  ─ model_from_params ─┼─▶ ModelSpec (P, layers, d_attn)
    neither                           ─ reference_model ───┘          │
                                                                      ▼
    StrategyResult (slots, attention_work) ──────────────────▶ training_flops ─▶ (linear, attention)
                                                                      │ FLOPs = linear + attention
                                                                      ▼
    --gpu NAME or TFLOP/s ─ gpu_spec ─▶ GpuSpec (peak), --mfu ──▶ gpu_hours ─▶ GPU-hours

Training FLOPs (PaLM, Chowdhery et al. 2022, appendix B, full-n² convention):

    FLOPs = 6·P·slots + 12·layers·d_attn·attention_work

6·P per position: forward 2·P (one multiply-add per matmul weight) plus backward 4·P; P counts
the weights that take part in matmuls (layers + LM head, not the embedding lookup). Per layer and
per (query, key) pair the forward pass does QKᵀ (2·d_attn) and A·V (2·d_attn) and the backward
twice that: 12·d_attn, where d_attn = heads · head_dim. Slots and attention work are defined in
packtool.stats.strategies (docs/ARCHITECTURE.md, "Semantics").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from packtool.errors import PacktoolError, UsageError

FLOPS_FORMULA = "FLOPs = 6*P*slots + 12*layers*d_attn*attention_work"
ATTENTION_CONVENTION = (
    "attention work counts full n^2 (query, key) pairs per sequence; a causal kernel that skips "
    "masked blocks does about half of every strategy's work, so ratios are unchanged"
)

# Dense (no 2:4 sparsity) BF16 tensor-core peak, TFLOP/s per GPU, from the vendor datasheets:
# H100 SXM 989.4 and H100 PCIe 756 (NVIDIA H100 datasheet; H200 is the same GH100 die, also 989),
# A100 312 (A100 datasheet), L40S 362.05 (L40S datasheet, 733 with sparsity), L4 121 and A10 125
# (datasheets list 242 / 250 with sparsity), B200 2250 (HGX B200: 4.5 PFLOP/s with sparsity),
# MI300X 1307.4 (AMD Instinct MI300X datasheet).
GPU_PEAK_TFLOPS: dict[str, float] = {
    "h100": 989.4,
    "h100-pcie": 756.0,
    "h200": 989.4,
    "a100": 312.0,
    "l40s": 362.05,
    "l4": 121.0,
    "a10": 125.0,
    "b200": 2250.0,
    "mi300x": 1307.4,
}


@dataclass(frozen=True)
class ModelSpec:
    """What the FLOP formula needs. `matmul_params` is P in 6·P (layers + LM head)."""

    name: str
    matmul_params: float
    layers: int
    d_attn: int  # heads · head_dim
    total_params: float | None = None
    source: str = "params"  # config | params | reference
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "source": self.source,
            "matmul_params": self.matmul_params,
            "total_params": self.total_params,
            "layers": self.layers,
            "d_attn": self.d_attn,
            "notes": list(self.notes),
        }


_NON_GATED = {
    "gpt2",
    "gpt_neox",
    "gptj",
    "opt",
    "bloom",
    "falcon",
    "phi",
    "gpt_bigcode",
    "starcoder2",
    "bert",
    "roberta",
    "gpt_neo",
    "codegen",
    "mpt",
}


def _first(cfg: dict, keys: tuple[str, ...], what: str, name: str, required: bool = True):
    for k in keys:
        if cfg.get(k) is not None:
            v = cfg[k]
            if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
                raise PacktoolError(f"{name}: {k}={v!r} is not a positive number")
            return v
    if required:
        raise PacktoolError(
            f"{name}: no {what} ({' or '.join(keys)}); pass --params N --layers L --hidden D instead"
        )
    return None


def model_from_config(cfg: dict, name: str = "config.json") -> ModelSpec:
    """Parameter count and attention width from a transformers config.json (dense or MoE).

    per layer: attention  d·h·hd (q) + 2·d·kv·hd (k, v) + h·hd·d (o)
               MLP        3·d·i gated (SwiGLU/GeGLU) or 2·d·i (GPT-2 style); MoE: × active experts
    P = layers · (attention + active MLP) + vocab · d (the LM head matmul, tied or not)
    Norms and biases are left out (< 0.1 %). A multimodal config's `text_config` is read when the
    top level has no num_hidden_layers.
    """
    if not isinstance(cfg, dict):
        raise PacktoolError(f"{name}: not a JSON object")
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {
            **cfg["text_config"],
            "model_type": cfg["text_config"].get("model_type", cfg.get("model_type")),
        }
    layers = int(_first(cfg, ("num_hidden_layers", "n_layer", "num_layers"), "layer count", name))
    d = int(_first(cfg, ("hidden_size", "n_embd", "d_model"), "hidden size", name))
    heads = int(_first(cfg, ("num_attention_heads", "n_head"), "attention head count", name))
    vocab = int(_first(cfg, ("vocab_size",), "vocab size", name))
    kv = int(_first(cfg, ("num_key_value_heads",), "", name, required=False) or heads)
    hd = int(cfg.get("head_dim") or d // heads)
    inter = _first(cfg, ("intermediate_size", "n_inner", "ffn_dim"), "", name, required=False)
    inter = int(inter or 4 * d)
    gated = str(cfg.get("model_type", "")).lower() not in _NON_GATED
    mats = 3 if gated else 2
    notes = []
    attn = d * heads * hd + 2 * d * kv * hd + heads * hd * d
    experts = _first(
        cfg, ("num_local_experts", "num_experts", "n_routed_experts"), "", name, required=False
    )
    if experts and cfg.get("num_experts_per_tok"):
        k = int(cfg["num_experts_per_tok"])
        moe_i = int(cfg.get("moe_intermediate_size") or inter)
        mlp_active = mats * d * moe_i * k
        mlp_total = mats * d * moe_i * int(experts)
        notes.append(
            f"MoE: {k} of {int(experts)} experts active per token; shared experts and dense layers ignored"
        )
    else:
        mlp_active = mlp_total = mats * d * inter
    tied = bool(cfg.get("tie_word_embeddings", False))
    matmul = layers * (attn + mlp_active) + vocab * d
    total = layers * (attn + mlp_total) + vocab * d * (1 if tied else 2)
    label = (
        cfg.get("_name_or_path")
        or (cfg.get("architectures") or [None])[0]
        or cfg.get("model_type")
        or name
    )
    return ModelSpec(
        str(label), float(matmul), layers, heads * hd, float(total), "config", tuple(notes)
    )


# Used for "relative FLOPs" when no model is given: the Llama-2-7B shape (6.74 B parameters).
REFERENCE_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "_name_or_path": "reference 7B (Llama-2-7B shape)",
}


def reference_model() -> ModelSpec:
    return dataclasses.replace(
        model_from_config(REFERENCE_CONFIG),
        source="reference",
        notes=("no --model/--params given: FLOPs use the reference 7B shape",),
    )


def model_from_params(params: float, layers: int, hidden: int) -> ModelSpec:
    if not (params > 0 and math.isfinite(params)):  # 1e400 reads as inf: nan× in every ratio
        raise UsageError(f"--params {params} must be a finite number > 0, e.g. --params 7e9")
    if layers < 1:
        raise UsageError(f"--layers {layers} must be >= 1")
    if hidden < 1:
        raise UsageError(f"--hidden {hidden} must be >= 1")
    return ModelSpec(
        f"{params / 1e9:.3g}B (--params)", float(params), layers, hidden, float(params), "params"
    )


@dataclass(frozen=True)
class GpuSpec:
    name: str
    peak_tflops: float  # dense bf16


def gpu_spec(value: str) -> GpuSpec:
    """A known name (see GPU_PEAK_TFLOPS) or a number of dense TFLOP/s, e.g. 600."""
    key = value.strip().lower()
    if key in GPU_PEAK_TFLOPS:
        return GpuSpec(key, GPU_PEAK_TFLOPS[key])
    try:
        tf = float(key)
    except ValueError:
        known = "|".join(GPU_PEAK_TFLOPS)
        raise UsageError(
            f"--gpu {value!r} is not a known GPU ({known}) or a peak in TFLOP/s, e.g. --gpu h100 or --gpu 600"
        ) from None
    if not (tf > 0 and math.isfinite(tf)):
        raise UsageError(f"--gpu {value!r}: a peak must be a positive number of TFLOP/s")
    return GpuSpec(f"custom {tf:g} TFLOP/s", tf)


def training_flops(model: ModelSpec, slots: int, attention_work: int) -> tuple[float, float]:
    """(linear FLOPs 6·P·slots, attention FLOPs 12·layers·d_attn·work)."""
    return 6.0 * model.matmul_params * slots, 12.0 * model.layers * model.d_attn * float(
        attention_work
    )


def gpu_hours(flops: float, gpu: GpuSpec, mfu: float) -> float:
    """Hours on one GPU: flops / (peak · MFU)."""
    return flops / (gpu.peak_tflops * 1e12 * mfu) / 3600.0


# --------------------------------------------------------------------------------------------
# in words (stats.advice and report/ print them)


def versus(flops: float, base: float, what: str) -> str:
    """'2.31× fewer training FLOPs than X', 'about the same training FLOPs as X' or '1.20× more
    training FLOPs than X': a ratio of positive numbers, never a negative saving."""
    if not (flops > 0 and base > 0):
        return f"about the same training FLOPs as {what}"
    r = base / flops
    if r >= 1.005:
        return f"{r:.2f}× fewer training FLOPs than {what}"
    if r > 1 / 1.005:
        return f"about the same training FLOPs as {what}"
    return f"{1 / r:.2f}× more training FLOPs than {what}"


def hours_versus(hours: float, base: float, what: str) -> str:
    """'saves 12.3 GPU-hours against X' or 'costs 4.1 GPU-minutes more than X' (never negative)."""
    d = base - hours
    if d >= 0:
        return f"saves {gpu_time(d, 'GPU-')} against {what}"
    return f"costs {gpu_time(-d, 'GPU-')} more than {what}"


def gpu_time(h: float, prefix: str = "") -> str:
    """Hours, readably: '1,234 h', '12.3 h', '42 min', '4.1 min', '8.4 s'; with prefix 'GPU-' the
    units are spelled out ('12.3 GPU-hours', '4.1 GPU-minutes', '8.4 GPU-seconds')."""
    units = ("hours", "minutes", "seconds") if prefix else ("h", "min", "s")
    h = abs(h)
    value, unit = (
        (h, units[0]) if h >= 1 else (h * 60, units[1]) if h * 60 >= 1 else (h * 3600, units[2])
    )
    if value >= 100 or (unit != units[0] and value >= 10):
        text = f"{value:,.0f}"
    elif unit == units[0]:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2g}" if value >= 0.01 else "0"
    return f"{text} {prefix}{unit}"
