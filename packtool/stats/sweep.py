"""`--len` as a list: the values a sweep profiles, and one sweep point per value. Pure Python.

    --len TEXT := ITEM ( "," ITEM )*                 every ITEM's values, sorted, each once
    ITEM       := N                                  4096
                | N "-" M                            N, the powers of two between, M (inclusive)
                | N ":" M ":" S                      N, N+S, N+2S, ... up to M (inclusive)

    --len 4096                   [4096]                            a single value: profile as before
    --len 2048,4096,8192         [2048, 4096, 8192]
    --len 1024-8192              [1024, 2048, 4096, 8192]
    --len 1000-5000              [1000, 1024, 2048, 4096, 5000]
    --len 1024:4096:1024         [1024, 2048, 3072, 4096]
    --len 512,1024-4096          [512, 1024, 2048, 4096]

One SweepPoint per value (packtool.profiler.profile_lens, from the same per---len computation as a
full profile):

    SweepPoint
      pack        {"len", "overflow", "rows", "documents", "tokens_cut", "tokens_cut_share",
                   "examples_dropped", "examples_truncated", "examples_split", "loss_tokens_cut",
                   "fill", ...}                 what `packtool pack --len N` would write (ProfileResult.pack)
      strategies  {name: {"rows", "occupancy", "attention_waste", "relative_flops", "flops",
                          "gpu_hours"}}         per strategy of stats.strategies.STRATEGY_LABELS
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from packtool.errors import UsageError

MAX_LENS = 32  # values one --len may name: every value is a full simulation
EXAMPLE = "--len 4096, --len 2048,4096,8192, --len 1024-8192 or --len 1024:8192:1024"
_INT = r"\s*(\d+)\s*"
_RANGE = re.compile(rf"^{_INT}-{_INT}$")
_STEP = re.compile(rf"^{_INT}:{_INT}:{_INT}$")
_ONE = re.compile(rf"^{_INT}$")


def _fail(text: str, why: str) -> UsageError:
    return UsageError(f"--len {text!r}: {why}; e.g. {EXAMPLE}")


def _powers_between(lo: int, hi: int) -> list[int]:
    """lo, every power of two strictly between, hi."""
    out, p = [lo], 1 << lo.bit_length()  # the smallest power of two above lo
    while p < hi:
        out.append(p)
        p <<= 1
    return out + [hi]


def _item(item: str, text: str) -> list[int]:
    if m := _ONE.match(item):
        values = [int(m.group(1))]
    elif m := _RANGE.match(item):
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise _fail(text, f"the range {item.strip()!r} runs backwards; write it low-high")
        values = _powers_between(lo, hi)  # (lo < 1: refused below, as for every form)
    elif m := _STEP.match(item):
        lo, hi, step = (int(g) for g in m.groups())
        if step < 1:
            raise _fail(text, f"the step of {item.strip()!r} must be >= 1")
        if lo > hi:
            raise _fail(text, f"{item.strip()!r} starts above its stop; write start:stop:step")
        count = (hi - lo) // step + 1
        if count > MAX_LENS:
            raise _fail(text, f"{item.strip()!r} names {count:,} lengths; at most {MAX_LENS}")
        values = list(range(lo, hi + 1, step))
    else:
        raise _fail(text, f"{item.strip()!r} is not a length, a range N-M or N:M:STEP")
    if min(values) < 1:
        raise _fail(text, "a length must be >= 1")
    return values


def parse_lens(text: str | int) -> list[int]:
    """The --len values of `text` (grammar in the module docstring), sorted, each once."""
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str) or not text.strip():
        raise _fail(str(text), "no length given")
    items = text.split(",")
    if any(not i.strip() for i in items):
        raise _fail(text, "an empty value between commas")
    values: set[int] = set()
    for item in items:
        values.update(_item(item, text))
        if len(values) > MAX_LENS:
            raise _fail(text, f"more than {MAX_LENS} lengths")
    return sorted(values)


@dataclass(frozen=True)
class SweepPoint:
    """One --len of a sweep: the pack prediction and a summary of every strategy (docstring above)."""

    pack: dict[str, Any]
    strategies: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def pack_len(self) -> int:
        return int(self.pack["len"])

    @property
    def overflow(self) -> str:
        return str(self.pack["overflow"])

    @property
    def rows(self) -> int:
        return int(self.pack["rows"])

    @property
    def fill(self) -> float | None:
        """Real tokens / slots of the packed rows; None when nothing is left to pack."""
        return self.pack.get("fill")

    def relative_flops(self, name: str) -> float | None:
        s = self.strategies.get(name)
        return None if s is None else s.get("relative_flops")

    def to_json(self) -> dict[str, Any]:
        return {**self.pack, "strategies": self.strategies}
