"""The documents of a pack, shard by shard and batch by batch: what every export format starts from.

    PackReader(PACK)                 manifest.json read and typed (one-line error for anything else)
      .batches()  for each shard (manifest order), for each Arrow batch of ~1M token slots:

        row            0                                  1
        slots          a0 a1 a2 a3 | b0 b1 b2 | pad pad    c0 c1 c2 ...
        seq_lengths    [4, 3]                             [5, 0, 0]     (0: an empty document slot)
                 ──▶ DocBatch
        tokens         a0 a1 a2 a3 b0 b1 b2 c0 c1 c2 ...  only the documents' real tokens
        labels         -100 a1 -100 a3 -100 b1 b2 -100 ..  packtool's unshifted labels
        doc_len        [4, 3, 5, ...]                     non-empty documents only
        row_docs       [2, 1, ...]                        non-empty documents per row (0: row has none)

      .finish()   the shards' sha256 (hashed in a thread while the batches decode) against the
                  manifest, and the totals against manifest.tokens / counts: a mismatch raises

A `seq_lengths_unpadded` column (a `--pad-to-multiple` layout: `seq_lengths` counts each
document's padded slots, the real tokens come first and the pad slots after them hold pad_id and
label -100) is honoured: only the real tokens are kept, and the pad slots are checked to be pad.
Empty documents (seq_lengths 0, source_index -1: a `--fixed-docs` layout) are skipped.

Memory: one decoded batch (~1M slots: the Arrow columns, the gathered tokens and labels, int64
indices) plus what the caller keeps of it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError
from packtool.io.files import sha256_file

BATCH_SLOTS = 1 << 20  # token slots per decoded batch: 2 int32 columns = 8 MiB, ~40 MiB in all
UNPADDED = schema.UNPADDED_COLUMN  # the real tokens of each document in a padded-documents layout
READ_COLUMNS = ("input_ids", "labels", "seq_lengths")


@dataclass
class DocBatch:
    """The non-empty documents of consecutive rows of one shard (see the module docstring)."""

    tokens: np.ndarray  # int32 [T]
    labels: np.ndarray  # int32 [T]
    doc_len: np.ndarray  # int64 [D], every entry > 0
    row_docs: np.ndarray  # int64 [R]


@dataclass
class Totals:
    rows: int = 0
    rows_without_docs: int = 0
    documents: int = 0
    empty_docs: int = 0
    tokens: int = 0
    loss_tokens: int = 0  # labels != -100 among the kept tokens
    pad_slots: int = 0


class PackReader:
    """A pack folder opened for export; raises PacktoolError (one line) for anything else."""

    def __init__(self, pack: str):
        self.path = os.path.expanduser(pack)
        if os.path.isfile(self.path):
            raise PacktoolError(
                f"{pack} is a file, not a pack folder; pack it first (packtool pack {pack} --len N "
                "--out DIR) and export DIR"
            )
        if not os.path.isdir(self.path):
            raise PacktoolError(
                f"{pack}: no such folder; give the folder `packtool pack --out` wrote"
            )
        raw = schema.read_pack_manifest(self.path)
        if raw is None:
            raise PacktoolError(
                f"{pack} is not a packtool pack: no {schema.MANIFEST} with schema_version and "
                "packtool_version; give the folder `packtool pack --out` wrote"
            )
        try:
            self.manifest = schema.Manifest.from_json(raw, os.path.join(pack, schema.MANIFEST))
        except schema.ManifestError as e:
            raise PacktoolError(f"{e}; write the pack again with `packtool pack`") from None
        self.raw = raw
        self.pack_len = self.manifest.pack_len
        self.pad_id = self.manifest.pad_id
        self.padded = False  # set once a shard has the seq_lengths_unpadded column
        self.totals = Totals()
        self.shards = []
        for i, s in enumerate(self.manifest.shards):
            if not isinstance(s, dict) or not isinstance(s.get("file"), str):
                raise PacktoolError(
                    f"{pack}/{schema.MANIFEST}: shards[{i}] names no file; write the pack again"
                )
            if not os.path.isfile(os.path.join(self.path, s["file"])):
                raise PacktoolError(
                    f"{pack}/{s['file']}: listed in {schema.MANIFEST} but missing; the pack is "
                    f"incomplete (packtool verify {pack} says more)"
                )
            self.shards.append(s)
        self._pool = ThreadPoolExecutor(max_workers=1)  # hashlib drops the GIL: overlaps decoding
        self._hashes = {
            s["file"]: self._pool.submit(sha256_file, os.path.join(self.path, s["file"]))
            for s in self.shards
        }

    def close(self) -> None:
        for h in self._hashes.values():
            h.cancel()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> PackReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ----------------------------------------------------------------------- reading

    def batches(self) -> Iterator[DocBatch]:
        import pyarrow.parquet as pq

        for s in self.shards:
            name = s["file"]
            try:
                pf = pq.ParquetFile(os.path.join(self.path, name))
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
                raise PacktoolError(
                    f"{self.path}/{name}: not a readable Parquet file ({type(e).__name__}: {e}); "
                    f"packtool verify {self.path} says more"
                ) from None
            columns = [*READ_COLUMNS, *self._check_schema(pf.schema_arrow, name)]
            row0 = 0
            for batch in pf.iter_batches(
                batch_size=max(1, BATCH_SLOTS // self.pack_len), columns=columns
            ):
                if batch.num_rows:
                    yield self._documents(batch, name, row0)
                    row0 += batch.num_rows

    def _check_schema(self, got, name: str) -> list[str]:
        """The extra column to read ([UNPADDED] or []); PacktoolError when the schema is not v1's
        (the padded layout's when the shard has that column)."""
        padded = got.get_field_index(UNPADDED) >= 0
        self.padded = self.padded or padded
        problems = schema.shard_schema_problems(got, self.pack_len, padded)
        if problems:
            raise PacktoolError(
                f"{self.path}/{name}: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                + f"; packtool verify {self.path} says more"
            )
        return [UNPADDED] if padded else []

    def _where(self, shard: str, row: int) -> str:
        return f"{self.path}/{shard} row {row}"

    def _documents(self, batch, shard: str, row0: int) -> DocBatch:
        R, L = batch.num_rows, self.pack_len
        for c in batch.schema.names:
            if batch.column(c).null_count:
                raise PacktoolError(f"{self._where(shard, row0)}: column {c} has nulls")
        ids = _fixed(batch.column("input_ids"), R, L)
        lab = _fixed(batch.column("labels"), R, L)
        per_row, slots = _lists(batch.column("seq_lengths"))
        real = slots
        if UNPADDED in batch.schema.names:
            per_row_u, real = _lists(batch.column(UNPADDED))
            bad = np.flatnonzero(per_row_u != per_row)
            if bad.size:
                raise PacktoolError(
                    f"{self._where(shard, row0 + int(bad[0]))}: {UNPADDED} lists "
                    f"{per_row_u[bad[0]]} documents, seq_lengths {per_row[bad[0]]}"
                )
        row_of_doc = np.repeat(np.arange(R), per_row)
        bad = np.flatnonzero((real < 0) | (real > slots))
        if bad.size:
            d = int(bad[0])
            raise PacktoolError(
                f"{self._where(shard, row0 + int(row_of_doc[d]))}: a document has {real[d]} real "
                f"tokens in {slots[d]} slots"
            )
        # each document's first slot in its row: exclusive cumsum, restarted at every row
        excl = np.cumsum(slots) - slots
        first = np.concatenate(([0], np.cumsum(per_row)))[:-1]
        start = excl - np.repeat(np.append(excl, 0)[first], per_row)
        used = np.bincount(row_of_doc, weights=slots, minlength=R).astype(np.int64)
        if (used > L).any():
            r = int(np.flatnonzero(used > L)[0])
            raise PacktoolError(
                f"{self._where(shard, row0 + r)}: seq_lengths sum to {used[r]} > pack_len {L}"
            )
        base = row_of_doc * L + start  # flat slot of each document's first token
        keep = real > 0
        idx = _runs(base[keep], real[keep])
        tokens, labels = ids.reshape(-1)[idx], lab.reshape(-1)[idx]
        del idx
        self._check_pads(ids, lab, base + real, slots - real, row_of_doc, shard, row0)
        self._check_labels(tokens, labels, real[keep], row_of_doc[keep], shard, row0)
        row_docs = np.bincount(row_of_doc[keep], minlength=R).astype(np.int64)
        t = self.totals
        t.rows += R
        t.rows_without_docs += int((row_docs == 0).sum())
        t.documents += int(keep.sum())
        t.empty_docs += int((~keep).sum())  # document slots of length 0, skipped
        t.tokens += int(tokens.size)
        t.loss_tokens += int((labels != schema.IGNORE_INDEX).sum())
        t.pad_slots += int((slots - real).sum())  # padded documents' slots past their real tokens
        return DocBatch(tokens, labels, real[keep], row_docs)

    def _check_pads(self, ids, lab, at, n, row_of_doc, shard: str, row0: int) -> None:
        """The slots a padded document has beyond its real tokens must be pad_id with label -100."""
        if not n.any():
            return
        L = ids.shape[1]
        idx = _runs(at, n)
        pad_ids, pad_lab = ids.reshape(-1)[idx], lab.reshape(-1)[idx]
        bad = np.flatnonzero((pad_ids != self.pad_id) | (pad_lab != schema.IGNORE_INDEX))
        if bad.size:
            flat = int(idx[bad[0]])
            raise PacktoolError(
                f"{self._where(shard, row0 + flat // L)} slot {flat % L}: a document's slot past "
                f"its {UNPADDED} holds token {pad_ids[bad[0]]} label {pad_lab[bad[0]]}, not pad "
                f"{self.pad_id} / -100; this layout cannot be exported"
            )

    def _check_labels(self, tokens, labels, doc_len, row_of_doc, shard: str, row0: int) -> None:
        """What the exported formats can say: a label is -100 or the token itself, and a document's
        first token is never a target (their loaders derive targets from the next input token)."""
        bad = np.flatnonzero((labels != schema.IGNORE_INDEX) & (labels != tokens))
        if bad.size:
            d = int(np.searchsorted(np.cumsum(doc_len), bad[0], side="right"))
            raise PacktoolError(
                f"{self._where(shard, row0 + int(row_of_doc[d]))}: label {labels[bad[0]]} differs "
                f"from its token {tokens[bad[0]]}; formats that shift input_ids into targets cannot "
                "hold it"
            )
        starts = np.cumsum(doc_len) - doc_len
        bad = np.flatnonzero(labels[starts] != schema.IGNORE_INDEX)
        if bad.size:
            raise PacktoolError(
                f"{self._where(shard, row0 + int(row_of_doc[bad[0]]))}: a document's first token "
                f"has label {labels[starts[bad[0]]]}, not -100 (the pack contract); write the "
                "pack again with `packtool pack`"
            )

    # ----------------------------------------------------------------------- the end

    def finish(self) -> Totals:
        """Shard hashes and the totals against the manifest; PacktoolError on any difference."""
        for s in self.shards:
            got = self._hashes[s["file"]].result()
            if s.get("sha256") and got != s["sha256"]:
                raise PacktoolError(
                    f"{self.path}/{s['file']}: sha256 {got[:12]}… differs from {schema.MANIFEST}'s "
                    f"{str(s['sha256'])[:12]}…; the shard changed after packing (packtool verify "
                    f"{self.path} says more)"
                )
        t, m = self.totals, self.manifest
        want = {
            "rows": (t.rows, m.counts.rows),
            "documents": (t.documents, m.counts.documents),
            "tokens": (t.tokens, m.tokens.out),
            "loss tokens": (t.loss_tokens, m.tokens.loss_out),
        }
        for what, (got, expected) in want.items():
            if got != expected:
                raise PacktoolError(
                    f"{self.path}: the shards hold {got:,} {what}, {schema.MANIFEST} says "
                    f"{expected:,}; packtool verify {self.path} says more"
                )
        return t


def _fixed(arr, rows: int, width: int) -> np.ndarray:
    """(rows, width) int32 array of a fixed_size_list<int32> column (zero copy when possible)."""
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return flat.astype(np.int32, copy=False).reshape(rows, width)


def _lists(arr) -> tuple[np.ndarray, np.ndarray]:
    """(entries per row, values as int64) of a list<int> column, honouring slices."""
    per_row = arr.value_lengths().to_numpy(zero_copy_only=False).astype(np.int64)
    return per_row, arr.flatten().to_numpy(zero_copy_only=False).astype(np.int64)


def _runs(at: np.ndarray, n: np.ndarray) -> np.ndarray:
    """int64 flat indices of the runs [at[i], at[i] + n[i]), concatenated (no Python loop)."""
    idx = np.arange(int(n.sum()), dtype=np.int64)
    idx += np.repeat(at - (np.cumsum(n) - n), n)
    return idx
