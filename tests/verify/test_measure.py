"""measure_tolerances (packtool/verify/measure.py): the max |Δ| of correct rows per comparison,
beside the tolerance verify applies, on CPU sdpa here (benchmarks/gpu_check.sh runs it on a GPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from packtool.verify import backends as bk  # noqa: E402
from packtool.verify.measure import measure_tolerances  # noqa: E402


def test_measure_tolerances_reports_every_comparison():
    lines = []
    out = measure_tolerances(
        [bk.make("sdpa", "cpu")], pack_lens=(96,), rows=2, models=("gpt2",), echo=lines.append
    )
    assert out["ok"], out["failures"]
    (row,) = out["rows"]
    assert row["pack_len"] == 96 and row["backend"] == "sdpa" and row["model"] == "gpt2"
    assert row["swap"] == (0.0, 0.0) and row["causal"] == (0.0, 0.0)
    assert row["vs fp32 ref"][0] <= row["vs fp32 ref"][1] and row["control Δ"] > 1
    assert set(out["max"]) == {"packed~alone", "vs fp32 ref", "swap", "causal"}
    assert "packed~alone (tol)" in lines[0] and any(x.startswith("max vs fp32 ref:") for x in lines)
