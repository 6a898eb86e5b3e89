"""A mixture's inputs (packtool.tokenization.mixture) as blocks of global source indices (InputBlock
draws the layout); `describe_source` names an index: "input 2 (alpaca.json) record 17, copy 1".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from packtool.data.provenance import FileFormat, SourceFile


@dataclass(frozen=True)
class InputBlock:
    """One input of a mixture (packtool.tokenization.mixture) and the block of global source
    indices it owns. Copy c of its record r (0-based, as in a single-input pack) is

        source_index = offset + c * records + r          0 <= c < copies, 0 <= r < records

    so input 1 owns [0, copies_1 * records_1), input 2 the block after it, and so on; a single
    input of weight 1 has offset 0 and copies 1: its source indices are its records' own.
    `selected`: examples (rows of its own tokenized table) taken into the last copy of a
    fractional weight (all of them for an integer weight)."""

    number: int  # 1-based, as in messages: "input 2 (alpaca.json)"
    spec: str  # as given on the command line
    data: str  # the input as given, before its ::options ('alpaca.json' in messages)
    read: dict[str, Any]  # its ReadConfig as JSON (format, split, columns, roles, on_error, limit)
    weight: float
    offset: int
    records: int  # records read from it, skipped ones included
    copies: int  # ceil(weight)
    tokenized: int  # its examples before weighting
    skipped: int
    examples: int  # after weighting: (copies - 1) * tokenized + selected
    format: str
    formats: dict[str, FileFormat]
    files: list[SourceFile]

    @property
    def end(self) -> int:
        return self.offset + self.copies * self.records

    def locate(self, source_index: int) -> tuple[int, int]:
        """(copy, record) of a global source index inside this block."""
        return divmod(int(source_index) - self.offset, self.records)


def input_of(source_index: int, inputs) -> InputBlock | None:
    """The InputBlock whose block holds `source_index` (None: in none)."""
    for b in inputs:
        if b.offset <= int(source_index) < b.end:
            return b
    return None


def describe_source(source_index: int, inputs) -> str:
    """'input 2 (alpaca.json) record 17, copy 1' for a mixture (copies counted from 0, named only
    for a weight above 1); 'record 17' for a single input."""
    b = input_of(source_index, inputs) if inputs else None
    if b is None:
        return f"record {int(source_index)}"
    c, r = b.locate(source_index)
    return f"input {b.number} ({b.data}) record {r}" + (f", copy {c}" if b.copies > 1 else "")


def input_counts(block: InputBlock, dropped, truncated, split) -> dict[str, int]:
    """The counts of one input in a pack, from the global source indices the packer dropped,
    truncated and split (numpy arrays); schema.input_problems states the rules they obey."""

    def inside(a) -> int:
        a = np.asarray(a, dtype=np.int64)
        return int(np.count_nonzero((a >= block.offset) & (a < block.end)))

    cut = {"truncated": inside(truncated), "split": inside(split), "dropped": inside(dropped)}
    return {
        "read": block.records,
        "skipped": block.skipped,
        "tokenized": block.tokenized,
        "not_selected": block.copies * block.tokenized - block.examples,
        "examples": block.examples,
        "packed": block.examples - sum(cut.values()),
        **cut,
    }
