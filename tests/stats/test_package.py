"""packtool.stats re-exports every public name it had as one module, as the submodules' objects."""

from __future__ import annotations

import pytest

from packtool import stats
from packtool.stats import flops, lengths, strategies, synthetic

# the public names of packtool/stats.py before it became a package, by the module that holds them now
MOVED = {
    lengths: ["PERCENTILES", "describe", "nice_step", "Histogram", "length_histogram"],
    strategies: ["OVERFLOW_POLICY", "STRATEGY_LABELS", "StrategyResult", "truncate", "pad_to_len",
                 "padded_batches", "random_padded", "length_grouped", "padding_free", "packed", "simulate"],
    flops: ["FLOPS_FORMULA", "ATTENTION_CONVENTION", "GPU_PEAK_TFLOPS", "ModelSpec", "model_from_config",
            "REFERENCE_CONFIG", "reference_model", "model_from_params", "GpuSpec", "gpu_spec",
            "training_flops", "gpu_hours"],
}


@pytest.mark.parametrize("module", list(MOVED), ids=lambda m: m.__name__)
def test_every_old_name_is_the_submodules_object(module):
    for name in MOVED[module]:
        assert getattr(stats, name) is getattr(module, name), name
        assert name in stats.__all__


def test_all_names_exactly_the_moved_ones():
    assert sorted(stats.__all__) == sorted([n for names in MOVED.values() for n in names] + ["synthetic"])


def test_synthetic_is_a_submodule():
    assert stats.synthetic is synthetic
    assert synthetic.__name__ == "packtool.stats.synthetic"
    assert not hasattr(stats, "synthetic_lengths")  # its names stay in their own namespace
