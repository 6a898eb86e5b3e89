"""The tool that sets the bf16 tolerances from data: measure_tolerances, run on a GPU.

    for each pack_len: selftest.sample_rows (correct synthetic rows) ──▶ isolation.run_isolation
      per (model, backend): max |Δ| of packed~alone, vs fp32 ref, swap, causal, loss sums, each
      beside the tolerance verify applies (tolerances.py), and the control's logits Δ
    ──▶ a printed table, the worst of each comparison with its headroom, and `ok`

benchmarks/gpu_check.sh runs it; verify itself never does.
"""

from __future__ import annotations

from packtool.verify.backends import Backend
from packtool.verify.isolation import MODELS, run_isolation
from packtool.verify.selftest import sample_rows

COMPARISONS = {
    "logits": "packed~alone",
    "vs reference": "vs fp32 ref",
    "swap A": "swap",
    "causal": "causal",
    "loss sums": "loss sums",
}


def measure_tolerances(
    backends: list[Backend],
    *,
    pack_lens=(1024, 4096),
    rows: int = 4,
    seed: int = 0,
    models: tuple[str, ...] = MODELS,
    echo=print,
) -> dict:
    """Run the isolation checks on correct synthetic rows (selftest.sample_rows) and report, per
    (pack_len, model, backend), the max |Δ| of every comparison beside the tolerance verify
    applies, and the control's logits Δ: the data to set BF16_*_TOL from on a GPU. `ok` is False
    when a correct row already exceeds a tolerance (verify would fail a good pack) or a run failed."""
    table, failures = [], []
    for L in pack_lens:
        checks = run_isolation(
            sample_rows(L, rows, seed=seed), backends, pack_len=L, seed=seed, models=models
        )
        groups: dict = {}
        for c in checks:
            if c.skipped or "backend" not in c.evidence:
                continue
            g = groups.setdefault(
                (c.evidence["model_type"], c.evidence["backend"]),
                {
                    "pack_len": L,
                    "model": c.evidence["model_type"],
                    "backend": c.evidence["backend"],
                    "dtype": c.evidence.get("dtype"),
                    "kernel_calls": c.evidence.get("kernel_calls"),
                },
            )
            what = c.name.split(" ", 2)[2] if c.name.count(" ") >= 2 else "run"
            if what in COMPARISONS:
                g[COMPARISONS[what]] = (
                    c.evidence.get("max_abs_diff"),
                    c.evidence.get("tol", c.evidence.get("tol_sqrt_tokens")),
                )
            elif what == "control":
                g["control Δ"] = c.evidence.get("control_logits_diff")
            if not c.passed:
                failures.append(f"{L} {c.name}: {c.message}")
        table.extend(groups.values())
    cols = ["packed~alone", "vs fp32 ref", "swap", "causal"]
    echo(
        f"{'len':>5} {'model':<6} {'backend':<13} {'dtype':<9} "
        + " ".join(f"{c + ' (tol)':>22}" for c in cols)
        + f" {'control Δ':>10}"
    )
    for g in table:
        cells = [
            f"{'-' if g.get(c) is None else f'{_num(g[c][0])} ({_num(g[c][1])})':>22}" for c in cols
        ]
        echo(
            f"{g['pack_len']:>5} {g['model']:<6} {g['backend']:<13} {g['dtype'] or '?':<9} "
            + " ".join(cells)
            + f" {_num(g.get('control Δ')):>10}"
        )
    worst = {}
    for c in cols:
        vals = [g[c] for g in table if g.get(c) is not None and g[c][0] is not None]
        if vals:
            m = max(vals, key=lambda v: v[0])
            worst[c] = {
                "max_abs_diff": m[0],
                "tol": m[1],
                "headroom": (m[1] / m[0]) if m[0] else None,
            }
            echo(
                f"max {c}: {_num(m[0])} against tol {_num(m[1])}"
                + (f" ({m[1] / m[0]:.1f}x headroom)" if m[0] else " (bit-exact)")
            )
    for f in failures:
        echo(f"FAIL {f}")
    return {"rows": table, "max": worst, "failures": failures, "ok": not failures and bool(table)}


def _num(v) -> str:
    return "-" if v is None else "0" if v == 0 else f"{v:.3g}"
