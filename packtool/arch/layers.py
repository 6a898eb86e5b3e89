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

What each layer is declared to be, in the config's own words (no model built): `declared`

    layer_types = [full_attention, linear_attention, ...]   layer i: "layer_types=linear_attention"
    layers_block_type, block_types, attention_layers, ...    any per-layer list of strings, the same
    hybrid_override_pattern = "M-M*-"                        a per-layer pattern string: per character
    full_attn_idxs, hybrid_layer_ids, moe_layers, ...        layer indices: "full_attn_idxs" on those,
                                                             "not full_attn_idxs" on the others
    attn_layer_period + attn_layer_offset                    layer i % period == offset: "attn_layer"
    no_rope_layers = [1, 1, 1, 0, ...]                       per-layer 0/1 flags: "no_rope_layers=0"

The tiny copy must hold every declared kind at least once (`not_built`), or that kind was not
checked: a pass would claim a layer that was never built. The words stay the config's own
because they differ between families ("linear_attention" is a gated delta net in qwen3.5, a
lightning attention in minimax and a Mamba-2 mixer in nemotron_h).
"""

from __future__ import annotations

import re

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


def field(cfg, name: str):
    """A config.json dict's key or a config's attribute; None when absent, or where the config
    refuses a global read (a per-layer attribute)."""
    if isinstance(cfg, dict):
        return cfg.get(name)
    try:
        return getattr(cfg, name, None)
    except Exception:
        return None


def layer_types(config) -> list:
    """The config's declared type per layer (layer_types, else layers_block_type), or []."""
    for name in ("layer_types", "layers_block_type", "block_types"):
        if isinstance(v := field(config, name), list) and v:
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


# --------------------------------------------------------------------------------------------
# the kinds a config declares per layer

_LIST_NAMES = re.compile(r"(layer_types|block_type|block_types|attention_layers|attn_layers)$")
_INDEX_NAMES = re.compile(r"(_idxs|_ids|_indices|_layers)$")
_NOT_KINDS = re.compile(r"(rope_theta|heads|sizes?|dims?|window|limit|source)")  # numbers
# properties some configs derive from other fields (jamba's layers_block_type): read them too
_DERIVED = ("layer_types", "layers_block_type", "block_types")


def _depth(cfg) -> int | None:
    for name in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        v = field(cfg, name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _fields(cfg) -> dict:
    if isinstance(cfg, dict):
        return dict(cfg)
    out = {k: v for k, v in vars(cfg).items() if not k.startswith("__")}
    for name in _DERIVED:
        if name not in out and (v := field(cfg, name)) is not None:
            out[name] = v
    return out


def declared(cfg) -> list[tuple[str, ...]]:
    """Per layer, the kinds the config declares for it ("layer_types=linear_attention", ...);
    an empty list when the config gives no depth."""
    n = _depth(cfg)
    if n is None:
        return []
    out: list[list[str]] = [[] for _ in range(n)]
    fields = _fields(cfg)
    for name, v in sorted(fields.items()):
        if name.startswith("mtp_") or _NOT_KINDS.search(name):
            continue
        if isinstance(v, list) and len(v) == n and v and all(isinstance(x, str) for x in v):
            if _LIST_NAMES.search(name) or "type" in name:
                for i, x in enumerate(v):
                    out[i].append(f"{name}={x}")
        elif isinstance(v, str) and "pattern" in name and len(v) == n:
            for i, ch in enumerate(v):
                out[i].append(f"{name}={ch}")
        elif isinstance(v, list) and v and all(isinstance(x, int) for x in v):
            flags = len(v) == n and set(v) <= {0, 1} and not re.search(r"(idxs|ids|indices)$", name)
            if flags:
                for i, x in enumerate(v):
                    out[i].append(f"{name}={x}")
            elif _INDEX_NAMES.search(name) and all(0 <= x < n for x in v) and len(set(v)) < n:
                for i in range(n):
                    out[i].append(name if i in v else f"not {name}")
        elif name.endswith("_period") and isinstance(v, int) and v > 1:
            offset = fields.get(name[: -len("_period")] + "_offset")
            if isinstance(offset, int) and 0 <= offset < v:
                base = name[: -len("_period")]
                for i in range(n):
                    out[i].append(base if i % v == offset else f"not {base}")
    return [tuple(x) for x in out]


def declared_kinds(cfg) -> set[str]:
    """Every kind the config declares, over all its layers."""
    return {k for layer in declared(cfg) for k in layer}


def declared_prefix(cfg) -> int:
    """The number of leading layers that declare every kind of the whole stack at least once."""
    return shortest_prefix(declared(cfg))


def not_built(full, small) -> list[str]:
    """The kinds `full` declares that `small` (its tiny copy) does not, in order."""
    return sorted(declared_kinds(full) - declared_kinds(small))


def word(kind: str) -> str:
    """A declared kind as the config says it: "layer_types=linear_attention" -> "linear_attention"
    (the field's name where the kind is a membership or a flag: "full_attn_idxs", "no_rope_layers=0")."""
    name, _, value = kind.partition("=")
    return kind if not value or value.isdigit() else value
