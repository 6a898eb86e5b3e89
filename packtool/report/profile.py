"""Render a ProfileResult: rich tables and a unicode histogram (stderr), JSON, PNG (matplotlib Agg).

JSON top-level keys (stable, schema "packtool.profile/v1"):
    schema, packtool_version, source, options, counts, lengths, loss_tokens_per_example,
    truncation, strategies, flops, histogram, random_batch_waste, notes, timings
`strategies` maps a fixed id (stats.STRATEGY_LABELS order) to the same keys for every strategy.
"""

from __future__ import annotations

from typing import Any

from packtool import stats
from packtool.profiler import ProfileResult

SCHEMA = "packtool.profile/v1"
STRATEGY_KEYS = (
    "label", "rows", "steps", "tokens", "slots", "pad_slots", "occupancy", "padding_fraction",
    "attention_work", "attention_waste", "docs_per_row", "flops", "flops_linear", "flops_attention",
    "relative_flops", "saving_vs_pad_to_len", "saving_vs_random_padded", "gpu_hours",
    "gpu_hours_saved_vs_pad_to_len", "gpu_hours_saved_vs_random_padded",
)
_COLOR = {"pad_to_len": "#c44e52", "random_padded": "#dd8452", "length_grouped": "#ccb974",
          "padding_free": "#55a868", "packed_bfd_varlen": "#4c72b0", "packed_bfd_dense": "#4c72b0",
          "packed_ffd_varlen": "#8172b3", "packed_ffd_dense": "#8172b3"}
# terminal labels, short enough for an 80-column table
SHORT_LABELS = {"pad_to_len": "pad to --len", "random_padded": "random, padded", "length_grouped": "length-grouped",
                "padding_free": "padding-free", "packed_bfd_varlen": "packed BFD varlen",
                "packed_bfd_dense": "packed BFD dense", "packed_ffd_varlen": "packed FFD varlen",
                "packed_ffd_dense": "packed FFD dense"}


def _strategy_json(name: str, s: stats.StrategyResult, cost: dict[str, Any]) -> dict[str, Any]:
    d = {
        "label": s.label, "rows": s.rows, "steps": s.steps, "tokens": s.tokens, "slots": s.slots,
        "pad_slots": s.slots - s.tokens, "occupancy": s.occupancy,
        "padding_fraction": s.padding_fraction, "attention_work": s.attention_work,
        "attention_waste": s.attention_waste, "docs_per_row": s.docs_per_row,
    }
    for k in STRATEGY_KEYS:
        if k not in d:
            d[k] = cost.get(k)
    return {k: d[k] for k in STRATEGY_KEYS}


def to_json(r: ProfileResult) -> dict[str, Any]:
    from packtool import __version__

    cfg = r.config
    return {
        "schema": SCHEMA,
        "packtool_version": __version__,
        "source": r.source,
        "options": {
            "len": cfg.pack_len, "batch_size": cfg.batch_size, "group_window": cfg.group_window,
            "seed": cfg.seed, "mfu": cfg.mfu, "overflow": "truncate",
        },
        "counts": r.counts,
        "lengths": r.lengths,
        "loss_tokens_per_example": r.loss_lengths,
        "truncation": r.truncation,
        "strategies": {n: _strategy_json(n, s, r.costs[n]) for n, s in r.strategies.items()},
        "flops": {
            "formula": stats.FLOPS_FORMULA,
            "attention_convention": stats.ATTENTION_CONVENTION,
            "relative_to": "padding_free",
            "model": r.model.to_json(),
            "gpu": None if cfg.gpu is None else {"name": cfg.gpu.name, "peak_tflops_bf16_dense": cfg.gpu.peak_tflops},
            "mfu": cfg.mfu,
        },
        "histogram": r.histogram.to_json(),
        "random_batch_waste": r.batch_waste,
        "notes": r.notes,
        "timings": {k: round(v, 4) for k, v in r.timings.items()},
    }


# --------------------------------------------------------------------------------------------
# terminal


def _num(x: float | int | None, digits: int = 0) -> str:
    if x is None:
        return "–"
    if isinstance(x, float) and not x.is_integer() or digits:
        return f"{x:,.{digits}f}"
    return f"{int(x):,}"


def _count(x: int) -> str:
    """Row and step counts: exact below a million, 1.62M above (keeps the table in 80 columns)."""
    return f"{x:,}" if x < 1_000_000 else f"{x / 1e6:.3g}M"


def _si(x: float) -> str:
    for unit, scale in (("Y", 1e24), ("Z", 1e21), ("E", 1e18), ("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def _pct(x: float) -> str:
    """Occupancy: one decimal, two near 100 % so that 99.97 % does not print as 100.0 %."""
    if 0.999 <= x < 1.0:
        return "99.99%" if f"{x:.2%}" == "100.00%" else f"{x:.2%}"
    return f"{x:.1%}"


def _pct_small(x: float) -> str:
    """Padding: two decimals below 1 % so that 0.03 % does not print as 0.0 %."""
    return f"{x:.2%}" if 0 < x < 0.01 else f"{x:.1%}"


def _saved(hours: float, share: float) -> str:
    """GPU-hours saved, or what it costs more: never a negative saving."""
    if hours >= 0:
        return f"{_hours(hours)} h ({share:.0%})"
    return f"{_hours(-hours)} h more"


def _hours(h: float | None) -> str:
    if h is None:
        return "–"
    if abs(h) >= 100:
        return f"{h:,.0f}"
    if abs(h) >= 1:
        return f"{h:,.1f}"
    return f"{h:.3g}"


_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, full: float, width: int) -> str:
    """A left-aligned bar of `width` cells, 1/8-cell resolution; a non-zero value shows at least ▏."""
    if full <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / full * width * 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")


def histogram_lines(r: ProfileResult, width: int = 40) -> list[tuple[str, str, str, str]]:
    """(range, bar, count, marks) per bin; marks name the percentiles and --len inside the bin."""
    h = r.histogram
    edges, counts = h.edges.tolist(), h.counts.tolist()
    marks_at: dict[int, list[str]] = {}
    marks = [("p50", r.lengths["median"]), ("p90", r.lengths["p90"]), ("p99", r.lengths["p99"]),
             (f"--len {r.config.pack_len:,}", r.config.pack_len)]
    for label, v in marks:
        if v is None:
            continue
        for i in range(len(counts)):
            if edges[i] <= v < edges[i + 1]:
                marks_at.setdefault(i, []).append(label)
                break
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
    from rich.table import Table
    from rich.text import Text

    cfg = r.config
    src = r.source
    what = src.get("data") or src.get("spec") or src.get("path") or src.get("kind")
    extra = []
    if src.get("format"):
        extra.append(f"format {src['format']}")
    tok = src.get("tokenizer") or {}
    if tok.get("name"):
        extra.append(f"tokenizer {tok['name']}")
    console.print(f"[bold]packtool profile[/] · {what}" + (f" [dim]({', '.join(extra)})[/]" if extra else ""))

    # counts --------------------------------------------------------------------------------
    c = r.counts
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="dim")
    t.add_column(justify="right")
    t.add_row("examples read", _num(c["examples_read"]))
    if c["examples_skipped"]:
        t.add_row("skipped", f"[yellow]{c['examples_skipped']:,}[/]")
        for reason, k in list(c["skipped_reasons"].items())[:5]:
            t.add_row(f"  {reason[:70]}", f"{k:,}")
    if c["examples_empty"]:
        t.add_row("empty (0 tokens)", f"[yellow]{c['examples_empty']:,}[/]")
    t.add_row("examples profiled", _num(c["examples"]))
    t.add_row("tokens", _num(c["tokens"]))
    if c["loss_tokens"] is not None:
        t.add_row("loss tokens", f"{c['loss_tokens']:,} ({c['loss_share']:.1%})")
        style = "yellow" if c["examples_without_loss"] else ""
        t.add_row("examples without loss", f"[{style}]{c['examples_without_loss']:,}[/]" if style else "0")
    console.print(t)

    # distribution --------------------------------------------------------------------------
    d = Table(box=box.SIMPLE_HEAD, title="tokens per example", title_justify="left")
    d.add_column("")
    for k in ("min", "mean", "median", "p90", "p95", "p99", "max"):
        d.add_column(k, justify="right")
    for label, dist in (("all tokens", r.lengths), ("loss tokens", r.loss_lengths)):
        if dist and dist["count"]:
            d.add_row(label, *(_num(dist[k], 1 if k == "mean" else 0) for k in ("min", "mean", "median", "p90", "p95", "p99", "max")))
    console.print(d)
    tr = r.truncation
    if tr["examples_over"]:
        loss = "" if tr["loss_tokens_cut"] is None else f", {tr['loss_tokens_cut']:,} of them loss tokens"
        k = tr["examples_over"]
        console.print(
            f"[yellow]{k:,} example{'s' if k != 1 else ''} ({tr['examples_over_share']:.2%}) "
            f"exceed{'s' if k == 1 else ''} --len {cfg.pack_len:,}[/]: "
            f"truncation would cut {tr['tokens_cut']:,} tokens ({tr['tokens_cut_share']:.2%}){loss}. "
            "Every strategy below truncates them to --len."
        )
    else:
        console.print(f"[green]every example fits in --len {cfg.pack_len:,}[/]")

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
        console.print(f"  [dim]--len {cfg.pack_len:,} is beyond the longest example ({r.lengths['max']:,})[/]")

    # strategies ----------------------------------------------------------------------------
    gpu = cfg.gpu
    title = (f"strategies · --len {cfg.pack_len:,} · --batch-size {cfg.batch_size} · "
             f"--group-window {cfg.group_window} · --seed {cfg.seed}")
    s = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False, padding=(0, 1))
    for col in ("strategy", "rows", "steps", "occupancy", "padding", "attn\nwaste", "rel.\nFLOPs"):
        s.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
    best = best_strategy(r)
    for name, st in r.strategies.items():
        cost = r.costs[name]
        s.add_row(SHORT_LABELS.get(name, name), _count(st.rows), _count(st.steps), _pct(st.occupancy),
                  _pct_small(st.padding_fraction), f"{st.attention_waste:.2f}×", f"{cost['relative_flops']:.2f}×",
                  style="bold green" if name == best else None)
    console.print(s)
    if gpu:
        g = Table(box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left", padding=(0, 1),
                  title=f"one epoch on {gpu.name} ({gpu.peak_tflops:g} dense bf16 TFLOP/s) at MFU {cfg.mfu:g}")
        for col in ("strategy", "FLOPs", "GPU-hours", "saved vs pad", "saved vs random"):
            g.add_column(col, justify="left" if col == "strategy" else "right", no_wrap=True)
        for name in r.strategies:
            cost = r.costs[name]
            g.add_row(
                SHORT_LABELS.get(name, name), _si(cost["flops"]), _hours(cost["gpu_hours"]),
                "–" if name == "pad_to_len" else _saved(cost["gpu_hours_saved_vs_pad_to_len"],
                                                        cost["saving_vs_pad_to_len"]),
                "–" if name == "random_padded" else _saved(cost["gpu_hours_saved_vs_random_padded"],
                                                           cost["saving_vs_random_padded"]),
                style="bold green" if name == best else None,
            )
        console.print(g)
    console.print(f"[bold]{headline(r)}[/]")
    m = r.model
    params = f"P={_si(m.matmul_params)} matmul params, layers={m.layers}, d_attn={m.d_attn}"
    console.print(f"[dim]{stats.FLOPS_FORMULA}  ({m.name}: {params}); rel. FLOPs are ÷ padding-free.[/]")
    console.print(f"[dim]attention waste = Σ attention work / Σ own-length work (Σ n²); {stats.ATTENTION_CONVENTION}.[/]")
    console.print("[dim]rows: padded rows, varlen sequences or packed rows; steps: micro-batches of "
                  f"{cfg.batch_size} rows; {stats.OVERFLOW_POLICY}.[/]")
    for note in r.notes:
        console.print(f"[dim]note: {note}[/]")


# --------------------------------------------------------------------------------------------
# PNG


def _source_name(r: ProfileResult) -> str:
    src = r.source
    return str(src.get("data") or src.get("spec") or src.get("path") or src.get("kind", ""))


_PREFERENCE = ("padding_free", "packed_bfd_varlen", "packed_ffd_varlen", "length_grouped", "packed_bfd_dense",
               "packed_ffd_dense", "random_padded", "pad_to_len")


def best_strategy(r: ProfileResult) -> str:
    """The strategy with the fewest training FLOPs; ties go to the simpler-to-adopt one."""
    order = [n for n in _PREFERENCE if n in r.costs] + [n for n in r.costs if n not in _PREFERENCE]
    return min(order, key=lambda n: (r.costs[n]["flops"], order.index(n)))


def headline(r: ProfileResult) -> str:
    """One sentence: the cheapest strategy and what it saves against the padded baselines."""
    best = best_strategy(r)
    c = r.costs
    f = c[best]["flops"] or 1.0
    text = f"{r.strategies[best].label}: {c['pad_to_len']['flops'] / f:.1f}× fewer training FLOPs than pad to --len"
    if best != "random_padded":
        text += f", {c['random_padded']['flops'] / f:.1f}× fewer than random padded batches"
    return text


def write_png(r: ProfileResult, path: str) -> None:
    """Four panels: length histogram with p50/p90/p99/--len; occupancy by strategy; relative
    training FLOPs split into linear and attention; per-batch attention waste of random batches."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    cfg = r.config
    names = list(r.strategies)
    labels = [r.strategies[n].label for n in names]

    colors = [_COLOR.get(n, "#888888") for n in names]
    plt.rcParams.update({"font.size": 9, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.titleweight": "bold", "axes.titlesize": 10})
    fig, axes = plt.subplots(2, 2, figsize=(13, 8.5), dpi=110)
    (ax_h, ax_o), (ax_f, ax_w) = axes

    # (a) length histogram
    h = r.plot_histogram
    edges = h.edges.astype(float)
    widths = np.diff(edges)
    if h.overflow:  # draw the tail bin as wide as the others; its label says what it holds
        widths[-1] = widths[0]
    ax_h.bar(edges[:-1], h.counts, width=widths, align="edge", color="#4c72b0", alpha=0.85,
             edgecolor="white", linewidth=0.3)
    ymax = max(h.counts.max(), 1)
    for k, (label, v, style) in enumerate((("p50", r.lengths["median"], ":"), ("p90", r.lengths["p90"], "--"),
                                           ("p99", r.lengths["p99"], "-."))):
        ax_h.axvline(v, color="#333333", linestyle=style, linewidth=1)
        ax_h.text(v, ymax * (1.17 - 0.08 * k), f" {label} {v:,.0f}", va="center", ha="left", fontsize=8,
                  bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    right = edges[-2] + widths[-1]
    if cfg.pack_len <= right:
        ax_h.axvline(cfg.pack_len, color="#c44e52", linewidth=1.8)
        ax_h.axvspan(cfg.pack_len, right, color="#c44e52", alpha=0.08)
        over = r.truncation["examples_over"]
        ax_h.text(cfg.pack_len, ymax * 0.6, f"--len {cfg.pack_len:,} \n{over:,} longer ", color="#c44e52",
                  fontsize=9, fontweight="bold", ha="right",
                  bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1})
    if h.overflow:
        ax_h.annotate(f"≥{int(edges[-2]):,}\n(tail to {r.lengths['max']:,})", (edges[-2] + widths[-1] / 2, h.counts[-1]),
                      xytext=(0, 28), textcoords="offset points", ha="right", fontsize=7,
                      arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.6})
    ax_h.set_ylim(0, ymax * 1.25)
    ax_h.set_xlabel("tokens per example" + ("" if cfg.pack_len <= right else
                                            f"   (--len {cfg.pack_len:,} is beyond the longest example)"))
    ax_h.set_ylabel("examples")
    from matplotlib.ticker import FuncFormatter as _Fmt

    ax_h.yaxis.set_major_formatter(_Fmt(lambda v, _p: f"{v:,.0f}"))
    c = r.counts
    ax_h.set_title(f"Length distribution · {c['examples']:,} examples, {c['tokens']:,} tokens")

    # (b) occupancy
    y = np.arange(len(names))[::-1]
    occ = [r.strategies[n].occupancy * 100 for n in names]
    ax_o.barh(y, occ, color=colors, height=0.65)
    for yi, n, o in zip(y, names, occ, strict=True):
        st = r.strategies[n]
        ax_o.text(min(o, 100) + 1.5, yi, f"{_pct(st.occupancy)} · attn ×{st.attention_waste:.2f}", va="center",
                  fontsize=8)
    ax_o.set_yticks(y, labels)
    ax_o.set_xlim(0, 150)
    ax_o.set_xticks([0, 25, 50, 75, 100])
    ax_o.axvline(100, color="#999999", linewidth=0.6)
    ax_o.set_xlabel("occupancy: real tokens / computed slots (%)")
    ax_o.set_title(f"Occupancy by strategy · --len {cfg.pack_len:,}, batch {cfg.batch_size}")

    # (c) relative FLOPs, linear vs attention
    ideal = r.costs["padding_free"]["flops"] or 1.0
    lin = np.array([r.costs[n]["flops_linear"] / ideal for n in names])
    att = np.array([r.costs[n]["flops_attention"] / ideal for n in names])
    ax_f.barh(y, lin, color=colors, height=0.65)
    ax_f.barh(y, att, left=lin, color=colors, height=0.65, alpha=0.45, hatch="///", edgecolor="white")
    from matplotlib.patches import Patch

    handles = [Patch(facecolor="#777777", label="linear layers: 6·P·slots"),
               Patch(facecolor="#777777", alpha=0.45, hatch="///", edgecolor="white",
                     label="attention: 12·layers·d_attn·work")]
    totals = lin + att
    # one huge bar (pad to --len on short data) would flatten the rest: clip it and say so
    rest = np.sort(totals)[-2] if totals.size > 1 else totals.max()
    cap = totals.max() * 1.3 if totals.max() <= 4 * rest else max(rest * 1.6, 2.0)
    for yi, n, total in zip(y, names, totals, strict=True):
        cost = r.costs[n]
        txt = f"{total:.2f}×"
        if cfg.gpu is not None:
            txt += f"  {_hours(cost['gpu_hours'])} {cfg.gpu.name} h"
        if total > cap:
            ax_f.text(cap * 0.98, yi, txt + " ▶", va="center", ha="right", fontsize=8, color="white",
                      fontweight="bold")
        else:
            ax_f.text(total + cap * 0.01, yi, txt, va="center", fontsize=8)
    ax_f.set_yticks(y, labels)
    ax_f.set_xlim(0, cap)
    ax_f.axvline(1.0, color="#999999", linewidth=0.6)
    ax_f.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8,
                frameon=False)
    ax_f.set_xlabel("training FLOPs relative to padding-free (1.0 = no waste)")
    ax_f.set_title(f"Training FLOPs · {r.model.name}")

    # (d) per-batch attention waste of random padded batches
    w = r.batch_waste
    wedges = np.asarray(w["edges"])
    wcounts = np.asarray(w["counts"])
    ax_w.bar(wedges[:-1], wcounts, width=np.diff(wedges), align="edge", color="#dd8452",
             edgecolor="white", linewidth=0.3)
    ax_w.set_xscale("log")
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ticks = [t for t in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= wedges[-1] * 1.05]
    ax_w.xaxis.set_major_locator(FixedLocator(ticks))
    ax_w.xaxis.set_minor_locator(NullLocator())
    ax_w.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}×"))
    summ = w["summary"]
    if summ.get("batches"):
        top = max(wcounts.max(), 1)
        for k, (label, key, style) in enumerate((("median", "median", "--"), ("p90", "p90", ":"))):
            ax_w.axvline(summ[key], color="#333333", linestyle=style, linewidth=1)
            ax_w.text(summ[key], top * (1.17 - 0.08 * k), f" {label} ×{summ[key]:.2f}", va="center", ha="left",
                      fontsize=8, bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
        ax_w.set_ylim(0, top * 1.25)
        overall = r.strategies["random_padded"].attention_waste
        ax_w.text(0.02, 0.97, f"{summ['batches']:,} batches of {cfg.batch_size}\nepoch waste ×{overall:.2f}",
                  transform=ax_w.transAxes, ha="left", va="top", fontsize=8)
    ax_w.set_xlabel("attention waste per batch: b·m² / Σ n²  (log scale)")
    ax_w.set_ylabel("batches")
    ax_w.set_title("Random padded batches: attention waste per batch")

    fig.suptitle(f"packtool profile · {_source_name(r)}\n{headline(r)}", fontsize=11, fontweight="bold")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)

