"""Isolation layer: tiny random-weight decoders prove that packed documents cannot see each other.

For sampled rows holding >= 2 documents, per preset model (arch.tiny.PRESETS: "llama" RoPE and
grouped-query attention, "gpt2" learned absolute positions; LAYERS layers at tiny width) and per
attention backend (backends.py), the runs forwards.py draws (packed, alone, swapped, last,
control) compared, and judged below against tolerances.py:

    logits     packed[B] == alone[B] for every document (tolerance per dtype)
    loss       per-document loss sums packed == alone (the shift across A|B must be ignored)
    swap       swapped[B] == packed[B] (bit-exact where the backend is deterministic)
    causal     last[A A A] == packed[A A A], bit-identical: no position reads a later token
    reference  alone on the backend == alone on the fp32 reference (bf16 tolerance)
    control    must FAIL the logits, loss and swap comparisons; if it passes them they have no power

packed/alone/swap run the backend against itself, so a kernel that is wrong the same way in both
runs (e.g. non-causal: attends to later tokens of the same document) passes them; the causal probe
and the comparison with the reference are what catch it (docs/ARCHITECTURE.md, "Verify"). Every
check's evidence carries `kernel_calls` (backends.counting), which `flash_check` reads.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict

from packtool.arch import tiny
from packtool.verify import Check, tolerances
from packtool.verify import backends as bk
from packtool.verify.forwards import compare, quiet_transformers, run_alone, tf_version, track_worst
from packtool.verify.sampling import Sample, crop

MODELS = ("llama", "gpt2")
FLASH = "FlashAttention kernel"
LAYERS = 2  # attention layers per model: a varlen backend makes LAYERS varlen calls per forward


def build_model(kind: str, backend: bk.Backend, pack_len: int, seed: int):
    """The preset `kind` at tiny width, LAYERS layers, random weights, through the backend."""
    cfg = tiny.preset(kind, pack_len=max(pack_len, 64), layers=LAYERS)
    return tiny.build(cfg, backend.attn_implementation, backend.device, backend.dtype, seed)


def model_desc(kind: str) -> str:
    pos = "RoPE" if kind == "llama" else "learned absolute positions"
    return (
        f"{kind} {LAYERS}x{tiny.HIDDEN}, {tiny.HEADS} heads, vocab {tiny.VOCAB}, {pos}, "
        f"random init std {tiny.INIT_STD}"
    )


def run_isolation(
    samples: list[Sample],
    backends: list[bk.Backend],
    *,
    pack_len: int,
    seed: int = 0,
    batch_rows: int = 2,
    models: tuple[str, ...] = MODELS,
    row_tokens: int | None = None,
) -> list[Check]:
    """Isolation checks for each (model, backend): logits, loss sums, swap, causal probe, agreement
    with the fp32 reference, negative control. With `row_tokens`, each row runs as its first
    `row_tokens` slots or more (sampling.crop)."""
    import torch

    bk.register()
    quiet_transformers()
    if not samples:
        return [Check("isolation", False, "no row to test: the pack holds no valid row", {})]
    if row_tokens:
        samples = crop(samples, row_tokens, batch_rows)
    threads = torch.get_num_threads()
    if all(b.device == "cpu" for b in backends):
        # one thread: these tiny forwards are latency-bound, and OpenMP spinning costs more
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
            ref_alone[backend.device] = run_alone(model, samples, ref.device, True)
    except Exception as e:  # the reference failing is a failed check, not a traceback
        msg = f"the fp32 reference run failed: {bk.one_line(e)}"
        return [Check(label, False, msg, {"backend": backend.name, "model_type": kind})]
    tol, loss_tol = tolerances.LOGIT_TOL[backend.dtype], tolerances.LOSS_TOL[backend.dtype]
    swap_tol = 0.0 if backend.deterministic else tolerances.SWAP_TOL[backend.dtype]
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
            if alone is None:
                alone = run_alone(model, samples, backend.device, backend.varlen_kwargs)
            kw = dict(control=False, loss_tol=loss_tol, batch_rows=batch_rows, swap_seed=seed + 1)
            good = compare(model, backend, samples, alone, **kw)
            ctrl = compare(model, backend, samples, alone, **{**kw, "control": True})
        except Exception as e:  # a kernel that raises fails its checks, with the reason
            ev = {**run, "kernel_calls": asdict(calls)}
            return [Check(label, False, f"the {backend.name} kernel raised {bk.one_line(e)}", ev)]
    if is_ref:
        ref_alone[backend.device] = alone
    ev = {
        **run,
        "model": model_desc(kind),
        "rows_tested": len(samples),
        "rows_from": rows_from(samples, pack_len),
        "row_slots": [len(s.input_ids) for s in samples],
        "documents": good.docs,
        "tokens": good.tokens,
        "batch_rows": batch_rows,
        "kernel_calls": {**asdict(calls), "attention_layers": LAYERS},
        "torch": torch.__version__,
        "transformers": tf_version(),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    out = compared(label, good, ev, tol, loss_tol, swap_tol)
    if not is_ref:
        worst, at = 0.0, {}
        for (i, j), (logits, _, _) in alone.items():
            s = samples[i]
            where = {"shard": s.shard, "row": s.row, "document": j, "position": s.bounds[j][0]}
            worst, at = track_worst(worst, at, logits, ref_alone[backend.device][i, j][0], where)
        out.append(reference(label, worst, at, tolerances.REFERENCE_TOL[backend.dtype], ev))
    out.append(control(label, ctrl, tol, ev))
    return out


def kernel_calls(checks: list[Check]) -> dict:
    """{backend: {model: counted calls}} from the isolation checks' evidence: one entry per
    (model, backend) whose forwards ran (nothing for a model skipped on a backend, or when
    isolation did not run at all)."""
    out: dict = {}
    for c in checks:
        calls = c.evidence.get("kernel_calls")
        if calls is not None and not c.skipped:
            out.setdefault(c.evidence["backend"], {}).setdefault(c.evidence["model_type"], calls)
    return out


def rows_from(samples, pack_len: int) -> str:
    """Where the rows came from, and how much of each ran."""
    source = "rows of the pack"
    if samples[0].synthetic:
        source = "synthetic rows built from the pack's documents (no row holds >= 2 documents)"
    slots = [len(s.input_ids) for s in samples]
    if min(slots) < pack_len:
        span = f"{min(slots):,}" + ("" if min(slots) == max(slots) else f"-{max(slots):,}")
        source += f", each run as its first {span} slots (its first two documents whole)"
    return source


def where(w: dict) -> str:
    """Where a largest difference is: 'data/x.parquet row 3 document 1 position 40'."""
    return f"{w['shard']} row {w['row']} document {w['document']} position {w['position']}"


def compared(label: str, good, ev: dict, tol: float, loss_tol: float, swap_tol: float) -> list:
    """The logits, loss sums, swap A and causal checks of one (model, backend)."""
    at = f"; worst: {where(good.worst)}" if good.worst else ""
    ok = good.logits <= tol
    logits = Check(
        f"{label} logits",
        ok,
        f"packed == alone: max|Δ| {good.logits:.3g} {'≤' if ok else '>'} tol {tol:g}"
        + ("" if ok else at + ": documents see each other or positions are wrong"),
        {**ev, "max_abs_diff": good.logits, "tol": tol, "worst": good.worst},
    )
    ok = good.loss_sum <= 1.0
    loss = Check(
        f"{label} loss sums",
        ok,
        f"per-document loss sums packed == alone: max|Δ| {good.loss_sum_abs:.3g} "
        f"({'within' if ok else 'beyond'} {loss_tol:g}·sqrt(loss tokens + 1))"
        + ("" if ok else at + ": a label crosses a document boundary or outputs leak"),
        {**ev, "max_abs_diff": good.loss_sum_abs, "tol_sqrt_tokens": loss_tol},
    )
    ok, exact = good.swap <= swap_tol, good.swap == 0.0
    swap = Check(
        f"{label} swap A",
        ok,
        f"document A replaced: later documents max|Δ| {good.swap:.3g}"
        + (" (bit-exact)" if exact else f" (tol {swap_tol:g})")
        + ("" if ok else ": document A leaks into later documents"),
        {**ev, "max_abs_diff": good.swap, "tol": swap_tol, "exact": exact},
    )
    return [logits, loss, swap, _causal(label, good, ev)]


def _causal(label: str, good, ev: dict) -> Check:
    w, power = good.causal_worst, good.causal_power
    ok = good.causal <= tolerances.CAUSAL_TOL and power > 0 and good.causal_docs > 0
    if not good.causal_docs:
        msg = "no document of 2 or more tokens: nothing to probe"
    elif good.causal > tolerances.CAUSAL_TOL:
        msg = (
            f"each document's last token changed: earlier logits moved by max|Δ| {good.causal:.3g} "
            f"(must be bit-identical); worst: {where(w)} moved when position {w['changed']} "
            f"changed: the kernel is not causal, tokens read later tokens"
        )
    elif not power > 0:
        msg = "probe has no power: changing a document's last token did not change its own logits"
    else:
        msg = (
            f"each document's last token changed: earlier logits bit-identical over {good.causal_docs} "
            f"documents (the changed token's own logits moved ≥ {power:.3g})"
        )
    ev = {**ev, "max_abs_diff": good.causal, "tol": tolerances.CAUSAL_TOL}
    ev["changed_token_min_diff"] = power if math.isfinite(power) else None
    ev |= {"documents_probed": good.causal_docs, "worst": w}
    return Check(f"{label} causal", ok, msg, ev)


def reference(label: str, worst: float, at: dict, tol: float, ev: dict) -> Check:
    ok = worst <= tol
    msg = f"alone == fp32 reference alone: max|Δ| {worst:.3g} {'≤' if ok else '>'} tol {tol:g}"
    if not ok:
        msg += (
            f"; worst: {where(at)}: the kernel computes something else than causal attention "
            f"(non-causal, wrong scale or heads)"
        )
    ev = {**ev, "max_abs_diff": worst, "tol": tol, "worst": at}
    return Check(f"{label} vs reference", ok, msg, ev)


def control(label: str, ctrl, tol: float, ev: dict) -> Check:
    """The control must fail every comparison, by a margin above the tolerance."""
    power = {"logits": ctrl.logits / tol, "loss": ctrl.loss_sum, "swap": ctrl.swap / tol}
    power = {k: float(f"{v:.3g}") for k, v in power.items()}
    weak = [k for k, v in power.items() if not v > tolerances.CONTROL_MARGIN]
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
    ev = {
        **ev,
        "control_logits_diff": ctrl.logits,
        "control_loss_sum_diff": ctrl.loss_sum_abs,
        "control_swap_diff": ctrl.swap,
        "power_over_tol": power,
    }
    return Check(f"{label} control", not weak, msg, ev)


def flash_check(backends, calls: dict) -> Check:
    """Whether a FlashAttention varlen kernel computed attention, from the counted calls
    ({backend: {model: {varlen_calls, varlen_tokens, dense_calls, forwards, attention_layers}}}):
    it passes only with one varlen call per attention layer of every forward and no dense call."""
    flash = [b for b in backends if b.name in bk.VARLEN]
    ran = [b for b in flash if b.name in calls]
    if ran:
        b = ran[0]
        per_model = calls[b.name]
        keys = ("varlen_calls", "varlen_tokens", "dense_calls", "forwards")
        total = {k: sum(int(m.get(k, 0)) for m in per_model.values()) for k in keys}
        expected = sum(
            int(m.get("forwards", 0)) * int(m.get("attention_layers", 0))
            for m in per_model.values()
        )
        ev = {"kernel": b.kernel, "backend": b.name, "device": b.device, "dtype": b.dtype, **total}
        ev |= {"expected_varlen_calls": expected, "per_model": per_model}
        ev |= {"trial": b.trial, "fallback": list(b.notes)}
        counted = (
            f"{total['varlen_calls']:,} varlen calls over {total['varlen_tokens']:,} query tokens, "
            f"{total['dense_calls']} dense attention calls, {total['forwards']} forwards"
        )
        if total["varlen_calls"] == 0:
            why = f"{b.name} was selected but made no varlen call ({counted}): the models did not run the kernel"
        elif total["dense_calls"] or total["varlen_calls"] != expected:
            why = (
                f"{b.name}: {counted}; expected {expected} varlen calls (one per attention layer and "
                f"forward) and 0 dense: some layers did not run the varlen kernel"
            )
        else:
            return Check(FLASH, True, f"exercised: {b.kernel} ({b.dtype}): {counted}", ev)
        return Check(FLASH, False, why, ev)
    ev = {"fallback": list(backends[0].notes)} if backends and backends[0].notes else {}
    if flash:
        why = "isolation did not run it"
    elif backends and backends[0].notes:
        why = f"auto fell back to {backends[0].name}: " + "; ".join(backends[0].notes)
    elif all(b.device == "cpu" for b in backends):
        why = "no CUDA"
    else:
        why = "not requested by --backend"
    msg = (
        f"FlashAttention kernel not exercised ({why}); the "
        f"backends above prove the packed format, not the GPU kernel"
    )
    return Check(FLASH, False, msg, ev, skipped=True)
