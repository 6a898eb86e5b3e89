"""The words of verify's isolation checks: every Check they report, built from what was measured.

isolation (isolation.py, per model and backend: forwards.Diffs against tolerances.py)
  "isolation MODEL/BACKEND logits | loss sums | swap A | causal | vs reference | control"
  "isolation MODEL/BACKEND" alone: skipped (the model does not run there) or failed (it raised)
"FlashAttention kernel" (from the counted calls, backends.counting): exercised, or why not
verify --model (model_check.py's report: the input matrix, the probe's leaking layers)
  cells            {set: "exact (3e-07)" | "leaks 0.98" | "refused: needs causal-conv1d"}
  "model isolation"  PASS: the collator's batch keeps every built layer apart, and every declared
                     layer kind was built; NOT CHECKED: all built layers isolated, but a kind the
                     config declares is not in the tiny copy (or nothing could be built or run);
                     FAIL: a layer leaks (named by the probe), with the fix the matrix points to
  "model control"    the negative control has power
"""

from __future__ import annotations

import math
import re

from packtool.verify import Check
from packtool.verify.backends import VARLEN
from packtool.verify.tolerances import CAUSAL_TOL, CONTROL_MARGIN

MODEL = "model isolation"
FLASH = "FlashAttention kernel"


# --------------------------------------------------------------------------------------------
# isolation: the preset models on each attention backend


def rows_from(samples, pack_len: int) -> str:
    """Where the rows came from, and how much of each ran."""
    synthetic = samples[0].synthetic
    source = (
        "synthetic rows built from the pack's documents (no row holds >= 2 documents)"
        if synthetic
        else "rows of the pack"
    )
    slots = [len(s.input_ids) for s in samples]
    if min(slots) < pack_len:
        span = f"{min(slots):,}" + ("" if min(slots) == max(slots) else f"-{max(slots):,}")
        source += f", each run as its first {span} slots (its first two documents whole)"
    return source


def not_on_backend(label: str, backend, kind: str, version: str) -> Check:
    why = (
        f"transformers {version} has no {backend.attn_implementation} for GPT-2: the "
        "absolute-position model does not run on this backend"
    )
    ev = {"kernel": backend.kernel, "backend": backend.name, "model_type": kind}
    return Check(label, False, why, ev, skipped=True)


def reference_failed(label: str, backend, kind: str, why: str) -> Check:
    msg = f"the fp32 reference run failed: {why}"
    return Check(label, False, msg, {"backend": backend.name, "model_type": kind})


def kernel_raised(label: str, backend, why: str, ev: dict) -> Check:
    return Check(label, False, f"the {backend.name} kernel raised {why}", ev)


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
    ok = good.causal <= CAUSAL_TOL and power > 0 and good.causal_docs > 0
    if not good.causal_docs:
        msg = "no document of 2 or more tokens: nothing to probe"
    elif good.causal > CAUSAL_TOL:
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
    flash = [b for b in backends if b.name in VARLEN]
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
        ev = {
            "kernel": b.kernel,
            "backend": b.name,
            "device": b.device,
            "dtype": b.dtype,
            **total,
            "expected_varlen_calls": expected,
            "per_model": per_model,
            "trial": b.trial,
            "fallback": list(b.notes),
        }
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


# --------------------------------------------------------------------------------------------
# verify --model


def not_checked_check(reason: str) -> Check:
    return Check(MODEL, False, f"not checked: {reason}", unchecked=True)


def layer_words(cfg, kinds) -> list[str]:
    """Per layer of the tiny model, its type as the config declares it (layer_types,
    layers_block_type), else the kinds of its modules ("full attention+moe"), else "-"."""
    from packtool.arch.layers import layer_types

    types = layer_types(cfg)
    out = []
    for i, ks in enumerate(kinds):
        t = types[i] if i < len(types) and isinstance(types[i], str) else None
        out.append(t or "+".join(ks) or "-")
    return out


def _needs(error: str) -> str | None:
    """The package a transformers refusal names ("... without `causal_conv1d`"), as pip names it."""
    from packtool.arch import KERNELS

    m = re.search(r"without `([^`]+)`", error)
    return m and KERNELS.get(m.group(1), m.group(1).replace("_", "-"))


def cells(report: dict) -> dict[str, str]:
    """Per input set, in words: 'exact (3e-07)', 'leaks 0.98', 'refused: needs causal-conv1d'."""
    out = {}
    for name, r in report.get("matrix", {}).items():
        if r["error"]:
            need = _needs(r["error"])
            out[name] = f"refused: needs {need}" if need else f"error: {r['error'][:80]}"
        elif r["logits"] <= report["tolerance"]:
            out[name] = f"exact ({r['logits']:.0e})"
        else:
            out[name] = f"leaks {r['logits']:.2g}"
    return out


def _leaking(report: dict) -> str:
    """The leaking layers, as the probe found them: 'layer 1 (linear_attention:
    MiniMaxLightningAttention) differs by 1.7 with position_ids'."""
    words = report["layer_types"]
    for name, found in report["leaking_layers"].items():
        return "; ".join(
            f"layer {e['layer']} ({words[e['layer']]}"
            + (f": {', '.join(e['modules'])}" if e["modules"] else "")
            + f") differs by {e['diff']:.2g} with {name}"
            for e in found
        )
    return "; ".join(  # no decoder layer could be probed whole: the modules that leaked
        f"{kind} (layer {', '.join(map(str, v[k]['layers']))}) differs by {v[k]['diff']:.2g} "
        f"with {k}"
        for kind, v in report["leaks"].items()
        for k in list(v)[:1]
    )


def _leaking_types(report: dict) -> set[str]:
    words = report["layer_types"]
    found = report["leaking_layers"].values()
    return {words[e["layer"]] for layers in found for e in layers} | set(report["leaks"])


def fix(report: dict, sets, fam) -> str:
    """What would change the result, from the matrix: the inputs that were exact, the package a
    refusal names, the kernels whose absence makes this machine's path ignore an input, or
    (nothing would) training unpacked."""
    given = report["collator"]
    r = sets[given]
    missing = report["missing_kernels"]
    unpacked = "train it unpacked: `packtool pack ... --max-docs 1` (one document per row)"
    if report["minimum"] is not None:
        return f"train with the {report['minimum']} inputs (PackedCollator(...) options)"
    if not fam.inputs:  # no input reaches the recurrent state: measured as such, nothing to install
        return f"{fam.note}; {unpacked}"
    if missing and r.error is not None:  # refused: the package transformers names
        return (
            f"install {' and '.join(missing)} (CUDA) and train with "
            "PackedCollator.for_model(model); then run this check again on that machine"
        )
    if missing:  # the collator's inputs ran, nothing refused them, and they leaked
        same = r.logits >= sets["position_ids"].logits * 0.5 and sets["position_ids"].error is None
        return (
            f"{given} was passed and still leaks here"
            + (" about as much as position_ids alone" if same else "")
            + f": on this machine (without {' and '.join(missing)}) transformers' torch path "
            f"ignores {given.lstrip('+')}, and no layer refused it; whether the CUDA kernels read "
            f"it was not measured here: install {' and '.join(missing)} (CUDA), train with "
            "PackedCollator.for_model(model) and run this check again on that machine before "
            f"training packed; until then {unpacked}"
        )
    attention = {"full attention", "sliding attention", "full_attention", "sliding_attention"}
    if fam.name in ("attention", "gpt_oss") and _leaking_types(report) <= attention:
        return (
            "this model's attention code does not keep packed documents apart with these inputs "
            "(its mask ignores position_ids, or positions are its own): train it with a "
            "flash-attention varlen kernel fed cu_seq_lens and run this check on that CUDA "
            f"machine, or {unpacked}"
        )
    return (
        f"no input set packtool gives keeps these layers apart in transformers "
        f"{report['transformers']} on this machine, and packtool knows no kernel package that "
        f"would; {unpacked}"
    )


def isolation_check(report: dict, sets, fam) -> Check:
    from packtool.arch.layers import word

    given = report["collator"]
    r = sets[given]
    mt = report["model_type"]
    matrix = "; ".join(f"{n}: {w}" for n, w in cells(report).items())
    built = ", ".join(f"{i}: {w}" for i, w in enumerate(report["layer_types"]))
    evidence = {"inputs": matrix, "layers": built, "not_built": report["not_built"]}
    absent = ", ".join(sorted({word(k) for k in report["not_built"]}))
    if r.error is None and r.logits <= report["tolerance"]:
        if absent:
            msg = (
                f"{mt}: the layers built (layer {built}) keep documents apart with {given} "
                f"(max difference {r.logits:.0e}), but the tiny copy holds no {absent} layer "
                f"the config declares: {absent} not checked"
            )
            return Check(MODEL, False, f"not checked: {msg}", evidence=evidence, unchecked=True)
        msg = (
            f"{mt}: documents stay apart with the batch PackedCollator.for_model gives "
            f"({given}; the minimum here: {report['minimum']}), max difference {r.logits:.0e}, "
            f"every declared layer kind built (layer {built})"
        )
        return Check(MODEL, True, msg, evidence=evidence)
    if r.error is not None and not _needs(r.error):  # it raised, and not for a missing package
        msg = (
            f"not checked: the tiny {mt} does not run packed with {given} here ({r.error[:200]}); "
            "this architecture is not covered by verify --model"
        )
        return Check(MODEL, False, msg, evidence=evidence, unchecked=True)
    leak = _leaking(report) or f"logits differ by {r.logits:.2g}"
    if absent:
        leak += f" (not built, so not checked: {absent})"
    unsafe = report["minimum"] is None
    msg = (
        f"{mt} mixes packed documents here ({report['attention']}, {report['device']}): "
        f"{leak}; inputs: {matrix}. "
        + ("Packed training of this model is not safe on this machine. " if unsafe else "")
        + f"Fix: {fix(report, sets, fam)}"
    )
    return Check(MODEL, False, msg, evidence=evidence)


def control_check(report: dict, power: float) -> Check:
    need = power * report["tolerance"]
    ok = report["control"] > need
    msg = (
        f"positions through the row, no boundaries: documents differ by {report['control']:.2g} "
        f"(> {need:.0e}): the check would see a leak"
        if ok
        else f"the control differs by only {report['control']:.2g} (<= {need:.0e}): the check has "
        "no power on these rows (documents too short?)"
    )
    return Check("model control", ok, msg)
