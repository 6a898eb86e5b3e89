"""What the tokenization layer hands to `profile` and `pack`.

`TokenizedData.table` is an Arrow table (memory-mapped from the cache entry), one row per kept
example:

    column           type            meaning
    input_ids        list<int32>     token ids of the rendered example
    labels           list<int32>     = input_ids where the token carries loss, else -100 (unshifted)
      or loss_mask   list<bool>      1 where it does (a cache entry stores this where it can; read
                                     labels through packtool.data.labels: `labels_column`, ...)
    length           int32           len(input_ids)
    num_loss_tokens  int32           count of labels != -100
    source_index     int64           index of the record in the input (counts skipped records too)

`lengths` and `loss_counts` are the same numbers as numpy arrays, for the numba kernels.

A mixture (tokenization/mixture.py) is one TokenizedData whose `inputs` are InputBlocks: input k
owns the source indices [offset, offset + copies * records) (packtool.data.blocks);
`inputs_manifest` gives the manifest's `inputs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from packtool.data.arrow import column_numpy, token_batch
from packtool.data.blocks import InputBlock, input_counts
from packtool.data.provenance import FileFormat, SkippedRecord, SourceFile, short_names


@dataclass
class TokenizedData:
    table: Any  # pyarrow.Table with the columns drawn above (or a datasets.Dataset of them)
    lengths: np.ndarray  # int32[n]
    loss_counts: np.ndarray  # int32[n]
    source_index: np.ndarray  # int64[n]
    num_read: int  # records read, skipped ones included
    skipped: list[SkippedRecord] = field(default_factory=list)
    # detected or forced input format; "mixed: ..." (formats_summary) when files differ
    format: str = ""
    format_reason: str = ""
    # per file read: its format, why, records
    formats: dict[str, FileFormat] = field(default_factory=dict)
    # name, vocab_size, pad_id, eos_id, files_hash, template
    tokenizer: dict[str, Any] = field(default_factory=dict)
    sources: list[SourceFile] = field(default_factory=list)
    # paths DATA named or a folder held that were not read ({path, why}: a link loop, a broken link)
    not_read: list[dict[str, str]] = field(default_factory=list)
    # tokenization options that shaped the labels
    options: dict[str, Any] = field(default_factory=dict)
    cache_hit: bool = False
    # said once each, e.g. "12 examples have no loss token"
    warnings: list[str] = field(default_factory=list)
    # the tokenizer backend that ran, and its start-up check
    backend: dict[str, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # timings of the stages that ran
    # callable dropping the memory-mapped pages this process touched, or None
    release_pages: Any = None
    # (path, base address, size) of each file `table` is memory-mapped from (a mixture: several)
    mapped_files: list[tuple[str, int, int]] = field(default_factory=list)
    # a mixture's inputs and their source-index blocks; empty for one input
    inputs: list[InputBlock] = field(default_factory=list)
    # "preference": rows 2k and 2k+1 are pair k (chosen, rejected; one source_index), each
    # side's prompt the leading prompt_lengths[i] tokens (untrained, the same ids on both sides)
    task: str = "sft"
    prompt_lengths: np.ndarray | None = None  # int32[n], preference only
    rows: Any = None  # where the token rows are when `table` is None: the Ray engine's
    # packtool.cluster.tokenize.ClusterRows (part files on the cluster), whose `write` packs them

    def __len__(self) -> int:
        return len(self.lengths)

    def as_pairs(self) -> TokenizedData:
        """Mark data tokenized from preference records (format "preference": rows 2k, 2k+1 pair
        k) as pairs: task "preference", each side's prompt its leading untrained run."""
        from packtool.data.labels import prompt_lengths

        self.task = "preference"
        self.prompt_lengths = prompt_lengths(self.table) if self.table is not None else None
        return self

    def inputs_manifest(self, dropped, truncated, split) -> list[dict[str, Any]]:
        """The manifest's `inputs` (empty for one input): each input as given, its options, format,
        weight, block, files and counts, from the global source indices the packer dropped,
        truncated and split (the writer checks them with schema.conservation_problems)."""
        return [
            {
                "input": b.number,
                "spec": b.spec,
                "data": b.data,
                "options": b.read,
                "weight": b.weight,
                "format": b.format,
                "formats": {f: list(x) for f, x in b.formats.items()},
                "block": {"offset": b.offset, "records": b.records, "copies": b.copies},
                "files": [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in b.files],
                "counts": input_counts(b, dropped, truncated, split),
            }
            for b in self.inputs
        ]

    def input_shares(self) -> list[dict[str, Any]]:
        """What each input of a mixture contributes (empty for one input): examples after weighting,
        their tokens and loss tokens, and the share of all tokens."""
        total = int(self.lengths.sum()) or 1
        names = short_names(b.data for b in self.inputs)
        out = []
        for b in self.inputs:
            mask = (self.source_index >= b.offset) & (self.source_index < b.end)
            tokens = int(self.lengths[mask].sum())
            out.append(
                {
                    "input": b.number,
                    "spec": b.spec,
                    "name": names[b.data] + b.spec[len(b.data) :],  # short path, its ::options
                    "format": b.format,
                    "weight": b.weight,
                    "records": b.records,
                    "examples": int(np.count_nonzero(mask)),
                    "tokens": tokens,
                    "loss_tokens": int(self.loss_counts[mask].sum()),
                    "share": round(tokens / total, 6),
                }
            )
        return out

    def file_names(self) -> dict[str, str]:
        """{path: name relative to the input's root} of the files in `formats` (short_names)."""
        return short_names(self.formats)

    def labels(self):
        """The labels as a ChunkedArray list<int32>, built from the loss mask where the table holds
        one (4 bytes a token: for inspection and small data; pack reads the mask as it is)."""
        from packtool.data.labels import labels_column

        return labels_column(self.table)

    @property
    def dataset(self):
        """The table as a `datasets.Dataset` (no copy), for code that wants that API."""
        import datasets

        table = self.table
        return table if isinstance(table, datasets.Dataset) else datasets.Dataset(table)

    @classmethod
    def from_table(cls, table, **kw) -> TokenizedData:
        return cls(
            table=table,
            lengths=column_numpy(table, "length", np.int32),
            loss_counts=column_numpy(table, "num_loss_tokens", np.int32),
            source_index=column_numpy(table, "source_index", np.int64),
            **kw,
        )

    @classmethod
    def from_lists(cls, input_ids: list[list[int]], labels: list[list[int]], **kw) -> TokenizedData:
        """Build from Python lists (tests and small inputs). Labels use -100 for no loss."""
        import pyarrow as pa

        n = len(input_ids)
        offsets = np.cumsum([0] + [len(x) for x in input_ids], dtype=np.int64)
        flat = lambda rows: np.array([v for r in rows for v in r], dtype=np.int32)  # noqa: E731
        src = np.asarray(kw.pop("source_index", np.arange(n)), dtype=np.int64)
        batch = token_batch(flat(input_ids), flat(labels), offsets, src)
        kw.setdefault("num_read", n)
        return cls.from_table(pa.Table.from_batches([batch]), **kw)
