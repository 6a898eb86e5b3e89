"""The layer kinds a config declares, per layer, in the config's own words (no model built).

    layer_types = [full_attention, linear_attention, ...]   layer i: "layer_types=linear_attention"
    layers_block_type, block_types, attention_layers, ...    any per-layer list of strings, the same
    hybrid_override_pattern = "M-M*-"                        a per-layer pattern string: per character
    full_attn_idxs, hybrid_layer_ids, moe_layers, ...        layer indices: "full_attn_idxs" on those,
                                                             "not full_attn_idxs" on the others
    attn_layer_period + attn_layer_offset                    layer i % period == offset: "attn_layer"
    no_rope_layers = [1, 1, 1, 0, ...]                       per-layer 0/1 flags: "no_rope_layers=0"

The tiny copy must hold every declared kind at least once (`missing`), or that kind was not
checked: a pass would claim a layer that was never built. The words stay the config's own
because they differ between families ("linear_attention" is a gated delta net in qwen3.5, a
lightning attention in minimax and a Mamba-2 mixer in nemotron_h).
"""

from __future__ import annotations

import re

from packtool.arch.layers import shortest_prefix

_LIST_NAMES = re.compile(r"(layer_types|block_type|block_types|attention_layers|attn_layers)$")
_INDEX_NAMES = re.compile(r"(_idxs|_ids|_indices|_layers)$")
_NOT_KINDS = re.compile(
    r"(rope_theta|heads|sizes?|dims?|window|limit|source)"
)  # per-layer numbers, not kinds
# properties some configs derive from other fields (jamba's layers_block_type): read them too
_DERIVED = ("layer_types", "layers_block_type", "block_types")


def _depth(cfg) -> int | None:
    for name in ("num_hidden_layers", "n_layer", "num_layers", "n_layers"):
        v = _attr(cfg, name)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def _attr(cfg, name: str):
    if isinstance(cfg, dict):
        return cfg.get(name)
    try:
        return getattr(cfg, name, None)
    except Exception:  # a config refusing a global read of a per-layer field
        return None


def _fields(cfg) -> dict:
    if isinstance(cfg, dict):
        return dict(cfg)
    out = {k: v for k, v in vars(cfg).items() if not k.startswith("__")}
    for name in _DERIVED:
        if name not in out and (v := _attr(cfg, name)) is not None:
            out[name] = v
    return out


def per_layer(cfg) -> list[tuple[str, ...]]:
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


def kinds(cfg) -> set[str]:
    """Every kind the config declares, over all its layers."""
    return {k for layer in per_layer(cfg) for k in layer}


def prefix(cfg) -> int:
    """The number of leading layers that declare every kind of the whole stack at least once."""
    return shortest_prefix(per_layer(cfg))


def missing(full, small) -> list[str]:
    """The kinds `full` declares that `small` (its tiny copy) does not, in order."""
    have = kinds(small)
    return sorted(kinds(full) - have)


def word(kind: str) -> str:
    """A declared kind as the config says it: "layer_types=linear_attention" -> "linear_attention"
    (the field's name where the kind is a membership or a flag: "full_attn_idxs", "no_rope_layers=0")."""
    name, _, value = kind.partition("=")
    return kind if not value or value.isdigit() else value
