"""What each decoder layer of a built model is made of: the modules that mix tokens, by kind.

    model ─▶ decoder layers (the longest ModuleList: model.layers, backbone.layers, h, ...)
    layer i ─▶ its token-mixing children, each with a kind:

    kind                 module class names (transformers 5.x)           mixes tokens by
    full attention       *Attention (no window)                          softmax over the row
    sliding attention    *Attention with a window (layer_types / config)  softmax over the window
    linear attention     *GatedDeltaNet, *LinearAttention, *Lightning*    a recurrent state (chunked)
    mamba                *Mixer, *Mamba*Layer, *Mamba*Block               a selective scan + conv
    conv                 *ShortConv, *TokenConv, *CausalConv              a causal convolution
    recurrent            *RecurrentBlock, Rwkv*, *LSTM*Layer|Block        a recurrent state
    moe                  *Moe, *MoE, *SparseMoeBlock, *Experts            nothing: routing is per
                                                                         token (checked anyway)

Dense MLPs and norms act per token and are not tracked. Classes are matched by name because every
family defines its own (Qwen3_5GatedDeltaNet, NemotronHMamba2Mixer, Lfm2ShortConv, ...); where the
config declares the layer's type (layer_types, layers_block_type), an attention-named module of a
"linear_attention" layer is linear attention (MiniMaxLightningAttention). A name is only a label:
which layer leaks is measured per decoder layer by the probe (verify/forwards.py), never read from it.
"""

from __future__ import annotations

import re

KINDS = (
    "full attention",
    "sliding attention",
    "linear attention",
    "mamba",
    "conv",
    "recurrent",
    "moe",
)

_RULES = (  # the first rule whose pattern ends the class name wins
    ("linear attention", re.compile(r"(GatedDeltaNet|LinearAttention|DeltaNet|Lightning\w*)$")),
    (
        "recurrent",
        re.compile(r"(RecurrentBlock|^Rwkv\w*(Attention|FeedForward)|LSTM\w*(Layer|Block))$"),
    ),
    ("attention", re.compile(r"(Attention|Attn)$")),
    ("mamba", re.compile(r"(Mixer|Mamba\w*Layer|Mamba\w*Block)$")),
    ("conv", re.compile(r"(ShortConv|TokenConv|CausalConv)$")),
    ("moe", re.compile(r"(Moe|MoE|SparseMoeBlock|MoeBlock|MoeLayer|MoELayer|Experts)$")),
)


def decoder_layers(model):
    """The model's list of decoder layers (the longest torch ModuleList), or None."""
    import torch

    best = None
    for _, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and (best is None or len(module) > len(best)):
            best = module
    return best


def layer_types(config) -> list:
    """The config's declared type per layer (layer_types, else layers_block_type), or []."""
    for name in ("layer_types", "layers_block_type", "block_types"):
        try:
            v = getattr(config, name, None)
        except Exception:
            v = None
        if isinstance(v, list) and v:
            return v
    return []


def _kind_of(module, layer_type: str | None) -> str | None:
    name = type(module).__name__
    for kind, pattern in _RULES:
        if pattern.search(name):
            if kind != "attention":
                return kind
            if (layer_type or "").startswith("linear"):
                return "linear attention"
            window = getattr(module, "sliding_window", None)
            sliding = (layer_type or "").startswith(("sliding", "chunked")) or (
                isinstance(window, int) and window > 0
            )
            return "sliding attention" if sliding else "full attention"
    return None


def tracked(model, config) -> list[tuple[int, str, str, object]]:
    """(layer index, module path, kind, module) for every token-mixing or MoE child of every
    decoder layer, in order; a layer's child inside a tracked child is not listed again."""
    layers = decoder_layers(model)
    if layers is None:
        return []
    types = layer_types(config)
    out = []
    for i, layer in enumerate(layers):
        layer_type = types[i] if i < len(types) and isinstance(types[i], str) else None
        taken: list[str] = []
        for path, module in layer.named_modules():
            if not path or any(path.startswith(t + ".") for t in taken):
                continue
            kind = _kind_of(module, layer_type)
            if kind is not None:
                taken.append(path)
                out.append((i, path, kind, module))
    return out


def layer_kinds(model, config) -> list[tuple[str, ...]]:
    """Per decoder layer, the kinds of its tracked modules (e.g. ('mamba',), ('full attention', 'moe'))."""
    layers = decoder_layers(model)
    kinds: list[list[str]] = [[] for _ in range(len(layers) if layers is not None else 0)]
    for i, _, kind, _ in tracked(model, config):
        if kind not in kinds[i]:
            kinds[i].append(kind)
    return [tuple(k) for k in kinds]


def shortest_prefix(kinds: list[tuple[str, ...]]) -> int:
    """The number of leading layers that hold every kind of the whole stack at least once."""
    wanted = {k for ks in kinds for k in ks}
    seen: set[str] = set()
    for i, ks in enumerate(kinds):
        seen.update(ks)
        if seen >= wanted:
            return i + 1
    return len(kinds)
