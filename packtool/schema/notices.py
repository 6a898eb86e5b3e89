"""Structured warnings: what a step noticed, in a form a report can filter and a CI can read.

    Notice(code="truncated", message="truncated 3 example(s) to --len 4096: ...", count=3, items=[12, 40, 41])

`code` says what kind of thing happened (the report shows the kinds it renders itself, such as
truncated/dropped, in its own way and prints the rest); `message` is the one line a person reads;
`items` are the source indices (or other keys) concerned, `count` how many in all.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

TRUNCATED = "truncated"
DROPPED = "dropped"
OVERFLOW_LOSS = "overflow_loss"  # --overflow drop|truncate lost more than 1% of examples or tokens
INPUT = "input"  # a warning from reading or tokenizing the data, passed on as it was said
LEFTOVER = (
    "leftover"  # a folder that a run which died left beside the output, removed (io.files)
)


@dataclass(frozen=True)
class Notice:
    code: str
    message: str
    count: int = 0
    items: list[Any] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies `items` (every dropped example's index) first
        return {
            "code": self.code,
            "message": self.message,
            "count": self.count,
            "items": list(self.items),
        }


_QUOTED = re.compile(r"'([^']*)'")
_NUMBER = re.compile(r"(?<![\w.'-])\d+(?![\w.'-])")


@dataclass(frozen=True)
class ReasonGroup:
    """Reasons that differ only in quoted names and numbers: one cause, its variants counted.

    message 2 has unknown role 'bot'; ... --role bot=OURS      ┐  cause   "message N has unknown role
    message 5 has unknown role 'bot'; ... --role bot=OURS      ├─▶          '…'; ... --role …=OURS"
    message 1 has unknown role 'agent'; ... --role agent=OURS  ┘  variants [("'bot'", 2), ("'agent'", 1)]
    """

    cause: str  # the reason itself when all are the same
    count: int
    variants: tuple[tuple[str, int], ...] = ()  # the quoted values that differ, most frequent first

    def text(self, listed: int = 3) -> str:
        """The cause and, when it has variants, the first `listed` with counts: "... ('bot' 2, 'agent' 1)"."""
        return self.cause + self.variants_text(listed)

    def variants_text(self, listed: int = 3) -> str:
        if not self.variants:
            return ""
        shown = ", ".join(f"{v} {k:,}" for v, k in self.variants[:listed])
        more = len(self.variants) - listed
        return f" ({shown}{f', … {more} more' if more > 0 else ''})"


def _cause(reason: str) -> tuple[str, tuple[str, ...]]:
    """(reason with quoted values as '…', bare repeats of them as …, numbers as N; the quoted values)."""
    values = tuple(_QUOTED.findall(reason))
    key = _QUOTED.sub("'…'", reason)
    words = {v for v in values if len(v) > 1 and re.fullmatch(r"[\w.-]+", v)}
    for v in sorted(words, key=len, reverse=True):
        key = re.sub(rf"(?<![\w.-]){re.escape(v)}(?![\w.-])", "…", key)
    return _NUMBER.sub("N", key), values


def group_reasons(reasons) -> list[ReasonGroup]:
    """Reasons (one per record) grouped by cause, most frequent cause first. A cause that occurs
    with one reason only is that reason, unchanged; otherwise numbers that differ read N and quoted
    values that differ read '…', and those values are the variants."""
    exact = Counter(reasons)
    by_cause: dict[str, list[tuple[str, tuple[str, ...], int]]] = {}
    for reason, k in exact.items():
        key, values = _cause(reason)
        by_cause.setdefault(key, []).append((reason, values, k))
    out = []
    for key, members in by_cause.items():
        total = sum(k for _, _, k in members)
        if len(members) == 1:
            out.append(ReasonGroup(members[0][0], total))
            continue
        slots = {len(v) for _, v, _ in members}
        variants: Counter = Counter()
        if len(slots) == 1:
            varying = [i for i in range(slots.pop()) if len({v[i] for _, v, _ in members}) > 1]
            for _, v, k in members:
                if varying:
                    variants[", ".join(f"'{v[i]}'" for i in varying)] += k
        out.append(ReasonGroup(key, total, tuple(variants.most_common())))
    out.sort(key=lambda g: -g.count)
    return out
