"""Isolation layer: tiny random-weight decoders prove that packed documents cannot see each other.

For sampled rows holding >= 2 documents, the runs forwards.py draws (packed, alone, swapped,
last, control) compared:

    logits     packed[B] == alone[B] for every document (tolerance per dtype)
    loss       per-document loss sums packed == alone (the shift across A|B must be ignored)
    swap       swapped[B] == packed[B] (bit-exact where the backend is deterministic)
    causal     last[A A A] == packed[A A A], bit-identical: no position reads a later token
    reference  alone on the backend == alone on the fp32 reference (bf16 tolerance)
    control    must FAIL the logits, loss and swap comparisons; if it passes them they have no power

packed/alone/swap run the backend against itself, so a kernel that is wrong the same way in both
runs (e.g. non-causal: attends to later tokens of the same document) passes them; the causal probe
and the comparison with the reference are what catch it (docs/ARCHITECTURE.md, "Verify"). The
modules it draws on are listed in verify/__init__.py.
"""

from __future__ import annotations

import math
import time

from packtool.verify import Check
from packtool.verify import backends as bk
from packtool.verify.backends import Backend
from packtool.verify.forwards import Diffs, compare, run_alone, track_worst
from packtool.verify.sampling import Sample, crop
from packtool.verify.tiny_models import (
    LAYERS,
    MODELS,
    build_model,
    model_desc,
    quiet_transformers,
    tf_version,
)
from packtool.verify.tolerances import (
    CAUSAL_TOL,
    CONTROL_MARGIN,
    LOGIT_TOL,
    LOSS_TOL,
    REFERENCE_TOL,
    SWAP_TOL,
)


def run_isolation(
    samples: list[Sample],
    backends: list[Backend],
    *,
    pack_len: int,
    seed: int = 0,
    batch_rows: int = 2,
    models: tuple[str, ...] = MODELS,
    row_tokens: int | None = None,
) -> list[Check]:
    """Isolation checks for each (model, backend): logits, loss sums, swap, causal probe, agreement
    with the fp32 reference, negative control. Every check's evidence carries `kernel_calls`: what
    computed attention in that (model, backend) group, counted (see backends.counting). With
    `row_tokens`, each row runs as its first `row_tokens` slots or more (sampling.crop)."""
    import torch

    bk.register()
    quiet_transformers()
    if not samples:
        return [Check("isolation", False, "no row to test: the pack holds no valid row", {})]
    if row_tokens:
        samples = crop(samples, row_tokens, batch_rows)
    threads = torch.get_num_threads()
    if all(b.device == "cpu" for b in backends):
        # one thread: these tiny forwards are latency-bound, and on a shared 2-core box OpenMP
        # spinning made a 100-token forward take 260 ms with 2 threads against 1.5 ms with one
        torch.set_num_threads(1)
    try:
        checks: list[Check] = []
        for kind in models:
            ref_alone: dict = {}  # per device: the fp32 reference run of every document alone
            for backend in backends:
                checks += _group(kind, backend, samples, ref_alone, pack_len, seed, batch_rows)
        return checks
    finally:
        torch.set_num_threads(threads)


def _group(kind, backend, samples, ref_alone, pack_len, seed, batch_rows) -> list[Check]:
    """The checks of one (model, backend): every forward runs under one kernel-call counter. The
    fp32 reference's alone runs (`ref_alone`, per device) are shared by the backends of a model."""
    import torch

    label = f"isolation {kind}/{backend.name}"
    if kind == "gpt2" and not backend.gpt2:
        why = (
            f"transformers {tf_version()} has no {backend.attn_implementation} for GPT-2: the "
            "absolute-position model does not run on this backend"
        )
        ev = {"kernel": backend.kernel, "backend": backend.name, "model_type": kind}
        return [Check(label, False, why, ev, skipped=True)]
    is_ref = backend.attn_implementation == bk.REFERENCE and backend.dtype == "float32"
    try:
        if not is_ref and backend.device not in ref_alone:
            ref = bk.make("reference", backend.device)
            model = build_model(kind, ref, pack_len, seed)
            ref_alone[backend.device] = run_alone(model, ref, samples)
    except Exception as e:  # the reference failing is a failed check, not a traceback
        why = f"the fp32 reference run failed: {bk.one_line(e)}"
        return [Check(label, False, why, {"backend": backend.name, "model_type": kind})]
    tol, loss_tol = LOGIT_TOL[backend.dtype], LOSS_TOL[backend.dtype]
    swap_tol = 0.0 if backend.deterministic else SWAP_TOL[backend.dtype]
    ref_tol = REFERENCE_TOL[backend.dtype]
    source = (
        "synthetic rows built from the pack's documents (no row holds >= 2 documents)"
        if samples[0].synthetic
        else "rows of the pack"
    )
    slots = [len(s.input_ids) for s in samples]
    if min(slots) < pack_len:
        span = f"{min(slots):,}" + ("" if min(slots) == max(slots) else f"-{max(slots):,}")
        source += f", each run as its first {span} slots (its first two documents whole)"
    run = {
        "kernel": backend.kernel,
        "backend": backend.name,
        "model_type": kind,
        "device": backend.device,
        "dtype": backend.dtype,
    }
    t0 = time.perf_counter()
    with bk.counting() as calls:
        try:
            model = build_model(kind, backend, pack_len, seed)
            # the reference's own alone run, when another backend already made it (same seed: same weights)
            alone = ref_alone.get(backend.device) if is_ref else None
            alone = alone if alone is not None else run_alone(model, backend, samples)
            good, ctrl = (
                compare(
                    model,
                    backend,
                    samples,
                    alone,
                    control=control,
                    loss_tol=loss_tol,
                    batch_rows=batch_rows,
                    swap_seed=seed + 1,
                )
                for control in (False, True)
            )
        except Exception as e:  # a kernel that raises fails its checks, with the reason
            return [
                Check(
                    label,
                    False,
                    f"the {backend.name} kernel raised {bk.one_line(e)}",
                    {**run, "kernel_calls": calls.to_dict()},
                )
            ]
    if is_ref:
        ref_alone[backend.device] = alone
    ev = {
        **run,
        "model": model_desc(kind),
        "rows_tested": len(samples),
        "rows_from": source,
        "row_slots": slots,
        "documents": good.docs,
        "tokens": good.tokens,
        "batch_rows": batch_rows,
        "kernel_calls": {**calls.to_dict(), "attention_layers": LAYERS},
        "torch": torch.__version__,
        "transformers": tf_version(),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    out = []
    at = f"; worst: {_where(good.worst)}" if good.worst else ""
    ok = good.logits <= tol
    out.append(
        Check(
            f"{label} logits",
            ok,
            f"packed == alone: max|Δ| {good.logits:.3g} {'≤' if ok else '>'} tol {tol:g}"
            + ("" if ok else at + ": documents see each other or positions are wrong"),
            {**ev, "max_abs_diff": good.logits, "tol": tol, "worst": good.worst},
        )
    )
    ok = good.loss_sum <= 1.0
    out.append(
        Check(
            f"{label} loss sums",
            ok,
            f"per-document loss sums packed == alone: max|Δ| {good.loss_sum_abs:.3g} "
            f"({'within' if ok else 'beyond'} {loss_tol:g}·sqrt(loss tokens + 1))"
            + ("" if ok else at + ": a label crosses a document boundary or outputs leak"),
            {**ev, "max_abs_diff": good.loss_sum_abs, "tol_sqrt_tokens": loss_tol},
        )
    )
    ok = good.swap <= swap_tol
    exact = good.swap == 0.0
    out.append(
        Check(
            f"{label} swap A",
            ok,
            f"document A replaced: later documents max|Δ| {good.swap:.3g}"
            + (" (bit-exact)" if exact else f" (tol {swap_tol:g})")
            + ("" if ok else ": document A leaks into later documents"),
            {**ev, "max_abs_diff": good.swap, "tol": swap_tol, "exact": exact},
        )
    )
    out.append(_causal_check(label, good, ev))
    if not is_ref:
        out.append(_reference_check(label, alone, ref_alone[backend.device], ref_tol, samples, ev))
    out.append(_control_check(label, ctrl, tol, ev))
    return out


def _where(w: dict) -> str:
    """Where a largest difference is: 'data/x.parquet row 3 document 1 position 40'."""
    return f"{w['shard']} row {w['row']} document {w['document']} position {w['position']}"


def _causal_check(label: str, good: Diffs, ev: dict) -> Check:
    w = good.causal_worst
    power = good.causal_power
    ok = good.causal <= CAUSAL_TOL and power > 0 and good.causal_docs > 0
    if not good.causal_docs:
        msg = "no document of 2 or more tokens: nothing to probe"
    elif good.causal > CAUSAL_TOL:
        msg = (
            f"each document's last token changed: earlier logits moved by max|Δ| {good.causal:.3g} "
            f"(must be bit-identical); worst: {_where(w)} moved when position {w['changed']} "
            f"changed: the kernel is not causal, tokens read later tokens"
        )
    elif not power > 0:
        msg = "probe has no power: changing a document's last token did not change its own logits"
    else:
        msg = (
            f"each document's last token changed: earlier logits bit-identical over {good.causal_docs} "
            f"documents (the changed token's own logits moved ≥ {power:.3g})"
        )
    return Check(
        f"{label} causal",
        ok,
        msg,
        {
            **ev,
            "max_abs_diff": good.causal,
            "tol": CAUSAL_TOL,
            "changed_token_min_diff": power if math.isfinite(power) else None,
            "documents_probed": good.causal_docs,
            "worst": w,
        },
    )


def _reference_check(label: str, alone: dict, ref: dict, tol: float, samples, ev: dict) -> Check:
    worst, where = 0.0, {}
    for (i, j), (logits, _) in alone.items():
        s = samples[i]
        at = {"shard": s.shard, "row": s.row, "document": j, "position": s.bounds[j][0]}
        worst, where = track_worst(worst, where, logits, ref[i, j][0], at)
    ok = worst <= tol
    msg = f"alone == fp32 reference alone: max|Δ| {worst:.3g} {'≤' if ok else '>'} tol {tol:g}"
    if not ok:
        msg += (
            f"; worst: {_where(where)}: the kernel computes something else than causal attention "
            f"(non-causal, wrong scale or heads)"
        )
    return Check(
        f"{label} vs reference", ok, msg, {**ev, "max_abs_diff": worst, "tol": tol, "worst": where}
    )


def _control_check(label: str, ctrl: Diffs, tol: float, ev: dict) -> Check:
    """The control must fail every comparison, by a margin above the tolerance."""
    power = {"logits": ctrl.logits / tol, "loss": ctrl.loss_sum, "swap": ctrl.swap / tol}
    power = {k: float(f"{v:.3g}") for k, v in power.items()}
    weak = [k for k, v in power.items() if not v > CONTROL_MARGIN]
    msg = (
        f"plain causal row (positions 0..L-1) fails as it must: logits Δ {ctrl.logits:.3g}, "
        f"loss-sum Δ {ctrl.loss_sum_abs:.3g}, swap Δ {ctrl.swap:.3g} (≥ {min(power.values()):.3g}× tol)"
    )
    if weak:
        msg = (
            f"check has no power: a plain causal mask with positions not reset passes the "
            f"{', '.join(weak)} comparison(s) (logits Δ {ctrl.logits:.3g} vs tol {tol:g}); the "
            f"isolation result above proves nothing"
        )
    return Check(
        f"{label} control",
        not weak,
        msg,
        {
            **ev,
            "control_logits_diff": ctrl.logits,
            "control_loss_sum_diff": ctrl.loss_sum_abs,
            "control_swap_diff": ctrl.swap,
            "power_over_tol": power,
        },
    )
