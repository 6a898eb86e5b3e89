"""verify orchestration: a VerifyConfig (packtool.config, validated there) in, a VerifyResult out.

    pack folder? (_is_pack_folder: a usage error for what is not a pack at all)
    backends.resolve          which kernels run (a backend that cannot run here: a usage error)
    integrity (every row, numpy)  ──samples rows with >= 2 documents──▶  isolation (tiny models)
                                  (none: sampling.synthesize builds rows of two from the pack's own)
    isolation.flash_check     whether a FlashAttention varlen kernel ran, from counted calls

The result passes only when every check passes; skipped checks (the FlashAttention kernel without
CUDA) never count as passes of what they skip.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field, replace

from packtool import schema
from packtool.arch.config import read_config
from packtool.config import VerifyConfig  # noqa: F401  (re-exported: verify.run.VerifyConfig)
from packtool.errors import NotChecked, UsageError
from packtool.verify import Check, integrity, model_check
from packtool.verify import backends as bk
from packtool.verify.isolation import flash_check, kernel_calls, run_isolation
from packtool.verify.sampling import synthesize

DEFAULT_ROWS = {"cpu": 4, "cuda": 16}
# CPU: each row runs as its first 1024 slots or more, its first two documents whole (sampling.crop):
# the sdpa path's packed mask is L^2 per row (benchmarks/README.md times it); CUDA: whole rows
ROW_TOKENS = {"cpu": 1024, "cuda": None}
MODEL_ROWS = 16  # --model: rows cut to model_check.TOKENS, so 16 of them fit the same time


@dataclass
class VerifyResult:
    path: str
    checks: list[Check] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)  # what computed attention, in words
    timings: dict[str, float] = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    self_test: bool = False
    kernel_calls: dict = field(default_factory=dict)  # backend -> model -> counted attention calls
    model: dict = field(default_factory=dict)  # --model: model_check's report (the input matrix)

    @property
    def passed(self) -> bool:
        return all(c.passed or c.skipped for c in self.checks) and any(
            c.passed for c in self.checks
        )

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed and not c.skipped and not c.unchecked]

    @property
    def not_checked(self) -> list[Check]:
        return [c for c in self.checks if c.unchecked]

    @property
    def exit_code(self) -> int:
        """0 passed, 1 a check failed, 3 nothing failed but a check asked for was not run."""
        return 0 if self.passed else 1 if self.failed else NotChecked.exit_code

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "passed": self.passed,
            "self_test": self.self_test,
            "status": "passed" if self.passed else "failed" if self.failed else "not checked",
            "failed": [c.name for c in self.failed],
            "not_checked": [c.name for c in self.not_checked],
            "kernels": self.kernels,
            "kernel_calls": self.kernel_calls,
            "timings_s": {k: round(v, 3) for k, v in self.timings.items()},
            "config": self.config,
            "checks": [c.to_dict() for c in self.checks],
            **({"model": self.model} if self.model else {}),
        }


def _is_pack_folder(path: str) -> None:
    """A usage error for what is not a pack at all (a missing path, a file, a data folder); shards
    without a manifest are left to the integrity check (an interrupted pack is a failure)."""
    p = os.path.expanduser(path)
    if not os.path.exists(p):
        raise UsageError(f"{path}: no such folder; pass a pack folder written by `packtool pack`")
    if os.path.isfile(p):
        raise UsageError(
            f"{path} is a file, not a pack folder; `packtool pack {path} --len N --out OUT` "
            "makes a pack, then `packtool verify OUT`"
        )
    has_manifest = os.path.isfile(os.path.join(p, schema.MANIFEST))
    has_shards = os.path.isdir(os.path.join(p, schema.DATA_DIR))
    if not has_manifest and not has_shards:
        raise UsageError(
            f"{path} is not a pack (no {schema.MANIFEST}, no {schema.DATA_DIR}/): if it holds "
            f"training data, `packtool pack {path} --len N --out OUT` makes a pack, then "
            "`packtool verify OUT`"
        )


def verify(cfg: VerifyConfig) -> VerifyResult:
    """Integrity of every row of the pack at cfg.path, then isolation on sampled rows."""
    if not cfg.path:
        raise UsageError(
            "give the pack folder to verify (e.g. packtool verify out/), or --self-test"
        )
    _is_pack_folder(cfg.path)
    cfg = replace(cfg, path=os.path.expanduser(cfg.path))  # (an API caller's "~/out")
    if cfg.model:
        return _verify_model(cfg)
    # resolve first: a backend that cannot run here (or no torch) is a usage error
    backends = bk.resolve(cfg.backend, cfg.device) if cfg.rows != 0 else []
    device = backends[0].device if backends else "cpu"
    rows = DEFAULT_ROWS[device] if cfg.rows is None else cfg.rows
    res, summary = _integrity(cfg, rows, device)
    if rows == 0:
        res.checks.append(
            Check("isolation", False, "not run (--rows 0): integrity only", skipped=True)
        )
        return res
    t1 = time.perf_counter()
    iso = _isolation(cfg, summary, backends, rows)
    res.checks.extend(iso)
    res.timings["isolation"] = time.perf_counter() - t1
    res.kernel_calls = kernel_calls(iso)
    ran = [(b, list(res.kernel_calls[b.name])) for b in backends if b.name in res.kernel_calls]
    res.kernels = [
        f"{b.name}: {b.kernel} ({b.device}, {b.dtype}); models {', '.join(models)}"
        for b, models in ran
    ]
    res.checks.append(flash_check(backends, res.kernel_calls))
    return res


def _integrity(cfg: VerifyConfig, rows: int, device: str) -> tuple[VerifyResult, dict]:
    """A VerifyResult holding the integrity checks and timings, and the scan's summary (with
    `rows` rows sampled for isolation)."""
    res = VerifyResult(path=cfg.path, config={**asdict(cfg), "rows": rows, "device": device})
    t0 = time.perf_counter()
    checks, summary = integrity.check_integrity(cfg.path, sample_rows=rows, seed=cfg.seed)
    res.timings["integrity"] = time.perf_counter() - t0
    res.checks.extend(checks)
    tokens = summary.get("rows", 0) * (summary.get("pack_len") or 0)
    res.timings["integrity_tokens_per_s"] = tokens / max(res.timings["integrity"], 1e-9)
    return res, summary


def _isolation(cfg: VerifyConfig, summary: dict, backends, rows: int) -> list[Check]:
    pack_len = summary.get("pack_len")
    if not isinstance(pack_len, int) or pack_len < 2:
        return [Check("isolation", False, f"not run: pack_len {pack_len!r} unknown or < 2")]
    samples = _samples(summary, pack_len, rows)
    if not samples:
        why = (
            "every valid row holds one document and no two-document row can be built from them (a "
            "single document shorter than 2 tokens)"
            if summary.get("singles")
            else "no row of the pack is valid enough to sample (see the integrity failures above)"
        )
        return [Check("isolation", False, f"not run: {why}")]
    batch = cfg.batch_rows or (2 if pack_len <= 8192 else 1)  # > 1: cu_seqlens over a flat batch
    tokens = ROW_TOKENS[backends[0].device]
    return run_isolation(
        samples, backends, pack_len=pack_len, seed=cfg.seed, batch_rows=batch, row_tokens=tokens
    )


def _verify_model(cfg: VerifyConfig) -> VerifyResult:
    """Integrity of every row, then isolation through a tiny copy of cfg.model's architecture
    (model_check) instead of the two generic tiny models."""
    # a bad --model: before any scan
    cfg_dict, config_file = read_config(cfg.model, cfg.allow_download)
    bk.require_torch()
    device = bk.resolve_device(cfg.device)
    rows = MODEL_ROWS if cfg.rows is None else cfg.rows
    res, summary = _integrity(cfg, rows, device)
    if rows == 0:
        res.checks.append(Check("model isolation", False, "not run (--rows 0)", skipped=True))
        return res
    samples = _samples(summary, summary.get("pack_len") or 2, rows)
    if not samples:
        res.checks.append(
            Check("model isolation", False, "not run: no row of the pack can be sampled")
        )
        return res
    t1 = time.perf_counter()
    model_checks, res.model = model_check.bounded(
        cfg_dict, config_file, cfg.model, samples, device, cfg.seed
    )
    res.checks.extend(model_checks)
    res.timings["isolation"] = time.perf_counter() - t1
    m = res.model
    if "layers" not in m:  # not checked: nothing was built
        return res
    res.kernels = [
        f"model: tiny {m['model_type']} ({_n(len(m['layers']), 'layer')}: "
        f"{', '.join('+'.join(k) or '-' for k in m['layers'])}), {m['attention']} "
        f"({m['device']}, {m['dtype']}), {_n(m['rows'], 'row')} of <= {m['tokens_per_row']} tokens"
    ]
    return res


def _samples(summary: dict, pack_len: int, rows: int) -> list:
    """The integrity scan's sampled rows, or (none holds two documents) rows of two built from its
    one-document rows."""
    return summary.get("samples") or synthesize(summary.get("singles", []), pack_len, rows)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"
