"""The profile PNG: four panels (five with a --len sweep) drawn with matplotlib (Agg), imported
only when a PNG is written. The title is the source, the recommendation and its command
(stats.advice.recommend).

    ┌───────────────────────────────────┬───────────────────────────────────┐
    │ packtool profile · DATA                                               │
    │ recommended: packed BFD + varlen … · --len 4,096 --overflow split · … │
    │ next: packtool pack DATA --len 4096 --overflow split --out packed/    │
    ├───────────────────────────────────┬───────────────────────────────────┤
    │ (a) length histogram              │ (b) occupancy by strategy         │
    │     p50, p90, p99 and --len       │     real tokens / computed slots  │
    ├───────────────────────────────────┼───────────────────────────────────┤
    │ (c) training FLOPs relative to    │ (d) attention waste per random    │
    │     padding-free, linear + attn   │     padded batch, log scale       │
    ├───────────────────────────────────┴───────────────────────────────────┤
    │ (e) only with a sweep: packed occupancy (fill) and the share of       │
    │     tokens --overflow cuts, against --len (log2 axis), the pick marked│
    └───────────────────────────────────────────────────────────────────────┘

Panel (a) draws `plot_histogram`. A folded tail bar is drawn as wide as the first bin, so the view
ends at `end` (histogram_view), short of the longest example:

    edges[0]                       edges[-2]    end                        max + 1 = edges[-1]
    │ ▂▅█▇▅▃▂▁  regular bins  ▁ ▁ │ tail bar │  · · · not drawn · · ·  │

--len is a red line when it lies in the view (--len <= end); otherwise the x-axis label says where
it is. That choice is len_axis_note, a pure function of the ProfileResult (no matplotlib).
"""

from __future__ import annotations

import numpy as np

from packtool.profiler import ProfileResult
from packtool.report.format import pct
from packtool.stats import advice
from packtool.stats.lengths import Histogram

_COLOR = {
    "pad_to_len": "#c44e52",
    "random_padded": "#dd8452",
    "length_grouped": "#ccb974",
    "padding_free": "#55a868",
    "packed_bfd_varlen": "#4c72b0",
    "packed_bfd_dense": "#4c72b0",
    "packed_ffd_varlen": "#8172b3",
    "packed_ffd_dense": "#8172b3",
}


def histogram_view(h: Histogram) -> tuple[np.ndarray, np.ndarray, float]:
    """(edges as float, drawn bar widths, right end of the view) of a length histogram as panel (a)
    draws it: the tail bar of an overflowing histogram is as wide as the first bar."""
    edges = h.edges.astype(float)
    widths = np.diff(edges)
    if h.overflow:
        widths[-1] = widths[0]
    return edges, widths, float(edges[-2] + widths[-1])


def len_axis_note(r: ProfileResult) -> str:
    """What panel (a)'s x-axis label adds about --len (L), by where L lies:

        in the view (L <= end)            ""   (the red --len line shows it)
        beyond the data (max < L)         "--len 4,096 is beyond the longest example"
        in the tail bar (max > L > end)   "--len 4,096 is in the tail bar: 7 examples exceed it"
        at the longest (max = L > end)    "--len 4,096 is in the tail bar, at the longest example"

    L > end with max >= L happens only with a folded tail (without one the view ends past max).
    """
    pack_len = r.config.pack_len
    _, _, end = histogram_view(r.plot_histogram)
    if pack_len <= end:
        return ""
    longest = r.lengths["max"]
    if longest < pack_len:
        return f"--len {pack_len:,} is beyond the longest example"
    over = r.truncation["examples_over"]
    if over == 0:
        return f"--len {pack_len:,} is in the tail bar, at the longest example"
    return f"--len {pack_len:,} is in the tail bar: {over:,} example{'s' if over != 1 else ''} exceed{'' if over != 1 else 's'} it"


def sweep_series(r: ProfileResult) -> dict[str, list]:
    """Panel (e)'s data, one entry per swept --len (empty lists without a sweep):

    lens       [1024, 2048, 4096]
    fill       packed BFD occupancy, % (None where nothing is left to pack)
    grouped    length-grouped occupancy, %
    cut        tokens --overflow cuts, % of all tokens
    """
    out: dict[str, list] = {"lens": [], "fill": [], "grouped": [], "cut": []}
    for p in r.sweep or []:
        g = (p.strategies.get("length_grouped") or {}).get("occupancy")
        out["lens"].append(p.pack_len)
        out["fill"].append(None if p.fill is None else 100 * p.fill)
        out["grouped"].append(None if g is None else 100 * g)
        out["cut"].append(100 * (p.pack.get("tokens_cut_share") or 0.0))
    return out


def title_lines(r: ProfileResult) -> list[str]:
    """The figure title: source, the recommendation in one line, its command."""
    rec = advice.recommend(r)
    label, command = rec.lines()[-1]  # "next" (or "to pack") and the command
    src = r.source
    name = src.get("data") or src.get("spec") or src.get("path") or src.get("kind", "")
    return [f"packtool profile · {name}", rec.summary(), f"{label}: {command}"]


def histogram_title(r: ProfileResult) -> str:
    """'Length distribution · 100 examples, 5,785 tokens (200 of 300 records skipped)'."""
    c = r.counts
    skipped = (
        f" ({c['examples_skipped']:,} of {c['examples_read']:,} records skipped)"
        if c.get("examples_skipped")
        else ""
    )
    return f"Length distribution · {c['examples']:,} examples, {c['tokens']:,} tokens{skipped}"


def write_png(r: ProfileResult, path: str) -> None:
    """The PNG at `path`: the panels drawn in the module docstring."""
    import os

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

    cfg = r.config
    names = list(r.strategies)
    labels = [r.strategies[n].label for n in names]

    colors = [_COLOR.get(n, "#888888") for n in names]
    plt.rcParams.update(
        {
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.titleweight": "bold",
            "axes.titlesize": 10,
        }
    )
    series = sweep_series(r)
    if series["lens"]:
        fig = plt.figure(figsize=(13, 12), dpi=110)
        grid = fig.add_gridspec(3, 2, height_ratios=[1, 1, 0.8])
        ax_h, ax_o = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        ax_f, ax_w = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
        ax_s = fig.add_subplot(grid[2, :])
    else:
        fig, axes = plt.subplots(2, 2, figsize=(13, 9), dpi=110)
        (ax_h, ax_o), (ax_f, ax_w) = axes
        ax_s = None

    # (a) length histogram
    h = r.plot_histogram
    edges, widths, right = histogram_view(h)
    ax_h.bar(
        edges[:-1],
        h.counts,
        width=widths,
        align="edge",
        color="#4c72b0",
        alpha=0.85,
        edgecolor="white",
        linewidth=0.3,
    )
    ymax = max(h.counts.max(), 1)
    percentiles = (("p50", "median", ":"), ("p90", "p90", "--"), ("p99", "p99", "-."))
    _marks(
        ax_h,
        [(r.lengths[k], f" {label} {r.lengths[k]:,.0f}", s) for label, k, s in percentiles],
        ymax,
    )
    if cfg.pack_len <= right:
        ax_h.axvline(cfg.pack_len, color="#c44e52", linewidth=1.8)
        ax_h.axvspan(cfg.pack_len, right, color="#c44e52", alpha=0.08)
        over = r.truncation["examples_over"]
        ax_h.text(
            cfg.pack_len,
            ymax * 0.6,
            f"--len {cfg.pack_len:,} \n{over:,} longer ",
            color="#c44e52",
            fontsize=9,
            fontweight="bold",
            ha="right",
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1},
        )
    if h.overflow:
        ax_h.annotate(
            f"≥{int(edges[-2]):,}\n(tail to {r.lengths['max']:,})",
            (edges[-2] + widths[-1] / 2, h.counts[-1]),
            xytext=(0, 28),
            textcoords="offset points",
            ha="right",
            fontsize=7,
            arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.6},
        )
    ax_h.set_ylim(0, ymax * 1.25)
    note = len_axis_note(r)
    ax_h.set_xlabel("tokens per example" + (f"   ({note})" if note else ""))
    ax_h.set_ylabel("examples")
    ax_h.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole ticks
    ax_h.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    ax_h.set_title(histogram_title(r))

    # (b) occupancy
    y = np.arange(len(names))[::-1]
    occ = [r.strategies[n].occupancy * 100 for n in names]
    ax_o.barh(y, occ, color=colors, height=0.65)
    for yi, n, o in zip(y, names, occ, strict=True):
        st = r.strategies[n]
        ax_o.text(
            min(o, 100) + 1.5,
            yi,
            f"{pct(st.occupancy)} · attn ×{st.attention_waste:.2f}",
            va="center",
            fontsize=8,
        )
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
    ax_f.barh(
        y, att, left=lin, color=colors, height=0.65, alpha=0.45, hatch="///", edgecolor="white"
    )
    handles = [
        Patch(facecolor="#777777", label="linear layers: 6·P·slots"),
        Patch(
            facecolor="#777777",
            alpha=0.45,
            hatch="///",
            edgecolor="white",
            label="attention: 12·layers·d_attn·work",
        ),
    ]
    totals = lin + att
    # one huge bar (pad to --len on short data) would flatten the rest: clip it and say so
    rest = np.sort(totals)[-2] if totals.size > 1 else totals.max()
    cap = totals.max() * 1.3 if totals.max() <= 4 * rest else max(rest * 1.6, 2.0)
    for yi, n, total in zip(y, names, totals, strict=True):
        cost = r.costs[n]
        txt = f"{total:.2f}×"
        if cfg.gpu is not None:
            txt += f"  {advice.gpu_time(cost['gpu_hours'])} on {cfg.gpu.name.upper()}"
        if total > cap:
            ax_f.text(
                cap * 0.98,
                yi,
                txt + " ▶",
                va="center",
                ha="right",
                fontsize=8,
                color="white",
                fontweight="bold",
            )
        else:
            ax_f.text(total + cap * 0.01, yi, txt, va="center", fontsize=8)
    ax_f.set_yticks(y, labels)
    ax_f.set_xlim(0, cap)
    ax_f.axvline(1.0, color="#999999", linewidth=0.6)
    ax_f.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.13),
        ncol=2,
        fontsize=8,
        frameon=False,
    )
    ax_f.set_xlabel("training FLOPs relative to padding-free (1.0 = no waste)")
    ax_f.set_title(f"Training FLOPs · {r.model.name}")

    # (d) per-batch attention waste of random padded batches
    w = r.batch_waste
    wedges = np.asarray(w["edges"])
    wcounts = np.asarray(w["counts"])
    ax_w.bar(
        wedges[:-1],
        wcounts,
        width=np.diff(wedges),
        align="edge",
        color="#dd8452",
        edgecolor="white",
        linewidth=0.3,
    )
    ax_w.set_xscale("log")
    ticks = [
        t for t in (1, 1.5, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000) if t <= wedges[-1] * 1.05
    ]
    ax_w.xaxis.set_major_locator(FixedLocator(ticks))
    ax_w.xaxis.set_minor_locator(NullLocator())
    ax_w.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}×"))
    summ = w["summary"]
    if summ.get("batches"):
        top = max(wcounts.max(), 1)
        _marks(
            ax_w,
            [(summ[k], f" {k} ×{summ[k]:.2f}", s) for k, s in (("median", "--"), ("p90", ":"))],
            top,
        )
        ax_w.set_ylim(0, top * 1.25)
        overall = r.strategies["random_padded"].attention_waste
        ax_w.text(
            0.02,
            0.97,
            f"{summ['batches']:,} batches of {cfg.batch_size}\nepoch waste ×{overall:.2f}",
            transform=ax_w.transAxes,
            ha="left",
            va="top",
            fontsize=8,
        )
    ax_w.set_xlabel("attention waste per batch: b·m² / Σ n²  (log scale)")
    ax_w.set_ylabel("batches")
    ax_w.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_w.set_title("Random padded batches: attention waste per batch")

    if ax_s is not None:
        _draw_sweep(ax_s, series, r)

    title = title_lines(r)
    fig.suptitle("\n".join(title), fontsize=10, fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.99 - 0.012 * len(title)))
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def _marks(ax, marks: list[tuple[float, str, str]], top: float) -> None:
    """(x, label, line style) per mark: a vertical line, its label in a box near the top, each
    label below the one before."""
    for k, (x, text, style) in enumerate(marks):
        ax.axvline(x, color="#333333", linestyle=style, linewidth=1)
        ax.text(
            x,
            top * (1.17 - 0.08 * k),
            text,
            va="center",
            ha="left",
            fontsize=8,
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1},
        )


def _draw_sweep(ax, series: dict[str, list], r: ProfileResult) -> None:
    """Panel (e): fill of pack's rows and length-grouped occupancy (left axis, %), tokens cut by
    --overflow (bars, right axis, %), against --len on a log2 axis; the recommended --len marked."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    lens = np.asarray(series["lens"], dtype=float)
    fill = np.array(series["fill"], dtype=float)  # None: nan
    grouped = np.array(series["grouped"], dtype=float)
    cut = np.asarray(series["cut"], dtype=float)
    ax.set_xscale("log", base=2)
    right = ax.twinx()
    right.spines["right"].set_visible(True)
    widths = lens * 0.25
    right.bar(
        lens, cut, width=widths, color="#c44e52", alpha=0.3, label="tokens cut by --overflow (%)"
    )
    right.set_ylim(0, max(5.0, float(np.nanmax(cut)) * 1.3 if cut.size else 5.0))
    right.set_ylabel("tokens cut, %", color="#c44e52")  # the title names --overflow
    ax.plot(lens, fill, "o-", color="#4c72b0", label="packed BFD fill (%)")
    ax.plot(lens, grouped, "s--", color="#ccb974", label="length-grouped occupancy (%)")
    for x, y in zip(lens, fill, strict=True):
        if not np.isnan(y):
            ax.annotate(
                f"{y:.1f}%",
                (x, y),
                xytext=(0, 6),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
    both = np.concatenate([fill, grouped])
    low = np.nanmin(both) if np.isfinite(both).any() else 0
    ax.set_ylim(max(0.0, min(low - 5, 90.0)), 101.5)
    ax.set_zorder(right.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.xaxis.set_major_locator(FixedLocator(lens.tolist()))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:,.0f}"))
    pick = advice.recommend(r).pack_len
    if pick in series["lens"]:
        ax.axvline(pick, color="#55a868", linewidth=1.5, linestyle=":")
        ax.text(  # at the foot of the line: the fill labels sit near the top
            pick,
            0.03,
            f" recommended --len {pick:,}",
            color="#2d7a45",
            fontsize=8,
            va="bottom",
            ha="left",
            transform=ax.get_xaxis_transform(),
        )
    ax.set_xlabel("--len")
    ax.set_ylabel("occupancy, %")
    handles = ax.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    # below the axes, not over the points (the fill at the longest --len sat under it)
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.2),
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    ax.set_title(f"--len sweep · packed fill and tokens cut by --overflow {r.config.overflow}")
