"""The words of verify --model's checks, from model_check.py's report (the input matrix, the
probe's leaking layers):

  cells            {set: "exact (3e-07)" | "leaks 0.98" | "refused: needs causal-conv1d"}
  "model isolation"  PASS: the collator's batch keeps every built layer apart, and every declared
                     layer kind was built; NOT CHECKED: all built layers isolated, but a kind the
                     config declares is not in the tiny copy (or nothing could be built or run);
                     FAIL: a layer leaks (named by the probe), with the fix the matrix points to
  "model control"    the negative control has power
"""

from __future__ import annotations

import re

from packtool.arch import KERNELS
from packtool.arch.layers import layer_types, word
from packtool.verify import Check

MODEL = "model isolation"


def not_checked_check(reason: str) -> Check:
    return Check(MODEL, False, f"not checked: {reason}", unchecked=True)


def layer_words(cfg, kinds) -> list[str]:
    """Per layer of the tiny model, its type as the config declares it (layer_types,
    layers_block_type), else the kinds of its modules ("full attention+moe"), else "-"."""
    types = layer_types(cfg)
    out = []
    for i, ks in enumerate(kinds):
        t = types[i] if i < len(types) and isinstance(types[i], str) else None
        out.append(t or "+".join(ks) or "-")
    return out


def _needs(error: str) -> str | None:
    """The package a transformers refusal names ("... without `causal_conv1d`"), as pip names it."""
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


def fix(report: dict, fam) -> str:
    """What would change the result, from the matrix: the inputs that were exact, the package a
    refusal names, the kernels whose absence makes this machine's path ignore an input, or
    (nothing would) training unpacked."""
    given, matrix = report["collator"], report["matrix"]
    r = matrix[given]
    missing = report["missing_kernels"]
    unpacked = "train it unpacked: `packtool pack ... --max-docs 1` (one document per row)"
    if report["minimum"] is not None:
        return f"train with the {report['minimum']} inputs (PackedCollator(...) options)"
    if not fam.inputs:  # no input reaches the recurrent state: measured as such, nothing to install
        return f"{fam.note}; {unpacked}"
    if missing and r["error"] is not None:  # refused: the package transformers names
        return (
            f"install {' and '.join(missing)} (CUDA) and train with "
            "PackedCollator.for_model(model); then run this check again on that machine"
        )
    if missing:  # the collator's inputs ran, nothing refused them, and they leaked
        pos_only = matrix["position_ids"]
        same = r["logits"] >= pos_only["logits"] * 0.5 and pos_only["error"] is None
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


def isolation_check(report: dict, fam) -> Check:
    given = report["collator"]
    r = report["matrix"][given]
    mt = report["model_type"]
    matrix = "; ".join(f"{n}: {w}" for n, w in cells(report).items())
    built = ", ".join(f"{i}: {w}" for i, w in enumerate(report["layer_types"]))
    evidence = {"inputs": matrix, "layers": built, "not_built": report["not_built"]}
    absent = ", ".join(sorted({word(k) for k in report["not_built"]}))
    if r["error"] is None and r["logits"] <= report["tolerance"]:
        if absent:
            msg = (
                f"{mt}: the layers built (layer {built}) keep documents apart with {given} "
                f"(max difference {r['logits']:.0e}), but the tiny copy holds no {absent} layer "
                f"the config declares: {absent} not checked"
            )
            return Check(MODEL, False, f"not checked: {msg}", evidence=evidence, unchecked=True)
        msg = (
            f"{mt}: documents stay apart with the batch PackedCollator.for_model gives "
            f"({given}; the minimum here: {report['minimum']}), max difference {r['logits']:.0e}, "
            f"every declared layer kind built (layer {built})"
        )
        return Check(MODEL, True, msg, evidence=evidence)
    if r["error"] is not None and not _needs(
        r["error"]
    ):  # it raised, and not for a missing package
        msg = (
            f"not checked: the tiny {mt} does not run packed with {given} here ({r['error'][:200]}); "
            "this architecture is not covered by verify --model"
        )
        return Check(MODEL, False, msg, evidence=evidence, unchecked=True)
    leak = _leaking(report) or f"logits differ by {r['logits']:.2g}"
    if absent:
        leak += f" (not built, so not checked: {absent})"
    unsafe = report["minimum"] is None
    msg = (
        f"{mt} mixes packed documents here ({report['attention']}, {report['device']}): "
        f"{leak}; inputs: {matrix}. "
        + ("Packed training of this model is not safe on this machine. " if unsafe else "")
        + f"Fix: {fix(report, fam)}"
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
