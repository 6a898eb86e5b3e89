"""Length statistics, batching-strategy simulation and the attention/FLOP model. Pure numpy.

Every strategy is reduced to three integers over the whole epoch, computed on the *effective*
lengths e_i = min(n_i, L) (over-length examples are truncated to --len for every strategy):

    tokens          Σ e_i                        real tokens, the same for all strategies
    slots           token positions computed     real + pad; what the linear layers pay for
    attention_work  Σ (query, key) pairs         what the attention kernel pays for

Attention work counts the *full* score matrix: a sequence of n positions costs n² pairs, a batch
padded to m with b rows costs b·m², a packed row of L with a dense mask costs L², a document under
a varlen kernel costs n² (DESIGN §5). A causal kernel that skips masked blocks does about half of
every one of these, so the ratios between strategies do not change.

    batch of 2 padded to 4      packed row, L = 8, varlen      packed row, L = 8, dense mask
    a a a .  ← 2 pads           a a a b b b b .                a a a b b b b .
    b b b b                     work 3² + 4² = 25              work 8² = 64
    slots 8, work 2·4² = 32     slots 8                        slots 8

Training FLOPs (PaLM, Chowdhery et al. 2022, appendix B, full-n² convention):

    FLOPs = 6·P·slots + 12·layers·d_attn·attention_work

6·P per position: forward 2·P (one multiply-add per matmul weight) plus backward 4·P; P counts
the weights that take part in matmuls (layers + LM head, not the embedding lookup). Per layer and
per (query, key) pair the forward pass does QKᵀ (2·d_attn) and A·V (2·d_attn) and the backward
twice that: 12·d_attn, where d_attn = heads · head_dim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from packtool.errors import PacktoolError, UsageError

FLOPS_FORMULA = "FLOPs = 6*P*slots + 12*layers*d_attn*attention_work"
ATTENTION_CONVENTION = (
    "attention work counts full n^2 (query, key) pairs per sequence; a causal kernel that skips "
    "masked blocks does about half of every strategy's work, so ratios are unchanged"
)
OVERFLOW_POLICY = "examples longer than --len are truncated to --len for every strategy"

PERCENTILES = (50, 90, 95, 99)

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

STRATEGY_LABELS: dict[str, str] = {
    "pad_to_len": "pad to --len",
    "random_padded": "random batches, padded",
    "length_grouped": "length-grouped batches",
    "padding_free": "padding-free (varlen)",
    "packed_bfd_varlen": "packed BFD + varlen",
    "packed_bfd_dense": "packed BFD + dense mask",
    "packed_ffd_varlen": "packed FFD + varlen",
    "packed_ffd_dense": "packed FFD + dense mask",
}


# --------------------------------------------------------------------------------------------
# distributions and histograms


def describe(values: np.ndarray) -> dict:
    """count, sum, min, mean, median, p90, p95, p99, max (numpy's linear percentiles)."""
    v = np.asarray(values)
    if v.size == 0:
        return {"count": 0, "sum": 0, "min": None, "mean": None, "median": None,
                "p90": None, "p95": None, "p99": None, "max": None}
    p50, p90, p95, p99 = (float(x) for x in np.percentile(v, PERCENTILES))
    return {
        "count": int(v.size),
        "sum": int(v.sum(dtype=np.int64)),
        "min": int(v.min()),
        "mean": float(v.mean(dtype=np.float64)),
        "median": p50,
        "p90": p90,
        "p95": p95,
        "p99": p99,
        "max": int(v.max()),
    }


def nice_step(span: float, bins: int) -> int:
    """The smallest of 1, 2, 2.5, 5 × 10^k that covers `span` in at most `bins` bins."""
    raw = max(span / max(bins, 1), 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if step >= raw and float(step).is_integer():
            return int(step)
    return int(10 * mag)


@dataclass(frozen=True)
class Histogram:
    """counts[i] examples with edges[i] <= length < edges[i+1]; the last bin also holds
    everything >= edges[-2] when `overflow` (a long tail folded into one bar)."""

    edges: np.ndarray  # int64[k+1]
    counts: np.ndarray  # int64[k]
    overflow: bool

    def to_json(self) -> dict:
        return {"edges": self.edges.tolist(), "counts": self.counts.tolist(), "overflow": self.overflow}


def length_histogram(lengths: np.ndarray, pack_len: int, bins: int = 24, p99: float | None = None) -> Histogram:
    """About `bins` linear bins of a "nice" width from the shortest to the longest length. With a
    long tail (max > 1.5 × top, top = p99, or --len when --len <= 2·p99) the bins stop at top and
    one last bin holds the tail. O(n) via bincount."""
    v = np.asarray(lengths, dtype=np.int64)
    if v.size == 0:
        return Histogram(np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int64), False)
    vmin, vmax = int(v.min()), int(v.max())
    p99 = float(np.percentile(v, 99)) if p99 is None else p99
    top = int(p99)
    if pack_len < vmax and pack_len <= 2 * p99:  # show where --len cuts when it is near the bulk
        top = max(top, pack_len)
    overflow = vmax > 1.5 * top
    if not overflow:
        top = vmax
    step = nice_step(top - vmin + 1, bins - 1 if overflow else bins)
    lo = (vmin // step) * step
    nb = (top - lo) // step + 1  # regular bins cover [lo, lo + nb·step)
    idx = (v - lo) // step
    if overflow:
        idx = np.minimum(idx, nb)
    counts = np.bincount(idx, minlength=nb + overflow).astype(np.int64)
    edges = lo + np.arange(counts.size + 1, dtype=np.int64) * step
    if overflow:
        edges[-1] = vmax + 1
    return Histogram(edges, counts, bool(overflow))


# --------------------------------------------------------------------------------------------
# strategies


@dataclass(frozen=True)
class StrategyResult:
    """One batching strategy over the whole epoch (see the module docstring for the units)."""

    name: str
    rows: int  # sequences fed to the model: padded rows, varlen sequences or packed rows
    steps: int  # micro-batches of --batch-size rows
    tokens: int  # Σ e_i
    slots: int  # positions computed, pad included
    attention_work: int  # Σ pairs, full-n² convention
    own_work: int  # Σ e_i², the work of every example attended alone
    docs_per_row: float | None = None  # packed strategies only
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return STRATEGY_LABELS.get(self.name, self.name)

    @property
    def occupancy(self) -> float:
        return self.tokens / self.slots if self.slots else 1.0

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.occupancy

    @property
    def attention_waste(self) -> float:
        return self.attention_work / self.own_work if self.own_work else 1.0


def truncate(lengths: np.ndarray, pack_len: int) -> tuple[np.ndarray, int, int]:
    """(effective int64 lengths min(n, L), examples over L, tokens truncation cuts)."""
    n = np.asarray(lengths, dtype=np.int64)
    over = n > pack_len
    cut = int((n[over] - pack_len).sum())
    return np.minimum(n, pack_len), int(over.sum()), cut


def _total(e: np.ndarray) -> int:
    return int(e.sum(dtype=np.int64))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _sq_sum(e: np.ndarray) -> int:
    e = e.astype(np.int64, copy=False)
    return int((e * e).sum())


def pad_to_len(e: np.ndarray, pack_len: int, batch_size: int, own_work: int) -> StrategyResult:
    n = int(e.size)
    return StrategyResult(
        "pad_to_len", rows=n, steps=_ceil_div(n, batch_size), tokens=_total(e),
        slots=n * pack_len, attention_work=n * pack_len * pack_len, own_work=own_work,
    )


def padded_batches(x: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut `x` (lengths in batch order) into consecutive batches of `batch_size` (the last may be
    short). Returns per batch (rows, longest, Σ e²) as int64, via ufunc.reduceat (no padding copy)."""
    n = x.size
    starts = np.arange(0, n, batch_size)
    rows = np.diff(np.append(starts, n))
    longest = np.maximum.reduceat(x, starts).astype(np.int64)
    sq = x.astype(np.int64)
    np.multiply(sq, sq, out=sq)
    return rows, longest, np.add.reduceat(sq, starts)


def random_padded(e: np.ndarray, batch_size: int, perm: np.ndarray, own_work: int) -> StrategyResult:
    """Shuffle, cut into batches of B, pad each batch to its longest member: slots b·m, work b·m².

    extra["batch_waste"] holds each batch's own waste ratio b·m² / Σ e² (for the plot)."""
    rows, m, sq = padded_batches(e[perm], batch_size)
    return StrategyResult(
        "random_padded", rows=int(e.size), steps=int(rows.size), tokens=_total(e),
        slots=int((rows * m).sum()), attention_work=int((rows * m * m).sum()), own_work=own_work,
        extra={"batch_waste": (rows * m * m) / np.maximum(sq, 1)},
    )


def length_grouped(
    e: np.ndarray, batch_size: int, window: int, perm: np.ndarray, own_work: int
) -> StrategyResult:
    """Shuffle, take windows of `window` consecutive examples, sort each window by length
    (longest first), cut each window into batches of B (a window's last batch may be short;
    batches never cross windows), pad each batch to its longest member.

        shuffled  5 1 4 2 | 3 6        window 4, B 2
        sorted    5 4 2 1 | 6 3        batches [5 4] [2 1] [6 3]
    """
    x = e[perm]
    n = x.size
    window = max(1, min(window, n))  # one window holding everything is the same as a larger one
    nw = _ceil_div(n, window)
    grid = np.zeros(nw * window, dtype=np.int32)  # e <= --len < 2**31
    grid[:n] = x
    grid = grid.reshape(nw, window)
    grid.sort(axis=1)  # ascending, in place; zeros (the last window's padding) come first
    grid = grid[:, ::-1]  # longest first, zeros last
    per_window = _ceil_div(window, batch_size) * batch_size
    if per_window != window:
        grid = np.pad(grid, ((0, 0), (0, per_window - window)))
    batches = np.ascontiguousarray(grid).reshape(-1, batch_size).astype(np.int64)
    m = batches[:, 0]
    rows = (batches > 0).sum(axis=1)
    keep = rows > 0
    m, rows = m[keep], rows[keep]
    return StrategyResult(
        "length_grouped", rows=int(n), steps=int(rows.size), tokens=_total(e),
        slots=int((rows * m).sum()), attention_work=int((rows * m * m).sum()), own_work=own_work,
    )


def padding_free(e: np.ndarray, batch_size: int, own_work: int) -> StrategyResult:
    """Batches of B examples concatenated without pad (TRL padding_free, DataCollatorWithFlattening)."""
    n = int(e.size)
    tokens = _total(e)
    return StrategyResult(
        "padding_free", rows=n, steps=_ceil_div(n, batch_size), tokens=tokens, slots=tokens,
        attention_work=own_work, own_work=own_work,
    )


def packed(
    e: np.ndarray, pack_len: int, batch_size: int, algo: str, own_work: int, seed: int = 0
) -> tuple[StrategyResult, StrategyResult]:
    """Rows of --len planned by the same packer as `packtool pack`; (varlen, dense-mask) results.

    varlen: each document attends only to itself (cu_seqlens over the documents; the pad tail
    is not attended), work Σ e². dense: the whole row is one L×L score matrix, work R·L²."""
    from packtool.plan import plan_packs

    n = int(e.size)
    if n == 0:
        num_rows = 0
    else:
        plan = plan_packs(e, pack_len, strategy=algo, seed=seed)
        num_rows = int(plan.num_rows)
    tokens = _total(e)
    common = dict(
        rows=num_rows, steps=_ceil_div(num_rows, batch_size), tokens=tokens,
        slots=num_rows * pack_len, own_work=own_work,
        docs_per_row=(n / num_rows) if num_rows else None,
    )
    return (
        StrategyResult(f"packed_{algo}_varlen", attention_work=own_work, **common),
        StrategyResult(f"packed_{algo}_dense", attention_work=num_rows * pack_len * pack_len, **common),
    )


def simulate(
    lengths: np.ndarray,
    pack_len: int,
    batch_size: int,
    group_window: int,
    seed: int = 0,
    on_stage=None,
) -> dict[str, StrategyResult]:
    """All strategies on `lengths` (truncated to `pack_len` first). Random and length-grouped
    batching share one seeded shuffle, so they differ only by the sorting inside windows."""
    say = on_stage or (lambda _s: None)
    e, _, _ = truncate(lengths, pack_len)
    own = _sq_sum(e)
    e = e.astype(np.int32)  # <= --len < 2**24: half the memory traffic; products are taken in int64
    out: dict[str, StrategyResult] = {}
    out["pad_to_len"] = pad_to_len(e, pack_len, batch_size, own)
    say("random batches")
    perm = np.random.default_rng(seed).permutation(e.size)
    out["random_padded"] = random_padded(e, batch_size, perm, own)
    say("length-grouped batches")
    out["length_grouped"] = length_grouped(e, batch_size, group_window, perm, own)
    del perm
    out["padding_free"] = padding_free(e, batch_size, own)
    for algo in ("bfd", "ffd"):
        say(f"packing ({algo.upper()})")
        varlen, dense = packed(e, pack_len, batch_size, algo, own, seed=seed)
        out[varlen.name] = varlen
        out[dense.name] = dense
    return out


# --------------------------------------------------------------------------------------------
# FLOP model


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
            "name": self.name, "source": self.source, "matmul_params": self.matmul_params,
            "total_params": self.total_params, "layers": self.layers, "d_attn": self.d_attn,
            "notes": list(self.notes),
        }


_NON_GATED = {"gpt2", "gpt_neox", "gptj", "opt", "bloom", "falcon", "phi", "gpt_bigcode",
              "starcoder2", "bert", "roberta", "gpt_neo", "codegen", "mpt"}


def _first(cfg: dict, keys: tuple[str, ...], what: str, name: str, required: bool = True):
    for k in keys:
        if cfg.get(k) is not None:
            v = cfg[k]
            if not isinstance(v, int | float) or isinstance(v, bool) or v <= 0:
                raise PacktoolError(f"{name}: {k}={v!r} is not a positive number")
            return v
    if required:
        raise PacktoolError(f"{name}: no {what} ({' or '.join(keys)}); pass --params N --layers L --hidden D instead")
    return None


def model_from_config(cfg: dict, name: str = "config.json") -> ModelSpec:
    """Parameter count and attention width from a transformers config.json (dense or MoE).

    per layer: attention  d·h·hd (q) + 2·d·kv·hd (k, v) + h·hd·d (o)
               MLP        3·d·i gated (SwiGLU/GeGLU) or 2·d·i (GPT-2 style); MoE: × active experts
    P = layers · (attention + active MLP) + vocab · d (the LM head matmul, tied or not)
    Norms and biases are left out (< 0.1 %).
    """
    if not isinstance(cfg, dict):
        raise PacktoolError(f"{name}: not a JSON object")
    if "num_hidden_layers" not in cfg and isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
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
    experts = _first(cfg, ("num_local_experts", "num_experts", "n_routed_experts"), "", name, required=False)
    if experts and cfg.get("num_experts_per_tok"):
        k = int(cfg["num_experts_per_tok"])
        moe_i = int(cfg.get("moe_intermediate_size") or inter)
        mlp_active = mats * d * moe_i * k
        mlp_total = mats * d * moe_i * int(experts)
        notes.append(f"MoE: {k} of {int(experts)} experts active per token; shared experts and dense layers ignored")
    else:
        mlp_active = mlp_total = mats * d * inter
    tied = bool(cfg.get("tie_word_embeddings", False))
    matmul = layers * (attn + mlp_active) + vocab * d
    total = layers * (attn + mlp_total) + vocab * d * (1 if tied else 2)
    label = cfg.get("_name_or_path") or (cfg.get("architectures") or [None])[0] or cfg.get("model_type") or name
    return ModelSpec(str(label), float(matmul), layers, heads * hd, float(total), "config", tuple(notes))


# Used for "relative FLOPs" when no model is given: the Llama-2-7B shape (6.74 B parameters).
REFERENCE_CONFIG = {
    "model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
    "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
    "tie_word_embeddings": False, "_name_or_path": "reference 7B (Llama-2-7B shape)",
}


def reference_model() -> ModelSpec:
    m = model_from_config(REFERENCE_CONFIG)
    return ModelSpec(m.name, m.matmul_params, m.layers, m.d_attn, m.total_params, "reference",
                     ("no --model/--params given: FLOPs use the reference 7B shape",))


def model_from_params(params: float, layers: int, hidden: int) -> ModelSpec:
    if not params > 0:
        raise UsageError(f"--params {params} must be > 0, e.g. --params 7e9")
    if layers < 1:
        raise UsageError(f"--layers {layers} must be >= 1")
    if hidden < 1:
        raise UsageError(f"--hidden {hidden} must be >= 1")
    return ModelSpec(f"{params / 1e9:.3g}B (--params)", float(params), layers, hidden, float(params), "params")


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
        raise UsageError(f"--gpu {value!r} is not a known GPU ({known}) or a peak in TFLOP/s, e.g. --gpu h100 or --gpu 600") from None
    if not (tf > 0 and math.isfinite(tf)):
        raise UsageError(f"--gpu {value!r}: a peak must be a positive number of TFLOP/s")
    return GpuSpec(f"custom {tf:g} TFLOP/s", tf)


def training_flops(model: ModelSpec, slots: int, attention_work: int) -> tuple[float, float]:
    """(linear FLOPs 6·P·slots, attention FLOPs 12·layers·d_attn·work)."""
    return 6.0 * model.matmul_params * slots, 12.0 * model.layers * model.d_attn * float(attention_work)


def gpu_hours(flops: float, gpu: GpuSpec, mfu: float) -> float:
    return flops / (gpu.peak_tflops * 1e12 * mfu) / 3600.0
