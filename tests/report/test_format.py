"""packtool.report.format: the numbers, shares, durations and sizes every report prints."""

from __future__ import annotations

from packtool.report import format as fmt


def test_number_formats():
    assert (fmt.num(1234), fmt.num(1234.0), fmt.num(2.5, 1), fmt.num(3.14159)) == (
        "1,234",
        "1,234",
        "2.5",
        "3",
    )
    assert (fmt.count(999_999), fmt.count(1_620_000)) == ("999,999", "1.62M")
    assert (fmt.si(1.5e18), fmt.si(2.0e9), fmt.si(999)) == ("1.5E", "2G", "999")


def test_percent_formats_never_round_to_a_lie():
    assert fmt.pct(0.5) == "50.0%"
    assert fmt.pct(0.9997) == "99.97%"
    assert fmt.pct(0.99999) == "99.99%"  # not 100.00 %
    assert fmt.pct(1.0) == "100.0%"
    assert fmt.pct_small(0.0003) == "0.03%" and fmt.pct_small(0.0) == "0.0%"
    assert fmt.pct_small(0.25) == "25.0%"


def test_plural_and_size():
    assert (fmt.plural(1, "shard"), fmt.plural(2048, "shard")) == ("1 shard", "2,048 shards")
    assert (fmt.size(512), fmt.size(3_500_000), fmt.size(5 * 2**40)) == (
        "512 B",
        "3.3 MiB",
        "5,120.0 GiB",
    )
