"""Build a profile: counts, length distributions, what pack would write, strategy simulation and
FLOP projection, one --len or a sweep of several.

    TokenizedData ──profile_data──┐                       ┌──▶ packtool.report.profile (rich, JSON)
                                  ├──▶ ProfileResult ─────┤
    lengths (synthetic / file) ───┘ profile_lengths  │    └──▶ packtool.report.profile_png (PNG)
                                                     └──▶ stats.advice.recommend ─▶ Recommendation
    either, several --len ──sweep──▶ [SweepPoint]   (profile_lens: the sweep + a full profile at
                                                     the --len the advice picks, sweep attached)

Per --len L (`_at_len`; docs/ARCHITECTURE.md, "Semantics", Overflow):

    lengths int[n] (0 = empty) ──pack.overflow.apply_overflow(--overflow)──▶ pieces (1..L tokens)
        drop: over-length and empty examples left out; truncate: cut to L; split: parts;
        error: PacktoolError naming the example, as pack
    pieces.length ──stats.simulate──▶ strategies; packed_bfd_* = plan_packs(pieces.length, L,
        "bfd", "sorted", 0, 0): the call pack/run.py makes with pack's defaults ─▶ pack["rows"]

--pad-to-multiple N (ProfileConfig.pad_to_multiple): as pack, each piece takes ceil(n/N)*N slots
(schema.Layout.slots); the strategies are simulated on those slots (what a kernel computes over),
and pack["doc_pad"] (= manifest tokens.doc_pad) with its share of the slots is the cost of the
padding inside documents; tokens_out stays the real tokens.

No rendering here. Everything is computed on whole arrays (numpy + the packer's numba kernels):
10M lengths profile in a few seconds (benchmarks/bench_profile.py).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packtool import schema, stats
from packtool.config import ProfileConfig  # noqa: F401  (re-exported: profiler.ProfileConfig)
from packtool.errors import PacktoolError, UsageError
from packtool.pack.overflow import apply_overflow, overflow_loss
from packtool.schema.notices import group_reasons
from packtool.stats import choice
from packtool.stats.sweep import SweepPoint, parse_lens  # noqa: F401  (re-exported: profiler.parse_lens)

BASELINES = ("pad_to_len", "random_padded")

# ProfileResult.pack / JSON "pack" / SweepPoint.pack: what `packtool pack --len L --overflow X`
# (strategy bfd, order sorted, max_docs 0, seed 0) writes in its manifest:
#   rows = counts.rows, documents = counts.documents, examples_* = counts.{packed,dropped,truncated,split},
#   split_parts = counts.split_parts, tokens_in/out/cut = tokens.in/out/cut, loss_tokens_in = tokens.loss_in,
#   loss_tokens_cut = tokens.loss_cut (None when labels are unknown), pad_slots = tokens.pad, fill,
#   pad_to_multiple, doc_pad = tokens.doc_pad (0 when not padded), lower_bound_rows
PACK_KEYS = (
    "len",
    "overflow",
    "strategy",
    "order",
    "max_docs",
    "seed",
    "pad_to_multiple",
    "examples",
    "examples_packed",
    "examples_dropped",
    "examples_dropped_empty",
    "examples_truncated",
    "examples_split",
    "split_parts",
    "documents",
    "rows",
    "lower_bound_rows",
    "tokens_in",
    "tokens_out",
    "tokens_cut",
    "tokens_cut_share",
    "loss_tokens_in",
    "loss_tokens_cut",
    "loss_tokens_cut_share",
    "pad_slots",
    "doc_pad",
    "doc_pad_share",
    "fill",
)
SWEEP_STRATEGY_KEYS = (
    "rows",
    "occupancy",
    "attention_waste",
    "relative_flops",
    "flops",
    "gpu_hours",
)


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


@dataclass
class _Input:
    """Examples as profile sees them: every tokenized example, empty ones included."""

    lengths: np.ndarray  # int64[n], >= 0
    source_index: np.ndarray  # int64[n]: what an --overflow error names
    loss_counts: np.ndarray | None  # int64[n] or None (bare lengths)
    data: Any = None  # TokenizedData: its labels give truncation's loss cut
    loss_tokens_cut: int | None = (
        None  # the caller's truncation loss cut at `given_len` (profile_lengths)
    )
    given_len: int | None = None

    @property
    def nonempty(self) -> np.ndarray:
        return self.lengths > 0


@dataclass
class _AtLen:
    """One --len: the pack prediction, the overflow summary, strategies and costs."""

    pack: dict[str, Any]
    truncation: dict[str, Any]
    strategies: dict[str, stats.StrategyResult]
    costs: dict[str, dict[str, Any]]
    seconds: float
    loss: str | None = None  # pack's warning when --overflow loses > 1% (pack.overflow_loss)


def _costs(
    strategies: dict[str, stats.StrategyResult], cfg: ProfileConfig, model: stats.ModelSpec
) -> dict:
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
                c[f"gpu_hours_saved_vs_{base}"] = stats.gpu_hours(
                    out[base]["flops"] - c["flops"], cfg.gpu, cfg.mfu
                )
    return out


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


def _share(part: int | None, whole: int | None) -> float | None:
    if part is None or whole is None:
        return None
    return part / whole if whole else 0.0


def _truncated_loss_cut(inp: _Input, pack_len: int, truncated: np.ndarray) -> int | None:
    """Loss tokens in the cut-off tails of the truncated examples (pack's loss_cut_tails)."""
    if truncated.size == 0:
        return 0
    if inp.data is not None:
        return loss_tokens_cut(inp.data, pack_len)
    if inp.loss_tokens_cut is not None and inp.given_len == pack_len:
        return int(inp.loss_tokens_cut)
    return None


def _nothing_to_pack(inp: _Input, cfg: ProfileConfig) -> PacktoolError:
    """What pack says when --overflow leaves nothing (pack/run.py), with the shortest example."""
    n = inp.lengths
    keep = n[n > 0]
    shortest = (
        f"shortest {int(keep.min()):,} tokens > --len {cfg.pack_len:,}"
        if keep.size
        else "all empty"
    )
    return PacktoolError(
        f"nothing to pack: all {n.size:,} examples would be dropped ({shortest}); "
        "use --overflow truncate|split or raise --len"
    )


def _at_len(inp: _Input, cfg: ProfileConfig, model: stats.ModelSpec, say) -> _AtLen | None:
    """Pack's overflow, then every strategy on its pieces, at cfg.pack_len. None when --overflow
    leaves nothing to pack (pack stops there with an error)."""
    t0 = time.perf_counter()
    L, lengths = cfg.pack_len, inp.lengths
    pieces = apply_overflow(
        lengths, inp.source_index, L, cfg.overflow
    )  # error: PacktoolError, as pack
    n_all = int(lengths.size)
    nonempty = int(np.count_nonzero(lengths))
    over = int(np.count_nonzero(lengths > L))
    tokens_in = int(lengths.sum())
    tokens_out = int(pieces.length.sum())
    dropped_loss = None
    if inp.loss_counts is not None:
        dropped_loss = int(inp.loss_counts[pieces.dropped].sum())
    elif not np.any(lengths[pieces.dropped] > 0):
        dropped_loss = 0  # only empty examples dropped: no loss token among them
    tails = _truncated_loss_cut(inp, L, pieces.truncated)
    loss_cut = None if dropped_loss is None or tails is None else dropped_loss + tails
    loss_in = None if inp.loss_counts is None else int(inp.loss_counts.sum())
    truncation = {
        "len": L,
        "policy": cfg.overflow,
        "examples_over": over,
        "examples_over_share": over / nonempty if nonempty else 0.0,
        "tokens_cut": tokens_in - tokens_out,
        "tokens_cut_share": _share(tokens_in - tokens_out, tokens_in) or 0.0,
        "loss_tokens_cut": loss_cut,
        "examples_dropped": int(pieces.dropped.size),
        "examples_truncated": int(pieces.truncated.size),
        "examples_split": int(pieces.split.size),
        "split_parts": int(pieces.split_parts.sum()),
    }
    m = int(pieces.length.size)
    if m == 0:
        return None
    slots = schema.Layout(cfg.pad_to_multiple).slots(pieces.length)  # pack plans these
    doc_pad = int(slots.sum()) - tokens_out
    strategies = stats.simulate(slots, L, cfg.batch_size, cfg.group_window, cfg.seed, say)
    rows = strategies["packed_bfd_varlen"].rows
    pack = {
        "len": L,
        "overflow": cfg.overflow,
        "strategy": "bfd",
        "order": stats.PACK_ORDER,
        "max_docs": stats.PACK_MAX_DOCS,
        "seed": stats.PACK_SEED,
        "pad_to_multiple": cfg.pad_to_multiple,
        "examples": n_all,
        "examples_packed": n_all
        - int(pieces.truncated.size + pieces.split.size + pieces.dropped.size),
        "examples_dropped": int(pieces.dropped.size),
        "examples_dropped_empty": n_all - nonempty,
        "examples_truncated": int(pieces.truncated.size),
        "examples_split": int(pieces.split.size),
        "split_parts": int(pieces.split_parts.sum()),
        "documents": m,
        "rows": rows,
        "lower_bound_rows": -(-(tokens_out + doc_pad) // L),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_cut": tokens_in - tokens_out,
        "tokens_cut_share": _share(tokens_in - tokens_out, tokens_in),
        "loss_tokens_in": loss_in,
        "loss_tokens_cut": loss_cut,
        "loss_tokens_cut_share": _share(loss_cut, loss_in),
        "pad_slots": rows * L - tokens_out,
        "doc_pad": doc_pad,
        "doc_pad_share": doc_pad / (rows * L) if rows else None,
        "fill": tokens_out / (rows * L) if rows else None,
    }
    return _AtLen(
        pack={k: pack[k] for k in PACK_KEYS},
        truncation=truncation,
        strategies=strategies,
        costs=_costs(strategies, cfg, model),
        seconds=time.perf_counter() - t0,
        loss=overflow_loss(lengths, pieces, L, cfg.overflow),
    )


def _input(lengths, loss_counts=None, source_index=None, data=None) -> _Input:
    lengths = np.asarray(lengths)
    if lengths.ndim != 1:
        raise UsageError(f"lengths must be 1-D, got shape {lengths.shape}")
    if lengths.size and not np.issubdtype(lengths.dtype, np.integer):
        raise UsageError(f"lengths must be integers, got {lengths.dtype}")
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    if lengths.size and int(lengths.min()) < 0:
        i = int(np.argmin(lengths))
        raise UsageError(f"length #{i + 1} is {int(lengths[i])}; lengths must be >= 0")
    n = lengths.size
    src = (
        np.arange(n, dtype=np.int64)
        if source_index is None
        else np.ascontiguousarray(source_index, dtype=np.int64)
    )
    loss = None if loss_counts is None else np.ascontiguousarray(loss_counts, dtype=np.int64)
    if src.shape != (n,) or (loss is not None and loss.shape != (n,)):
        raise UsageError(
            f"{n} lengths but {src.size} source indices and "
            f"{'no' if loss is None else loss.size} loss counts"
        )
    return _Input(lengths=lengths, source_index=src, loss_counts=loss, data=data)


def _profile(
    inp: _Input,
    cfg: ProfileConfig,
    *,
    source: dict[str, Any],
    num_read: int | None,
    skipped,
    notes: list[str],
    on_stage,
    at: _AtLen | None = None,
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
        at = _at_len(inp, cfg, model, say)
        if at is None:
            raise _nothing_to_pack(inp, cfg)
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


def _advice_point(inp: _Input, cfg: ProfileConfig, model, cuts, counts, dist, given, points, say):
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
    at = _at_len(inp, c, model, lambda s: say(f"recommended --len {L:,}: {s}"))
    return (None if at is None else _point(at, inp, c)), (0.0 if at is None else at.seconds)


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
    inp = _input(lengths, loss_counts, source_index)
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


def loss_tokens_cut(data, pack_len: int) -> int | None:
    """Loss tokens beyond position `pack_len` in the over-length examples (what truncation would
    take from training; pack's tokens.loss_cut for --overflow truncate). Reads only those
    examples' labels. None when labels are unavailable."""
    idx = np.flatnonzero(np.asarray(data.lengths) > pack_len)
    if idx.size == 0:
        return 0
    table = getattr(data, "table", None)
    if (
        table is not None
        and not hasattr(table, "column")
        and getattr(table, "_indices", None) is None
    ):
        table = getattr(
            getattr(table, "data", None), "table", None
        )  # a datasets.Dataset without a mapping
    if table is None or not hasattr(table, "column") or "labels" not in table.column_names:
        return None
    from packtool.data.arrow import arrow_numpy
    from packtool.schema import IGNORE_INDEX

    total, start = 0, 0
    for chunk in table.column("labels").chunks:  # only the over-length rows' labels are read
        rows = idx[(idx >= start) & (idx < start + len(chunk))] - start
        start += len(chunk)
        if rows.size:
            offsets, values = arrow_numpy(chunk.offsets), arrow_numpy(chunk.values)
            for r in rows.tolist():
                total += int(
                    np.count_nonzero(values[offsets[r] + pack_len : offsets[r + 1]] != IGNORE_INDEX)
                )
    return total


def _data_source(data, source: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "kind": "data",
        "format": getattr(data, "format", ""),
        "tokenizer": dict(getattr(data, "tokenizer", {}) or {}),
        "cache_hit": bool(getattr(data, "cache_hit", False)),
        "tokenizer_backend": dict(getattr(data, "backend", {}) or {}),
        **(source or {}),
    }


def _data_input(data) -> _Input:
    return _input(data.lengths, data.loss_counts, getattr(data, "source_index", None), data=data)


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
        _data_input(data),
        cfg,
        source=_data_source(data, source),
        num_read=data.num_read,
        skipped=list(data.skipped),
        notes=list(getattr(data, "warnings", []) or []),
        on_stage=on_stage,
        advise=advise,
    )


# --------------------------------------------------------------------------------------------
# several --len values


def _is_data(x) -> bool:
    return hasattr(x, "lengths") and hasattr(x, "table")


def _point(at: _AtLen | None, inp: _Input, cfg: ProfileConfig) -> SweepPoint:
    """The sweep summary of one --len (`at` None: --overflow left nothing to pack)."""
    if at is None:
        lengths = inp.lengths
        tokens_in = int(lengths.sum())
        loss_in = None if inp.loss_counts is None else int(inp.loss_counts.sum())
        pack = dict.fromkeys(PACK_KEYS)
        pack.update(
            {
                "len": cfg.pack_len,
                "overflow": cfg.overflow,
                "strategy": "bfd",
                "order": stats.PACK_ORDER,
                "max_docs": stats.PACK_MAX_DOCS,
                "seed": stats.PACK_SEED,
                "pad_to_multiple": cfg.pad_to_multiple,
                "examples": int(lengths.size),
                "examples_packed": 0,
                "examples_dropped": int(lengths.size),
                "examples_dropped_empty": int(lengths.size - np.count_nonzero(lengths)),
                "examples_truncated": 0,
                "examples_split": 0,
                "split_parts": 0,
                "documents": 0,
                "rows": 0,
                "lower_bound_rows": 0,
                "tokens_in": tokens_in,
                "tokens_out": 0,
                "tokens_cut": tokens_in,
                "tokens_cut_share": 1.0 if tokens_in else 0.0,
                "loss_tokens_in": loss_in,
                "loss_tokens_cut": loss_in,
                "loss_tokens_cut_share": 1.0 if loss_in else 0.0,
                "pad_slots": 0,
                "doc_pad": 0,
            }
        )
        return SweepPoint(pack=pack, strategies={})
    summary = {}
    for name, s in at.strategies.items():
        c = at.costs[name]
        summary[name] = {
            "rows": s.rows,
            "occupancy": s.occupancy,
            "attention_waste": s.attention_waste,
            "relative_flops": c["relative_flops"],
            "flops": c["flops"],
            "gpu_hours": c.get("gpu_hours"),
        }
    return SweepPoint(pack=dict(at.pack), strategies=summary)


def _sweep(
    inp: _Input, cfg: ProfileConfig, lens: list[int], on_stage
) -> tuple[list[SweepPoint], dict[int, _AtLen]]:
    say = on_stage or (lambda _s: None)
    model = cfg.model or stats.reference_model()
    points, done = [], {}
    for L in lens:
        c = dataclasses.replace(cfg, pack_len=int(L))  # validates --len
        at = _at_len(inp, c, model, lambda s, L=L: say(f"--len {L:,}: {s}"))
        points.append(_point(at, inp, c))
        if at is not None:
            done[int(L)] = at
    return points, done


def sweep(data_or_lengths, cfg: ProfileConfig, lens, *, on_stage=None) -> list[SweepPoint]:
    """One SweepPoint per --len of `lens` (a list, or a --len text for parse_lens), in increasing
    order, each computed exactly as a full profile at that --len computes it (pack prediction,
    strategies, FLOPs). cfg.pack_len is ignored. A --len at which --overflow leaves nothing to pack
    gives a point with 0 rows and no strategies; --overflow error raises as pack would."""
    lens = parse_lens(lens) if isinstance(lens, str) else sorted({int(x) for x in lens})
    if not lens:
        raise UsageError("--len: no length given; e.g. --len 4096")
    inp = _data_input(data_or_lengths) if _is_data(data_or_lengths) else _input(data_or_lengths)
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
    among them (choose_len), with `sweep` attached. `lens` is a list or a --len text."""
    lens = parse_lens(lens) if isinstance(lens, str) else sorted({int(x) for x in lens})
    if not lens:
        raise UsageError("--len: no length given; e.g. --len 4096")
    is_data = _is_data(data_or_lengths)
    if len(lens) == 1:
        one = dataclasses.replace(cfg, pack_len=lens[0])
        if is_data:
            return profile_data(data_or_lengths, one, source=source, on_stage=on_stage)
        return profile_lengths(data_or_lengths, one, source=source, on_stage=on_stage)
    t0 = time.perf_counter()
    if is_data:
        data = data_or_lengths
        inp = _data_input(data)
        src, num_read, skipped = _data_source(data, source), data.num_read, list(data.skipped)
        notes = list(getattr(data, "warnings", []) or [])
    else:
        inp, src, num_read, skipped, notes = (
            _input(data_or_lengths),
            source or {"kind": "lengths"},
            None,
            [],
            [],
        )
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
            raise _nothing_to_pack(inp, dataclasses.replace(cfg, pack_len=lens[-1]))
        pick = max(done)
    main = dataclasses.replace(cfg, pack_len=pick)
    r = _profile(
        inp,
        main,
        source=src,
        num_read=num_read,
        skipped=skipped,
        notes=notes,
        on_stage=on_stage,
        at=done[pick],
        given=lens,
        points=points,
    )
    r.timings["sweep"] = time.perf_counter() - t0
    return r
