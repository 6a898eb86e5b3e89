"""packtool.stats re-exports every public name it had as one module, as the submodules' objects."""

from __future__ import annotations

import pytest

from packtool import stats
from packtool.stats import advice, choice, flops, lengths, strategies, sweep, synthetic

# the public names of packtool/stats.py before it became a package, by the module that holds them now
MOVED = {
    lengths: ["PERCENTILES", "describe", "nice_step", "Histogram", "length_histogram"],
    strategies: [
        "OVERFLOW_POLICY",
        "STRATEGY_LABELS",
        "StrategyResult",
        "truncate",
        "pad_to_len",
        "padded_batches",
        "random_padded",
        "length_grouped",
        "padding_free",
        "packed",
        "simulate",
    ],
    flops: [
        "FLOPS_FORMULA",
        "ATTENTION_CONVENTION",
        "GPU_PEAK_TFLOPS",
        "ModelSpec",
        "model_from_config",
        "REFERENCE_CONFIG",
        "reference_model",
        "model_from_params",
        "GpuSpec",
        "gpu_spec",
        "training_flops",
        "gpu_hours",
    ],
}
# added with --overflow in profile (pack's policy and planner defaults)
ADDED = {
    strategies: ["OVERFLOW_NOTES", "overflow_note", "PACK_ORDER", "PACK_MAX_DOCS", "PACK_SEED"]
}


@pytest.mark.parametrize("module", list(ADDED), ids=lambda m: m.__name__)
def test_every_added_name_is_the_submodules_object(module):
    for name in ADDED[module]:
        assert getattr(stats, name) is getattr(module, name), name


@pytest.mark.parametrize("module", list(MOVED), ids=lambda m: m.__name__)
def test_every_old_name_is_the_submodules_object(module):
    for name in MOVED[module]:
        assert getattr(stats, name) is getattr(module, name), name


def test_synthetic_sweep_and_advice_are_submodules():
    for name, module in (
        ("synthetic", synthetic),
        ("sweep", sweep),
        ("advice", advice),
        ("choice", choice),
    ):
        assert getattr(stats, name) is module
        assert module.__name__ == f"packtool.stats.{name}"
    # their names stay in their own namespaces
    for name in (
        "synthetic_lengths",
        "parse_lens",
        "SweepPoint",
        "recommend",
        "Recommendation",
        "pick_len",
    ):
        assert not hasattr(stats, name), name


def test_pack_plan_defaults_are_packs():
    from packtool.config import PackConfig

    cfg = PackConfig(pack_len=4096)
    assert (stats.PACK_ORDER, stats.PACK_MAX_DOCS, stats.PACK_SEED) == (
        cfg.order,
        cfg.max_docs,
        cfg.seed,
    )
    assert cfg.strategy == "bfd" and cfg.overflow == "drop"
