"""What the tokenization layer hands to `profile` and `pack`: TokenizedData, the Arrow table it
holds, where its records came from, and a mixture's input blocks.

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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from packtool.data.labels import arrow_array, column_numpy

NO_FORMAT = "none"  # FileFormat.format of a file none of whose records fits a known format
NAMED_PER_FORMAT = 3


@dataclass(frozen=True)
class SkippedRecord:
    """A record that was not tokenized (--on-error skip): where it was and why. `line`: its 1-based
    line (JSON Lines), else None; `record`: its 0-based index within its file, only where that
    differs from `source_index` (a file after the first of a folder or glob)."""

    source_index: int
    file: str
    line: int | None
    reason: str
    record: int | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "source_index": self.source_index,
            "file": self.file,
            "line": self.line,
            "reason": self.reason,
        }
        if self.record is not None:
            out["record"] = self.record
        return out

    @property
    def position(self) -> int:
        """Its 0-based index within its file (where `line` is None)."""
        return self.source_index if self.record is None else self.record

    @property
    def where(self) -> str:
        return where(self.file, self.line, self.position)


def where(file: str, line: int | None, position: int) -> str:
    """How every message names a record in its own file: 'data.jsonl:12' or 'data.json record 3'."""
    return f"{file}:{line}" if line is not None else f"{file} record {position}"


@dataclass(frozen=True)
class SourceFile:  # the manifest's `sources`
    path: str
    size: int
    sha256: str


class FileFormat(NamedTuple):
    """How one input file was read: its format (NO_FORMAT: none fits), why, and its records."""

    format: str
    reason: str
    records: int


def short_names(paths) -> dict[str, str]:
    """Each path relative to the folder the paths share, or its basename when there is one path:
    {"data/sub/a.jsonl": "sub/a.jsonl", ...}."""
    import os

    paths = list(dict.fromkeys(paths))
    if len(paths) <= 1:
        return {p: os.path.basename(p) or p for p in paths}
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in paths])
    except ValueError:  # absolute and relative paths mixed
        return {p: p for p in paths}
    return {p: os.path.relpath(p, root) if root else p for p in paths}


def formats_summary(formats: dict[str, FileFormat]) -> tuple[str, str] | None:
    """(format, reason) of an input whose files were read in two or more formats, e.g.
    ('mixed: alpaca (identity.json 91), sharegpt (a.json 300, b.json 500)', 'each file's format ...')
    (at most NAMED_PER_FORMAT files named per format); None when one format covers every file."""
    groups: dict[str, list[tuple[str, int]]] = {}
    names = short_names(formats)
    for path, f in formats.items():
        if f.format != NO_FORMAT:
            groups.setdefault(f.format, []).append((names[path], f.records))
    if len(groups) < 2:
        return None
    parts = []
    for fmt, files in sorted(groups.items()):
        if len(files) <= NAMED_PER_FORMAT:
            parts.append(f"{fmt} ({', '.join(f'{n} {k}' for n, k in files)})")
        else:
            parts.append(f"{fmt} ({len(files)} files, {sum(k for _, k in files)} records)")
    why = f"each file's format detected from its own records ({len(formats)} files)"
    return "mixed: " + ", ".join(parts), why


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
    """The counts of one input in a pack (schema.input_problems states their rules)."""

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


def token_schema():
    """The Arrow schema of a tokenized table (module drawing) and of every encoded batch."""
    import pyarrow as pa

    return pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("labels", pa.list_(pa.int32())),
            ("length", pa.int32()),
            ("num_loss_tokens", pa.int32()),
            ("source_index", pa.int64()),
        ]
    )


def token_batch(ids: np.ndarray, labels: np.ndarray, offsets: np.ndarray, source_index: np.ndarray):
    """A record batch of the tokenized schema from flat int32 ids/labels and int64 offsets[n+1]."""
    import pyarrow as pa

    from packtool.schema import IGNORE_INDEX

    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("a batch holds more than 2^31 tokens; use smaller batches")
    off32 = arrow_array(offsets.astype(np.int32))
    lengths = np.diff(offsets).astype(np.int32)
    trained = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX, dtype=np.int64)])
    loss = (trained[offsets[1:]] - trained[offsets[:-1]]).astype(np.int32)
    return pa.RecordBatch.from_arrays(
        [
            pa.ListArray.from_arrays(off32, arrow_array(np.asarray(ids, dtype=np.int32))),
            pa.ListArray.from_arrays(off32, arrow_array(np.asarray(labels, dtype=np.int32))),
            arrow_array(lengths),
            arrow_array(loss),
            arrow_array(np.asarray(source_index, dtype=np.int64)),
        ],
        schema=token_schema(),
    )


@dataclass
class TokenizedData:
    table: Any  # pyarrow.Table with the columns drawn above (or a datasets.Dataset of them)
    lengths: np.ndarray  # int32[n]
    loss_counts: np.ndarray  # int32[n]
    source_index: np.ndarray  # int64[n]
    num_read: int  # records read, skipped ones included
    skipped: list[SkippedRecord] = field(default_factory=list)
    format: str = ""  # detected or forced; "mixed: ..." (formats_summary) when files differ
    format_reason: str = ""
    formats: dict[str, FileFormat] = field(default_factory=dict)  # per file read
    tokenizer: dict[str, Any] = field(default_factory=dict)  # name, vocab_size, pad_id, eos_id, ...
    sources: list[SourceFile] = field(default_factory=list)
    # paths DATA named or a folder held that were not read ({path, why}: a link loop, a broken link)
    not_read: list[dict[str, str]] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)  # as api.load_tokenized records them
    cache_hit: bool = False
    warnings: list[str] = field(default_factory=list)  # e.g. "12 examples have no loss token"
    backend: dict[str, Any] = field(default_factory=dict)  # the tokenizer backend that ran
    seconds: dict[str, float] = field(default_factory=dict)  # timings of the stages that ran
    release_pages: Any = None  # drops the memory-mapped pages this process touched
    # (path, base address, size) of each file `table` is memory-mapped from (a mixture: several)
    mapped_files: list[tuple[str, int, int]] = field(default_factory=list)
    inputs: list[InputBlock] = field(default_factory=list)  # a mixture's; empty for one input
    # "preference": rows 2k and 2k+1 are pair k (chosen, rejected; one source_index), each
    # side's prompt the leading prompt_lengths[i] tokens (untrained, the same ids on both sides)
    task: str = "sft"
    prompt_lengths: np.ndarray | None = None  # int32[n], preference only
    rows: Any = None  # when `table` is None: the Ray engine's ClusterRows, whose `write` packs them

    def __len__(self) -> int:
        return len(self.lengths)

    def as_pairs(self) -> TokenizedData:
        """Mark data read from preference records as pairs (task "preference", prompt_lengths)."""
        from packtool.data.labels import prompt_lengths

        self.task = "preference"
        self.prompt_lengths = prompt_lengths(self.table) if self.table is not None else None
        return self

    def inputs_manifest(self, dropped, truncated, split) -> list[dict[str, Any]]:
        """The manifest's `inputs` (empty for one input), with the counts of the global source
        indices the packer dropped, truncated and split."""
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
        """What each input of a mixture contributes (empty for one input), its share of all tokens."""
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
        """The labels as a ChunkedArray list<int32> (labels.labels_column)."""
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
