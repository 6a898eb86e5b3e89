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

Every public name of lengths, strategies and flops is re-exported here, so `stats.describe`,
`stats.simulate`, `stats.model_from_config` … name the same objects as the submodules'. The
synthetic lengths stay in their own namespace: `from packtool.stats import synthetic`.
"""

from __future__ import annotations

from packtool.stats import synthetic
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
    OVERFLOW_POLICY,
    STRATEGY_LABELS,
    StrategyResult,
    length_grouped,
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
    "PERCENTILES", "Histogram", "describe", "length_histogram", "nice_step",
    # strategies
    "OVERFLOW_POLICY", "STRATEGY_LABELS", "StrategyResult", "length_grouped", "packed", "pad_to_len",
    "padded_batches", "padding_free", "random_padded", "simulate", "truncate",
    # flops
    "ATTENTION_CONVENTION", "FLOPS_FORMULA", "GPU_PEAK_TFLOPS", "REFERENCE_CONFIG", "GpuSpec", "ModelSpec",
    "gpu_hours", "gpu_spec", "model_from_config", "model_from_params", "reference_model", "training_flops",
    # the --synthetic / --lengths submodule
    "synthetic",
]
