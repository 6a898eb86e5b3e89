"""packtool.stats.sweep: the --len grammar (values, ranges, steps, one-line errors) and SweepPoint."""

from __future__ import annotations

import pytest

from packtool.errors import UsageError
from packtool.stats.sweep import EXAMPLE, MAX_LENS, SweepPoint, parse_lens


@pytest.mark.parametrize(
    "text, want",
    [
        ("4096", [4096]),
        (4096, [4096]),
        (" 4096 ", [4096]),
        ("2048,4096,8192", [2048, 4096, 8192]),
        ("8192, 2048 ,4096,4096", [2048, 4096, 8192]),  # sorted, each once
        ("1024-8192", [1024, 2048, 4096, 8192]),  # powers of two, inclusive
        (
            "1000-5000",
            [1000, 1024, 2048, 4096, 5000],
        ),  # the ends themselves, and the powers between
        ("1024-1024", [1024]),
        ("1-4", [1, 2, 4]),
        ("1024:4096:1024", [1024, 2048, 3072, 4096]),
        ("1000:2500:1000", [1000, 2000]),  # the stop is inclusive only when a step lands on it
        ("512,1024-4096", [512, 1024, 2048, 4096]),
        ("256:512:256,1024-2048", [256, 512, 1024, 2048]),
    ],
)
def test_parse_lens(text, want):
    assert parse_lens(text) == want


@pytest.mark.parametrize(
    "text, match",
    [
        ("", "no length given"),
        ("   ", "no length given"),
        ("4k", "'4k' is not a length, a range N-M or N:M:STEP"),
        ("four", "is not a length"),
        ("-5", "is not a length"),
        ("1.5", "is not a length"),
        ("1024,,2048", "an empty value between commas"),
        ("2048,", "an empty value between commas"),
        ("8192-1024", "runs backwards"),
        ("0", "a length must be >= 1"),
        ("0-4", "a length must be >= 1"),
        ("0:8:2", "a length must be >= 1"),
        ("1024:512:1", "starts above its stop"),
        ("1024:2048:0", "the step of '1024:2048:0' must be >= 1"),
        ("1:100000:1", f"names 100,000 lengths; at most {MAX_LENS}"),
        ("1-99999999999999999999999", f"more than {MAX_LENS} lengths"),
        ("1024:2048", "is not a length, a range"),
    ],
)
def test_bad_lens_are_one_line_usage_errors(text, match):
    with pytest.raises(UsageError) as e:
        parse_lens(text)
    msg = str(e.value)
    assert match in msg
    assert msg.startswith(f"--len {text!r}: ") and msg.endswith(f"e.g. {EXAMPLE}")
    assert "\n" not in msg


def test_a_huge_step_range_is_refused_before_it_is_built():
    with pytest.raises(UsageError, match="at most"):
        parse_lens("1:1000000000000:1")  # would be a list of 10^12 values


def test_sweep_point_accessors_and_json():
    pack = {"len": 2048, "overflow": "drop", "rows": 7, "fill": 0.97, "tokens_cut": 5}
    strategies = {"packed_bfd_varlen": {"relative_flops": 1.03}}
    p = SweepPoint(pack=pack, strategies=strategies)
    assert (p.pack_len, p.overflow, p.rows, p.fill) == (2048, "drop", 7, 0.97)
    assert p.relative_flops("packed_bfd_varlen") == 1.03 and p.relative_flops("nope") is None
    assert p.to_json() == {**pack, "strategies": strategies}
