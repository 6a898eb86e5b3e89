"""What to do with the data, in words: the reasons for --len, --overflow and the strategy, the
hints, and the exact `packtool pack` command. The choice itself (numbers, rules, thresholds) is
stats/choice.py's; this module words it.

    cuts, Totals ──choice.pick_len──▶ LenPick ──choose_len──▶ LenChoice (+ len_reason, overflow_reason)
    ProfileResult ──recommend──▶ Recommendation
                                   strategy   packed BFD + varlen, or length-grouped, and why
                                   --len      and why
                                   overflow   drop | split, and why
                                   cut        tokens, examples, loss tokens
                                   command    packtool pack DATA --len N [--overflow split] --out packed/

It lives in stats/, not report/: the words are part of the result (the Recommendation's JSON
carries the reasons and the command for the terminal, the PNG and a Python caller).

Every ratio is printed as "N× fewer", "about the same" or "N× more": never a negative saving.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from packtool.stats.choice import (
    DENSE,
    FLAT,
    GROUPED,
    MAX_LEN_RAISE,
    MAX_LOST_SHARE,
    MAX_POW2,
    NEARLY,
    PACKED,
    LenPick,
    StrategyPick,
    Totals,
    cut_at,
    cut_of_pack,
    evidence,
    pick_len,
    pick_strategy,
    pow2_below,
    share,
    totals_of,
)
from packtool.stats.flops import gpu_time, hours_versus, versus
from packtool.stats.strategies import STRATEGY_LABELS

OUT = "packed/"
# the recommendation's names of the strategies (STRATEGY_LABELS but for random padded batches)
LABELS = {**STRATEGY_LABELS, "random_padded": "random padded batches"}


# --------------------------------------------------------------------------------------------
# --len and --overflow


def _plural(k: int, word: str) -> str:
    return f"{k:,} {word}{'' if k == 1 else 's'}"


def _pct(x: float | None) -> str:
    """A share: two decimals below 1 % (0.33 %), one above; a non-zero share never shows as 0."""
    if x is None:
        return "?"
    if 0 < x < 0.0001:
        return "<0.01%"
    return f"{x:.2%}" if x < 0.01 else f"{x:.1%}"


def _unit(t: Totals) -> str:  # what one example is: a pair of preference data, else an example
    return "pair" if t.pairs else "example"


def _over_text(c: dict, t: Totals) -> str:
    """'3 examples (1.0%) are longer, holding 7.2% of tokens (6.3% of loss tokens)'."""
    k = c["examples_over"]
    text = (
        f"{_plural(k, _unit(t))} ({_pct(share(k, t.examples))}) {'is' if k == 1 else 'are'} longer, "
        f"holding {_pct(share(c['tokens_over'], t.tokens))} of tokens"
    )
    loss = share(c["loss_tokens_over"], t.loss_tokens)
    return text + ("" if loss is None else f" ({_pct(loss)} of loss tokens)")


@dataclass(frozen=True)
class LenChoice:
    pack_len: int
    overflow: str  # drop | split
    rule: str  # fits | drop | raise | outliers | split | sweep-*: which rule decided
    len_reason: str
    overflow_reason: str


def _overflow_reason(c: dict, t: Totals, overflow: str, cut: dict | None = None) -> str:
    """Why --overflow; `cut`: cut_of_pack's exact figures at this case, when it was simulated."""
    k = c["examples_over"]
    if k == 0:
        return f"no {_unit(t)} is longer than --len: --overflow does not matter (drop is pack's default)"
    trunc = (  # pairs: Σ (n - L) is a lower bound of what the pair rule cuts (choice.cut_at)
        f"truncate would cut at least {c['tokens_truncated']:,} tokens from the answers of "
        f"{_plural(k, 'pair')}"
        if t.pairs
        else f"truncate would cut the ends of {_plural(k, _unit(t))} ({c['tokens_truncated']:,} tokens)"
    )
    if overflow == "truncate":  # pairs: what keeps every pair (split would part its sides)
        them = "it" if k == 1 else "them"
        what = (
            f"cuts the answers of {_plural(k, 'pair')} (at least {c['tokens_truncated']:,} tokens), "
            "each side keeping a trained token"
            if cut is None
            else _truncated_text(cut)
        )
        return (
            f"truncate: dropping {them} would lose {_pct(share(c['tokens_over'], t.tokens))} of "
            f"tokens (more than {MAX_LOST_SHARE:.0%}); a pair cannot be split across rows, so "
            f"truncate {what}"
        )
    if overflow == "drop":
        return (
            f"drop (pack's default): leaving out {_plural(k, _unit(t))} loses only "
            f"{_pct(share(c['tokens_over'], t.tokens))} of tokens (at most {MAX_LOST_SHARE:.0%}); {trunc}"
        )
    them = "it" if k == 1 else "them"
    return (
        f"split: dropping {them} would lose {_pct(share(c['tokens_over'], t.tokens))} of tokens (more than "
        f"{MAX_LOST_SHARE:.0%}); split keeps every token as {c['split_parts']:,} documents of at most --len "
        f"(each part's first token carries no loss); {trunc}"
    )


def _truncated_text(c: dict) -> str:
    """'cuts the answers of 5 pairs, each side keeping a trained token, and drops 3 pairs whose
    prompt leaves no room for one (3,662 tokens in all)' (c: choice.cut_of_pack's figures)."""
    k, drops = c["examples_truncated"], c["examples_dropped"] - c["examples_empty"]
    cuts = f"cuts the answers of {_plural(k, 'pair')}, each side keeping a trained token"
    if not drops:
        return f"{cuts} ({c['tokens']:,} tokens)"
    dropped = f"drops {_plural(drops, 'pair')} whose prompt leaves no room for one"
    return f"{cuts + ', and ' if k else ''}{dropped} ({c['tokens']:,} tokens in all)"


def _within_text(p: LenPick) -> str:
    """Why a sweep took a longer --len than the shortest candidate (LenPick.within), or ''."""
    if p.within is None:
        return ""
    rel, first_len, first = p.within
    worse = "" if first is None else f" (--len {first_len:,}: {first:.3f}×)"
    return (
        f"; it packs within {FLAT:.0%} of the best swept --len, {rel:.3f}× padding-free's FLOPs"
        f"{worse}"
    )


def _len_reason(p: LenPick, cuts: dict[int, dict], t: Totals) -> str:
    """Why --len is p.pack_len, read after "--len N: "."""
    L0, c0, c = p.given, cuts[p.given], cuts[p.pack_len]
    if p.rule == "fits":
        return f"every {_unit(t)} fits (longest {t.longest:,})"
    if p.rule == "drop":
        return f"keeps all but a small tail: {_over_text(c0, t)}"
    if p.rule == "outliers":
        hint = (
            f"; --len {p.whole:,} would keep {'it' if c0['examples_over'] == 1 else 'them'} whole"
            if p.whole
            else ""
        )
        return f"only {_over_text(c0, t)}: too few to make every row longer{hint}"
    if p.rule == "raise":
        left = f"every {_unit(t)} fits" if c["examples_over"] == 0 else _over_text(c, t)
        return (
            f"the smallest power of two that keeps all but {MAX_LOST_SHARE:.0%} of tokens ({left}); "
            f"at --len {L0:,} {_over_text(c0, t)}"
        )
    if p.rule == "split":
        far = f"--len {p.whole:,}" if p.whole else "a longer --len than the planner takes"
        return (
            f"{_over_text(c0, t)}; keeping them whole needs {far}, more than {MAX_LEN_RAISE}× "
            "--len, so --len stays and split keeps their tokens (a --len sweep takes its longest "
            f"--len instead, which splits the fewest: `packtool profile DATA --len {L0}-{MAX_LEN_RAISE * L0}`)"
        )
    why = _within_text(p)
    if p.rule == "sweep-ok":
        fits = c["examples_over"] == 0
        if p.within is not None:
            base = (
                f"every {_unit(t)} fits (longest {t.longest:,})"
                if fits
                else f"keeps all but {MAX_LOST_SHARE:.0%} of tokens: {_over_text(c, t)}"
            )
        elif fits:
            base = f"the shortest swept --len that every {_unit(t)} fits in (longest {t.longest:,})"
        else:
            base = (
                f"the shortest swept --len that keeps all but {MAX_LOST_SHARE:.0%} of tokens: "
                f"{_over_text(c, t)}"
            )
        return base + why
    if p.rule == "sweep-outliers":
        return (
            f"every swept --len would drop more than {MAX_LOST_SHARE:.0%} of tokens; here only "
            f"{_over_text(c, t)}" + why
        )
    return (
        f"the longest swept --len, which splits the fewest examples: even here {_over_text(c, t)} "
        f"(one --len alone stays as given and splits, unless a --len at most {MAX_LEN_RAISE}× longer "
        f"drops no more than {MAX_LOST_SHARE:.0%} of tokens)"
    )


def choose_len(
    cuts: dict[int, dict],
    totals: Totals,
    given: list[int],
    points: dict | None = None,
    multiple: int = 1,
) -> LenChoice:
    """choice.pick_len with its reasons (read after "--len N: ")."""
    p = pick_len(cuts, totals, given, points, multiple)
    return LenChoice(
        p.pack_len,
        p.overflow,
        p.rule,
        _len_reason(p, cuts, totals),
        _overflow_reason(cuts[p.pack_len], totals, p.overflow),
    )


# --------------------------------------------------------------------------------------------
# the recommendation


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


def _loss(c: dict) -> str:
    """', 879 loss tokens (33.0%)', or '' when unknown."""
    if c["loss_tokens"] is None:
        return ""
    return f", {c['loss_tokens']:,} loss tokens ({_pct(c['loss_tokens_share'])})"


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
    # tokens, tokens_share, examples_dropped, examples_split, split_parts, loss_tokens, loss_tokens_share
    cut: dict[str, Any]
    rows: int | None  # rows pack writes at (pack_len, overflow), when that was simulated
    evidence_len: int  # the --len the FLOP figures come from
    evidence_overflow: str
    command: str
    # {"name", "hours", "vs_random_padded", "vs_pad_to_len"} with --gpu
    gpu: dict[str, Any] | None = None
    hints: list[str] = field(default_factory=list)
    candidates: list[dict[str, Any]] = field(default_factory=list)  # cuts_by_len, for the JSON
    skipped: dict[str, int] | None = None  # {"records", "read"} when --on-error skip skipped some
    evidence_note: str = ""  # when the FLOP ratios are not at the table's (--len, --overflow)

    def skipped_text(self) -> str:
        """'200 of 300 records skipped (67%)', or '' when none were."""
        s = self.skipped
        if not s or not s.get("records"):
            return ""
        return f"{s['records']:,} of {s['read']:,} records skipped ({_pct(share(s['records'], s['read']))})"

    def cut_text(self) -> str:
        """'drops 1 example: 11,540 tokens (6.8%), 5,730 loss tokens (6.3%)', 'nothing cut; …'."""
        c = self.cut
        empty = (
            ""
            if not c["examples_empty"]
            else f" ({_plural(c['examples_empty'], 'empty example')} dropped)"
        )
        if self.overflow == "truncate" and c.get("examples_truncated"):
            drops = c["examples_dropped"] - c["examples_empty"]  # a prompt leaves no room
            return (
                f"cuts {c['tokens']:,} tokens ({_pct(c['tokens_share'])}){_loss(c)} from the answers of "
                f"{_plural(c['examples_truncated'], 'pair')}"
                + (f" and the {_plural(drops, 'pair')} it drops (prompt too long)" if drops else "")
                + empty
            )
        if self.overflow == "split" and c["examples_split"]:
            return (
                f"nothing cut; {_plural(c['examples_split'], 'example')} split into {c['split_parts']:,} "
                f"documents{empty}"
            )
        over = c["examples_dropped"] - c["examples_empty"]
        if not over:
            return "nothing cut" + empty
        return f"drops {_plural(over, c.get('unit', 'example'))}: {c['tokens']:,} tokens ({_pct(c['tokens_share'])}){_loss(c)}{empty}"

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
        cut = self.cut_text() + ("" if self.rows is None else f"; {_plural(self.rows, 'row')}")
        if self.skipped:
            cut += f"; {self.skipped_text()} before profiling"
        rows += [
            ("--len", f"{self.pack_len:,}: {self.len_reason}"),
            ("overflow", self.overflow_reason),
            ("cut", cut),
        ]
        if self.gpu:
            g = self.gpu
            on = f"on {g['name'].upper()} (one epoch)"
            rows.append(("GPU time", f"{gpu_time(g['hours'])} {on}: {g['vs_random_padded']}"))
        rows += [("note", h) for h in self.hints]
        rows.append(("next" if self.strategy == PACKED else "to pack", self.command))
        return rows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _strategy(s: StrategyPick, ev: dict[str, dict[str, Any]], gpu: Any) -> dict[str, Any]:
    """The strategy's reason, the dense-mask line and the GPU time, in words."""
    f, rel, strategy = s.flops, s.relative, s.strategy
    base = f"{rel[strategy]:.2f}× padding-free's FLOPs; " + versus(
        f[strategy], f["random_padded"], "random padded batches"
    )
    if strategy == PACKED:
        reason = (
            base + "; rows of exactly --len, each document attending only to itself "
            "(a varlen kernel: position_ids / cu_seqlens, e.g. FlashAttention varlen)"
        )
        if s.nearly:
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
    if DENSE in f and f[PACKED]:
        dense_text = (
            f"without a varlen kernel, packed rows with a dense mask cost {rel[DENSE]:.2f}× padding-free's "
            f"FLOPs ({f[DENSE] / f[PACKED]:.2f}× the varlen rows')"
        )
    no_varlen = s.without_varlen
    if dense_text and no_varlen != DENSE:
        dense_text += f"; the cheapest option without one is {LABELS.get(no_varlen, no_varlen)} ({rel[no_varlen]:.2f}×)"
    out = {"reason": reason, "dense": dense_text, "gpu": None}
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
    cfg, cuts, sweep = r.config, r.cuts, r.sweep or []
    given = [p.pack_len for p in sweep] if sweep else [cfg.pack_len]
    points = {p.pack_len: p for p in sweep} if sweep else None
    t = totals_of(r)
    choice = choose_len(cuts, t, given, points, cfg.pad_to_multiple)
    L, ov = choice.pack_len, choice.overflow
    over = cuts[L]["examples_over"]
    ev_len, ev_ov, rows, ev, fill, pk = evidence(r, L, ov, over == 0)
    # pack's own figures when (L, ov) was simulated: one source with the table and pack's warning
    cut = cut_at(cuts[L], t, ov) if pk is None else cut_of_pack(pk, t, over)
    overflow_reason = choice.overflow_reason
    if pk is not None and ov == "truncate":
        overflow_reason = _overflow_reason(cuts[L], t, ov, cut)
    pick = pick_strategy(ev)
    s = _strategy(pick, ev, cfg.gpu)
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
    if not sweep and pick.relative[PACKED] > 1 + NEARLY and fill is not None:
        lo, hi = max(2, pow2_below(ev_len // 4)), min(MAX_POW2, 2 * pow2_below(ev_len))
        hints.append(
            f"packed rows are only {fill:.0%} full at --len {ev_len:,}: "
            f"`packtool profile DATA --len {lo}-{hi}` shows how other lengths pack"
        )
    if t.empty:
        hints.append(
            f"{_plural(t.empty, 'example')} without tokens {'is' if t.empty == 1 else 'are'} always dropped"
        )
    data = r.source.get("data")
    if not data:
        hints.append("profiled from lengths, not a dataset: put your dataset in place of DATA")
    extra = list(r.source.get("pack_args", ()))
    if cfg.pad_to_multiple > 1 and "--pad-to-multiple" not in extra:
        extra += ["--pad-to-multiple", str(cfg.pad_to_multiple)]  # the prediction's layout
    command = pack_command(data, L, ov, extra)
    read, n_skipped = r.counts["examples_read"], r.counts["examples_skipped"]
    if n_skipped:
        skipped_share = share(n_skipped, read)
        keeps = "--on-error" in extra
        hints.append(
            ("the command keeps --on-error skip, so pack skips them too: " if keeps else "")
            + f"{n_skipped:,} of {read:,} records read ({_pct(skipped_share)}) are skipped and in none of these figures"
            + (
                "; that is most of the data: check a record with --on-error error before packing"
                if skipped_share > 0.5
                else "; --on-error error shows the first bad record"
            )
        )
    return Recommendation(
        strategy=pick.strategy,
        strategy_label=LABELS.get(pick.strategy, pick.strategy),
        strategy_reason=s["reason"],
        relative_flops=pick.relative,
        dense_mask=s["dense"],
        without_varlen=pick.without_varlen,
        length_grouped_nearly_as_good=pick.nearly,
        pack_len=L,
        len_reason=choice.len_reason,
        overflow=ov,
        overflow_reason=overflow_reason,
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
