"""`verify PACK --model MODEL`: isolation proven on the user's own architecture, not only a Llama.

    config.json (arch.config) ──▶ family (arch: what the batch needs, which kernels)
    sampled rows (integrity) ──fit──▶ rows of <= TOKENS[device] tokens, >= 2 documents each
    tiny model (arch.tiny: every layer kind once, random weights, attention sdpa | eager | flash)
    per input set (model_forwards.INPUT_SETS): packed vs alone, per module when it differs
    control (positions through the row, no boundaries): must differ

Checks: "model isolation" (the batch PackedCollator.for_model gives keeps documents apart),
"model control" (the check has power). The report's matrix carries every set's difference or
error, the minimum set that keeps documents apart here, and per layer kind where it leaks.
"""

from __future__ import annotations

import importlib.util

import numpy as np

from packtool.errors import PacktoolError
from packtool.verify import Check
from packtool.verify.sampling import Sample, packed
from packtool.verify.tiny_models import quiet_transformers, tf_version

TOKENS = {"cpu": 1024, "cuda": 8192}  # row prefix run per sample (CPU attention is L^2 per row)
TOL = {"float32": 1e-4, "bfloat16": 2e-2}  # relative logits difference that still counts as equal
POWER = 10  # the control must differ by POWER x the tolerance
MAX_PARAMS = 20_000_000  # a tiny copy has < 2M; more means its widths were not shrunk


def fit(sample: Sample, tokens: int) -> Sample | None:
    """The row cut to its first `tokens` slots with >= 2 documents: documents in order, the first
    cut to half the budget when it is longer (a document's prefix is itself a document)."""
    lens = [int(n) for n in sample.seq_lengths if n > 0]
    if len(lens) < 2:
        return None
    keep, used = [], 0
    starts = np.concatenate(([0], np.cumsum(lens)))
    pieces = []
    for i, n in enumerate(lens):
        room = tokens - used if i else max(1, min(n, tokens // 2))
        take = min(n, room)
        if take < 1:
            break
        keep.append(take)
        pieces.append((int(starts[i]), int(starts[i]) + take))
        used += take
    if len(keep) < 2:
        return None
    docs = [(sample.input_ids[a:b], sample.labels[a:b]) for a, b in pieces]
    return packed(sample.shard, sample.row, docs, used, sample.synthetic)


def pad(sample: Sample, length: int) -> Sample:
    """The row with a pad tail up to `length` slots (sampling.packed), so that fitted rows of
    different lengths stack into one batch; the documents and their bounds are unchanged."""
    if len(sample.input_ids) >= length:
        return sample
    docs = [(sample.input_ids[a:b], sample.labels[a:b]) for a, b in sample.bounds]
    return packed(sample.shard, sample.row, docs, length, sample.synthetic)


def build(cfg_dict: dict, path: str, samples: list[Sample], device: str, seed: int):
    """(model, tiny config, attention implementation, kinds per layer) or PacktoolError."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from packtool.arch import layers, tiny

    mt = cfg_dict.get("model_type")
    try:
        full = AutoConfig.from_pretrained(path, local_files_only=True)
    except Exception as e:
        raise PacktoolError(
            f"transformers {tf_version()} cannot read a {mt!r} config ({type(e).__name__}: "
            f"{_line(e)}); verify never runs remote code: upgrade transformers if it is new"
        ) from e
    docs = [int(n) for s in samples for n in s.seq_lengths if n > 1]
    window = max(2, min(docs) // 2) if docs else 2
    pack_len = max(len(s.input_ids) for s in samples)
    try:
        wide = tiny.widths(full, pack_len=pack_len, window=window)
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(wide)
        cfg = tiny.cut(wide, layers.shortest_prefix(layers.layer_kinds(meta, wide)))
        with torch.device("meta"):
            size = sum(p.numel() for p in AutoModelForCausalLM.from_config(cfg).parameters())
    except Exception as e:
        raise PacktoolError(
            f"cannot build a tiny {mt} for the check ({type(e).__name__}: {_line(e)}); "
            "this architecture is not covered by verify --model"
        ) from e
    if size > MAX_PARAMS:  # widths in fields tiny.py does not know (sub-configs): not tiny
        raise PacktoolError(
            f"cannot build a tiny {mt} for the check: at the widths packtool sets it still has "
            f"{size / 1e6:.0f}M parameters (its sizes live in fields packtool does not shrink); "
            "this architecture is not covered by verify --model"
        )
    dtype = torch.float32
    last = None
    flash = device == "cuda" and importlib.util.find_spec("flash_attn") is not None
    for attn in ("flash_attention_2",) * flash + ("sdpa", "eager"):
        try:
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn)
            if attn == "flash_attention_2":
                dtype = torch.bfloat16
            model = model.to(device=device, dtype=dtype).eval()
            return model, cfg, attn, layers.layer_kinds(model, cfg)
        except Exception as e:  # this attention implementation is not offered: the next one
            last = e
    raise PacktoolError(
        f"cannot build a tiny {mt} for the check ({type(last).__name__}: {_line(last)})"
    )


def _line(e) -> str:
    return " ".join(str(e).split())[:300]


def run(cfg_dict: dict, path: str, where: str, samples: list[Sample], device: str, seed: int):
    """([Check, Check], the report dict) for the sampled rows through the tiny model of the
    config at `path` (read as `cfg_dict`; `where` is how the user named it)."""
    import torch

    from packtool import arch
    from packtool.arch import layers
    from packtool.arch.tiny import VOCAB
    from packtool.verify import model_forwards as mf

    quiet_transformers()
    rows = [r for r in (fit(s, TOKENS[device]) for s in samples) if r is not None]
    if not rows:
        raise PacktoolError("verify --model: no sampled row holds two documents")
    width = max(len(r.input_ids) for r in rows)  # rows cut short of the budget: one batch shape
    rows = [pad(r, width) for r in rows]
    model, cfg, attn, kinds = build(cfg_dict, path, rows, device, seed)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    tol = TOL.get(dtype, 1e-4)
    fam = arch.family(cfg_dict)
    needs = arch.inputs_for(cfg_dict)
    given = "+seq_idx" if "seq_idx" in needs else "+cu_seq_lens"
    recorder = mf.Recorder(layers.tracked(model, cfg))
    batch_rows = 4
    try:
        with torch.no_grad(), recorder:
            alone = [mf.run_alone(model, recorder, s, VOCAB, device) for s in rows]
            sets = {}
            for name in mf.INPUT_SETS:  # probe runs (which module leaks): the first leaking set
                probe = tol if not any(r.modules for r in sets.values()) else None
                sets[name] = mf.run_set(
                    model, recorder, name, rows, alone, VOCAB, device, batch_rows, probe
                )
        control = mf.run_control(model, rows, alone, VOCAB, device, batch_rows)
    except Exception as e:  # the tiny model does not run unpacked: not a finding about packing
        raise PacktoolError(
            f"the tiny {cfg_dict.get('model_type')} built for the check does not run "
            f"({type(e).__name__}: {_line(e)}); this architecture is not covered by verify --model"
        ) from e
    exact = {n: r.error is None and r.logits <= tol for n, r in sets.items()}
    minimum = next((n for n in mf.INPUT_SETS if exact[n]), None)
    by_kind = _by_kind(sets, recorder.modules, tol)
    report = {
        "model": where,
        "model_type": cfg_dict.get("model_type"),
        "family": fam.name,
        "attention": attn,
        "dtype": dtype,
        "device": device,
        "layers": [list(k) for k in kinds],
        "rows": len(rows),
        "tokens_per_row": max(len(r.input_ids) for r in rows),
        "documents": sum(len(r.seq_lengths) for r in rows),
        "tolerance": tol,
        "matrix": {n: r.to_dict() for n, r in sets.items()},
        "control": control,
        "minimum": minimum,
        "collator": given,
        "leaks": by_kind,
        "missing_kernels": arch.missing_kernels(cfg_dict),
        "transformers": tf_version(),
    }
    return [_isolation_check(report, sets, fam), _control_check(report)], report


def _by_kind(sets, modules, tol) -> dict:
    """kind -> {set: {"diff": max, "layers": [...]}} for the modules that leak."""
    kind_of = {f"layer {i} {path}": kind for i, path, kind, _ in modules}
    out: dict = {}
    for name, r in sets.items():
        for key, d in r.modules.items():
            if d > tol:
                e = out.setdefault(kind_of.get(key, "?"), {}).setdefault(
                    name, {"diff": 0.0, "layers": []}
                )
                e["diff"] = max(e["diff"], d)
                layer = int(key.split()[1])
                if layer not in e["layers"]:
                    e["layers"].append(layer)
    return out


def _needs(error: str) -> str | None:
    """The package a transformers refusal names ("... without `causal_conv1d`"), as pip names it."""
    import re

    from packtool.arch import KERNELS

    m = re.search(r"without `([^`]+)`", error)
    return m and KERNELS.get(m.group(1), m.group(1).replace("_", "-"))


def cells(report: dict) -> dict[str, str]:
    """Per input set, in words: 'exact (3e-07)', 'leaks 0.98', 'refused: needs causal-conv1d'."""
    out = {}
    for name, r in report["matrix"].items():
        if r["error"]:
            need = _needs(r["error"])
            out[name] = f"refused: needs {need}" if need else f"error: {r['error'][:80]}"
        elif r["logits"] <= report["tolerance"]:
            out[name] = f"exact ({r['logits']:.0e})"
        else:
            out[name] = f"leaks {r['logits']:.2g}"
    return out


def _isolation_check(report: dict, sets, fam) -> Check:
    given = report["collator"]
    r = sets[given]
    mt = report["model_type"]
    words = cells(report)
    matrix = "; ".join(f"{n}: {w}" for n, w in words.items())
    if r.error is None and r.logits <= report["tolerance"]:
        return Check(
            "model isolation",
            True,
            f"{mt}: documents stay apart with the batch PackedCollator.for_model gives "
            f"({given}; the minimum here: {report['minimum']}), max difference {r.logits:.0e}",
            evidence={"inputs": matrix},
        )
    where = "; ".join(
        f"{kind} (layer {', '.join(map(str, v[k]['layers']))}) differs by {v[k]['diff']:.2g} "
        f"with {k}"
        for kind, v in report["leaks"].items()
        for k in list(v)[:1]
    )
    missing = report["missing_kernels"]
    if report["minimum"] is not None:
        fix = f"train with the {report['minimum']} inputs (PackedCollator(...) options)"
    elif missing:
        fix = (
            f"install {' and '.join(missing)} (CUDA) and train with PackedCollator.for_model(model)"
        )
    elif fam.name == "attention":  # the table expects nothing to do: this implementation differs
        fix = (
            "this model's transformers code does not keep packed documents apart with these "
            "inputs (its mask ignores position_ids, or positions are its own): train it unpacked, "
            "or run this check on the CUDA machine with flash-attention installed"
        )
    else:
        fix = fam.note
    msg = (
        f"{mt} mixes packed documents here ({report['attention']}, {report['device']}): "
        f"{where or f'logits differ by {r.logits:.2g}'}; inputs: {matrix}. "
        + (
            "Packed training of this model is not safe on this machine. "
            if report["minimum"] is None
            else ""
        )
        + f"Fix: {fix}"
    )
    return Check("model isolation", False, msg, evidence={"inputs": matrix})


def _control_check(report: dict) -> Check:
    need = POWER * report["tolerance"]
    ok = report["control"] > need
    msg = (
        f"positions through the row, no boundaries: documents differ by {report['control']:.2g} "
        f"(> {need:.0e}): the check would see a leak"
        if ok
        else f"the control differs by only {report['control']:.2g} (<= {need:.0e}): the check has "
        "no power on these rows (documents too short?)"
    )
    return Check("model control", ok, msg)
