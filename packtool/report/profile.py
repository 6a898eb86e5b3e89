"""Render a ProfileResult: rich tables and a unicode histogram (stderr) and JSON; decide what to
lead with (best_strategy, headline) and what to do (stats.advice.recommend, shown last). The PNG is
packtool.report.profile_png.

JSON (schema "packtool.profile/v1"; keys are only ever added): schema, packtool_version, source,
options, counts, lengths, loss_tokens_per_example, truncation (what --overflow takes from examples
over --len), pack (what `packtool pack` with the same --len and --overflow writes: predict.at_len),
strategies, flops, histogram, random_batch_waste, sweep, recommendation, notes, timings.

    "strategies": {"pad_to_len": {"label": "pad to --len", "rows": …, "docs_per_row": null, …}, …,
                   "packed_ffd_dense": {…, "docs_per_row": 3.1, "gpu_hours": null (no --gpu), …}}
                  (fixed ids in strategies.STRATEGY_LABELS order, the same STRATEGY_KEYS for each)
    "sweep": null, or per --len {**pack, "strategies": {id: {rows, occupancy, attention_waste,
             relative_flops, flops, gpu_hours}}}  (profiler.profile_lens with several --len values)
    "recommendation": advice.Recommendation.to_json(): strategy, pack_len, overflow, reasons, cut,
             rows, command, hints, candidates (what each policy takes per --len)
"""

from __future__ import annotations

import bisect
from typing import Any

from packtool.profiler import ProfileResult
from packtool.report.format import bar, count, num, pct, pct_small, si
from packtool.stats import advice
from packtool.stats.flops import ATTENTION_CONVENTION, FLOPS_FORMULA
from packtool.stats.strategies import StrategyResult, overflow_note

SCHEMA = "packtool.profile/v1"
STRATEGY_KEYS = (
    "label", "rows", "steps", "tokens", "slots", "pad_slots", "occupancy", "padding_fraction",
    "attention_work", "attention_waste", "docs_per_row", "flops", "flops_linear",
    "flops_attention", "relative_flops", "saving_vs_pad_to_len", "saving_vs_random_padded",
    "gpu_hours", "gpu_hours_saved_vs_pad_to_len", "gpu_hours_saved_vs_random_padded",
)  # fmt: skip
# terminal labels, short enough for an 80-column table
SHORT_LABELS = {
    "pad_to_len": "pad to --len",
    "random_padded": "random, padded",
    "length_grouped": "length-grouped",
    "padding_free": "padding-free",
    "packed_bfd_varlen": "packed BFD varlen",
    "packed_bfd_dense": "packed BFD dense",
    "packed_ffd_varlen": "packed FFD varlen",
    "packed_ffd_dense": "packed FFD dense",
}
PAIR_SHORT_LABELS = {  # preference pairs (stats.strategies.simulate_pairs)
    **SHORT_LABELS,
    "pad_to_len": "sides to --len",
    "random_padded": "pairs, padded (TRL)",
    "length_grouped": "grouped pairs",
    "packed_bfd_varlen": "pairs BFD varlen",
    "packed_bfd_dense": "pairs BFD dense",
    "packed_ffd_varlen": "pairs FFD varlen",
    "packed_ffd_dense": "pairs FFD dense",
}


def _strategy_json(s: StrategyResult, cost: dict[str, Any]) -> dict[str, Any]:
    d = {
        "label": s.label,
        "rows": s.rows,
        "steps": s.steps,
        "tokens": s.tokens,
        "slots": s.slots,
        "pad_slots": s.slots - s.tokens,
        "occupancy": s.occupancy,
        "padding_fraction": s.padding_fraction,
        "attention_work": s.attention_work,
        "attention_waste": s.attention_waste,
        "docs_per_row": s.docs_per_row,
    }
    return {k: d[k] if k in d else cost.get(k) for k in STRATEGY_KEYS}


def to_json(r: ProfileResult) -> dict[str, Any]:
    from packtool import __version__

    cfg = r.config
    return {
        "schema": SCHEMA,
        "packtool_version": __version__,
        "source": r.source,
        "options": {
            "len": cfg.pack_len,
            "batch_size": cfg.batch_size,
            "group_window": cfg.group_window,
            "seed": cfg.seed,
            "mfu": cfg.mfu,
            "overflow": cfg.overflow,
            "pad_to_multiple": cfg.pad_to_multiple,
            "lens": None if not r.sweep else [p.pack_len for p in r.sweep],
        },
        "counts": r.counts,
        "lengths": r.lengths,
        "loss_tokens_per_example": r.loss_lengths,
        "truncation": r.truncation,
        "pack": r.pack,
        "strategies": {n: _strategy_json(s, r.costs[n]) for n, s in r.strategies.items()},
        "flops": {
            "formula": FLOPS_FORMULA,
            "attention_convention": ATTENTION_CONVENTION,
            "relative_to": "padding_free",
            "model": r.model.to_json(),
            "gpu": None
            if cfg.gpu is None
            else {"name": cfg.gpu.name, "peak_tflops_bf16_dense": cfg.gpu.peak_tflops},
            "mfu": cfg.mfu,
        },
        "histogram": r.histogram.to_json(),
        "random_batch_waste": r.batch_waste,
        "sweep": None if not r.sweep else [p.to_json() for p in r.sweep],
        "recommendation": advice.recommend(r).to_json(),
        "notes": r.notes,
        "timings": {k: round(v, 4) for k, v in r.timings.items()},
    }


# --------------------------------------------------------------------------------------------
# terminal


def _saved(cost: dict[str, Any], base: str) -> str:
    """GPU-hours saved against `base`, or what it costs more: never a negative saving."""
    h, share = cost[f"gpu_hours_saved_vs_{base}"], cost[f"saving_vs_{base}"]
    if h >= 0:
        return f"{advice.gpu_time(h)} ({share:.0%})"
    return f"{advice.gpu_time(-h)} more"


def histogram_lines(r: ProfileResult, width: int = 40) -> list[tuple[str, str, str, str]]:
    """(range, bar, count, marks) per bin; marks name the percentiles and --len inside the bin."""
    h = r.histogram
    edges, counts = h.edges.tolist(), h.counts.tolist()
    marks_at: dict[int, list[str]] = {}
    marks = [
        ("p50", r.lengths["median"]),
        ("p90", r.lengths["p90"]),
        ("p99", r.lengths["p99"]),
        (f"--len {r.config.pack_len:,}", r.config.pack_len),
    ]
    for label, v in marks:
        i = -1 if v is None else bisect.bisect_right(edges, v) - 1  # edges[i] <= v < edges[i + 1]
        if 0 <= i < len(counts):
            marks_at.setdefault(i, []).append(label)
    top = max(counts) if counts else 0
    lw = len(f"{edges[-1]:,}")
    rows = []
    for i, cnt in enumerate(counts):
        lo, hi = edges[i], edges[i + 1] - 1
        if h.overflow and i == len(counts) - 1:
            rng = f"≥{lo:,}".rjust(lw + 1).ljust(2 * lw + 1)
        else:
            rng = f"{lo:>{lw},}–{hi:<{lw},}"
        rows.append((rng, bar(cnt, top, width), f"{cnt:,}", " ".join(marks_at.get(i, []))))
    return rows


def render(r: ProfileResult, console) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    cfg = r.config
    src = r.source
    short = PAIR_SHORT_LABELS if src.get("task") == "preference" else SHORT_LABELS
    what = src.get("data") or src.get("spec") or src.get("path") or src.get("kind")
    if src.get("inputs"):  # a mixture: the per-input table below names them
        what = f"{len(src['inputs'])} inputs"
    extra = []
    if src.get("format"):
        fmt = str(src["format"])
        # 'mixed: alpaca (a.json 2), messages (b.jsonl 3)' is listed above, file by file
        if fmt.startswith("mixed: "):
            fmt = f"{fmt.count('), ') + 1} formats"
        extra.append(f"format {fmt}")
    tok = src.get("tokenizer") or {}
    if tok.get("name"):
        extra.append(f"tokenizer {tok['name']}")
    console.print(
        f"[bold]packtool profile[/] · {what}" + (f" [dim]({', '.join(extra)})[/]" if extra else "")
    )

    # counts --------------------------------------------------------------------------------
    c = r.counts
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="dim")
    t.add_column(justify="right")
    t.add_row("examples read", num(c["examples_read"]))
    if c["examples_skipped"]:
        share = c["examples_skipped"] / max(1, c["examples_read"])
        t.add_row(
            "skipped (--on-error skip)",
            f"[yellow]{c['examples_skipped']:,} of {c['examples_read']:,} ({pct(share)})[/]",
        )
        for reason, k in list(c["skipped_reasons"].items())[:5]:
            t.add_row(f"  {escape(reason)}", f"{k:,}")  # whole: the table wraps it
    if c["examples_empty"]:
        t.add_row("empty (0 tokens)", f"[yellow]{c['examples_empty']:,}[/]")
    t.add_row("examples profiled", num(c["examples"]))
    t.add_row("tokens", num(c["tokens"]))
    if c["loss_tokens"] is not None:
        t.add_row("loss tokens", f"{c['loss_tokens']:,} ({c['loss_share']:.1%})")
        k = c["examples_without_loss"]
        t.add_row("examples without loss", f"[yellow]{k:,}[/]" if k else "0")
    console.print(t)
    if src.get("inputs"):
        from packtool.report.tokenized import inputs_table

        console.print(inputs_table(src["inputs"]))

    # distribution --------------------------------------------------------------------------
    d = Table(box=box.SIMPLE_HEAD, title="tokens per example", title_justify="left")
    d.add_column("")
    keys = ("min", "mean", "median", "p90", "p95", "p99", "max")
    for k in keys:
        d.add_column(k, justify="right")
    for label, dist in (("all tokens", r.lengths), ("loss tokens", r.loss_lengths)):
        if dist and dist["count"]:
            d.add_row(label, *(num(dist[k], 1 if k == "mean" else 0) for k in keys))
    console.print(d)
    for line in overflow_lines(r):
        console.print(line)

    # histogram -----------------------------------------------------------------------------
    console.print()
    console.print("[bold]length histogram[/] [dim](tokens per example → examples)[/]")
    lines = histogram_lines(r, 1)
    fixed = 2 + len(lines[0][0]) + 1 + 10 + 4 + max(len(m) for *_, m in lines)
    width = max(10, min(40, console.width - fixed - 1))
    for rng, b, cnt, mark in histogram_lines(r, width):
        line = Text("  ", no_wrap=True, overflow="ellipsis")
        line.append(rng, style="dim")
        line.append(" ")
        line.append(b.ljust(width), style="cyan")
        line.append(f" {cnt:>9}")
        if mark:
            line.append("  ◀ " + mark, style="bold red" if "--len" in mark else "bold")
        console.print(line)
    if cfg.pack_len >= r.histogram.edges[-1]:
        console.print(
            f"  [dim]--len {cfg.pack_len:,} is beyond the longest example ({r.lengths['max']:,})[/]"
        )

    # strategies ----------------------------------------------------------------------------
    gpu = cfg.gpu
    title = (
        f"strategies · --len {cfg.pack_len:,} · --overflow {cfg.overflow} · --batch-size {cfg.batch_size} · "
        f"--group-window {cfg.group_window} · --seed {cfg.seed}"
    )
    s = _table(
        title, ("strategy", "rows", "steps", "occupancy", "padding", "attn\nwaste", "rel.\nFLOPs")
    )
    best = best_strategy(r)
    for name, st in r.strategies.items():
        cost = r.costs[name]
        s.add_row(
            short.get(name, name),
            count(st.rows),
            count(st.steps),
            pct(st.occupancy),
            pct_small(st.padding_fraction),
            f"{st.attention_waste:.2f}×",
            f"{cost['relative_flops']:.2f}×",
            style="bold green" if name == best else None,
        )
    console.print(s)
    if gpu:
        g = _table(
            f"one epoch on {gpu.name} ({gpu.peak_tflops:g} dense bf16 TFLOP/s) at MFU {cfg.mfu:g}",
            ("strategy", "FLOPs", "GPU time", "saved vs pad", "saved vs random"),
        )
        for name in r.strategies:
            cost = r.costs[name]
            g.add_row(
                short.get(name, name),
                si(cost["flops"]),
                advice.gpu_time(cost["gpu_hours"]),
                *("–" if name == b else _saved(cost, b) for b in ("pad_to_len", "random_padded")),
                style="bold green" if name == best else None,
            )
        console.print(g)
    console.print(f"[bold]{headline(r)}[/]")
    m = r.model
    params = f"P={si(m.matmul_params)} matmul params, layers={m.layers}, d_attn={m.d_attn}"
    console.print(f"[dim]{FLOPS_FORMULA}  ({m.name}: {params}); rel. FLOPs are ÷ padding-free.[/]")
    console.print(
        f"[dim]attention waste = Σ attention work / Σ own-length work (Σ n²); {ATTENTION_CONVENTION}.[/]"
    )
    console.print(
        "[dim]rows: padded rows, varlen sequences or packed rows; steps: micro-batches of "
        f"{cfg.batch_size} rows; {overflow_note(cfg.overflow, r.source.get('task') == 'preference')}.[/]"
    )
    for note in r.notes:
        console.print(f"[yellow]warning:[/] {escape(note)}")
    if r.sweep:
        console.print()
        console.print(sweep_table(r, console))
    render_recommendation(advice.recommend(r), console)


def _them(k: int) -> str:
    return "it" if k == 1 else "them"


def overflow_lines(r: ProfileResult) -> list[str]:
    """The lines (rich markup) under the distribution: what --overflow does to the examples over
    --len, and what `packtool pack` with this --len and --overflow would write."""
    cfg, tr, pk = r.config, r.truncation, r.pack
    k = tr["examples_over"]
    out = []
    if k:
        loss = (
            ""
            if tr["loss_tokens_cut"] is None
            else f", {tr['loss_tokens_cut']:,} of them loss tokens"
        )
        head = (
            f"[yellow]{k:,} example{'s' if k != 1 else ''} ({tr['examples_over_share']:.2%}) "
            f"exceed{'s' if k == 1 else ''} --len {cfg.pack_len:,}[/]: "
        )
        if cfg.overflow == "drop":
            out.append(
                head + f"--overflow drop leaves {_them(k)} out, {tr['tokens_cut']:,} tokens "
                f"({tr['tokens_cut_share']:.2%}){loss}. Every strategy below leaves {_them(k)} out."
            )
        elif cfg.overflow == "truncate" and r.source.get("task") == "preference":
            drops = tr["examples_dropped"] - pk["examples_dropped_empty"]  # no room for a prompt
            out.append(
                head
                + f"--overflow truncate cuts the answers of {tr['examples_truncated']:,}"
                + (f" and drops {drops:,} (a prompt leaves no trained token)" if drops else "")
                + f", {tr['tokens_cut']:,} tokens ({tr['tokens_cut_share']:.2%}){loss}. "
                "Every strategy below takes them cut or dropped, as pack."
            )
        elif cfg.overflow == "truncate":
            out.append(
                head
                + f"truncation would cut {tr['tokens_cut']:,} tokens ({tr['tokens_cut_share']:.2%}){loss}. "
                "Every strategy below truncates them to --len."
            )
        else:
            out.append(
                head
                + f"--overflow split makes {_them(k)} {tr['split_parts']:,} documents of at most --len; "
                "nothing is cut. Every strategy below takes the parts as documents."
            )
    else:
        out.append(f"[green]every example fits in --len {cfg.pack_len:,}[/]")
    did = []
    if pk["examples_dropped"]:
        empty = pk["examples_dropped_empty"]
        over = pk["examples_dropped"] - empty
        if over:
            did.append(f"drops {over:,} example{'s' if over != 1 else ''}")
        if empty:
            did.append(f"drops {empty:,} empty")
    if pk["examples_truncated"]:
        did.append(f"truncates {pk['examples_truncated']:,}")
    if pk["examples_split"]:
        did.append(f"splits {pk['examples_split']:,} into {pk['split_parts']:,} documents")
    cut = f"{pk['tokens_cut']:,} tokens cut" + (
        "" if pk["loss_tokens_cut"] is None else f" ({pk['loss_tokens_cut']:,} loss tokens)"
    )
    n = cfg.pad_to_multiple
    layout = f" --pad-to-multiple {n}" if n > 1 else ""
    out.append(
        f"[bold]pack --len {cfg.pack_len:,} --overflow {cfg.overflow}{layout}[/] would write "
        f"{pk['rows']:,} rows of {pk['documents']:,} documents, {pct(pk['fill'])} full; "
        + ", ".join(did + [cut])
    )
    if n > 1:
        out.append(
            f"[yellow]cost of --pad-to-multiple {n}[/]: {pk['doc_pad']:,} pad slots inside "
            f"documents, {pct_small(pk['doc_pad_share'] or 0.0)} of the rows' slots (computed, never trained); "
            "the strategies below run on the padded lengths"
        )
    return out


def sweep_table(r: ProfileResult, console=None):
    """One row per swept --len: pack's rows and fill, what --overflow takes, FLOPs ÷ padding-free."""
    cfg = r.config
    rec = advice.recommend(r)
    points = list(r.sweep or [])
    # the count columns that are 0 at every --len say nothing: left out (the policy's own stays),
    # so that the table fits 80 columns instead of cropping every cell to `1…`
    policy = {"drop": "dropped", "truncate": "trunc.", "split": "split"}.get(cfg.overflow)
    counts = {
        "dropped": lambda pk: f"{pk['examples_dropped']:,}",
        "trunc.": lambda pk: f"{pk['examples_truncated']:,}",
        "split": lambda pk: f"{pk['examples_split']:,}",
        "loss cut": lambda pk: (
            "–" if pk["loss_tokens_cut"] is None else f"{pk['loss_tokens_cut']:,}"
        ),
    }
    shown = [
        col
        for col, cell in counts.items()
        if col == policy or any(cell(p.pack) not in ("0", "–") for p in points)
    ]
    cols = ["--len", "rows", "fill", "tokens cut", *shown]
    cols += ["packed\nvarlen", "packed\ndense", "length-\ngrouped", "random"]
    if cfg.gpu is not None:
        cols.append("GPU time\npacked")
    t = _table(
        f"--len sweep · --overflow {cfg.overflow} · pack's rows (BFD) and FLOPs ÷ padding-free at each --len",
        cols,
    )
    for p in points:
        pk = p.pack
        rel = {
            n: p.relative_flops(n)
            for n in ("packed_bfd_varlen", "packed_bfd_dense", "length_grouped", "random_padded")
        }
        row = [
            f"{p.pack_len:,}",
            count(p.rows),
            "–" if p.fill is None else pct(p.fill),
            f"{pk['tokens_cut']:,} ({pct_small(pk['tokens_cut_share'] or 0.0)})",
            *(counts[col](pk) for col in shown),
        ]
        row += ["–" if v is None else f"{v:.2f}×" for v in rel.values()]
        if cfg.gpu is not None:
            h = (p.strategies.get("packed_bfd_varlen") or {}).get("gpu_hours")
            row.append("–" if h is None else advice.gpu_time(h))
        style = "bold green" if p.pack_len == rec.pack_len else None
        t.add_row(*row, style=style)
    if console is not None and t.__rich_measure__(console, console.options).maximum > console.width:
        t.padding = (0, 0)  # narrow terminal: one space between columns rather than cropped cells
    return t


def _table(title: str, columns):
    """A table of the strategies or the sweep: title on the left, columns right-aligned but names."""
    from rich import box
    from rich.table import Table

    t = Table(
        box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, padding=(0, 1)
    )
    for col in columns:
        t.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    return t


def render_recommendation(rec: advice.Recommendation, console) -> None:
    """The closing block: strategy, --len, --overflow, what is cut, notes, then the command alone
    on its line (not wrapped, so that it can be copied)."""
    from rich.table import Table
    from rich.text import Text

    console.print()
    console.print(Text("recommendation", style="bold"))
    t = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
    t.add_column(style="dim", no_wrap=True)
    t.add_column()
    *rows, (label, command) = rec.lines()  # the last: "next" (or "to pack") and the command
    for row_label, text in rows:
        t.add_row(row_label, Text(text))
    console.print(t)
    console.print(Text.assemble((f"{label}: ", "bold"), (command, "bold green")), soft_wrap=True)


# --------------------------------------------------------------------------------------------
# decisions


_PREFERENCE = (
    "padding_free",
    "packed_bfd_varlen",
    "packed_ffd_varlen",
    "length_grouped",
    "packed_bfd_dense",
    "packed_ffd_dense",
    "random_padded",
    "pad_to_len",
)


def best_strategy(r: ProfileResult) -> str:
    """The strategy with the fewest training FLOPs; ties go to the simpler-to-adopt one."""
    order = [n for n in _PREFERENCE if n in r.costs] + [n for n in r.costs if n not in _PREFERENCE]
    return min(order, key=lambda n: r.costs[n]["flops"])  # the first of equal ones


def headline(r: ProfileResult) -> str:
    """One sentence: the cheapest strategy and what it saves against the padded baselines."""
    best = best_strategy(r)
    c = r.costs
    f = c[best]["flops"] or 1.0
    text = f"{r.strategies[best].label}: {c['pad_to_len']['flops'] / f:.1f}× fewer training FLOPs than pad to --len"
    if best != "random_padded":
        text += f", {c['random_padded']['flops'] / f:.1f}× fewer than random padded batches"
    return text
