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
