"""Issue 23, second pass: the profile report says what it skipped and agrees with itself."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from packtool.profiler import ProfileConfig, profile_lengths
from packtool.report import profile as report
from packtool.report import profile_png
from packtool.stats import advice


def rendered(r, width: int = 200) -> str:
    buf = io.StringIO()
    report.render(r, Console(file=buf, width=width, force_terminal=False))
    return buf.getvalue()


@pytest.fixture(scope="module")
def skipped_two_thirds():
    """100 profiled examples, after --on-error skip skipped 200 of the 300 records read."""
    lengths = np.random.default_rng(0).integers(20, 100, 100)
    r = profile_lengths(
        lengths,
        ProfileConfig(pack_len=4096),
        source={"data": "skip.jsonl", "pack_args": ["--on-error", "skip"]},
    )
    r.counts["examples_read"] = 300
    r.counts["examples_skipped"] = 200
    r.counts["skipped_reasons"] = {"message 1 has unknown role 'bogus'": 200}
    return r


def test_headline_and_png_title_say_how_many_records_were_skipped(skipped_two_thirds):
    r = skipped_two_thirds
    rec = advice.recommend(r)
    assert rec.summary().endswith("nothing cut · 200 of 300 records skipped (66.7%)")
    assert profile_png.title_lines(r)[1] == rec.summary()
    assert profile_png.histogram_title(r).endswith("(200 of 300 records skipped)")


def test_report_warns_that_the_command_keeps_on_error_skip(skipped_two_thirds):
    out = " ".join(rendered(skipped_two_thirds).split())
    assert "skipped (--on-error skip) 200 of 300 (66.7%)" in out
    assert "nothing cut; 2 rows; 200 of 300 records skipped (66.7%)" in out
    assert "the command keeps --on-error skip, so pack skips them too" in out
    assert "that is most of the data" in out
    assert "to pack: packtool pack skip.jsonl --len 4096 --on-error skip --out packed/" in out


def test_nothing_skipped_says_nothing():
    r = profile_lengths(np.array([10, 20, 30]), ProfileConfig(pack_len=64))
    rec = advice.recommend(r)
    assert "skipped" not in rec.summary()
    assert not any("skip" in h for h in rec.hints)
    assert "skipped" not in profile_png.histogram_title(r)


def test_count_axes_have_whole_ticks(tmp_path, monkeypatch):
    """Few examples and batches: the histogram and the per-batch panel tick whole counts only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    r = profile_lengths(np.random.default_rng(2).integers(20, 100, 40), ProfileConfig(pack_len=256))
    profile_png.write_png(r, str(tmp_path / "p.png"))
    fig = figs[-1]
    counted = [ax for ax in fig.axes if ax.get_ylabel() in ("examples", "batches")]
    assert len(counted) == 2
    for ax in counted:
        lo, hi = ax.get_ylim()
        ticks = [t for t in ax.get_yticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), (ax.get_ylabel(), ticks)


def test_gpu_time_is_readable():
    """'0.0281 h100 h' read badly: hours ≥ 1, minutes below, seconds below a minute."""
    assert [advice.gpu_time(h) for h in (1234.5, 12.34, 0.5, 0.0281, 0.00232)] == [
        "1,234 h",
        "12.3 h",
        "30 min",
        "1.7 min",
        "8.4 s",
    ]
    assert advice.hours_versus(0.01, 0.0381, "X") == "saves 1.7 GPU-minutes against X"
    cost = {"gpu_hours_saved_vs_pad_to_len": 0.0281, "saving_vs_pad_to_len": 0.5}
    assert report._saved(cost, "pad_to_len") == "1.7 min (50%)"


@pytest.fixture(scope="module")
def swept():
    from packtool.profiler import profile_lens

    lengths = np.random.default_rng(1).integers(50, 600, 400)
    return profile_lens(lengths, ProfileConfig(), [1024, 2048, 4096, 8192])


def test_sweep_table_fits_80_columns(swept):
    """At 80 columns every cell used to crop to `1…`: all-zero count columns are left out and the
    padding narrows, so every header and value reads whole."""
    out = rendered(swept, width=80)
    table = out[out.index("--len sweep") : out.index("recommendation")]
    assert "…" not in table
    for word in ("--len", "rows", "fill", "dropped", "varlen", "dense", "grouped", "random"):
        assert word in table
    assert "trunc." not in table and "split" not in table  # 0 at every --len under drop
    assert "1,024" in table and "8,192" in table and "99.0%" in table


def test_sweep_panel_legend_is_off_the_data_and_labels_inside_the_figure(
    swept, tmp_path, monkeypatch
):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    profile_png.write_png(swept, str(tmp_path / "s.png"))
    fig = figs[-1]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = next(a for a in fig.axes if a.get_xlabel() == "--len")
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y1 <= ax.get_window_extent(renderer).y0  # below the plot, not over a point
    width = fig.bbox.width
    for a in fig.axes:
        for label in (a.yaxis.label, a.xaxis.label, a.title):
            if label.get_text():
                box = label.get_window_extent(renderer)
                assert 0 <= box.x0 and box.x1 <= width, label.get_text()


LONG_TAIL = "lognormal:median=1500,sigma=0.8,n=3000,max=20000,seed=3"  # 11% over 4,096: split


def test_recommendation_says_which_overflow_its_ratios_assume():
    """The recommendation's 1.01× and the table's 1.02× came from different --overflow runs,
    unsaid: the recommendation now names its own and the table's."""
    from packtool.stats.synthetic import synthetic_lengths

    r = profile_lengths(synthetic_lengths(LONG_TAIL), ProfileConfig(pack_len=4096))
    rec = advice.recommend(r)
    assert (rec.overflow, rec.evidence_overflow) == ("split", "split")
    assert rec.evidence_note == (
        "these ratios are simulated as recommended, at --len 4,096 --overflow split; the table "
        "above is at --overflow drop, without the 333 longer examples"
    )
    assert ("", rec.evidence_note) in rec.lines()
    fits = advice.recommend(profile_lengths(np.array([10, 20, 30]), ProfileConfig(pack_len=64)))
    assert fits.evidence_note == ""


def test_single_len_and_sweep_explain_their_different_choices():
    """--len 4096 alone keeps 4,096 + split; a 1024-8192 sweep takes 8,192 + split: each reason
    says the rule that separates them."""
    from packtool.profiler import profile_lens
    from packtool.stats.synthetic import synthetic_lengths

    lengths = synthetic_lengths(LONG_TAIL)
    one = advice.recommend(profile_lengths(lengths, ProfileConfig(pack_len=4096)))
    sweep = advice.recommend(profile_lens(lengths, ProfileConfig(), [1024, 2048, 4096, 8192]))
    assert (one.pack_len, one.overflow) == (4096, "split")
    assert (sweep.pack_len, sweep.overflow) == (8192, "split")
    assert (
        "a --len sweep takes its longest --len instead, which splits the fewest" in one.len_reason
    )
    assert "packtool profile DATA --len 4096-16384" in one.len_reason
    assert sweep.len_reason.startswith("the longest swept --len, which splits the fewest examples")
    assert "one --len alone stays as given and splits" in sweep.len_reason
