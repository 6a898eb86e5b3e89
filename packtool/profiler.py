"""Build a profile: counts, length distributions, what pack would write, strategy simulation and
FLOP projection, one --len or a sweep of several.

    TokenizedData ──profile_data──┐                       ┌──▶ packtool.report.profile (rich, JSON)
                                  ├──▶ ProfileResult ─────┤
    lengths (synthetic / file) ───┘ profile_lengths  │    └──▶ packtool.report.profile_png (PNG)
                                                     └──▶ stats.advice.recommend ─▶ Recommendation
    either, several --len ──sweep──▶ [SweepPoint]   (profile_lens: the sweep + a full profile at
                                                     the --len the advice picks, sweep attached)

One --len (what pack would write, strategies, costs) is packtool.predict's `at_len`.

No rendering here. Everything is computed on whole arrays (numpy + the packer's numba kernels):
10M lengths profile in a few seconds (benchmarks/bench_profile.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packtool import stats
from packtool.config import ProfileConfig  # noqa: F401  (re-exported: profiler.ProfileConfig)
from packtool.errors import PacktoolError, UsageError
from packtool.predict import AtLen, Examples, at_len, examples_of, nothing_to_pack, sweep_point
from packtool.schema.notices import group_reasons
from packtool.stats import choice
from packtool.stats.sweep import SweepPoint, parse_lens  # noqa: F401  (re-exported: profiler.parse_lens)


@dataclass
class ProfileResult:
    source: dict[str, Any]
    config: ProfileConfig
    counts: dict[str, Any]
    lengths: dict[str, Any]  # stats.describe of tokens per example (before --overflow)
    loss_lengths: dict[str, Any] | None  # stats.describe of loss tokens per example
    truncation: dict[str, Any]  # examples over --len and what --overflow takes from them (v1 name)
    strategies: dict[str, stats.StrategyResult]  # simulated on the pieces pack would pack
    model: stats.ModelSpec  # the given one, or the reference shape
    costs: dict[str, dict[str, Any]]  # per strategy: FLOPs, relative FLOPs, savings, GPU-hours
    histogram: stats.Histogram  # terminal
    plot_histogram: stats.Histogram  # PNG
    batch_waste: dict[str, Any]  # random padded batches: describe + log-spaced histogram
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    pack: dict[str, Any] = field(default_factory=dict)  # what pack would write (PACK_KEYS)
    cuts: dict[int, dict[str, Any]] = field(
        default_factory=dict
    )  # choice.cuts_by_len at candidate lengths
    sweep: list[SweepPoint] | None = None  # profile_lens with several --len values
    advice_point: SweepPoint | None = (
        None  # at the advice's (--len, --overflow) when that is not this profile's
    )


def _batch_waste(ratios: np.ndarray) -> dict[str, Any]:
    if ratios.size == 0:
        return {"summary": stats.describe(ratios), "edges": [1.0, 2.0], "counts": [0]}
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
    num_read: int | None,
    skipped,
    notes: list[str],
    on_stage,
    at: AtLen | None = None,
    given: list[int] | None = None,
    points: list[SweepPoint] | None = None,
    advise: bool = True,
) -> ProfileResult:
    say = on_stage or (lambda _s: None)
    timings: dict[str, float] = {}
    notes = list(notes or [])
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
    dist = stats.describe(kept)
    loss_dist = stats.describe(kept_loss) if kept_loss is not None else None
    tokens = dist["sum"]
    reasons = group_reasons(getattr(r, "reason", str(r)) for r in skipped)
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
    cuts = choice.cuts_by_len(
        kept, kept_loss, choice.candidate_lens(dist["max"], given or [cfg.pack_len])
    )
    hist = stats.length_histogram(kept, cfg.pack_len, cfg.bins, p99=dist["p99"])
    plot_hist = stats.length_histogram(kept, cfg.pack_len, cfg.plot_bins, p99=dist["p99"])
    timings["statistics"] = time.perf_counter() - t0

    model = cfg.model or stats.reference_model()
    if at is None:
        at = at_len(inp, cfg, model, say)
        if at is None:
            raise nothing_to_pack(inp, cfg)
    timings["strategies"] = at.seconds
    if at.loss is not None:
        notes.append(f"pack {at.loss}")
    waste = _batch_waste(at.strategies["random_padded"].extra.get("batch_waste", np.zeros(0)))
    extra = (
        _advice_point(inp, cfg, model, cuts, counts, dist, given, points, say) if advise else None
    )
    if extra is not None:
        timings["advice"] = extra[1]
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
        advice_point=None if extra is None else extra[0],
    )


def _advice_point(inp: Examples, cfg: ProfileConfig, model, cuts, counts, dist, given, points, say):
    """(SweepPoint, seconds) at the (--len, --overflow) stats.choice.pick_len picks, when pack
    would pack other pieces there than this profile did (so that the recommendation's FLOPs are
    its own); None when it is this profile's case or a sweep point's."""
    totals = choice.Totals(
        examples=counts["examples"],
        tokens=counts["tokens"],
        loss_tokens=counts["loss_tokens"],
        longest=int(dist["max"]),
        empty=counts["examples_empty"],
    )
    lens = given or [cfg.pack_len]
    picked = choice.pick_len(
        cuts,
        totals,
        lens,
        {p.pack_len: p for p in points} if points else None,
        cfg.pad_to_multiple,
    )
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
    return (None if at is None else sweep_point(at, inp, c)), (0.0 if at is None else at.seconds)


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
    source_index: np.ndarray | None = None,
    advise: bool = True,
) -> ProfileResult:
    """Profile `lengths` (tokens per example, int >= 0) under cfg.overflow, as pack would pack them.
    `loss_counts` (loss tokens per example) is optional: without it the loss rows are None.
    `loss_tokens_cut`: the loss tokens truncation at cfg.pack_len cuts, when the caller knows it
    (--overflow truncate; without it and without labels that figure is None). `source_index`
    names the examples in an --overflow error (default: their position). Lengths of 0 are
    counted and left out (pack drops them). `advise`: when stats.choice picks another --len or
    --overflow, simulate that case too (advice_point), so that the recommendation's FLOPs are its
    own; False skips that second simulation (benchmarks)."""
    inp = examples_of(lengths, loss_counts, source_index)
    inp.loss_tokens_cut, inp.given_len = loss_tokens_cut, cfg.pack_len
    return _profile(
        inp,
        cfg,
        source=source or {"kind": "lengths"},
        num_read=num_read,
        skipped=skipped,
        notes=notes or [],
        on_stage=on_stage,
        advise=advise,
    )


def _data_args(data, source: dict[str, Any] | None) -> dict[str, Any]:
    """_profile's source, num_read, skipped and notes for a TokenizedData."""
    return {
        "source": {
            "kind": "data",
            "format": getattr(data, "format", ""),
            "tokenizer": dict(getattr(data, "tokenizer", {}) or {}),
            "cache_hit": bool(getattr(data, "cache_hit", False)),
            "tokenizer_backend": dict(getattr(data, "backend", {}) or {}),
            **(source or {}),
        },
        "num_read": data.num_read,
        "skipped": list(data.skipped),
        "notes": list(getattr(data, "warnings", []) or []),
    }


def _data_input(data) -> Examples:
    return examples_of(
        data.lengths, data.loss_counts, getattr(data, "source_index", None), data=data
    )


def profile_data(
    data,
    cfg: ProfileConfig,
    *,
    source: dict[str, Any] | None = None,
    on_stage=None,
    advise: bool = True,
) -> ProfileResult:
    """Profile a `TokenizedData` (lengths and loss counts from the tokenization cache; labels for
    the loss tokens --overflow truncate cuts) under cfg.overflow, as pack would pack it.
    `advise` as in profile_lengths."""
    if on_stage:
        on_stage("what --overflow takes")
    return _profile(
        _data_input(data), cfg, **_data_args(data, source), on_stage=on_stage, advise=advise
    )


# --------------------------------------------------------------------------------------------
# several --len values


def _is_data(x) -> bool:
    return hasattr(x, "lengths") and hasattr(x, "table")


def _sweep(
    inp: Examples, cfg: ProfileConfig, lens: list[int], on_stage
) -> tuple[list[SweepPoint], dict[int, AtLen]]:
    say = on_stage or (lambda _s: None)
    model = cfg.model or stats.reference_model()
    points, done = [], {}
    for L in lens:
        c = dataclasses.replace(cfg, pack_len=int(L))  # validates --len
        at = at_len(inp, c, model, lambda s, L=L: say(f"--len {L:,}: {s}"))
        points.append(sweep_point(at, inp, c))
        if at is not None:
            done[int(L)] = at
    return points, done


def _lens(lens) -> list[int]:
    """--len values, increasing: a list, or a --len text (parse_lens)."""
    lens = parse_lens(lens) if isinstance(lens, str) else sorted({int(x) for x in lens})
    if not lens:
        raise UsageError("--len: no length given; e.g. --len 4096")
    return lens


def sweep(data_or_lengths, cfg: ProfileConfig, lens, *, on_stage=None) -> list[SweepPoint]:
    """One SweepPoint per --len of `lens` (a list, or a --len text for parse_lens), in increasing
    order, each computed exactly as a full profile at that --len computes it (pack prediction,
    strategies, FLOPs). cfg.pack_len is ignored. A --len at which --overflow leaves nothing to pack
    gives a point with 0 rows and no strategies; --overflow error raises as pack would."""
    lens = _lens(lens)
    inp = (
        _data_input(data_or_lengths) if _is_data(data_or_lengths) else examples_of(data_or_lengths)
    )
    return _sweep(inp, cfg, lens, on_stage)[0]


def profile_lens(
    data_or_lengths,
    cfg: ProfileConfig,
    lens,
    *,
    source: dict[str, Any] | None = None,
    on_stage=None,
) -> ProfileResult:
    """`packtool profile --len TEXT`: one value profiles as profile_data / profile_lengths at it;
    several profile each (sweep), then give the full profile at the --len stats.choice picks
    among them (choice.pick_len), with `sweep` attached. `lens` is a list or a --len text."""
    lens = _lens(lens)
    is_data = _is_data(data_or_lengths)
    if len(lens) == 1:
        one = dataclasses.replace(cfg, pack_len=lens[0])
        if is_data:
            return profile_data(data_or_lengths, one, source=source, on_stage=on_stage)
        return profile_lengths(data_or_lengths, one, source=source, on_stage=on_stage)
    t0 = time.perf_counter()
    if is_data:
        inp, args = _data_input(data_or_lengths), _data_args(data_or_lengths, source)
    else:
        inp = examples_of(data_or_lengths)
        args = {
            "source": source or {"kind": "lengths"},
            "num_read": None,
            "skipped": [],
            "notes": [],
        }
    points, done = _sweep(inp, cfg, lens, on_stage)
    kept = inp.lengths[inp.nonempty]
    if kept.size == 0:
        raise PacktoolError(
            f"nothing to profile: none of the {inp.lengths.size:,} examples read has a token"
        )
    kept_loss = None if inp.loss_counts is None else inp.loss_counts[inp.nonempty]
    cuts = choice.cuts_by_len(kept, kept_loss, lens)
    totals = choice.Totals(
        examples=int(kept.size),
        tokens=int(kept.sum()),
        loss_tokens=None if kept_loss is None else int(kept_loss.sum()),
        longest=int(kept.max()),
    )
    pick = choice.pick_len(cuts, totals, lens, {p.pack_len: p for p in points}).pack_len
    if (
        pick not in done
    ):  # --overflow leaves nothing at the pick: the longest --len that packs something
        if not done:
            raise nothing_to_pack(inp, dataclasses.replace(cfg, pack_len=lens[-1]))
        pick = max(done)
    main = dataclasses.replace(cfg, pack_len=pick)
    r = _profile(inp, main, **args, on_stage=on_stage, at=done[pick], given=lens, points=points)
    r.timings["sweep"] = time.perf_counter() - t0
    return r
