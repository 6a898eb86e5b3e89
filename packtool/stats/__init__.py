"""The pure core of `packtool profile`: numpy (and the packer's numba kernels), nothing else.
No typer, rich, pyarrow, transformers or matplotlib here (docs/ARCHITECTURE.md, "Module map").

    --synthetic SPEC ─┐
    --lengths FILE ───┴─ synthetic.py ─▶ lengths int32[n] ◀─ a TokenizedData's lengths
                                            │
             ┌──────────────────────────────┼─────────────────────────────────┐
             ▼                              ▼                                 ▼
    lengths.py                     strategies.py                         flops.py
    describe, length_histogram     truncate, simulate                    ModelSpec, GpuSpec
    → percentiles, Histogram       → {name: StrategyResult}  ─(slots, ─▶ training_flops, gpu_hours
                                                                work)    → FLOPs, GPU-hours

    sweep.py        parse_lens (--len 2048,4096 | 1024-8192 | 1024:8192:1024), SweepPoint
    choice.py       the decision, in numbers: cuts_by_len, pick_len (--len, --overflow, the rule),
                    pick_strategy
    advice.py       the decision in words: choose_len (with reasons), recommend → Recommendation
                    (strategy, --len, --overflow, what is cut, the `packtool pack` command)

Every public name of lengths, strategies and flops is re-exported here, so `stats.describe`,
`stats.simulate`, `stats.model_from_config` … name the same objects as the submodules'. The
synthetic lengths, the --len sweep, the choice and the advice stay in their own namespaces:
`from packtool.stats import advice, choice, sweep, synthetic`.
"""

from __future__ import annotations

from packtool.stats import advice, choice, sweep, synthetic
from packtool.stats.flops import (
    ATTENTION_CONVENTION,
    FLOPS_FORMULA,
    GPU_PEAK_TFLOPS,
    REFERENCE_CONFIG,
    GpuSpec,
    ModelSpec,
    gpu_hours,
    gpu_spec,
    model_from_config,
    model_from_params,
    reference_model,
    training_flops,
)
from packtool.stats.lengths import PERCENTILES, Histogram, describe, length_histogram, nice_step
from packtool.stats.strategies import (
    OVERFLOW_NOTES,
    OVERFLOW_POLICY,
    PACK_MAX_DOCS,
    PACK_ORDER,
    PACK_SEED,
    STRATEGY_LABELS,
    StrategyResult,
    length_grouped,
    overflow_note,
    packed,
    pad_to_len,
    padded_batches,
    padding_free,
    random_padded,
    simulate,
    truncate,
)

__all__ = [
    # lengths
    "PERCENTILES",
    "Histogram",
    "describe",
    "length_histogram",
    "nice_step",
    # strategies
    "OVERFLOW_NOTES",
    "OVERFLOW_POLICY",
    "PACK_MAX_DOCS",
    "PACK_ORDER",
    "PACK_SEED",
    "STRATEGY_LABELS",
    "StrategyResult",
    "length_grouped",
    "overflow_note",
    "packed",
    "pad_to_len",
    "padded_batches",
    "padding_free",
    "random_padded",
    "simulate",
    "truncate",
    # flops
    "ATTENTION_CONVENTION",
    "FLOPS_FORMULA",
    "GPU_PEAK_TFLOPS",
    "REFERENCE_CONFIG",
    "GpuSpec",
    "ModelSpec",
    "gpu_hours",
    "gpu_spec",
    "model_from_config",
    "model_from_params",
    "reference_model",
    "training_flops",
    # submodules in their own namespace: --synthetic / --lengths, --len sweeps, the recommendation
    "advice",
    "choice",
    "sweep",
    "synthetic",
]
