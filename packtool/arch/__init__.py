"""The user's model architecture: what keeps its packed documents apart, and a tiny copy to prove it.

Packing is safe only if every token-mixing layer of the model restarts at each document. Attention
restarts from position_ids (transformers' sdpa/eager) or cu_seq_lens (flash-attention varlen);
recurrent layers (Mamba-2, gated delta nets, short convolutions) restart only where a kernel
package reads cu_seq_lens / seq_idx, and without one transformers either refuses the packed input
or, with position_ids alone, lets the state run on into the next document. `FAMILIES` is the one
table of what each architecture needs, measured with `packtool verify PACK --model` on
transformers 5.24 (CPU; the README shows it).

    config.py   MODEL (a folder or a cached hub id) -> config.json as a dict (json only, no torch)
    tiny.py     the config at tiny size, every layer kind kept (torch-free until a model is built);
                PRESETS, the architectures packtool builds itself
    layers.py   the kinds of each layer: declared by the config, and in a built model by module

Nothing here imports torch or transformers at module level: `family`, `inputs_for` and `warning`
read the config dict only, so inspect/profile/pack can warn before tokenizing.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from packtool.arch.layers import field as _get

# import name -> pip distribution
KERNELS = {
    "fla": "flash-linear-attention",
    "causal_conv1d": "causal-conv1d",
    "mamba_ssm": "mamba-ssm",
    "flash_attn": "flash-attn",
}


@dataclass(frozen=True)
class Family:
    name: str
    kinds: str  # the layer kinds, in words
    inputs: tuple[str, ...]  # what the batch must carry (PackedCollator.for_model gives these)
    kernels: tuple[str, ...]  # import names of the packages that keep documents apart
    model_types: tuple[str, ...]
    note: str  # what happens without them, as measured


def _unpackable(name: str, kinds: str, model_types: tuple[str, ...], what: str) -> Family:
    """A family whose documents no input keeps apart: transformers' `what` (as measured)."""
    note = f"no input keeps documents apart: transformers' {what}, so each document's state runs on into the next; it cannot be trained packed"
    return Family(name, kinds, (), (), model_types, note)


FAMILIES = (
    Family(
        "gated_deltanet",
        "gated delta net (linear attention) + full attention",
        ("position_ids", "cu_seq_lens", "seq_idx"),
        ("fla", "causal_conv1d"),
        ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next", "olmo_hybrid"),
        "position_ids alone: documents mix silently; cu_seq_lens / seq_idx without the kernels: "
        "transformers refuses",
    ),
    Family(
        "mamba2_hybrid",
        "Mamba-2 (+ attention, MoE)",
        ("position_ids", "cu_seq_lens", "seq_idx"),
        ("mamba_ssm", "causal_conv1d"),
        ("nemotron_h", "falcon_h1", "bamba", "granitemoehybrid", "zamba2", "jamba"),
        "position_ids and cu_seq_lens: documents mix silently; seq_idx without causal-conv1d: "
        "transformers refuses",
    ),
    Family(
        "short_conv",
        "short convolution + attention",
        ("position_ids", "cu_seq_lens", "seq_idx"),
        ("causal_conv1d",),
        ("lfm2", "lfm2_moe"),
        "position_ids and cu_seq_lens: documents mix silently in the conv layers; seq_idx without "
        "causal-conv1d: transformers refuses",
    ),
    _unpackable(
        "mamba2",
        "Mamba-2 only",
        ("mamba2",),
        "Mamba-2 model passes neither seq_idx nor cu_seq_lens to its scan or its convolution",
    ),
    _unpackable(
        "mamba",
        "Mamba (v1) only",
        ("mamba", "falcon_mamba"),
        "Mamba model (v1, also Falcon-Mamba) passes no document boundary to its selective scan or "
        "its convolution",
    ),
    _unpackable(
        "recurrent",
        "recurrent blocks (RWKV, RG-LRU, xLSTM), with or without attention",
        ("rwkv", "recurrent_gemma", "xlstm"),
        "recurrent blocks (RWKV time mixing, RecurrentGemma's RG-LRU and convolution, xLSTM) take "
        "no document boundary",
    ),
    Family(
        "gpt_oss",
        "attention with sinks (full + sliding) + MoE",
        ("position_ids", "cu_seq_lens"),
        ("flash_attn",),
        ("gpt_oss",),
        "sdpa/eager: documents mix (the model builds its mask without position_ids); keep them "
        "apart with a flash-attention varlen kernel fed cu_seq_lens (CUDA)",
    ),
)
ATTENTION = Family(
    "attention",
    "full / sliding-window attention",
    ("position_ids", "cu_seq_lens"),
    (),
    (),
    "sdpa/eager keep documents apart from position_ids; flash-attention with batches > 1 needs "
    "cu_seq_lens",
)
_RECURRENT_TYPES = {
    "linear_attention": "gated_deltanet",
    "mamba": "mamba2_hybrid",
    "conv": "short_conv",
}


def _model_type(config) -> str:
    return str(_get(config, "model_type") or "")


def _layer_types(config) -> list[str]:
    out = []
    for key in ("layer_types", "layers_block_type"):
        v = _get(config, key)
        if isinstance(v, list):
            out += [x for x in v if isinstance(x, str)]
    sub = _get(config, "text_config")
    if sub is not None:
        out += _layer_types(sub)
    return out


def family(config) -> Family:
    """The architecture family of a config (a config.json dict or a PretrainedConfig)."""
    types = {_model_type(config)}
    sub = _get(config, "text_config")
    if sub is not None:
        types.add(_model_type(sub))
    for f in FAMILIES:
        if types & set(f.model_types):
            return f
    by_name = {f.name: f for f in FAMILIES}
    for t in _layer_types(config):
        if t in _RECURRENT_TYPES:
            return by_name[_RECURRENT_TYPES[t]]
    return ATTENTION


def packable(config) -> bool:
    """Whether any batch keeps this architecture's packed documents apart."""
    return bool(family(config).inputs)


def inputs_for(config) -> tuple[str, ...]:
    """What a packed batch must carry for this architecture (PackedCollator.for_model)."""
    return family(config).inputs


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def missing_kernels(config) -> list[str]:
    """The pip names of the kernel packages this architecture needs that are not installed here."""
    return [KERNELS[k] for k in family(config).kernels if not installed(k)]


def warning(config, where: str) -> str | None:
    """One line, before any tokenizing, when packed training of this architecture is not safe on
    this machine (None when it is, as far as the table knows)."""
    f = family(config)
    name = _model_type(config) or "this model"
    if not f.inputs:
        return (
            f"{name} ({where}) is {f.kinds}: {f.note}; train it unpacked (pack with --max-docs 1). "
            "`packtool verify PACK --model ...` measures it"
        )
    missing = missing_kernels(config)
    if not missing:
        return None
    return (
        f"{name} ({where}) has {f.kinds} layers: packed documents stay apart only with "
        f"{' and '.join(missing)} installed (CUDA) and a batch carrying {', '.join(f.inputs)} "
        f"(PackedCollator.for_model); {f.note}. `packtool verify PACK --model ...` checks it"
    )
