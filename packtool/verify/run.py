"""verify orchestration: a frozen VerifyConfig in, a VerifyResult (a list of Checks) out.

    integrity (every row, numpy)  ──samples rows with >= 2 documents──▶  isolation (tiny models)

The result passes only when every check passes; skipped checks (e.g. the FlashAttention kernel on
a machine without CUDA) are reported as such and never count as passes of what they skip.
Whether a kernel ran is read from counted calls (`backends.counting`), never from check names:
the "FlashAttention kernel" check passes only when the varlen backend made one varlen call per
attention layer of every forward and no dense attention call.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from packtool import schema
from packtool.config import VerifyConfig  # noqa: F401  (re-exported: verify.run.VerifyConfig)
from packtool.errors import PacktoolError, UsageError
from packtool.verify import Check

DEFAULT_ROWS = {"cpu": 4, "cuda": 16}  # CPU: 4 rows x 4096 tokens, ~25 s on a shared 2-core box


@dataclass
class VerifyResult:
    path: str
    checks: list[Check] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)  # what computed attention, in words
    timings: dict[str, float] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    self_test: bool = False
    kernel_calls: dict = field(default_factory=dict)  # backend -> model -> counted attention calls

    @property
    def passed(self) -> bool:
        return all(c.passed or c.skipped for c in self.checks) and any(c.passed for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed and not c.skipped]

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "passed": self.passed,
            "self_test": self.self_test,
            "failed": [c.name for c in self.failed],
            "kernels": self.kernels,
            "kernel_calls": self.kernel_calls,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "config": self.config,
            "checks": [c.to_dict() for c in self.checks],
        }


def _validate(cfg: VerifyConfig) -> None:
    if cfg.path is not None:
        _is_pack_folder(cfg.path)


def _is_pack_folder(path: str) -> None:
    """A usage error for what is not a pack at all (a missing path, a file, a data folder); a folder
    with shards but no manifest is left to the integrity check (an interrupted pack is a failure)."""
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        raise UsageError(f"{path}: no such folder; pass a pack folder written by `packtool pack`")
    if os.path.isfile(p):
        raise UsageError(f"{path} is a file, not a pack folder; `packtool pack {path} --len N --out OUT` "
                         "makes a pack, then `packtool verify OUT`")
    has_manifest = os.path.isfile(os.path.join(p, schema.MANIFEST))
    has_shards = os.path.isdir(os.path.join(p, schema.DATA_DIR))
    if not has_manifest and not has_shards:
        raise UsageError(f"{path} is not a pack (no {schema.MANIFEST}, no {schema.DATA_DIR}/): if it holds "
                         f"training data, `packtool pack {path} --len N --out OUT` makes a pack, then "
                         "`packtool verify OUT`")


def verify(cfg: VerifyConfig) -> VerifyResult:
    """Integrity of every row of the pack at cfg.path, then isolation on sampled rows."""
    _validate(cfg)
    if not cfg.path:
        raise UsageError("give the pack folder to verify (e.g. packtool verify out/), or --self-test")
    if not os.path.isdir(cfg.path):
        raise PacktoolError(f"{cfg.path} is not a folder; verify takes the OUT folder of `packtool pack` "
                            f"(holding {schema.MANIFEST} and {schema.DATA_DIR}/)")
    backends = []
    if cfg.rows != 0:  # resolve first: a backend that cannot run here (or no torch) is a usage error
        from packtool.verify import backends as bk

        backends = bk.resolve(cfg.backend, cfg.device)
    device = backends[0].device if backends else "cpu"
    rows = DEFAULT_ROWS[device] if cfg.rows is None else cfg.rows
    res = VerifyResult(path=cfg.path, config={**asdict(cfg), "rows": rows, "device": device})

    from packtool.verify import integrity

    t0 = time.perf_counter()
    checks, summary = integrity.check_integrity(cfg.path, sample_rows=rows, seed=cfg.seed)
    res.timings["integrity"] = time.perf_counter() - t0
    res.checks.extend(checks)
    tokens = summary.get("rows", 0) * (summary.get("pack_len") or 0)
    res.timings["integrity_tokens_per_s"] = tokens / max(res.timings["integrity"], 1e-9)

    if rows == 0:
        res.checks.append(Check("isolation", False, "not run (--rows 0): integrity only", skipped=True))
        return res
    t1 = time.perf_counter()
    iso = _isolation(cfg, summary, backends, rows)
    res.checks.extend(iso)
    res.timings["isolation"] = time.perf_counter() - t1
    res.kernel_calls = kernel_calls(iso)
    ran = [(b, list(res.kernel_calls[b.name])) for b in backends if b.name in res.kernel_calls]
    res.kernels = [f"{b.name}: {b.kernel} ({b.device}, {b.dtype}); models {', '.join(models)}"
                   for b, models in ran]
    res.checks.append(_flash_note(backends, res.kernel_calls))
    return res


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


def _isolation(cfg: VerifyConfig, summary: dict, backends, rows: int) -> list[Check]:
    from packtool.verify.isolation import Sample, run_isolation

    pack_len = summary.get("pack_len")
    if not isinstance(pack_len, int) or pack_len < 2:
        return [Check("isolation", False, f"not run: pack_len {pack_len!r} unknown or < 2")]
    samples = [Sample(**d) for d in summary.get("samples", [])]
    if not samples:
        samples = _synthesize(summary.get("singles", []), pack_len, rows)
    if not samples:
        why = ("every valid row holds one document and no two-document row can be built from them (a "
               "single document shorter than 2 tokens)" if summary.get("singles") else
               "no row of the pack is valid enough to sample (see the integrity failures above)")
        return [Check("isolation", False, f"not run: {why}")]
    batch = cfg.batch_rows or (2 if pack_len <= 8192 else 1)  # batch > 1: cu_seqlens over a flattened batch
    return run_isolation(samples, backends, pack_len=pack_len, seed=cfg.seed, batch_rows=batch)


def _synthesize(singles: list[dict], pack_len: int, rows: int):
    """No row holds two documents: build rows of two documents from the pack's own ones (the heads
    of two one-document rows, or the two halves of the only document), so the kernel is still
    tested; the report says the rows are synthetic. Token slots keep the row's layout rules."""
    from packtool.verify.isolation import Sample

    docs = [(d["input_ids"][: int(d["seq_lengths"][0])], d["labels"][: int(d["seq_lengths"][0])], d)
            for d in singles]
    pairs = []
    if len(docs) >= 2:
        pairs = [(a, b) for a, b in zip(docs[0::2], docs[1::2], strict=False)]
    elif len(docs) == 1 and len(docs[0][0]) >= 2:
        ids, lab, d = docs[0]
        h = len(ids) // 2
        pairs = [((ids[:h], lab[:h], d), (ids[h:], lab[h:], d))]
    out = []
    for (ia, la_, da), (ib, lb_, db) in pairs[:rows]:
        na = min(len(ia), pack_len // 2)
        nb = min(len(ib), pack_len - na)
        pad = pack_len - na - nb
        ids = np.concatenate((ia[:na], ib[:nb], np.zeros(pad, np.int32)))
        lab = np.concatenate((la_[:na], lb_[:nb], np.full(pad, schema.IGNORE_INDEX)))
        lab[[0, na]] = schema.IGNORE_INDEX
        pos = np.concatenate((np.arange(na), np.arange(nb), np.arange(pad)))
        out.append(Sample(shard=f"synthetic from {da['shard']} row {da['row']}", row=int(db["row"]),
                          input_ids=ids.astype(np.int32), labels=lab.astype(np.int32),
                          position_ids=pos.astype(np.int32), seq_lengths=np.array([na, nb]), synthetic=True))
    return out


FLASH = ("flash-attn", "torch-varlen")


def _flash_note(backends, calls: dict) -> Check:
    """Whether a FlashAttention varlen kernel computed attention, from the counted calls."""
    flash = [b for b in backends if b.name in FLASH]
    ran = [b for b in flash if b.name in calls]
    if ran:
        b = ran[0]
        per_model = calls[b.name]
        total = {k: sum(int(m.get(k, 0)) for m in per_model.values())
                 for k in ("varlen_calls", "varlen_tokens", "dense_calls", "forwards")}
        expected = sum(int(m.get("forwards", 0)) * int(m.get("attention_layers", 0)) for m in per_model.values())
        ev = {"kernel": b.kernel, "backend": b.name, "device": b.device, "dtype": b.dtype, **total,
              "expected_varlen_calls": expected, "per_model": per_model, "trial": b.trial, "fallback": list(b.notes)}
        counted = (f"{total['varlen_calls']:,} varlen calls over {total['varlen_tokens']:,} query tokens, "
                   f"{total['dense_calls']} dense attention calls, {total['forwards']} forwards")
        if total["varlen_calls"] == 0:
            return Check("FlashAttention kernel", False, f"{b.name} was selected but made no varlen call ({counted}): "
                         f"the models did not run the kernel", ev)
        if total["dense_calls"] or total["varlen_calls"] != expected:
            return Check("FlashAttention kernel", False,
                         f"{b.name}: {counted}; expected {expected} varlen calls (one per attention layer and "
                         f"forward) and 0 dense: some layers did not run the varlen kernel", ev)
        return Check("FlashAttention kernel", True, f"exercised: {b.kernel} ({b.dtype}): {counted}", ev)
    ev = {"fallback": list(backends[0].notes)} if backends and backends[0].notes else {}
    if flash:
        why = "isolation did not run it"
    elif backends and backends[0].notes:
        why = f"auto fell back to {backends[0].name}: " + "; ".join(backends[0].notes)
    elif all(b.device == "cpu" for b in backends):
        why = "no CUDA"
    else:
        why = "not requested by --backend"
    return Check("FlashAttention kernel", False, f"FlashAttention kernel not exercised ({why}); the "
                 f"backends above prove the packed format, not the GPU kernel", ev, skipped=True)
