"""Build a profile: counts, length distributions, strategy simulation and FLOP projection.

    TokenizedData ──profile_data──┐                    ┌──▶ packtool.report.profile (rich, JSON)
                                  ├──▶ ProfileResult ──┤
    lengths (synthetic / file) ───┘ profile_lengths    └──▶ packtool.report.profile_png (PNG)

No rendering here. Everything is computed on whole arrays (numpy + the packer's numba kernels):
10M lengths profile in a few seconds (benchmarks/bench_profile.py).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packtool import stats
from packtool.config import ProfileConfig  # noqa: F401  (re-exported: profiler.ProfileConfig)
from packtool.errors import PacktoolError, UsageError

BASELINES = ("pad_to_len", "random_padded")


@dataclass
class ProfileResult:
    source: dict[str, Any]
    config: ProfileConfig
    counts: dict[str, Any]
    lengths: dict[str, Any]  # stats.describe of tokens per example (before truncation)
    loss_lengths: dict[str, Any] | None  # stats.describe of loss tokens per example
    truncation: dict[str, Any]
    strategies: dict[str, stats.StrategyResult]
    model: stats.ModelSpec  # the given one, or the reference shape
    costs: dict[str, dict[str, Any]]  # per strategy: FLOPs, relative FLOPs, savings, GPU-hours
    histogram: stats.Histogram  # terminal
    plot_histogram: stats.Histogram  # PNG
    batch_waste: dict[str, Any]  # random padded batches: describe + log-spaced histogram
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)


def _costs(strategies: dict[str, stats.StrategyResult], cfg: ProfileConfig, model: stats.ModelSpec) -> dict:
    out: dict[str, dict[str, Any]] = {}
    for name, s in strategies.items():
        lin, att = stats.training_flops(model, s.slots, s.attention_work)
        out[name] = {"flops_linear": lin, "flops_attention": att, "flops": lin + att}
    ideal = out["padding_free"]["flops"]
    for c in out.values():
        c["relative_flops"] = c["flops"] / ideal if ideal else 1.0
        for base in BASELINES:
            b = out[base]["flops"]
            c[f"saving_vs_{base}"] = 1.0 - c["flops"] / b if b else 0.0
        if cfg.gpu is not None:
            c["gpu_hours"] = stats.gpu_hours(c["flops"], cfg.gpu, cfg.mfu)
            for base in BASELINES:
                c[f"gpu_hours_saved_vs_{base}"] = stats.gpu_hours(out[base]["flops"] - c["flops"], cfg.gpu, cfg.mfu)
    return out


def _batch_waste(ratios: np.ndarray) -> dict[str, Any]:
    if ratios.size == 0:
        return {"summary": stats.describe(ratios), "edges": [1.0, 2.0], "counts": [0]}
    hi = max(float(ratios.max()), 1.0 + 1e-9)
    edges = np.geomspace(1.0, hi * (1 + 1e-9), 41)
    counts, _ = np.histogram(np.clip(ratios, 1.0, None), bins=edges)
    p50, p90, p99 = (float(x) for x in np.percentile(ratios, (50, 90, 99)))
    summary = {"batches": int(ratios.size), "mean": float(ratios.mean()), "median": p50,
               "p90": p90, "p99": p99, "max": float(ratios.max())}
    return {"summary": summary, "edges": edges.tolist(), "counts": counts.tolist()}


def profile_lengths(
    lengths: np.ndarray,
    cfg: ProfileConfig,
    *,
    source: dict[str, Any] | None = None,
    loss_counts: np.ndarray | None = None,
    num_read: int | None = None,
    skipped: list | tuple = (),
    loss_tokens_cut: int | None = None,
    notes: list[str] | None = None,
    on_stage=None,
) -> ProfileResult:
    """Profile `lengths` (tokens per example, int). `loss_counts` (loss tokens per example) is
    optional: without it the loss rows are None. Lengths of 0 are counted and left out."""
    say = on_stage or (lambda _s: None)
    timings: dict[str, float] = {}
    notes = list(notes or [])
    t0 = time.perf_counter()
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise UsageError(f"lengths must be 1-D, got shape {lengths.shape}")
    empty = int((lengths <= 0).sum())
    if empty:
        keep = lengths > 0
        lengths = lengths[keep]
        loss_counts = None if loss_counts is None else np.asarray(loss_counts)[keep]
        notes.append(f"{empty} examples have no tokens and are left out of every strategy")
    n = int(lengths.size)
    if n == 0:
        total = num_read if num_read is not None else empty + len(skipped)
        raise PacktoolError(f"nothing to profile: none of the {total:,} examples read has a token")
    say("length statistics")
    dist = stats.describe(lengths)
    loss_dist = stats.describe(loss_counts) if loss_counts is not None else None
    tokens = dist["sum"]
    reasons = Counter(getattr(r, "reason", str(r)) for r in skipped)
    counts = {
        "examples_read": int(num_read if num_read is not None else n + empty + len(skipped)),
        "examples_skipped": len(skipped),
        "skipped_reasons": dict(reasons.most_common()),
        "examples_empty": empty,
        "examples": n,
        "tokens": tokens,
        "loss_tokens": None if loss_dist is None else loss_dist["sum"],
        "loss_share": None if loss_dist is None or not tokens else loss_dist["sum"] / tokens,
        "examples_without_loss": None if loss_counts is None else int((np.asarray(loss_counts) == 0).sum()),
    }
    _, over, cut = stats.truncate(lengths, cfg.pack_len)
    truncation = {
        "len": cfg.pack_len,
        "policy": stats.OVERFLOW_POLICY,
        "examples_over": over,
        "examples_over_share": over / n if n else 0.0,
        "tokens_cut": cut,
        "tokens_cut_share": cut / tokens if tokens else 0.0,
        "loss_tokens_cut": loss_tokens_cut,
    }
    hist = stats.length_histogram(lengths, cfg.pack_len, cfg.bins, p99=dist["p99"])
    plot_hist = stats.length_histogram(lengths, cfg.pack_len, cfg.plot_bins, p99=dist["p99"])
    timings["statistics"] = time.perf_counter() - t0

    t1 = time.perf_counter()
    strategies = stats.simulate(lengths, cfg.pack_len, cfg.batch_size, cfg.group_window, cfg.seed, say)
    timings["strategies"] = time.perf_counter() - t1

    model = cfg.model or stats.reference_model()
    costs = _costs(strategies, cfg, model)
    waste = _batch_waste(strategies["random_padded"].extra.get("batch_waste", np.zeros(0)))
    timings["total"] = time.perf_counter() - t0
    return ProfileResult(
        source=source or {"kind": "lengths"}, config=cfg, counts=counts, lengths=dist,
        loss_lengths=loss_dist, truncation=truncation, strategies=strategies, model=model,
        costs=costs, histogram=hist, plot_histogram=plot_hist, batch_waste=waste,
        notes=notes + list(model.notes), timings=timings,
    )


def loss_tokens_cut(data, pack_len: int) -> int | None:
    """Loss tokens beyond position `pack_len` in the over-length examples (what truncation would
    take from training). Reads only those examples' labels. None when labels are unavailable."""
    idx = np.flatnonzero(np.asarray(data.lengths) > pack_len)
    if idx.size == 0:
        return 0
    table = getattr(data, "table", None)
    if table is None or "labels" not in table.column_names:
        return None
    from packtool.data import arrow_numpy
    from packtool.schema import IGNORE_INDEX

    total, start = 0, 0
    for chunk in table.column("labels").chunks:  # only the over-length rows' labels are read
        rows = idx[(idx >= start) & (idx < start + len(chunk))] - start
        start += len(chunk)
        if rows.size:
            offsets, values = arrow_numpy(chunk.offsets), arrow_numpy(chunk.values)
            for r in rows.tolist():
                total += int(np.count_nonzero(values[offsets[r] + pack_len:offsets[r + 1]] != IGNORE_INDEX))
    return total


def profile_data(data, cfg: ProfileConfig, *, source: dict[str, Any] | None = None, on_stage=None) -> ProfileResult:
    """Profile a `TokenizedData` (lengths and loss counts from the tokenization cache)."""
    src = {
        "kind": "data",
        "format": getattr(data, "format", ""),
        "tokenizer": dict(getattr(data, "tokenizer", {}) or {}),
        "cache_hit": bool(getattr(data, "cache_hit", False)),
        "tokenizer_backend": dict(getattr(data, "backend", {}) or {}),
        **(source or {}),
    }
    if on_stage:
        on_stage("loss tokens cut by truncation")
    return profile_lengths(
        data.lengths, cfg, source=src, loss_counts=data.loss_counts, num_read=data.num_read,
        skipped=list(data.skipped), loss_tokens_cut=loss_tokens_cut(data, cfg.pack_len),
        notes=list(getattr(data, "warnings", []) or []), on_stage=on_stage,
    )
