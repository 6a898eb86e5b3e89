"""Isolation layer: tiny random-weight decoders prove that packed documents cannot see each other.

For sampled rows holding >= 2 documents, per preset model (arch.tiny.PRESETS: "llama" RoPE and
grouped-query attention, "gpt2" learned absolute positions; LAYERS layers at tiny width) and per
attention backend (backends.py), the runs forwards.py draws (packed, alone, swapped, last,
control) compared, and judged in messages.py against tolerances.py:

    logits     packed[B] == alone[B] for every document (tolerance per dtype)
    loss       per-document loss sums packed == alone (the shift across A|B must be ignored)
    swap       swapped[B] == packed[B] (bit-exact where the backend is deterministic)
    causal     last[A A A] == packed[A A A], bit-identical: no position reads a later token
    reference  alone on the backend == alone on the fp32 reference (bf16 tolerance)
    control    must FAIL the logits, loss and swap comparisons; if it passes them they have no power

packed/alone/swap run the backend against itself, so a kernel that is wrong the same way in both
runs (e.g. non-causal: attends to later tokens of the same document) passes them; the causal probe
and the comparison with the reference are what catch it (docs/ARCHITECTURE.md, "Verify"). Every
check's evidence carries `kernel_calls`, what computed attention (backends.counting), which
`kernel_calls` below gathers for the "FlashAttention kernel" check.
"""

from __future__ import annotations

import time

from packtool.arch import tiny
from packtool.verify import Check
from packtool.verify import backends as bk
from packtool.verify import messages as say
from packtool.verify.backends import Backend
from packtool.verify.forwards import compare, quiet_transformers, run_alone, tf_version, track_worst
from packtool.verify.sampling import Sample, crop
from packtool.verify.tolerances import LOGIT_TOL, LOSS_TOL, REFERENCE_TOL, SWAP_TOL

MODELS = ("llama", "gpt2")
LAYERS = 2  # attention layers per model: a varlen backend makes LAYERS varlen calls per forward


def build_model(kind: str, backend: Backend, pack_len: int, seed: int):
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
    backends: list[Backend],
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
        return [say.not_on_backend(label, backend, kind, tf_version())]
    is_ref = backend.attn_implementation == bk.REFERENCE and backend.dtype == "float32"
    try:
        if not is_ref and backend.device not in ref_alone:
            ref = bk.make("reference", backend.device)
            model = build_model(kind, ref, pack_len, seed)
            ref_alone[backend.device] = run_alone(model, samples, ref.device, True)
    except Exception as e:  # the reference failing is a failed check, not a traceback
        return [say.reference_failed(label, backend, kind, bk.one_line(e))]
    tol, loss_tol = LOGIT_TOL[backend.dtype], LOSS_TOL[backend.dtype]
    swap_tol = 0.0 if backend.deterministic else SWAP_TOL[backend.dtype]
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
            ev = {**run, "kernel_calls": calls.to_dict()}
            return [say.kernel_raised(label, backend, bk.one_line(e), ev)]
    if is_ref:
        ref_alone[backend.device] = alone
    ev = {
        **run,
        "model": model_desc(kind),
        "rows_tested": len(samples),
        "rows_from": say.rows_from(samples, pack_len),
        "row_slots": [len(s.input_ids) for s in samples],
        "documents": good.docs,
        "tokens": good.tokens,
        "batch_rows": batch_rows,
        "kernel_calls": {**calls.to_dict(), "attention_layers": LAYERS},
        "torch": torch.__version__,
        "transformers": tf_version(),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    out = say.compared(label, good, ev, tol, loss_tol, swap_tol)
    if not is_ref:
        worst, at = 0.0, {}
        for (i, j), (logits, _, _) in alone.items():
            s = samples[i]
            where = {"shard": s.shard, "row": s.row, "document": j, "position": s.bounds[j][0]}
            worst, at = track_worst(worst, at, logits, ref_alone[backend.device][i, j][0], where)
        out.append(say.reference(label, worst, at, REFERENCE_TOL[backend.dtype], ev))
    out.append(say.control(label, ctrl, tol, ev))
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
