"""Build a profile: counts, length distributions, what pack would write, strategy simulation and
FLOP projection, one --len or a sweep of several.

    TokenizedData ─────────────┐
    lengths (synthetic, file) ─┴─ profile_lens (api.profile; the CLI) ──┐
    bare lengths, one --len ───── profile_lengths (a Python caller) ────┴─▶ ProfileResult
                                                                              │
        ┌──────────────────────────────┬──────────────────────────────────────┤
        ▼                              ▼                                      ▼
    report.profile (rich, JSON)    report.profile_png (PNG)    stats.advice.recommend ─▶ Recommendation

    several --len ──profile_lens──▶ a SweepPoint per --len, then the full profile at the --len the
                                    advice picks, the sweep attached

One --len is packtool.predict's `at_len`. No rendering here; everything is computed on whole arrays.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packtool.config import ProfileConfig  # noqa: F401  (re-exported: profiler.ProfileConfig)
from packtool.errors import PacktoolError, UsageError
from packtool.predict import (
    AtLen,
    Examples,
    at_len,
    examples_of,
    nothing_to_pack,
    pair_examples,
    sweep_point,
)
from packtool.schema.manifest import group_reasons
from packtool.stats import choice
from packtool.stats.flops import ModelSpec, reference_model
from packtool.stats.lengths import Histogram, describe, length_histogram
from packtool.stats.strategies import StrategyResult
from packtool.stats.sweep import SweepPoint, parse_lens


@dataclass
class ProfileResult:
    source: dict[str, Any]
    config: ProfileConfig
    counts: dict[str, Any]
    lengths: dict[str, Any]  # describe of tokens per example (before --overflow)
    loss_lengths: dict[str, Any] | None  # describe of loss tokens per example
    truncation: dict[str, Any]  # examples over --len and what --overflow takes from them (v1 name)
    strategies: dict[str, StrategyResult]  # simulated on the pieces pack would pack
    model: ModelSpec  # the given one, or the reference shape
    costs: dict[str, dict[str, Any]]  # per strategy: FLOPs, relative FLOPs, savings, GPU-hours
    histogram: Histogram  # terminal
    plot_histogram: Histogram  # PNG
    batch_waste: dict[str, Any]  # random padded batches: describe + log-spaced histogram
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    pack: dict[str, Any] = field(default_factory=dict)  # what pack would write (predict.at_len)
    cuts: dict[int, dict[str, Any]] = field(default_factory=dict)  # choice.cuts_by_len
    sweep: list[SweepPoint] | None = None  # profile_lens with several --len values
    # at the advice's (--len, --overflow) when that is not this profile's
    advice_point: SweepPoint | None = None


def _batch_waste(ratios: np.ndarray) -> dict[str, Any]:
    """Random padded batches' waste (one ratio a batch, at least one): summary, log-spaced histogram."""
    hi = max(float(ratios.max()), 1.0 + 1e-9)
    edges = np.geomspace(1.0, hi * (1 + 1e-9), 41)
    counts, _ = np.histogram(np.clip(ratios, 1.0, None), bins=edges)
    p50, p90, p99 = (float(x) for x in np.percentile(ratios, (50, 90, 99)))
    summary = {
        "batches": int(ratios.size),
        "mean": float(ratios.mean()),
        "median": p50,
        "p90": p90,
        "p99": p99,
        "max": float(ratios.max()),
    }
    return {"summary": summary, "edges": edges.tolist(), "counts": counts.tolist()}


def _profile(
    inp: Examples,
    cfg: ProfileConfig,
    *,
    source: dict[str, Any],
    num_read: int | None = None,
    skipped=(),
    notes=(),
    on_stage=None,
    swept: tuple[list[SweepPoint], dict[int, AtLen]] | None = None,
    advise: bool = True,
) -> ProfileResult:
    """The profile of `inp` at cfg.pack_len or, with `swept` (its points and the AtLen of each
    --len that packs something), at the --len choice.pick_len picks among them (the longest that
    packs something when --overflow leaves nothing there), the sweep attached."""
    say = on_stage or (lambda _s: None)
    timings: dict[str, float] = {}
    notes = list(notes)
    t0 = time.perf_counter()
    lengths = inp.lengths
    keep = inp.nonempty
    empty = int(lengths.size - np.count_nonzero(keep))
    kept = lengths[keep]
    kept_loss = None if inp.loss_counts is None else inp.loss_counts[keep]
    if empty:
        notes.append(
            f"{empty} examples have no tokens and are left out of every strategy (pack drops them too)"
        )
    n = int(kept.size)
    if n == 0:
        total = num_read if num_read is not None else empty + len(skipped)
        raise PacktoolError(f"nothing to profile: none of the {total:,} examples read has a token")
    say("length statistics")
    dist = describe(kept)
    loss_dist = describe(kept_loss) if kept_loss is not None else None
    tokens = dist["sum"]
    reasons = group_reasons(r.reason for r in skipped)
    counts = {
        "examples_read": int(num_read if num_read is not None else n + empty + len(skipped)),
        "examples_skipped": len(skipped),
        "skipped_reasons": {g.text(): g.count for g in reasons},  # by cause, variants counted
        "examples_empty": empty,
        "examples": n,
        "tokens": tokens,
        "loss_tokens": None if loss_dist is None else loss_dist["sum"],
        "loss_share": None if loss_dist is None or not tokens else loss_dist["sum"] / tokens,
        "examples_without_loss": None if kept_loss is None else int((kept_loss == 0).sum()),
    }
    points, done = swept or (None, {})
    given = [p.pack_len for p in points] if points else [cfg.pack_len]
    cuts = choice.cuts_by_len(kept, kept_loss, choice.candidate_lens(dist["max"], given))
    totals = choice.Totals(
        n, tokens, counts["loss_tokens"], int(dist["max"]), empty, inp.sides is not None
    )
    by_len = {p.pack_len: p for p in points} if points else None
    picked = choice.pick_len(cuts, totals, given, by_len, cfg.pad_to_multiple)
    if points:
        if not done:
            raise nothing_to_pack(inp, dataclasses.replace(cfg, pack_len=given[-1]))
        main = picked.pack_len if picked.pack_len in done else max(done)
        cfg = dataclasses.replace(cfg, pack_len=main)
    hist = length_histogram(kept, cfg.pack_len, cfg.bins, p99=dist["p99"])
    plot_hist = length_histogram(kept, cfg.pack_len, cfg.plot_bins, p99=dist["p99"])
    timings["statistics"] = time.perf_counter() - t0

    model = cfg.model or reference_model()
    at = done[cfg.pack_len] if points else at_len(inp, cfg, model, say)
    if not at.strategies:
        raise nothing_to_pack(inp, cfg)
    timings["strategies"] = at.seconds
    if at.loss is not None:
        notes.append(f"pack {at.loss}")
    waste = _batch_waste(at.strategies["random_padded"].extra["batch_waste"])
    extra = _advice_point(inp, cfg, model, picked, cuts, points, say) if advise else None
    if extra is not None:
        timings["advice"] = extra.seconds
    timings["total"] = time.perf_counter() - t0
    return ProfileResult(
        source=source,
        config=cfg,
        counts=counts,
        lengths=dist,
        loss_lengths=loss_dist,
        truncation=at.truncation,
        strategies=at.strategies,
        model=model,
        costs=at.costs,
        histogram=hist,
        plot_histogram=plot_hist,
        batch_waste=waste,
        notes=notes + list(model.notes),
        timings=timings,
        pack=at.pack,
        cuts=cuts,
        sweep=points,
        advice_point=None if extra is None else sweep_point(extra),
    )


def _advice_point(inp: Examples, cfg: ProfileConfig, model, picked, cuts, points, say):
    """The AtLen at the (--len, --overflow) stats.choice.pick_len picked, when pack would pack
    other pieces there than this profile did (so that the recommendation's FLOPs are its own);
    None when it is this profile's case or a sweep point's, or when nothing is left to pack."""
    L, ov = picked.pack_len, picked.overflow
    nothing_over = cuts[L]["examples_over"] == 0

    def same(pl: int, po: str) -> bool:
        return pl == L and (po == ov or nothing_over)

    if same(cfg.pack_len, cfg.overflow) or any(
        same(p.pack_len, p.overflow) and p.rows for p in points or []
    ):
        return None
    c = dataclasses.replace(cfg, pack_len=L, overflow=ov)
    at = at_len(inp, c, model, lambda s: say(f"recommended --len {L:,}: {s}"))
    return at if at.strategies else None


def _is_data(x) -> bool:
    return hasattr(x, "lengths") and hasattr(x, "table")


def _input(data_or_lengths, source: dict[str, Any] | None) -> tuple[Examples, dict[str, Any]]:
    """The Examples of a TokenizedData or of bare lengths, and _profile's source, num_read,
    skipped and notes for it."""
    x = data_or_lengths
    if not _is_data(x):
        return examples_of(x), {"source": source or {"kind": "lengths"}}
    pairs = x.task == "preference"  # one example a pair (predict.pair_examples)
    inp = (
        pair_examples(x) if pairs else examples_of(x.lengths, x.loss_counts, x.source_index, data=x)
    )
    return inp, {
        "source": {
            "kind": "data",
            **({"task": "preference"} if pairs else {}),
            "format": x.format,
            "tokenizer": dict(x.tokenizer),
            "cache_hit": x.cache_hit,
            "tokenizer_backend": dict(x.backend),
            **(source or {}),
        },
        "num_read": x.num_read,
        "skipped": list(x.skipped),
        "notes": list(x.warnings),
    }


def profile_lengths(
    lengths: np.ndarray,
    cfg: ProfileConfig,
    *,
    source: dict[str, Any] | None = None,
    on_stage=None,
    source_index: np.ndarray | None = None,
    advise: bool = True,
) -> ProfileResult:
    """Profile `lengths` (tokens per example, int >= 0) under cfg.overflow, as pack would pack them;
    the loss rows are None (no labels). `source_index` names the examples in an --overflow error
    (default: their position). Lengths of 0 are counted and left out (pack drops them). `advise`:
    when stats.choice picks another --len or --overflow, simulate that case too (advice_point), so
    that the recommendation's FLOPs are its own; False skips that second simulation."""
    inp = examples_of(lengths, source_index=source_index)
    return _profile(
        inp, cfg, source=source or {"kind": "lengths"}, on_stage=on_stage, advise=advise
    )


# --------------------------------------------------------------------------------------------
# several --len values


def _sweep(
    inp: Examples, cfg: ProfileConfig, lens: list[int], on_stage
) -> tuple[list[SweepPoint], dict[int, AtLen]]:
    say = on_stage or (lambda _s: None)
    model = cfg.model or reference_model()
    points, done = [], {}
    for L in lens:
        c = dataclasses.replace(cfg, pack_len=int(L))  # validates --len
        at = at_len(inp, c, model, lambda s, L=L: say(f"--len {L:,}: {s}"))
        points.append(sweep_point(at))
        if at.strategies:
            done[int(L)] = at
    return points, done


def _lens(lens) -> list[int]:
    """--len values, increasing: a list, or a --len text (parse_lens)."""
    lens = parse_lens(lens) if isinstance(lens, str) else sorted({int(x) for x in lens})
    if not lens:
        raise UsageError("--len: no length given; e.g. --len 4096")
    return lens


def profile_lens(
    data_or_lengths,
    cfg: ProfileConfig,
    lens,
    *,
    source: dict[str, Any] | None = None,
    on_stage=None,
) -> ProfileResult:
    """`packtool profile --len TEXT`: one value profiles `data_or_lengths` (a TokenizedData or bare
    lengths) at it; several profile each (sweep), then give the full profile at the --len
    stats.choice picks among them (choice.pick_len), with `sweep` attached. `lens` is a list or a
    --len text."""
    lens = _lens(lens)
    t0 = time.perf_counter()
    if len(lens) == 1:
        one = dataclasses.replace(cfg, pack_len=lens[0])  # the --len's own checks come first
        if on_stage and _is_data(data_or_lengths):
            on_stage("what --overflow takes")
        inp, args = _input(data_or_lengths, source)
        return _profile(inp, one, **args, on_stage=on_stage)
    inp, args = _input(data_or_lengths, source)
    r = _profile(inp, cfg, **args, on_stage=on_stage, swept=_sweep(inp, cfg, lens, on_stage))
    r.timings["sweep"] = time.perf_counter() - t0
    return r
