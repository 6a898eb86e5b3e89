"""The documents of a pack, shard by shard and batch by batch: what every export format starts from.

    PackReader(PACK)   manifest.json read and typed, its own arithmetic checked (conservation:
                       schema.conservation_problems); one-line error for anything else; a
                       preference pack (task "preference") refused up front (UsageError, exit 2):
                       the one format, NeMo's packed SFT, has no pairs
      .batches()  for each shard (manifest order), for each Arrow batch of ~1M token slots, every
                  row checked as verify checks it (schema/rows.py); the first failing row is the
                  error, naming shard, row and slot

        row            0                                  1
        slots          a0 a1 a2 a3 | b0 b1 b2 | pad pad    c0 c1 c2 ...
        seq_lengths    [4, 3]                             [5, 0, 0]     (0: an empty document slot)
                 ──▶ DocBatch
        tokens         a0 a1 a2 a3 b0 b1 b2 c0 c1 c2 ...  only the documents' real tokens
        labels         -100 a1 -100 a3 -100 b1 b2 -100 ..  packtool's unshifted labels
        doc_len        [4, 3, 5, ...]                     non-empty documents only
        row_docs       [2, 1, ...]                        non-empty documents per row

      .finish()   the shards' sha256 (hashed in a thread while the batches decode) against the
                  manifest, and the totals (rows, documents, tokens, loss tokens, pad slots) against
                  manifest.tokens / counts: a mismatch raises

The checksums alone prove only that the shards are the ones the manifest names; the row check is
what makes an export of a damaged pack (a shard edited and its sha256 re-signed) fail instead of
writing documents cut at the wrong boundary.

With `--pad-to-multiple` only each document's real tokens (`seq_lengths_unpadded`) are kept; the
empty documents of `--fixed-docs` are skipped. Memory: one decoded batch plus what the caller keeps.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError, UsageError
from packtool.io.files import sha256_file
from packtool.schema import rows

BATCH_SLOTS = 1 << 20  # token slots per decoded batch: 4 int32 columns = 16 MiB, ~100 MiB in all
UNPADDED = schema.UNPADDED_COLUMN  # the real tokens of each document in a padded-documents layout
LISTED = ("skipped", "dropped", "truncated", "split")  # the manifest's per-example lists


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
        if raw.get("task") == "preference":  # before any shard is read or hashed
            raise UsageError(
                f"{pack} is a preference pack (chosen and rejected documents in pairs): NeMo's packed "
                "SFT format has no pairs; export an SFT pack (or pack the chosen answers with "
                "`packtool pack DATA --format chosen-sft`)"
            )
        self.pack_len = self.manifest.pack_len
        self.pad_id = self.manifest.pad_id
        self.vocab_size = schema.vocab_size_of(raw)  # None: ids checked >= 0 only
        self.layout = schema.Layout.from_manifest(raw)
        self.padded = self.layout.padded  # the shards carry seq_lengths_unpadded
        problems = schema.conservation_problems(
            raw.get("counts", {}),
            raw.get("tokens", {}),
            {k: raw[k] for k in LISTED if isinstance(raw.get(k), list)},
            inputs=raw.get("inputs"),
        )
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise PacktoolError(f"{self.path}/{schema.MANIFEST}: {problems[0]}{more}; {self._fix}")
        self.totals = Totals()
        self.shards = []
        for i, s in enumerate(self.manifest.shards):
            if not isinstance(s, dict) or not isinstance(s.get("file"), str):
                raise PacktoolError(
                    f"{pack}/{schema.MANIFEST}: shards[{i}] names no file; write the pack again"
                )
            if not isinstance(s.get("sha256"), str) or not s["sha256"]:  # every shard is checked
                raise PacktoolError(
                    f"{pack}/{schema.MANIFEST}: the manifest records no sha256 for {s['file']}; "
                    "re-run packtool pack"
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

        columns = [*schema.COLUMNS, *([UNPADDED] if self.padded else [])]
        for s in self.shards:
            name = s["file"]
            try:
                pf = pq.ParquetFile(os.path.join(self.path, name))
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds for a bad file
                self._check_hash(s)
                raise PacktoolError(
                    f"{self.path}/{name}: not a readable Parquet file ({type(e).__name__}: {e}); "
                    f"packtool verify {self.path} says more"
                ) from None
            self._check_schema(pf.schema_arrow, s)
            row0 = 0
            for batch in pf.iter_batches(
                batch_size=max(1, BATCH_SLOTS // self.pack_len), columns=columns
            ):
                if batch.num_rows:
                    yield self._documents(self._checked(batch, s, row0))
                    row0 += batch.num_rows

    def _check_schema(self, got, s: dict) -> None:
        """PacktoolError when the shard's schema is not v1's (the padded layout's when the manifest
        records --pad-to-multiple)."""
        problems = schema.shard_schema_problems(got, self.pack_len, self.padded)
        if problems:
            self._check_hash(s)
            raise PacktoolError(
                f"{self.path}/{s['file']}: {problems[0]}"
                + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                + f"; packtool verify {self.path} says more"
            )

    def _checked(self, batch, s: dict, row0: int) -> dict[str, np.ndarray]:
        """The batch's columns once every row passed the row check verify makes (schema/rows.py:
        seq_lengths against document_id and position_ids, labels, pad, per-row counts, the layout);
        else PacktoolError naming the first failing row (its shard's checksum first: a shard that
        changed after packing is reported as such)."""
        try:
            cols = rows.batch_columns(batch, self.pack_len, row0)
        except ValueError as e:  # nulls
            self._check_hash(s)
            raise PacktoolError(f"{self.path}/{s['file']}: {e}; {self._fix}") from None
        found = rows.scan_rows(cols, self.pad_id, self.layout, self.vocab_size)
        found.pop("_totals")
        if found:
            self._check_hash(s)
            # the earliest failing row; among its checks, scan order (segments before counts)
            name, f = min(found.items(), key=lambda kv: int(kv[1]["rows"][0]))
            at = {k: int(f[k][0]) for k in ("rows", "pos", "got", "expected", "doc")}
            text = rows.describe(
                name,
                f"{self.path}/{s['file']}",
                row0 + at["rows"],
                at["pos"],
                at["got"],
                at["expected"],
                at["doc"],
                int(f["kind"][0]) if "kind" in f else -1,
                int(f.get("n", 1)),
            )
            raise PacktoolError(f"{text}; {self._fix}")
        return cols

    @property
    def _fix(self) -> str:
        return (
            f"the pack is damaged, nothing exported: write it again with `packtool pack` "
            f"(`packtool verify {self.path}` for the full report)"
        )

    def _documents(self, cols: dict[str, np.ndarray]) -> DocBatch:
        """The real tokens of the (checked) rows' non-empty documents."""
        ids, lab = cols["input_ids"], cols["labels"]
        R, L = ids.shape
        per_row = np.diff(cols["seq_off"])
        slots = cols["seq_val"].astype(np.int64)
        real = cols["unp_val"].astype(np.int64) if "unp_val" in cols else slots
        row_of_doc = np.repeat(np.arange(R), per_row)
        # each document's first slot in its row: exclusive cumsum, restarted at every row
        excl = np.cumsum(slots) - slots
        start = excl - np.repeat(np.append(excl, 0)[cols["seq_off"][:-1]], per_row)
        keep = real > 0
        idx = _runs((row_of_doc * L + start)[keep], real[keep])
        tokens, labels = ids.reshape(-1)[idx], lab.reshape(-1)[idx]
        del idx
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

    # ----------------------------------------------------------------------- the end

    def _check_hash(self, s: dict) -> None:
        """PacktoolError when the shard's sha256 is not the manifest's (waits for its hash)."""
        got = self._hashes[s["file"]].result()
        if got != s["sha256"]:  # recorded: __init__ refused a shard without one
            raise PacktoolError(
                f"{self.path}/{s['file']}: sha256 {got[:12]}… differs from {schema.MANIFEST}'s "
                f"{str(s['sha256'])[:12]}…; the shard changed after packing (packtool verify "
                f"{self.path} says more)"
            )

    def finish(self) -> Totals:
        """Shard hashes and the totals against the manifest; PacktoolError on any difference."""
        for s in self.shards:
            self._check_hash(s)
        t, m = self.totals, self.manifest
        want = {
            "rows": (t.rows, m.counts.rows),
            "documents": (t.documents, m.counts.documents),
            "tokens": (t.tokens, m.tokens.out),
            "loss tokens": (t.loss_tokens, m.tokens.loss_out),
            "pad slots": (t.rows * self.pack_len - t.tokens, m.tokens.pad),
        }
        if m.tokens.doc_pad is not None or self.padded:
            want["document pad slots"] = (t.pad_slots, m.tokens.doc_pad)
        for what, (got, expected) in want.items():
            if got != expected:
                raise PacktoolError(
                    f"{self.path}: the shards hold {got:,} {what}, {schema.MANIFEST} says "
                    f"{expected if expected is None else format(expected, ',')}; {self._fix}"
                )
        return t


def _runs(at: np.ndarray, n: np.ndarray) -> np.ndarray:
    """int64 flat indices of the runs [at[i], at[i] + n[i]), concatenated (no Python loop)."""
    idx = np.arange(int(n.sum()), dtype=np.int64)
    idx += np.repeat(at - (np.cumsum(n) - n), n)
    return idx
