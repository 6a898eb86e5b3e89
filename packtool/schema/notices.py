"""Structured warnings: what a step noticed, in a form a report can filter and a CI can read.

    Notice(code="truncated", message="truncated 3 example(s) to --len 4096: ...", count=3, items=[12, 40, 41])

`code` says what kind of thing happened (the report shows the kinds it renders itself, such as
truncated/dropped, in its own way and prints the rest); `message` is the one line a person reads;
`items` are the source indices (or other keys) concerned, `count` how many in all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TRUNCATED = "truncated"
DROPPED = "dropped"
INPUT = "input"  # a warning from reading or tokenizing the data, passed on as it was said


@dataclass(frozen=True)
class Notice:
    code: str
    message: str
    count: int = 0
    items: list[Any] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "message": self.message,
            "count": self.count,
            "items": list(self.items),
        }
