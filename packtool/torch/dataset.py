"""PackedDataset: a pack folder (manifest + shards) as a map-style torch dataset, one item per row.

    OUT/manifest.json        pack_len, pad_id, counts.rows, shards [{file, rows, sha256}]
    OUT/data/*.parquet  -->  arrow_cache (converted once, memory-mapped)  -->  ds[i]: one row, copied

The rows themselves are the schema's (docs/ARCHITECTURE.md, "Schema"); this module only finds
them, checks the manifest adds up, and turns one row into torch tensors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.errors import PacktoolError
from packtool.io.files import cache_root
from packtool.torch.arrow_cache import MappedShard, cache_path, convert_shard


class PackedDataset(torch.utils.data.Dataset):
    """Map-style dataset over a pack folder (`OUT/manifest.json` + `OUT/data/*.parquet`).

    On first use each shard is converted once into an uncompressed Arrow IPC file under `cache_dir`
    (default `$PACKTOOL_CACHE/arrow`, else `~/.cache/packtool/arrow`), memory-mapped from then on
    (`arrow_cache` draws it): nothing is loaded up front, and `ds[i]` copies one row (4 token
    columns of `pack_len` int32) out of the page cache, as `datasets` does without fingerprints. The
    cache takes ~16 bytes per token slot (3-4x the Parquet); delete `cache_dir` to reclaim it.

    Item: `input_ids`, `labels`, `position_ids` (int64 tensors of `pack_len`), `document_id` (int32),
    `seq_lengths` (int32 tensor), `source_index` (int64 tensor), `num_tokens`, `num_loss_tokens` (int);
    in a pack written with --pad-to-multiple N > 1 also `seq_lengths_unpadded` (int32 tensor).
    `layout` is the pack's (schema.Layout: pad_to_multiple, fixed_docs); give the collator
    `fixed_docs=ds.fixed_docs` for static cu_seqlens shapes (`ds.collator(mode)` does).

    verify_checksums=True hashes every shard against the manifest before converting (slow on
    big packs; `packtool verify` is the place for that).

    The manifest's `task` must be this class's: an SFT pack (`task` absent or "sft") here, a
    preference pack (`"task": "preference"`) in `PairDataset`. Read as SFT, a preference pack
    would train the rejected answers: PacktoolError.
    """

    task = "sft"

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        cache_dir: str | os.PathLike | None = None,
        verify_checksums: bool = False,
    ):
        self.folder = Path(folder)
        manifest_path = self.folder / schema.MANIFEST
        if not manifest_path.is_file():
            raise PacktoolError(
                f"{self.folder} is not a pack folder: {schema.MANIFEST} is missing; "
                "create one with `packtool pack DATA --len 4096 --out DIR`"
            )
        self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        task = self.manifest.get("task") or "sft"
        if task != self.task:
            raise PacktoolError(self._wrong_task(manifest_path, task))
        self.pack_len = int(self.manifest["pack_len"])
        shards = self.manifest.get("shards") or []
        if not shards:
            raise PacktoolError(f"{manifest_path} lists no shards; the pack is empty or unfinished")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "arrow"
        self.verify_checksums = verify_checksums
        self.shard_files = [self._shard_path(s["file"]) for s in shards]
        self.shard_rows = [int(s["rows"]) for s in shards]
        self._shard_sha = [s.get("sha256") for s in shards]
        self._shard_start = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)
        total = self.manifest.get("counts", {}).get("rows")
        if total is not None and int(total) != int(self._shard_start[-1]):
            raise PacktoolError(
                f"{manifest_path}: counts.rows = {total} but the shards list {int(self._shard_start[-1])} "
                "rows; the pack is inconsistent, re-run `packtool pack`"
            )
        self.layout = schema.Layout.from_manifest(self.manifest)
        self._views: list[MappedShard] | None = None  # opened lazily (and again in each worker)

    def _wrong_task(self, manifest_path: Path, task: str) -> str:
        if task == "preference":
            return (
                f"{manifest_path} is a preference pack (chosen/rejected pairs): read it with "
                "packtool.torch.PairDataset; read as SFT it would train the rejected answers"
            )
        return f"{manifest_path} declares task {task!r}; PackedDataset reads SFT packs only"

    def _extra_fields(self) -> tuple:
        """pyarrow fields of the list columns this task adds to schema v1 (SFT: none)."""
        return ()

    def _shard_path(self, file: str) -> Path:
        # the manifest names shards relative to the pack folder ("data/train-...parquet"); a bare
        # file name is taken to be inside data/
        rel = Path(file)
        return self.folder / (rel if len(rel.parts) > 1 else Path(schema.DATA_DIR) / rel)

    # -- properties ---------------------------------------------------------------------------------

    @property
    def pad_id(self) -> int | None:
        if self.manifest.get("pad_id") is not None:
            return int(self.manifest["pad_id"])
        return (self.manifest.get("tokenizer") or {}).get("pad_id")

    @property
    def fixed_docs(self) -> bool:
        """Every row lists exactly --max-docs documents (zeros at the end): static cu_seqlens."""
        return bool(self.layout.fixed_docs)

    def collator(self, mode: str = "hf", **kwargs):
        """A PackedCollator for this pack's layout (fixed_docs passed on)."""
        from packtool.torch.collate import PackedCollator

        return PackedCollator(mode, fixed_docs=self.fixed_docs, **kwargs)

    @property
    def shard_offsets(self) -> np.ndarray:
        """int64[S+1]: rows of shard s are `shard_offsets[s]:shard_offsets[s+1]` of the dataset."""
        return self._shard_start.copy()

    def __len__(self) -> int:
        return int(self._shard_start[-1])

    # -- opening --------------------------------------------------------------------------------------

    def __getstate__(self):
        # DataLoader workers started with "spawn" get a pickled copy: reopen the maps there.
        state = self.__dict__.copy()
        state["_views"] = None
        return state

    def _open(self) -> list[MappedShard]:
        views = []
        for s, src in enumerate(self.shard_files):
            path = cache_path(self.cache_dir, src, self._shard_sha[s])
            if not path.is_file():
                convert_shard(
                    src,
                    path,
                    pack_len=self.pack_len,
                    rows=self.shard_rows[s],
                    sha256=self._shard_sha[s],
                    verify_checksum=self.verify_checksums,
                    padded=self.layout.padded,
                    extra=self._extra_fields(),
                )
            views.append(MappedShard(path, pack_len=self.pack_len, rows=self.shard_rows[s]))
        return views

    # -- access ----------------------------------------------------------------------------------------

    def locate(self, index: int) -> tuple[int, int]:
        """(shard, row within shard) of dataset row `index`."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"row {index} out of range for a pack of {n} rows")
        s = int(np.searchsorted(self._shard_start, index, side="right") - 1)
        return s, int(index - self._shard_start[s])

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._views is None:
            self._views = self._open()
        s, r = self.locate(int(index))
        row = self._views[s].row(r)  # views into the memory map: copy what the item keeps
        item: dict[str, Any] = {
            name: torch.from_numpy(row[name].astype(np.int64))
            for name in ("input_ids", "labels", "position_ids")
        }
        # document_id, the list columns (seq_lengths_unpadded, a task's own such as `side`)
        copied = [n for n in row if n not in item and n not in schema.SCALAR_COLUMNS]
        item.update({name: torch.from_numpy(row[name].copy()) for name in copied})
        item.update({name: int(row[name]) for name in schema.SCALAR_COLUMNS})
        return item
