"""packtool.report.profile_png: where the histogram view ends, the --len note, and the drawing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from packtool.profiler import ProfileConfig, profile_lengths
from packtool.report import profile_png
from packtool.stats.lengths import Histogram
from packtool.stats.synthetic import synthetic_lengths

BULK = "lognormal:median=400,sigma=0.6,n=5000,max=3000,seed=4"


def profiled(lengths, pack_len: int):
    return profile_lengths(np.asarray(lengths), ProfileConfig(pack_len=pack_len))


# ---------------------------------------------------------------------------------------------
# histogram_view


def test_view_of_a_histogram_without_tail_ends_at_its_last_edge():
    h = Histogram(np.array([0, 10, 20, 30]), np.array([1, 2, 3]), overflow=False)
    edges, widths, end = profile_png.histogram_view(h)
    assert edges.tolist() == [0.0, 10.0, 20.0, 30.0] and widths.tolist() == [10.0, 10.0, 10.0]
    assert end == 30.0


def test_view_draws_the_tail_bar_as_wide_as_the_first():
    #   0    10    20           11 541
    #   │ b0 │ b1 │ tail ·····  │     the tail bar [20, 11 541) is drawn [20, 30): the view ends at 30
    h = Histogram(np.array([0, 10, 20, 11_541]), np.array([5, 3, 1]), overflow=True)
    edges, widths, end = profile_png.histogram_view(h)
    assert edges[-1] == 11_541.0 and widths.tolist() == [10.0, 10.0, 10.0]
    assert end == 30.0
    assert h.edges.tolist() == [0, 10, 20, 11_541]  # the histogram itself is not changed


# ---------------------------------------------------------------------------------------------
# len_axis_note: which note panel (a)'s x-axis gets


def test_len_inside_a_folded_tail_says_examples_exceed_it():
    """The caption bug: max 11,540 and --len 4,096 used to read "beyond the longest example"."""
    lengths = np.concatenate([synthetic_lengths(BULK), [5000, 8000, 11_540]])
    r = profiled(lengths, 4096)
    assert r.lengths["max"] == 11_540 and r.truncation["examples_over"] == 3
    _, _, end = profile_png.histogram_view(r.plot_histogram)
    assert (
        r.plot_histogram.overflow and end < 4096
    )  # --len is right of the view, inside the tail bar
    note = profile_png.len_axis_note(r)
    assert note == "--len 4,096 is in the tail bar: 3 examples exceed it"
    assert "beyond" not in note


def test_one_example_over_len_is_singular():
    r = profiled(np.concatenate([synthetic_lengths(BULK), [11_540]]), 4096)
    assert profile_png.len_axis_note(r) == "--len 4,096 is in the tail bar: 1 example exceeds it"


def test_len_beyond_the_longest_example():
    r = profiled(synthetic_lengths("lognormal:median=300,sigma=0.5,n=2000,max=2000,seed=2"), 4096)
    assert r.lengths["max"] < 4096
    assert profile_png.len_axis_note(r) == "--len 4,096 is beyond the longest example"


def test_len_equal_to_the_longest_example_in_the_tail():
    r = profiled(np.concatenate([synthetic_lengths(BULK), [4096]]), 4096)
    _, _, end = profile_png.histogram_view(r.plot_histogram)
    assert end < 4096 and r.truncation["examples_over"] == 0
    assert profile_png.len_axis_note(r) == "--len 4,096 is in the tail bar, at the longest example"


def test_no_note_when_the_len_line_is_drawn():
    r = profiled(np.concatenate([synthetic_lengths(BULK), [11_540]]), 1024)
    _, _, end = profile_png.histogram_view(r.plot_histogram)
    assert 1024 <= end
    assert profile_png.len_axis_note(r) == ""


@pytest.mark.parametrize("case", range(40))
def test_note_agrees_with_the_data(case):
    rng = np.random.default_rng(case)
    n = int(rng.integers(50, 3000))
    lengths = (
        np.rint(rng.lognormal(np.log(rng.integers(50, 2000)), rng.uniform(0.2, 1.2), n)).astype(
            np.int64
        )
        + 1
    )
    if case % 2 == 0:
        lengths[: int(rng.integers(1, 5))] = int(rng.integers(5000, 40_000))  # a long tail
    pack_len = max(
        1, int(np.median(lengths) * rng.choice([0.5, 1, 2, 4, 8, 16, 64]))
    )  # bulk, tail, beyond
    r = profiled(lengths, pack_len)
    note = profile_png.len_axis_note(r)
    _, _, end = profile_png.histogram_view(r.plot_histogram)
    longest, over = int(lengths.max()), int((lengths > pack_len).sum())
    assert (note == "") == (pack_len <= end)
    assert ("beyond the longest example" in note) == (note != "" and longest < pack_len)
    assert ("exceed" in note) == (note != "" and over > 0)
    if "exceed" in note:
        assert f"{over:,} example" in note


# ---------------------------------------------------------------------------------------------
# the drawing


@pytest.fixture
def xlabels(monkeypatch) -> list[str]:
    """The x-axis labels write_png sets, in order."""
    import matplotlib.axes

    labels: list[str] = []
    set_xlabel = matplotlib.axes.Axes.set_xlabel
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "set_xlabel",
        lambda self, text, *a, **k: labels.append(text) or set_xlabel(self, text, *a, **k),
    )
    return labels


def test_write_png_uses_the_note(tmp_path, xlabels):
    r = profiled(np.concatenate([synthetic_lengths(BULK), [5000, 8000, 11_540]]), 4096)
    png = tmp_path / "sub" / "p.png"
    profile_png.write_png(r, str(png))
    assert "tokens per example   (--len 4,096 is in the tail bar: 3 examples exceed it)" in xlabels
    assert not any("beyond" in x for x in xlabels)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_write_png_without_a_note(tmp_path, xlabels):
    r = profiled(np.concatenate([synthetic_lengths(BULK), [11_540]]), 1024)
    profile_png.write_png(r, str(tmp_path / "p.png"))
    assert xlabels[0] == "tokens per example"


def test_matplotlib_is_imported_only_to_draw():
    code = (
        "import sys, packtool.report.profile, packtool.report.profile_png; "
        "print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ---------------------------------------------------------------------------------------------
# the recommendation in the title, the sweep panel


def test_title_is_source_recommendation_and_command():
    from packtool.stats import advice

    r = profile_lengths(
        np.concatenate([synthetic_lengths(BULK), [11_540]]),
        ProfileConfig(pack_len=4096),
        source={"data": "data.jsonl"},
    )
    rec = advice.recommend(r)
    assert profile_png.title_lines(r) == [
        "packtool profile · data.jsonl",
        rec.summary(),
        f"next: {rec.command}",
    ]
    assert (
        "--len 4,096 · drops 1 example: 11,540 tokens (0.48%)" in rec.summary()
    )  # a tiny share: drop
    assert rec.command == "packtool pack data.jsonl --len 4096 --out packed/"


def test_sweep_series():
    from packtool.profiler import profile_lens

    lengths = np.concatenate([synthetic_lengths(BULK), [5000, 8000]])
    r = profile_lens(lengths, ProfileConfig(), "1024-8192")
    s = profile_png.sweep_series(r)
    assert s["lens"] == [1024, 2048, 4096, 8192]
    assert s["fill"] == [100 * p.fill for p in r.sweep]
    assert s["cut"][-1] == 0.0 and s["cut"][0] > s["cut"][2] > 0  # 8192 keeps everything
    assert profile_png.sweep_series(profiled(lengths, 4096)) == {
        "lens": [],
        "fill": [],
        "grouped": [],
        "cut": [],
    }


def test_write_png_with_a_sweep_has_five_panels_and_the_command(tmp_path, monkeypatch):
    import matplotlib.figure

    from packtool.profiler import profile_lens

    titles: list[str] = []
    suptitle = matplotlib.figure.Figure.suptitle
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "suptitle",
        lambda self, t, *a, **k: titles.append(t) or suptitle(self, t, *a, **k),
    )
    savefig = matplotlib.figure.Figure.savefig
    panels: list[int] = []
    monkeypatch.setattr(
        matplotlib.figure.Figure,
        "savefig",
        lambda self, *a, **k: panels.append(len(self.axes)) or savefig(self, *a, **k),
    )
    lengths = np.concatenate([synthetic_lengths(BULK), [5000, 8000, 11_540]])
    r = profile_lens(lengths, ProfileConfig(), "1024-8192", source={"data": "d.jsonl"})
    png = tmp_path / "s.png"
    profile_png.write_png(r, str(png))
    assert panels == [6]  # (a)-(e), plus the twin axis of (e)
    assert titles and titles[0].splitlines()[2].startswith("next: packtool pack d.jsonl --len ")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    profile_png.write_png(profiled(lengths, 4096), str(tmp_path / "one.png"))
    assert panels == [6, 4]
