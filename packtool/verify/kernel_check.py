"""Whether a FlashAttention varlen kernel computed attention: read from counted calls, never from names.

    isolation Checks ──evidence["kernel_calls"]──▶ kernel_calls: {backend: {model: counted calls}}
    {varlen_calls, varlen_tokens, dense_calls, forwards, attention_layers}   (backends.counting)

The "FlashAttention kernel" check passes only when the varlen backend made one varlen call per
attention layer of every forward and no dense attention call; where no such backend ran it is
skipped, saying why (no CUDA, auto's fallback, not requested).
"""

from __future__ import annotations

from packtool.verify import Check
from packtool.verify.backends import VARLEN as FLASH

NAME = "FlashAttention kernel"


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


def flash_check(backends, calls: dict) -> Check:
    """Whether a FlashAttention varlen kernel computed attention, from the counted calls."""
    flash = [b for b in backends if b.name in FLASH]
    ran = [b for b in flash if b.name in calls]
    if ran:
        b = ran[0]
        per_model = calls[b.name]
        total = {
            k: sum(int(m.get(k, 0)) for m in per_model.values())
            for k in ("varlen_calls", "varlen_tokens", "dense_calls", "forwards")
        }
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
            return Check(NAME, True, f"exercised: {b.kernel} ({b.dtype}): {counted}", ev)
        return Check(NAME, False, why, ev)
    ev = {"fallback": list(backends[0].notes)} if backends and backends[0].notes else {}
    if flash:
        why = "isolation did not run it"
    elif backends and backends[0].notes:
        why = f"auto fell back to {backends[0].name}: " + "; ".join(backends[0].notes)
    elif all(b.device == "cpu" for b in backends):
        why = "no CUDA"
    else:
        why = "not requested by --backend"
    return Check(
        NAME,
        False,
        f"FlashAttention kernel not exercised ({why}); the "
        f"backends above prove the packed format, not the GPU kernel",
        ev,
        skipped=True,
    )
