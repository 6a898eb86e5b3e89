"""The small text formatters the report modules share: numbers, shares, plurals, bytes, bars.

    num(1234) "1,234"    num(2.5, 1) "2.5"    count(1_620_000) "1.62M"    si(2.0e9) "2G"
    pct(0.9997) "99.97%" (never "100.0%" below 1)    pct_small(0.0003) "0.03%" (never "0.0%")
    plural(3, "row") "3 rows"    size(3_500_000) "3.3 MiB"    bar(5, 10, 5) "██▌" (eighths)

GPU time is stats.flops.gpu_time ("4.1 min"). Stdlib only: report/pack.py stays light.
"""

from __future__ import annotations


def num(x: float | int, digits: int = 0) -> str:
    if isinstance(x, float) and not x.is_integer() or digits:
        return f"{x:,.{digits}f}"
    return f"{int(x):,}"


def count(x: int) -> str:
    """Row and step counts: exact below a million, 1.62M above (keeps the table in 80 columns)."""
    return f"{x:,}" if x < 1_000_000 else f"{x / 1e6:.3g}M"


def si(x: float) -> str:
    for unit, scale in (
        ("Y", 1e24),
        ("Z", 1e21),
        ("E", 1e18),
        ("P", 1e15),
        ("T", 1e12),
        ("G", 1e9),
        ("M", 1e6),
        ("k", 1e3),
    ):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def pct(x: float) -> str:
    """Occupancy: one decimal, two near 100 % so that 99.97 % does not print as 100.0 %."""
    if 0.999 <= x < 1.0:
        return "99.99%" if f"{x:.2%}" == "100.00%" else f"{x:.2%}"
    return f"{x:.1%}"


def pct_small(x: float) -> str:
    """Padding: two decimals below 1 % so that 0.03 % does not print as 0.0 %."""
    return f"{x:.2%}" if 0 < x < 0.01 else f"{x:.1%}"


def plural(k: int, noun: str) -> str:
    """'1 shard', '2,048 shards'."""
    return f"{k:,} {noun}" + ("" if k == 1 else "s")


def size(n: int) -> str:
    """Bytes in binary units: '512 B', '3.3 MiB', '1.2 GiB' (GiB the largest)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return str(n)


_EIGHTHS = " ▏▎▍▌▋▊▉█"


def bar(value: float, full: float, width: int) -> str:
    """A left-aligned bar of `width` cells, 1/8-cell resolution; a non-zero value shows at least ▏."""
    if full <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / full * width * 8))
    return "█" * (eighths // 8) + (_EIGHTHS[eighths % 8] if eighths % 8 else "")
