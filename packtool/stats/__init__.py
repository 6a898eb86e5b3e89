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

The public names of lengths, strategies and flops are re-exported here (`stats.describe`); the
other submodules stay in their own namespaces (`stats.advice.recommend`).
"""

# ruff: noqa: F401  (the names below are re-exported)

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
