"""What `packtool pack --len L --overflow X` would write, predicted with pack's own overflow and
planner, and what each batching strategy costs on the same pieces: one --len at a time.

Per --len L (`at_len`; docs/ARCHITECTURE.md, "Semantics", Overflow):

    lengths int[n] (0 = empty) ──pack.overflow.apply_overflow(--overflow)──▶ pieces (1..L tokens)
        drop: over-length and empty examples left out; truncate: cut to L; split: parts;
        error: PacktoolError naming the example, as pack
    pieces.length ──strategies.simulate──▶ strategies; packed_bfd_* = plan_packs(pieces.length, L,
        "bfd", "sorted", 0, 0): the call pack/run.py makes with pack's defaults ─▶ pack["rows"]

--pad-to-multiple N (ProfileConfig.pad_to_multiple): as pack, each piece takes ceil(n/N)*N slots
(schema.Layout.slots); the strategies are simulated on those slots (what a kernel computes over),
and pack["doc_pad"] (= manifest tokens.doc_pad) with its share of the slots is the cost of the
padding inside documents; tokens_out stays the real tokens.

    Examples ──at_len──▶ AtLen: pack (as the manifest counts it), truncation,
                         strategies, costs (FLOPs, ÷ padding-free, savings, GPU-hours)
             ──sweep_point──▶ SweepPoint (one --len of a sweep)
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from packtool import schema
from packtool.config import ProfileConfig
from packtool.errors import PacktoolError, UsageError
from packtool.pack.overflow import apply_overflow, outcomes, overflow_loss
from packtool.stats.choice import share
from packtool.stats.flops import ModelSpec, gpu_hours, training_flops
from packtool.stats.strategies import (
    PACK_MAX_DOCS,
    PACK_ORDER,
    PACK_SEED,
    StrategyResult,
    simulate,
    simulate_pairs,
)
from packtool.stats.sweep import SweepPoint

BASELINES = ("pad_to_len", "random_padded")


@dataclass
class Examples:
    """Examples as profile sees them: every tokenized example, empty ones included."""

    lengths: np.ndarray  # int64[n], >= 0
    source_index: np.ndarray  # int64[n]: what an --overflow error names
    loss_counts: np.ndarray | None  # int64[n] or None (bare lengths)
    data: Any = None  # TokenizedData: its labels give truncation's loss cut
    # preference pairs: example k is pair k, its length both sides'; sides int64[2n] (chosen 2k,
    # rejected 2k+1) and each side's prompt are what pack's pair overflow reads
    sides: np.ndarray | None = None
    prompts: np.ndarray | None = None

    @property
    def nonempty(self) -> np.ndarray:
        return self.lengths > 0


def pair_examples(data) -> Examples:
    """A preference TokenizedData as profile sees it: one example a pair."""
    sides = np.ascontiguousarray(data.lengths, dtype=np.int64)
    loss = np.asarray(data.loss_counts, dtype=np.int64)
    return Examples(
        lengths=sides[0::2] + sides[1::2],
        source_index=np.asarray(data.source_index, dtype=np.int64)[0::2],
        loss_counts=loss[0::2] + loss[1::2],
        data=data,
        sides=sides,
        prompts=np.asarray(data.prompt_lengths, dtype=np.int64),
    )


def examples_of(lengths, loss_counts=None, source_index=None, data=None) -> Examples:
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
    return Examples(lengths=lengths, source_index=src, loss_counts=loss, data=data)


@dataclass
class AtLen:
    """One --len: the pack prediction, the overflow summary, strategies and costs (no strategies
    and no costs when --overflow leaves nothing to pack: pack stops there with an error)."""

    pack: dict[str, Any]
    truncation: dict[str, Any]
    strategies: dict[str, StrategyResult]
    costs: dict[str, dict[str, Any]]
    seconds: float
    loss: str | None = None  # pack's warning when --overflow loses > 1% (pack.overflow_loss)


def costs_of(strategies: dict[str, StrategyResult], cfg: ProfileConfig, model: ModelSpec) -> dict:
    out: dict[str, dict[str, Any]] = {}
    for name, s in strategies.items():
        lin, att = training_flops(model, s.slots, s.attention_work)
        out[name] = {"flops_linear": lin, "flops_attention": att, "flops": lin + att}
    ideal = out["padding_free"]["flops"]
    for c in out.values():
        c["relative_flops"] = c["flops"] / ideal if ideal else 1.0
        for base in BASELINES:
            b = out[base]["flops"]
            c[f"saving_vs_{base}"] = 1.0 - c["flops"] / b if b else 0.0
        if cfg.gpu is not None:
            c["gpu_hours"] = gpu_hours(c["flops"], cfg.gpu, cfg.mfu)
            for base in BASELINES:
                c[f"gpu_hours_saved_vs_{base}"] = gpu_hours(
                    out[base]["flops"] - c["flops"], cfg.gpu, cfg.mfu
                )
    return out


def loss_tokens_cut(data, pack_len: int, pieces=None) -> int | None:
    """Loss tokens beyond position `pack_len` in the over-length examples (what truncation would
    take from training; pack's tokens.loss_cut for --overflow truncate), or, with the `pieces` of
    a pair overflow, beyond each truncated side's cut. Reads only those examples' labels. None
    when labels are unavailable."""
    idx = np.flatnonzero(np.asarray(data.lengths) > pack_len)
    keep = pack_len
    if pieces is not None and data.task == "preference":
        kept = np.zeros(len(data.lengths), dtype=np.int64)
        kept[pieces.row] = pieces.length
        idx, keep = pieces.truncated, kept[pieces.truncated]
    if idx.size == 0:
        return 0
    table = data.table
    if not hasattr(table, "column") and getattr(table, "_indices", None) is None:
        # a datasets.Dataset without an indices mapping: its Arrow table (None stays None)
        table = getattr(getattr(table, "data", None), "table", None)
    if table is None or not hasattr(table, "column"):
        return None
    from packtool.data import labels

    names = table.column_names
    if labels.LABELS not in names and labels.LOSS_MASK not in names:
        return None
    return int(labels.loss_after(table, idx, keep).sum())  # only the over-length rows are read


def nothing_to_pack(inp: Examples, cfg: ProfileConfig) -> PacktoolError:
    """What pack says when --overflow leaves nothing (pack/run.py), with the shortest example;
    for pairs pack's pair message (its causes: a pair too long, a prompt leaving no room)."""
    if inp.sides is not None:
        from packtool.pack import pairs

        src, L = np.repeat(inp.source_index, 2), cfg.pack_len
        text = pairs.nothing_to_pack(inp.sides, inp.prompts, src, L, cfg.overflow, would=True)
        return PacktoolError(text)
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


def at_len(inp: Examples, cfg: ProfileConfig, model: ModelSpec, say) -> AtLen:
    """Pack's overflow, then every strategy on its pieces, at cfg.pack_len."""
    t0 = time.perf_counter()
    L, lengths = cfg.pack_len, inp.lengths
    pairs = inp.sides is not None
    # --overflow error: PacktoolError, as pack
    if pairs:  # preference pairs: pack's pair rules, pair batching
        from packtool.pack.pairs import apply_pair_overflow, pair_outcomes, pair_overflow_loss

        pieces = apply_pair_overflow(
            inp.sides, inp.prompts, np.repeat(inp.source_index, 2), L, cfg.overflow
        )
        oc = pair_outcomes(inp.sides, np.repeat(inp.source_index, 2), pieces)
    else:
        pieces = apply_overflow(lengths, inp.source_index, L, cfg.overflow)
        oc = outcomes(lengths, inp.source_index, pieces, L)
    n_all = int(lengths.size)
    nonempty = int(np.count_nonzero(lengths))
    over = int(np.count_nonzero(lengths > L))
    tokens_in = int(lengths.sum())
    tokens_out = int(pieces.length.sum())
    dropped_loss = None
    if inp.loss_counts is not None:
        dropped_loss = int(inp.loss_counts[oc.dropped].sum())
    elif not np.any(lengths[oc.dropped] > 0):
        dropped_loss = 0  # only empty examples dropped: no loss token among them
    tails = 0  # loss tokens in the cut-off tails of the truncated examples (pack's loss_cut_tails)
    if pieces.truncated.size:
        tails = None if inp.data is None else loss_tokens_cut(inp.data, L, pieces)
    loss_cut = None if dropped_loss is None or tails is None else dropped_loss + tails
    loss_in = None if inp.loss_counts is None else int(inp.loss_counts.sum())
    slots = schema.Layout(cfg.pad_to_multiple).slots(pieces.length)  # pack plans these
    doc_pad = int(slots.sum()) - tokens_out
    run = simulate_pairs if pairs else simulate
    strategies = (
        run(slots, L, cfg.batch_size, cfg.group_window, cfg.seed, say) if pieces.length.size else {}
    )
    rows = strategies["packed_bfd_varlen"].rows if strategies else 0
    # ProfileResult.pack / JSON "pack" / SweepPoint.pack: what `packtool pack --len L --overflow X`
    # (strategy bfd, order sorted, max_docs 0, seed 0) writes in its manifest:
    #   rows = counts.rows, documents = counts.documents, examples_* = counts.{packed,dropped,truncated,split},
    #   split_parts = counts.split_parts, tokens_in/out/cut = tokens.in/out/cut, loss_tokens_in = tokens.loss_in,
    #   loss_tokens_cut = tokens.loss_cut (None when labels are unknown), pad_slots = tokens.pad, fill,
    #   pad_to_multiple, doc_pad = tokens.doc_pad (0 when not padded), lower_bound_rows
    pack = {
        "len": L,
        "overflow": cfg.overflow,
        "strategy": "bfd",
        "order": PACK_ORDER,
        "max_docs": PACK_MAX_DOCS,
        "seed": PACK_SEED,
        "pad_to_multiple": cfg.pad_to_multiple,
        "examples": n_all,
        "examples_packed": n_all - int(oc.truncated.size + oc.split.size + oc.dropped.size),
        "examples_dropped": int(oc.dropped.size),
        "examples_dropped_empty": n_all - nonempty,
        "examples_truncated": int(oc.truncated.size),
        "examples_split": int(oc.split.size),
        "split_parts": int(oc.split_parts.sum()),
        "documents": int(pieces.length.size),
        "rows": rows,
        "lower_bound_rows": -(-(tokens_out + doc_pad) // L),
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "tokens_cut": tokens_in - tokens_out,
        "tokens_cut_share": share(tokens_in - tokens_out, tokens_in),
        "loss_tokens_in": loss_in,
        "loss_tokens_cut": loss_cut,
        "loss_tokens_cut_share": share(loss_cut, loss_in),
        "pad_slots": rows * L - tokens_out,
        "doc_pad": doc_pad,
        "doc_pad_share": doc_pad / (rows * L) if rows else None,
        "fill": tokens_out / (rows * L) if rows else None,
    }
    truncation = {  # what --overflow takes from the examples over --len (the v1 name)
        "len": L,
        "policy": cfg.overflow,
        "examples_over": over,
        "examples_over_share": over / nonempty if nonempty else 0.0,
        "tokens_cut": pack["tokens_cut"],
        "tokens_cut_share": pack["tokens_cut_share"],
        "loss_tokens_cut": loss_cut,
        "examples_dropped": pack["examples_dropped"],
        "examples_truncated": pack["examples_truncated"],
        "examples_split": pack["examples_split"],
        "split_parts": pack["split_parts"],
    }
    return AtLen(
        pack=pack,
        truncation=truncation,
        strategies=strategies,
        costs=costs_of(strategies, cfg, model) if strategies else {},
        seconds=time.perf_counter() - t0,
        loss=pair_overflow_loss(oc, L, cfg.overflow)
        if pairs
        else overflow_loss(lengths, pieces, L, cfg.overflow),
    )


def sweep_point(at: AtLen) -> SweepPoint:
    """The sweep summary of one --len (no strategies: --overflow left nothing to pack)."""
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
