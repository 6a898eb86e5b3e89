"""What the tokenization layer hands to `profile` and `pack`.

`TokenizedData.dataset` is an Arrow-backed `datasets.Dataset`, one row per kept example:

    column           type            meaning
    input_ids        list<int32>     token ids of the rendered example
    labels           list<int32>     = input_ids where the token carries loss, else -100 (unshifted)
    length           int32           len(input_ids)
    num_loss_tokens  int32           count of labels != -100
    source_index     int64           index of the record in the input (counts skipped records too)

`lengths` and `loss_counts` are the same numbers as numpy arrays, for the numba kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class SkippedRecord:
    """A record that was not tokenized: where it was and why."""

    source_index: int
    file: str
    line: int | None
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"source_index": self.source_index, "file": self.file, "line": self.line, "reason": self.reason}


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    sha256: str


@dataclass
class TokenizedData:
    dataset: Any  # datasets.Dataset with the columns drawn above
    lengths: np.ndarray  # int32[n]
    loss_counts: np.ndarray  # int32[n]
    source_index: np.ndarray  # int64[n]
    num_read: int  # records read, skipped ones included
    skipped: list[SkippedRecord] = field(default_factory=list)
    format: str = ""  # detected or forced input format
    format_reason: str = ""
    tokenizer: dict[str, Any] = field(default_factory=dict)  # name, vocab_size, pad_id, eos_id, files_hash, template_hash
    sources: list[SourceFile] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # tokenization options that shaped the labels
    cache_hit: bool = False
    warnings: list[str] = field(default_factory=list)  # said once each, e.g. "12 examples have no loss token"

    @classmethod
    def from_lists(cls, input_ids: list[list[int]], labels: list[list[int]], **kw) -> TokenizedData:
        """Build from Python lists (tests and small inputs). Labels use -100 for no loss."""
        import datasets
        import pyarrow as pa

        lengths = np.array([len(x) for x in input_ids], dtype=np.int32)
        loss = np.array([sum(1 for v in lab if v != -100) for lab in labels], dtype=np.int32)
        src = np.asarray(kw.pop("source_index", np.arange(len(input_ids))), dtype=np.int64)
        table = pa.table(
            {
                "input_ids": pa.array(input_ids, type=pa.list_(pa.int32())),
                "labels": pa.array(labels, type=pa.list_(pa.int32())),
                "length": pa.array(lengths, type=pa.int32()),
                "num_loss_tokens": pa.array(loss, type=pa.int32()),
                "source_index": pa.array(src, type=pa.int64()),
            }
        )
        ds = datasets.Dataset(table)
        kw.setdefault("num_read", len(input_ids))
        return cls(dataset=ds, lengths=lengths, loss_counts=loss, source_index=src, **kw)
