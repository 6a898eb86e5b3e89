"""What to do with the data: strategy, --len, --overflow and the exact `packtool pack` command.
Pure Python + numpy; a function of a ProfileResult (duck-typed: stats does not import the profiler).

    lengths, loss counts ──cuts_by_len──▶ cuts {L: what drop / truncate / split take at --len L}
                                                │  (profiler: ProfileResult.cuts)
    ProfileResult (strategies, costs, sweep) ───┼──recommend──▶ Recommendation
                                                ▼                 strategy   packed BFD + varlen, or length-grouped
                                          choose_len              --len      and why
                                          (--len, overflow, why)  overflow   drop | split, and why
                                                                  cut        tokens, examples, loss tokens
                                                                  command    packtool pack DATA --len N [--overflow split] --out packed/

The rules (constants below; docs/ARCHITECTURE.md, "Semantics", Overflow, for what each policy does):

    ok(L)       dropping the examples longer than L loses <= MAX_LOST_SHARE of the tokens
                (and of the loss tokens, when they are known)
    outliers(L) at most OUTLIER_SHARE of the examples are longer than L

    one --len L0   ok(L0)                        → L0, drop (no --overflow flag: drop is pack's default)
                   outliers(L0)                  → L0, split (a few long examples do not move --len)
                   the smallest power of two P ok, L0 < P <= MAX_LEN_RAISE·L0
                                                 → P, drop
                   otherwise                     → L0, split
    a sweep        the smallest swept L with ok(L), and among those the smallest whose packed BFD
                   FLOPs are within FLAT of the best; else the same among outliers(L), with split;
                   else the longest swept L, with split (it splits the fewest; one --len alone
                   keeps L0 in that case: the reasons of both say so)

    strategy       packed BFD + varlen kernel (rows of exactly --len, position_ids / cu_seqlens)
                   unless length-grouped batches cost fewer FLOPs; "nearly as good" when
                   length-grouped is within NEARLY of it; the dense-mask cost is always said

Every ratio is printed as "N× fewer", "about the same" or "N× more": never a negative saving.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

MAX_LOST_SHARE = 0.01  # drop may lose at most 1 % of the tokens (and of the loss tokens)
OUTLIER_SHARE = 0.01  # at most 1 % of the examples longer than --len: split them, keep --len
MAX_LEN_RAISE = 4  # one --len: raise it at most two doublings
NEARLY = 0.05  # length-grouped within 5 % of packed BFD + varlen: "nearly as good"
FLAT = 0.02  # a sweep: the smallest --len whose packing is within 2 % of the best swept one
MAX_POW2 = 1 << 23  # the largest power of two <= config.MAX_PACK_LEN (64**4 - 1)
OUT = "packed/"
PACKED = "packed_bfd_varlen"
DENSE = "packed_bfd_dense"
GROUPED = "length_grouped"
WITHOUT_VARLEN = (
    "length_grouped",
    "packed_bfd_dense",
    "packed_ffd_dense",
    "random_padded",
    "pad_to_len",
)
LABELS = {
    "packed_bfd_varlen": "packed BFD + varlen",
    "packed_bfd_dense": "packed BFD + dense mask",
    "packed_ffd_dense": "packed FFD + dense mask",
    "length_grouped": "length-grouped batches",
    "random_padded": "random padded batches",
    "pad_to_len": "pad to --len",
    "padding_free": "padding-free",
}


# --------------------------------------------------------------------------------------------
# what each policy takes at each --len


def candidate_lens(longest: int, given: list[int] | tuple[int, ...]) -> list[int]:
    """The given lengths and every power of two above the shortest of them, up to the first one
    that holds the longest example (at most MAX_POW2):

        longest 11,540, given [4096]   →  [4096, 8192, 16384]
    """
    out = {int(g) for g in given}
    lo = min(out)
    p = 1
    while p <= lo:
        p <<= 1
    while p <= MAX_POW2:
        out.add(p)
        if p >= longest:
            break
        p <<= 1
    return sorted(out)


def cuts_by_len(
    lengths: np.ndarray, loss_counts: np.ndarray | None, lens
) -> dict[int, dict[str, Any]]:
    """Per --len L, from the lengths alone (examples with 0 tokens are left out by the caller):

        examples_over     #{n > L}
        tokens_over       Σ n over them          what --overflow drop takes
        tokens_truncated  Σ (n - L) over them    what --overflow truncate takes
        loss_tokens_over  their loss tokens      what drop takes from the loss (None: unknown)
        split_parts       Σ ceil(n / L)          the documents --overflow split makes of them

    One pass over the lengths for the shortest L, then over the shrinking tail for each longer
    one (no sort: 10M lengths take about as long as one comparison each per L)."""
    lens = sorted({int(x) for x in lens})
    n = np.asarray(lengths)
    loss = None if loss_counts is None else np.asarray(loss_counts)
    out: dict[int, dict[str, Any]] = {}
    if not lens:
        return out
    keep = n > lens[0]
    tail = n[keep]
    tail_loss = None if loss is None else loss[keep]
    for L in lens:
        if tail.size and L != lens[0]:
            keep = tail > L
            tail = tail[keep]
            tail_loss = None if tail_loss is None else tail_loss[keep]
        over = int(tail.size)
        tokens_over = int(tail.sum(dtype=np.int64))
        out[L] = {
            "len": L,
            "examples_over": over,
            "tokens_over": tokens_over,
            "tokens_truncated": tokens_over - L * over,
            "loss_tokens_over": None if tail_loss is None else int(tail_loss.sum(dtype=np.int64)),
            "split_parts": int(((tail.astype(np.int64) + (L - 1)) // L).sum()),
        }
    return out


# --------------------------------------------------------------------------------------------
# choosing --len and --overflow


@dataclass(frozen=True)
class Totals:
    examples: int  # with at least one token
    tokens: int
    loss_tokens: int | None
    longest: int
    empty: int = 0


def _share(part: int | None, whole: int | None) -> float | None:
    if part is None or whole is None:
        return None
    return part / whole if whole else 0.0


def _ok(c: dict, t: Totals) -> bool:
    loss = _share(c["loss_tokens_over"], t.loss_tokens)
    return _share(c["tokens_over"], t.tokens) <= MAX_LOST_SHARE and (
        loss is None or loss <= MAX_LOST_SHARE
    )


def _outliers(c: dict, t: Totals) -> bool:
    return _share(c["examples_over"], t.examples) <= OUTLIER_SHARE


def _plural(k: int, word: str) -> str:
    return f"{k:,} {word}{'' if k == 1 else 's'}"


def _pct(x: float | None) -> str:
    """A share: two decimals below 1 % (0.33 %), one above; a non-zero share never shows as 0."""
    if x is None:
        return "?"
    if 0 < x < 0.0001:
        return "<0.01%"
    return f"{x:.2%}" if x < 0.01 else f"{x:.1%}"


def _over_text(c: dict, t: Totals) -> str:
    """'3 examples (1.0%) are longer, holding 7.2% of tokens (6.3% of loss tokens)'."""
    k = c["examples_over"]
    text = (
        f"{_plural(k, 'example')} ({_pct(_share(k, t.examples))}) {'is' if k == 1 else 'are'} longer, "
        f"holding {_pct(_share(c['tokens_over'], t.tokens))} of tokens"
    )
    loss = _share(c["loss_tokens_over"], t.loss_tokens)
    return text + ("" if loss is None else f" ({_pct(loss)} of loss tokens)")


@dataclass(frozen=True)
class LenChoice:
    pack_len: int
    overflow: str  # drop | split
    rule: str  # fits | drop | raise | outliers | split | sweep-*: which rule decided
    len_reason: str
    overflow_reason: str


def _overflow_reason(c: dict, t: Totals, overflow: str) -> str:
    k = c["examples_over"]
    if k == 0:
        return (
            "no example is longer than --len: --overflow does not matter (drop is pack's default)"
        )
    trunc = (
        f"truncate would cut the ends of {_plural(k, 'example')} ({c['tokens_truncated']:,} tokens)"
    )
    if overflow == "drop":
        return (
            f"drop (pack's default): leaving out {_plural(k, 'example')} loses only "
            f"{_pct(_share(c['tokens_over'], t.tokens))} of tokens (at most {MAX_LOST_SHARE:.0%}); {trunc}"
        )
    them = "it" if k == 1 else "them"
    return (
        f"split: dropping {them} would lose {_pct(_share(c['tokens_over'], t.tokens))} of tokens (more than "
        f"{MAX_LOST_SHARE:.0%}); split keeps every token as {c['split_parts']:,} documents of at most --len "
        f"(each part's first token carries no loss); {trunc}"
    )


def _smallest_within(lens: list[int], points: dict | None) -> tuple[int, str]:
    """The smallest of `lens` whose packed BFD + varlen FLOPs (÷ padding-free) are within FLAT of
    the best of them, and why when that is not simply the smallest; without sweep points, the
    smallest."""
    rel = {}
    if points:
        rel = {L: points[L].relative_flops(PACKED) for L in lens if L in points and points[L].rows}
        rel = {L: v for L, v in rel.items() if v is not None}
    if not rel:
        return lens[0], ""
    best = min(rel.values())
    pick = min(L for L, v in rel.items() if v <= best * (1 + FLAT))
    if pick == lens[0]:
        return pick, ""
    first = rel.get(lens[0])
    worse = "" if first is None else f" (--len {lens[0]:,}: {first:.3f}×)"
    return pick, (
        f"; it packs within {FLAT:.0%} of the best swept --len, {rel[pick]:.3f}× padding-free's FLOPs"
        f"{worse}"
    )


def choose_len(
    cuts: dict[int, dict],
    totals: Totals,
    given: list[int],
    points: dict | None = None,
    multiple: int = 1,
) -> LenChoice:
    """--len and --overflow by the rules of the module docstring. `cuts` must hold every given
    length and, for one given length, the powers of two above it (candidate_lens); with
    --pad-to-multiple N (`multiple`) only the lengths pack takes with it (multiples of N). The
    reasons read after "--len N: "."""
    given = sorted({int(g) for g in given})
    t = totals
    if len(given) == 1:
        L0 = given[0]
        c0 = cuts[L0]
        if c0["examples_over"] == 0:
            return LenChoice(
                L0,
                "drop",
                "fits",
                f"every example fits (longest {t.longest:,})",
                _overflow_reason(c0, t, "drop"),
            )
        if _ok(c0, t):
            return LenChoice(
                L0,
                "drop",
                "drop",
                f"keeps all but a small tail: {_over_text(c0, t)}",
                _overflow_reason(c0, t, "drop"),
            )
        above = [L for L in sorted(cuts) if L > L0 and L & (L - 1) == 0 and L % multiple == 0]
        whole = next((L for L in above if _ok(cuts[L], t)), None)
        if _outliers(c0, t):
            hint = (
                f"; --len {whole:,} would keep {'it' if c0['examples_over'] == 1 else 'them'} whole"
                if whole
                else ""
            )
            return LenChoice(
                L0,
                "split",
                "outliers",
                f"only {_over_text(c0, t)}: too few to make every row longer{hint}",
                _overflow_reason(c0, t, "split"),
            )
        if whole is not None and whole <= MAX_LEN_RAISE * L0:
            c = cuts[whole]
            left = "every example fits" if c["examples_over"] == 0 else _over_text(c, t)
            return LenChoice(
                whole,
                "drop",
                "raise",
                f"the smallest power of two that keeps all but {MAX_LOST_SHARE:.0%} of tokens ({left}); "
                f"at --len {L0:,} {_over_text(c0, t)}",
                _overflow_reason(c, t, "drop"),
            )
        far = f"--len {whole:,}" if whole else "a longer --len than the planner takes"
        return LenChoice(
            L0,
            "split",
            "split",
            f"{_over_text(c0, t)}; keeping them whole needs {far}, more than {MAX_LEN_RAISE}× "
            "--len, so --len stays and split keeps their tokens (a --len sweep takes its longest "
            f"--len instead, which splits the fewest: `packtool profile DATA --len {L0}-{MAX_LEN_RAISE * L0}`)",
            _overflow_reason(c0, t, "split"),
        )
    ok = [L for L in given if _ok(cuts[L], t)]
    if ok:
        pick, why = _smallest_within(ok, points)
        c = cuts[pick]
        fits = c["examples_over"] == 0
        if pick != ok[0]:
            base = (
                f"every example fits (longest {t.longest:,})"
                if fits
                else f"keeps all but {MAX_LOST_SHARE:.0%} of tokens: {_over_text(c, t)}"
            )
        elif fits:
            base = f"the shortest swept --len that every example fits in (longest {t.longest:,})"
        else:
            base = (
                f"the shortest swept --len that keeps all but {MAX_LOST_SHARE:.0%} of tokens: "
                f"{_over_text(c, t)}"
            )
        return LenChoice(pick, "drop", "sweep-ok", base + why, _overflow_reason(c, t, "drop"))
    few = [L for L in given if _outliers(cuts[L], t)]
    if few:
        pick, why = _smallest_within(few, points)
        c = cuts[pick]
        return LenChoice(
            pick,
            "split",
            "sweep-outliers",
            f"every swept --len would drop more than {MAX_LOST_SHARE:.0%} of tokens; here only "
            f"{_over_text(c, t)}" + why,
            _overflow_reason(c, t, "split"),
        )
    pick = given[-1]
    c = cuts[pick]
    return LenChoice(
        pick,
        "split",
        "sweep-split",
        f"the longest swept --len, which splits the fewest examples: even here {_over_text(c, t)} "
        f"(one --len alone stays as given and splits, unless a --len at most {MAX_LEN_RAISE}× longer "
        f"drops no more than {MAX_LOST_SHARE:.0%} of tokens)",
        _overflow_reason(c, t, "split"),
    )


# --------------------------------------------------------------------------------------------
# the recommendation


def versus(flops: float, base: float, what: str) -> str:
    """'2.31× fewer training FLOPs than X', 'about the same training FLOPs as X' or '1.20× more
    training FLOPs than X': a ratio of positive numbers, never a negative saving."""
    if not (flops > 0 and base > 0):
        return f"about the same training FLOPs as {what}"
    r = base / flops
    if r >= 1.005:
        return f"{r:.2f}× fewer training FLOPs than {what}"
    if r > 1 / 1.005:
        return f"about the same training FLOPs as {what}"
    return f"{1 / r:.2f}× more training FLOPs than {what}"


def hours_versus(hours: float, base: float, what: str) -> str:
    """'saves 12.3 GPU-hours against X' or 'costs 4.1 GPU-minutes more than X' (never negative)."""
    d = base - hours
    if d >= 0:
        return f"saves {gpu_time(d, 'GPU-')} against {what}"
    return f"costs {gpu_time(-d, 'GPU-')} more than {what}"


def gpu_time(h: float, prefix: str = "") -> str:
    """Hours, readably: '1,234 h', '12.3 h', '42 min', '4.1 min', '8.4 s'; with prefix 'GPU-' the
    units are spelled out ('12.3 GPU-hours', '4.1 GPU-minutes', '8.4 GPU-seconds')."""
    units = ("hours", "minutes", "seconds") if prefix else ("h", "min", "s")
    h = abs(h)
    value, unit = (
        (h, units[0]) if h >= 1 else (h * 60, units[1]) if h * 60 >= 1 else (h * 3600, units[2])
    )
    if value >= 100 or (unit != units[0] and value >= 10):
        text = f"{value:,.0f}"
    elif unit == units[0]:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2g}" if value >= 0.01 else "0"
    return f"{text} {prefix}{unit}"


def pack_command(
    data: str | None, pack_len: int, overflow: str, extra: list[str] | tuple[str, ...] = ()
) -> str:
    """`packtool pack DATA --len N [--overflow X] [extra...] --out packed/`, every word shell-quoted;
    --overflow only when it is not drop (pack's default); DATA when the source is not a dataset."""
    words = ["packtool", "pack", shlex.quote(data) if data else "DATA", "--len", str(int(pack_len))]
    if overflow != "drop":
        words += ["--overflow", overflow]
    words += [shlex.quote(str(w)) for w in extra]
    return " ".join(words + ["--out", OUT])


@dataclass(frozen=True)
class Recommendation:
    """What to run and why (module docstring). Every number is >= 0; `to_json` is plain JSON."""

    strategy: str  # packed_bfd_varlen | length_grouped
    strategy_label: str
    strategy_reason: str
    relative_flops: dict[str, float]  # per strategy, ÷ padding-free at evidence_len
    dense_mask: str  # what packed rows cost without a varlen kernel
    without_varlen: str  # the cheapest strategy that needs no varlen kernel
    length_grouped_nearly_as_good: bool
    pack_len: int
    len_reason: str
    overflow: str
    overflow_reason: str
    rule: str
    cut: dict[
        str, Any
    ]  # tokens, tokens_share, examples_dropped, examples_split, split_parts, loss_tokens, loss_tokens_share
    rows: int | None  # rows pack writes at (pack_len, overflow), when that was simulated
    evidence_len: int  # the --len the FLOP figures come from
    evidence_overflow: str
    command: str
    gpu: dict[str, Any] | None = (
        None  # {"name", "hours", "vs_random_padded", "vs_pad_to_len"} with --gpu
    )
    hints: list[str] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # cuts_by_len, for the JSON
    skipped: dict[str, int] | None = None  # {"records", "read"} when --on-error skip skipped some
    evidence_note: str = ""  # when the FLOP ratios are not at the table's (--len, --overflow)

    def skipped_text(self) -> str:
        """'200 of 300 records skipped (67%)', or '' when none were."""
        s = self.skipped
        if not s or not s.get("records"):
            return ""
        return f"{s['records']:,} of {s['read']:,} records skipped ({_pct(_share(s['records'], s['read']))})"

    def cut_text(self) -> str:
        """'drops 1 example: 11,540 tokens (6.8%), 5,730 loss tokens (6.3%)', 'nothing cut; …'."""
        c = self.cut
        empty = (
            ""
            if not c["examples_empty"]
            else f" ({_plural(c['examples_empty'], 'empty example')} dropped)"
        )
        if self.overflow == "split" and c["examples_split"]:
            return (
                f"nothing cut; {_plural(c['examples_split'], 'example')} split into {c['split_parts']:,} "
                f"documents{empty}"
            )
        over = c["examples_dropped"] - c["examples_empty"]
        if not over:
            return "nothing cut" + empty
        loss = (
            ""
            if c["loss_tokens"] is None
            else f", {c['loss_tokens']:,} loss tokens ({_pct(c['loss_tokens_share'])})"
        )
        return f"drops {_plural(over, 'example')}: {c['tokens']:,} tokens ({_pct(c['tokens_share'])}){loss}{empty}"

    def summary(self) -> str:
        """One line for a title: strategy, --len, overflow and the saving."""
        flag = "" if self.overflow == "drop" else f" --overflow {self.overflow}"
        rel = self.relative_flops.get(self.strategy)
        cost = "" if rel is None else f", {rel:.2f}× padding-free FLOPs"
        skipped = self.skipped_text()
        return (
            f"recommended: {self.strategy_label}{cost} · --len {self.pack_len:,}{flag} · {self.cut_text()}"
            + (f" · {skipped}" if skipped else "")
        )

    def lines(self) -> list[tuple[str, str]]:
        """(label, text) rows for the terminal block."""
        rows = [
            ("strategy", f"{self.strategy_label}: {self.strategy_reason}"),
            ("", self.dense_mask),
        ]
        if self.evidence_note:
            rows.append(("", self.evidence_note))
        rows.append(("--len", f"{self.pack_len:,}: {self.len_reason}"))
        rows.append(("overflow", self.overflow_reason))
        rows.append(
            (
                "cut",
                self.cut_text()
                + ("" if self.rows is None else f"; {_plural(self.rows, 'row')}")
                + (f"; {self.skipped_text()} before profiling" if self.skipped else ""),
            )
        )
        if self.gpu:
            rows.append(
                (
                    "GPU time",
                    f"{gpu_time(self.gpu['hours'])} on {self.gpu['name'].upper()} (one epoch): "
                    f"{self.gpu['vs_random_padded']}",
                )
            )
        for h in self.hints:
            rows.append(("note", h))
        rows.append(("next" if self.strategy == PACKED else "to pack", self.command))
        return rows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _totals(r) -> Totals:
    c = r.counts
    return Totals(
        examples=int(c["examples"]),
        tokens=int(c["tokens"]),
        loss_tokens=c.get("loss_tokens"),
        longest=int(r.lengths["max"] or 0),
        empty=int(c.get("examples_empty") or 0),
    )


def _cases(r) -> list[tuple[int, str, int, dict[str, dict[str, Any]], float | None]]:
    """Every simulated (len, overflow, rows, per-strategy costs, packed fill) of `r`: the profile
    itself, its advice point, its sweep points."""
    cfg = r.config
    out = [
        (
            cfg.pack_len,
            cfg.overflow,
            int((r.pack or {}).get("rows") or 0),
            {n: dict(c) for n, c in r.costs.items()},
            (r.pack or {}).get("fill"),
        )
    ]
    extra = [getattr(r, "advice_point", None)] + list(getattr(r, "sweep", None) or [])
    out += [
        (p.pack_len, p.overflow, p.rows, p.strategies, p.fill)
        for p in extra
        if p is not None and p.rows
    ]
    return out


def _evidence(r, pack_len: int, overflow: str, nothing_over: bool):
    """The case the FLOP figures come from: the one simulated at (pack_len, overflow), else the
    profile itself. Returns (len, overflow, rows or None, costs, fill)."""
    for L, ov, rows, costs, fill in _cases(r):
        if L == pack_len and (ov == overflow or nothing_over):
            return L, ov, rows, costs, fill
    L, ov, _, costs, fill = _cases(r)[0]
    return L, ov, None, costs, fill


def _strategy(ev: dict[str, dict[str, Any]], gpu: Any) -> dict[str, Any]:
    f = {n: float(c["flops"]) for n, c in ev.items()}
    rel = {n: float(c["relative_flops"]) for n, c in ev.items()}
    pv, lg = f[PACKED], f[GROUPED]
    nearly = lg <= pv * (1 + NEARLY)
    strategy = GROUPED if lg < pv else PACKED
    s = f[strategy]
    base = f"{rel[strategy]:.2f}× padding-free's FLOPs; " + versus(
        s, f["random_padded"], "random padded batches"
    )
    if strategy == PACKED:
        reason = (
            base + "; rows of exactly --len, each document attending only to itself "
            "(a varlen kernel: position_ids / cu_seqlens, e.g. FlashAttention varlen)"
        )
        if nearly:
            reason += (
                f". Plain length-grouped batching is nearly as good ({rel[GROUPED]:.2f}×, within "
                f"{NEARLY:.0%}) and needs neither packing nor a varlen kernel"
            )
    else:
        reason = (
            base
            + f"; packing costs more here ({rel[PACKED]:.2f}×: rows are not filled), so batch by "
            "length (e.g. group_by_length) or lower --len"
        )
    dense_text = ""
    if DENSE in f:
        dense_text = (
            f"without a varlen kernel, packed rows with a dense mask cost {rel[DENSE]:.2f}× padding-free's "
            f"FLOPs ({f[DENSE] / f[PACKED]:.2f}× the varlen rows')"
            if f[PACKED]
            else ""
        )
    no_varlen = min(
        (n for n in WITHOUT_VARLEN if n in f), key=lambda n: (f[n], WITHOUT_VARLEN.index(n))
    )
    if dense_text and no_varlen != DENSE:
        dense_text += f"; the cheapest option without one is {LABELS.get(no_varlen, no_varlen)} ({rel[no_varlen]:.2f}×)"
    out = {
        "strategy": strategy,
        "reason": reason,
        "dense": dense_text,
        "without_varlen": no_varlen,
        "nearly": bool(nearly),
        "relative": {n: rel[n] for n in ev},
        "gpu": None,
    }
    if gpu is not None and ev[strategy].get("gpu_hours") is not None:
        h = float(ev[strategy]["gpu_hours"])
        out["gpu"] = {
            "name": gpu.name,
            "hours": h,
            "vs_random_padded": hours_versus(
                h, float(ev["random_padded"]["gpu_hours"]), "random padded batches"
            ),
            "vs_pad_to_len": hours_versus(h, float(ev["pad_to_len"]["gpu_hours"]), "pad to --len"),
        }
    return out


def recommend(r) -> Recommendation:
    """The recommendation for a ProfileResult `r` (with its sweep, when it has one)."""
    cfg = r.config
    sweep = getattr(r, "sweep", None) or []
    given = [p.pack_len for p in sweep] if sweep else [cfg.pack_len]
    points = {p.pack_len: p for p in sweep} if sweep else None
    t = _totals(r)
    cuts = r.cuts if getattr(r, "cuts", None) else None
    if not cuts or any(L not in cuts for L in given):
        raise ValueError("the ProfileResult has no cuts_by_len for its --len values")
    choice = choose_len(cuts, t, given, points, getattr(r.config, "pad_to_multiple", 1))
    L, ov = choice.pack_len, choice.overflow
    c = cuts[L]
    split = ov == "split"
    over = c["examples_over"]
    cut = {
        "examples_over": over,
        "tokens": 0 if split else c["tokens_over"],
        "tokens_share": 0.0 if split else _share(c["tokens_over"], t.tokens),
        "examples_dropped": (0 if split else over) + t.empty,
        "examples_empty": t.empty,
        "examples_split": over if split else 0,
        "split_parts": c["split_parts"] if split else 0,
        "loss_tokens": 0 if split else c["loss_tokens_over"],
        "loss_tokens_share": 0.0 if split else _share(c["loss_tokens_over"], t.loss_tokens),
    }
    ev_len, ev_ov, rows, ev, fill = _evidence(r, L, ov, over == 0)
    s = _strategy(ev, cfg.gpu)
    hints = []
    if ev_len != L:
        hints.append(
            f"the FLOP figures are at the profiled --len {ev_len:,}; "
            f"`packtool profile DATA --len {min(L, ev_len)},{max(L, ev_len)}` compares them"
        )
    elif ev_ov != ov and over:
        hints.append(
            f"the FLOP figures are at the profiled --overflow {ev_ov}; "
            f"`packtool profile DATA --len {L} --overflow {ov}` shows them for {ov}"
        )
    evidence_note = ""
    table_len = L if sweep else cfg.pack_len
    if ev_len == L and (ev_len, ev_ov) != (table_len, cfg.overflow):
        # e.g. 1.01× here against 1.02× in the table: split keeps the long examples the table's
        # drop leaves out, so the two are different simulations
        left_out = cuts[table_len]["examples_over"] if cfg.overflow == "drop" else 0
        evidence_note = (
            f"these ratios are simulated as recommended, at --len {ev_len:,} --overflow {ev_ov}; "
            f"the {'sweep ' if sweep else ''}table above is at --overflow {cfg.overflow}"
            + (f", without the {_plural(left_out, 'longer example')}" if left_out else "")
        )
    if not sweep and s["relative"][PACKED] > 1 + NEARLY and fill is not None:
        lo, hi = max(2, _pow2_below(ev_len // 4)), min(MAX_POW2, 2 * _pow2_below(ev_len))
        hints.append(
            f"packed rows are only {fill:.0%} full at --len {ev_len:,}: "
            f"`packtool profile DATA --len {lo}-{hi}` shows how other lengths pack"
        )
    if t.empty:
        hints.append(
            f"{_plural(t.empty, 'example')} without tokens {'is' if t.empty == 1 else 'are'} always dropped"
        )
    data = (r.source or {}).get("data")
    if not data:
        hints.append("profiled from lengths, not a dataset: put your dataset in place of DATA")
    extra = list((r.source or {}).get("pack_args") or ())
    n = getattr(r.config, "pad_to_multiple", 1)
    if n > 1 and "--pad-to-multiple" not in extra:
        extra += ["--pad-to-multiple", str(n)]  # the layout the prediction was made with
    command = pack_command(data, L, ov, extra)
    read, n_skipped = (
        int(r.counts.get("examples_read") or 0),
        int(r.counts.get("examples_skipped") or 0),
    )
    if n_skipped:
        share = _share(n_skipped, read)
        keeps = "--on-error" in extra
        hints.append(
            ("the command keeps --on-error skip, so pack skips them too: " if keeps else "")
            + f"{n_skipped:,} of {read:,} records read ({_pct(share)}) are skipped and in none of these figures"
            + (
                "; that is most of the data: check a record with --on-error error before packing"
                if share > 0.5
                else "; --on-error error shows the first bad record"
            )
        )
    return Recommendation(
        strategy=s["strategy"],
        strategy_label=LABELS.get(s["strategy"], s["strategy"]),
        strategy_reason=s["reason"],
        relative_flops=s["relative"],
        dense_mask=s["dense"],
        without_varlen=s["without_varlen"],
        length_grouped_nearly_as_good=s["nearly"],
        pack_len=L,
        len_reason=choice.len_reason,
        overflow=ov,
        overflow_reason=choice.overflow_reason,
        rule=choice.rule,
        cut=cut,
        rows=rows,
        evidence_len=ev_len,
        evidence_overflow=ev_ov,
        command=command,
        gpu=s["gpu"],
        hints=hints,
        candidates=[cuts[k] for k in sorted(cuts)],
        skipped={"records": n_skipped, "read": read} if n_skipped else None,
        evidence_note=evidence_note,
    )


def _pow2_below(x: int) -> int:
    """The largest power of two <= x (1 for x < 2)."""
    return 1 << max(0, int(math.floor(math.log2(max(1, x)))))
