"""Train on packed shards with PyTorch: dataset, collator, sampler, FlexAttention mask, token-weighted loss.

The only packtool module that imports torch. A pack folder (schema v1, see `packtool.schema`) holds
rows of exactly `pack_len` tokens; a batch of B rows becomes, per consumer:

    row 0   a0 a1 a2 a3 | b0 b1 b2 | p  p        position_ids 0 1 2 3 0 1 2 0 1
    row 1   c0 c1 c2 c3 c4 c5 | d0 d1 d2         position_ids 0 1 2 3 4 5 0 1 2

    mode="hf"      input_ids, labels, position_ids  [B, L] int64, use_cache=False, and for the
                   flash-attention path over the flattened B*L tokens:
                   cu_seq_lens_q = cu_seq_lens_k = [0, 4, 7, 9, 15, 18]  int32 (the pad tail is a segment)
                   max_length_q  = max_length_k  = 6                    python int
                   No attention_mask: beside packed position_ids an all-ones mask makes transformers'
                   sdpa/eager paths attend across documents.
    mode="varlen"  input_ids, labels, position_ids  [B*L] (or [sum num_tokens] with drop_padding),
                   cu_seqlens int32, max_seqlen int: what flash_attn_varlen_func / varlen_attn take.
    mode="flex"    input_ids, labels, position_ids  [B, L] int64 and document_id [B, L] int32, for
                   `document_block_mask(document_id)` -> FlexAttention BlockMask.

`use_cache=False` is part of every "hf" batch: transformers (5.x) models default to building a cache
even in train mode, and a cache switches off the detection of packed sequences from position_ids,
so documents silently attend to each other.

Labels are unshifted (the model shifts). For a shifted loss the count of loss tokens is
`labels[..., 1:] != -100`; see `global_loss_tokens` for why packing needs no extra care there.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.errors import PacktoolError
from packtool.io.files import cache_root, sha256_file

__all__ = [
    "PackedDataset",
    "PackedCollator",
    "PackedSampler",
    "document_block_mask",
    "count_loss_tokens",
    "global_loss_tokens",
    "token_loss_sum",
    "accumulation_groups",
]

MODES = ("hf", "varlen", "flex")
_CONVERT_BATCH_ROWS = 256  # rows per record batch when converting Parquet -> Arrow IPC (bounded RAM)


# --------------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------------




class PackedDataset(torch.utils.data.Dataset):
    """Map-style dataset over a pack folder (`OUT/manifest.json` + `OUT/data/*.parquet`).

    Parquet pages are compressed, so they cannot be memory-mapped as they are. On first use each
    shard is converted, one record batch at a time (RAM stays bounded), into an uncompressed Arrow
    IPC file under `cache_dir` (default `$PACKTOOL_CACHE/arrow`, else `~/.cache/packtool/arrow`),
    named by the shard's sha256 from the manifest; later runs and other ranks reuse it. The IPC files
    are memory-mapped: nothing is loaded into RAM up front, and `ds[i]` copies one row (4 token
    columns of `pack_len` int32) out of the page cache. This is what `datasets` does with its Arrow
    cache, without the fingerprinting. The cache takes ~16 bytes per token slot on disk (the Parquet
    shards are ~3-4x smaller); delete `cache_dir` to reclaim it.

    Item: `input_ids`, `labels`, `position_ids` (int64 tensors of `pack_len`), `document_id` (int32),
    `seq_lengths` (int32 tensor), `source_index` (int64 tensor), `num_tokens`, `num_loss_tokens` (int).

    verify_checksums=True hashes every shard against the manifest before converting (slow on
    big packs; `packtool verify` is the place for that).
    """

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
        self._views: list[dict[str, Any]] | None = None  # opened lazily (and again in each worker)

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

    def _arrow_path(self, s: int) -> Path:
        sha = self._shard_sha[s]
        if not sha:  # no checksum in the manifest: key on what identifies this file version
            st = self.shard_files[s].stat()
            key = f"{self.shard_files[s].resolve()}:{st.st_size}:{st.st_mtime_ns}"
            sha = hashlib.sha256(key.encode()).hexdigest()
        return self.cache_dir / f"{sha}.arrow"

    def _convert(self, s: int, dest: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        src = self.shard_files[s]
        if not src.is_file():
            raise PacktoolError(f"shard {src} listed in the manifest is missing; re-run `packtool pack`")
        if self.verify_checksums and self._shard_sha[s] and sha256_file(src) != self._shard_sha[s]:
            raise PacktoolError(f"shard {src} does not match its sha256 in the manifest; re-run `packtool pack`")
        pf = pq.ParquetFile(src)
        expected = schema.arrow_schema(self.pack_len)
        got = pf.schema_arrow
        bad = [c for c in schema.FORBIDDEN_COLUMNS if c in got.names]
        if bad:
            raise PacktoolError(f"shard {src} has a forbidden column {bad[0]!r} (schema v1 has none)")
        for field in expected:
            if field.name not in got.names or not got.field(field.name).type.equals(field.type):
                have = got.field(field.name).type if field.name in got.names else "missing"
                raise PacktoolError(
                    f"shard {src}: column {field.name!r} is {have}, schema v1 with pack_len "
                    f"{self.pack_len} wants {field.type}; re-run `packtool pack`"
                )
        if pf.metadata.num_rows != self.shard_rows[s]:
            raise PacktoolError(
                f"shard {src} has {pf.metadata.num_rows} rows, the manifest says {self.shard_rows[s]}"
            )
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f"{dest.name}.{os.getpid()}.{id(self)}.tmp")
        try:
            with pa.OSFile(str(tmp), "wb") as sink:
                with pa.ipc.new_file(sink, expected) as writer:
                    for batch in pf.iter_batches(batch_size=_CONVERT_BATCH_ROWS, columns=expected.names):
                        writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=expected))
            os.replace(tmp, dest)  # atomic: concurrent ranks converting the same shard is harmless
        finally:
            if tmp.exists():
                tmp.unlink()

    def _open(self) -> list[dict[str, Any]]:
        import pyarrow as pa

        views = []
        for s in range(len(self.shard_files)):
            path = self._arrow_path(s)
            if not path.is_file():
                self._convert(s, path)
            table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()  # zero-copy
            if table.num_rows != self.shard_rows[s]:
                raise PacktoolError(f"cached {path} has {table.num_rows} rows, expected {self.shard_rows[s]}")
            chunks = []
            for j in range(table.column("input_ids").num_chunks):
                c: dict[str, Any] = {}
                for name in schema.TOKEN_COLUMNS:
                    arr = table.column(name).chunk(j)
                    c[name] = arr.flatten().to_numpy(zero_copy_only=True).reshape(len(arr), self.pack_len)
                for name in schema.LIST_COLUMNS:
                    arr = table.column(name).chunk(j)
                    c[name] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=True))
                for name in schema.SCALAR_COLUMNS:
                    c[name] = table.column(name).chunk(j).to_numpy(zero_copy_only=True)
                chunks.append(c)
            sizes = [len(c["num_tokens"]) for c in chunks]
            views.append({"chunks": chunks, "start": np.concatenate([[0], np.cumsum(sizes)])})
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
        view = self._views[s]
        j = int(np.searchsorted(view["start"], r, side="right") - 1)
        c, k = view["chunks"][j], r - int(view["start"][j])
        item: dict[str, Any] = {}
        for name in ("input_ids", "labels", "position_ids"):
            item[name] = torch.from_numpy(c[name][k].astype(np.int64))
        item["document_id"] = torch.from_numpy(c["document_id"][k].copy())
        for name in schema.LIST_COLUMNS:
            offsets, values = c[name]
            item[name] = torch.from_numpy(values[offsets[k] : offsets[k + 1]].copy())
        for name in schema.SCALAR_COLUMNS:
            item[name] = int(c[name][k])
        return item


# --------------------------------------------------------------------------------------------------
# Collator
# --------------------------------------------------------------------------------------------------


def _positions_from_lengths(seq_lengths: Sequence[int], pack_len: int) -> torch.Tensor:
    lengths = [int(n) for n in seq_lengths]
    used = sum(lengths)
    if used < pack_len:
        lengths.append(pack_len - used)  # the pad tail counts 0,1,... as its own segment
    return torch.cat([torch.arange(n) for n in lengths])


def _stack(features: Sequence[Mapping[str, Any]], name: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([torch.as_tensor(f[name]) for f in features]).to(dtype)


def _missing(name: str) -> KeyError:
    return KeyError(
        f"batch items have no {name!r}; if a Trainer dropped it, pass remove_unused_columns=False "
        "in TrainingArguments/SFTConfig"
    )


class PackedCollator:
    """Turn a list of `PackedDataset` items into one batch for `mode` ("hf", "varlen", "flex").

    Segments (for cu_seqlens) are read off position_ids: a segment starts at every 0. Rows are
    stacked, never padded or truncated: every row already holds `pack_len` tokens.

    mode="hf" keys: input_ids, labels, position_ids [B, L] int64; use_cache=False; and when
        flash_kwargs (default): cu_seq_lens_q/k int32 over the flattened B*L tokens, max_length_q/k int.
        transformers' flash-attention path then runs one varlen call for the batch; with batch size
        > 1 it needs them (it reads packing from position_ids only when the batch size is 1).
        sdpa/eager/flex ignore these keys and isolate documents from position_ids.
    mode="varlen" keys: input_ids, labels, position_ids [T] int64; cu_seqlens int32; max_seqlen int;
        T = B*L, or the real tokens only with drop_padding=True (shape then varies per batch).
    mode="flex" keys: input_ids, labels, position_ids [B, L] int64; document_id [B, L] int32.
    """

    def __init__(self, mode: str = "hf", *, flash_kwargs: bool = True, drop_padding: bool = False):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
        if drop_padding and mode != "varlen":
            raise ValueError("drop_padding=True only applies to mode='varlen'")
        self.mode = mode
        self.flash_kwargs = flash_kwargs
        self.drop_padding = drop_padding

    def __repr__(self) -> str:
        return f"PackedCollator(mode={self.mode!r}, flash_kwargs={self.flash_kwargs}, drop_padding={self.drop_padding})"

    def _position_ids(self, features, pack_len: int) -> torch.Tensor:
        first = features[0]
        if "position_ids" in first:
            return _stack(features, "position_ids", torch.long)
        if "seq_lengths" in first:
            return torch.stack([_positions_from_lengths(f["seq_lengths"], pack_len) for f in features])
        raise _missing("position_ids")

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not features:
            raise ValueError("empty batch")
        for name in ("input_ids", "labels"):
            if name not in features[0]:
                raise _missing(name)
        input_ids = _stack(features, "input_ids", torch.long)
        labels = _stack(features, "labels", torch.long)
        if input_ids.dim() != 2 or labels.shape != input_ids.shape:
            raise ValueError(f"rows must all have the same length; got input_ids {tuple(input_ids.shape)}")
        position_ids = self._position_ids(features, input_ids.shape[1])
        if position_ids.shape != input_ids.shape or bool((position_ids[:, 0] != 0).any()):
            raise ValueError("position_ids must have the row shape and start every row at 0 (schema v1)")

        if self.mode == "flex":
            if "document_id" not in features[0]:
                raise _missing("document_id")
            document_id = _stack(features, "document_id", torch.int32)
            return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids,
                    "document_id": document_id}

        if self.mode == "varlen" and self.drop_padding:
            if "num_tokens" in features[0]:
                keep = torch.arange(input_ids.shape[1])[None, :] < torch.tensor(
                    [int(f["num_tokens"]) for f in features])[:, None]
            elif "document_id" in features[0]:
                keep = _stack(features, "document_id", torch.int32) >= 0
            else:
                raise _missing("num_tokens")
            flat_ids, flat_labels, flat_pos = input_ids[keep], labels[keep], position_ids[keep]
        else:
            flat_ids, flat_labels, flat_pos = input_ids.reshape(-1), labels.reshape(-1), position_ids.reshape(-1)

        starts = torch.nonzero(flat_pos == 0).flatten()
        cu = torch.cat([starts, torch.tensor([flat_pos.numel()])]).to(torch.int32)
        max_len = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0

        if self.mode == "varlen":
            return {"input_ids": flat_ids, "labels": flat_labels, "position_ids": flat_pos,
                    "cu_seqlens": cu, "max_seqlen": max_len}
        batch = {"input_ids": input_ids, "labels": labels, "position_ids": position_ids, "use_cache": False}
        if self.flash_kwargs:
            batch.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_len, max_length_k=max_len)
        return batch


# --------------------------------------------------------------------------------------------------
# FlexAttention
# --------------------------------------------------------------------------------------------------


def document_block_mask(document_id: torch.Tensor, *, block_size: int = 128, num_heads: int | None = None):
    """Document-causal FlexAttention `BlockMask` from `document_id` [B, L] (schema v1; -1 = pad).

        document_id   0 0 0 1 1 -1 -1          q attends kv iff same id and kv <= q
        mask (q\\kv)   1 . . . . .  .           - a document sees only its own past
                      1 1 . . . .  .           - the pad tail is one more segment: it sees only
                      1 1 1 . . .  .             pad, so no row is fully masked (no NaN in a
                      . . . 1 . .  .             dense kernel) and no document sees pad
                      . . . 1 1 .  .
                      . . . . . 1  .
                      . . . . . 1  1

    Built on `document_id.device` (build it where the model runs; on CPU torch 2.13 builds it
    too, and uncompiled `flex_attention` then runs an unfused reference). Pass it to
    `flex_attention(q, k, v, block_mask=...)`, or as `attention_mask=` to a transformers model
    loaded with attn_implementation="flex_attention".
    """
    from torch.nn.attention.flex_attention import create_block_mask

    if document_id.dim() != 2:
        raise ValueError(f"document_id must be [batch, seq]; got shape {tuple(document_id.shape)}")
    doc = document_id.to(torch.int32)
    batch, length = doc.shape

    def document_causal(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (kv_idx <= q_idx)

    return create_block_mask(document_causal, batch, num_heads, length, length, device=doc.device,
                             BLOCK_SIZE=block_size)


# --------------------------------------------------------------------------------------------------
# Token-weighted loss
# --------------------------------------------------------------------------------------------------


def _labels_of(batch: Any) -> torch.Tensor:
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, Mapping) and "labels" in batch:
        return batch["labels"]
    raise TypeError("expected a labels tensor or a batch dict with 'labels'")


def count_loss_tokens(labels: torch.Tensor, *, shift: bool = True) -> torch.Tensor:
    """Tokens that carry loss in one micro-batch: `labels[..., 1:] != -100` (shift=True) as int64.

    Works on [B, L] rows and on flattened [T] varlen batches alike (see `global_loss_tokens`)."""
    lab = labels[..., 1:] if shift else labels
    return (lab != schema.IGNORE_INDEX).sum().to(torch.int64)


def global_loss_tokens(
    micro_batches: Iterable[Any],
    *,
    shift: bool = True,
    group: Any = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The number of loss tokens in one optimizer step: all micro-batches here, summed over all ranks.

    Divide each micro-batch's *summed* token loss by this number and the accumulated gradient is
    the gradient of the mean over every loss token of the step, whatever the split into micro-batches
    and ranks. Averaging per micro-batch instead weights a token by 1/(loss tokens of its micro-batch):
    a short answer packed with few others counts more than the same answer in a full batch.

    `micro_batches`: the batches (dicts with "labels", or label tensors) of this step on this rank.
    When torch.distributed is initialized the count is all-reduced (SUM) over `group`, so every
    rank must call this once per step. DDP *averages* gradients over ranks: multiply each rank's
    loss by the world size (as transformers' Trainer does with average_tokens_across_devices).

    Shifting: labels are unshifted, the model predicts token t+1 at position t, so the tokens that
    carry loss are labels[..., 1:] != -100. Packing adds no cross-document term: packtool writes
    -100 on every document's first token, so the prediction made at the last token of document A
    (whose target is the first token of B) is never trained, in [B, L] rows and in a flattened
    varlen stream alike (a row also starts with a document's first token or pad, both -100). For
    packtool rows the shifted and unshifted counts are therefore equal.

        for micro_batches in accumulation_groups(loader, grad_accum):
            n = global_loss_tokens(micro_batches)
            for mb in micro_batches:
                out = model(**{k: v for k, v in mb.items() if k != "labels"})
                loss = token_loss_sum(out.logits, mb["labels"]) / n
                (loss * world_size).backward()
            optimizer.step(); optimizer.zero_grad()
    """
    total = torch.zeros((), dtype=torch.int64)
    for mb in micro_batches:
        total += count_loss_tokens(_labels_of(mb), shift=shift).cpu()
    if device is not None:
        total = total.to(device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if device is None and torch.distributed.get_backend(group) == "nccl":
            total = total.cuda()
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=group)
    return total


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor, *, shift: bool = True) -> torch.Tensor:
    """Summed (not averaged) next-token cross-entropy in float32 over tokens whose label != -100.

    logits [..., T, V] and labels [..., T] (unshifted); shift=True scores logits[..., :-1, :]
    against labels[..., 1:]."""
    if shift:
        logits, labels = logits[..., :-1, :], labels[..., 1:]
    return torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1).to(logits.device),
        ignore_index=schema.IGNORE_INDEX,
        reduction="sum",
    )


def accumulation_groups(batches: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Group an iterable of micro-batches into lists of `size` (one optimizer step each); the
    last group may be shorter. Needed because the step's token count is known only once all its
    micro-batches are in hand."""
    if size < 1:
        raise ValueError(f"size={size}; gradient accumulation needs at least 1 micro-batch")
    group: list[Any] = []
    for b in batches:
        group.append(b)
        if len(group) == size:
            yield group
            group = []
    if group:
        yield group


# --------------------------------------------------------------------------------------------------
# Sampler
# --------------------------------------------------------------------------------------------------


class PackedSampler(torch.utils.data.Sampler[int]):
    """Seeded, epoch-aware, resumable row order, split evenly across data-parallel ranks.

    Epoch order (a pure function of seed and epoch): with shard_aware, the shards in a random order
    and each shard's rows shuffled within it (reads stay local to one memory-mapped file; the packer
    already shuffled rows across shards); otherwise one global permutation. Rank r of W takes
    positions r, r+W, r+2W, ... of that order; drop_last cuts the order to a multiple of W, else it
    wraps around to the start (like DistributedSampler), so every rank gets the same count.

        order      7 2 5 0 | 9 4 1 8 6 3          (shard 1 first, then shard 0)
        rank 0/2   7 5 9 1 6                       rank 1/2   2 0 4 8 3

    Epochs: `set_epoch(e)` makes the next `iter()` run epoch e (from its start when e is a new epoch,
    from where it stopped when it is the current one); without it, an `iter()` after an exhausted
    epoch starts the next one. Both loop styles resume correctly.

    Resume: `state_dict()` records the epoch and the rows this rank has handed out in it;
    `load_state_dict` continues from there (also with another world size: the state is kept as a
    global position). A DataLoader with workers fetches ahead of the training loop: pass the rows
    the loop really consumed, `state_dict(consumed=rows_done_this_epoch)`.
    """

    def __init__(
        self,
        data: PackedDataset | int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = True,
        shard_aware: bool = True,
    ):
        if isinstance(data, int):
            self.num_rows, shard_rows = data, [data]
        else:
            self.num_rows, shard_rows = len(data), list(getattr(data, "shard_rows", [len(data)]))
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.world_size = world_size if world_size is not None else (torch.distributed.get_world_size() if dist else 1)
        self.rank = rank if rank is not None else (torch.distributed.get_rank() if dist else 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")
        if drop_last and self.num_rows < self.world_size:
            raise ValueError(
                f"{self.num_rows} rows cannot give every one of {self.world_size} ranks a row; "
                "pack more data or use drop_last=False"
            )
        self.shuffle, self.seed, self.drop_last, self.shard_aware = shuffle, int(seed), drop_last, shard_aware
        self._shard_start = np.concatenate([[0], np.cumsum(shard_rows)]).astype(np.int64)
        self.epoch = 0
        self._position = 0  # rows of this epoch handed out by this rank
        self._pinned = False  # set_epoch() chose the epoch of the next iter()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_rows // self.world_size
        return -(-self.num_rows // self.world_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The global row order of `epoch` (before the split across ranks), int64."""
        n = self.num_rows
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch])
        if not self.shard_aware:
            return rng.permutation(n).astype(np.int64)
        parts = []
        for s in rng.permutation(len(self._shard_start) - 1):
            lo, hi = int(self._shard_start[s]), int(self._shard_start[s + 1])
            parts.append(lo + rng.permutation(hi - lo))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def rank_indices(self, epoch: int) -> np.ndarray:
        order = self.epoch_order(epoch)
        total = len(self) * self.world_size
        if total <= len(order):
            order = order[:total]
        else:
            order = np.resize(order, total)  # wraps around: a few rows twice, equal counts per rank
        return order[self.rank :: self.world_size]

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self._position = int(epoch), 0
        self._pinned = True

    def __iter__(self) -> Iterator[int]:
        if self._position >= len(self) and not self._pinned:
            self.epoch, self._position = self.epoch + 1, 0
        self._pinned = False
        epoch = self.epoch
        indices = self.rank_indices(epoch)
        while self._position < len(indices) and self.epoch == epoch:
            i = int(indices[self._position])
            self._position += 1
            yield i

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        position = self._position if consumed is None else int(consumed)
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "global_position": position * self.world_size,
            "num_rows": self.num_rows,
            "shuffle": self.shuffle,
            "shard_aware": self.shard_aware,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("seed", "num_rows", "shuffle", "shard_aware", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={state[key]!r} but this sampler has {getattr(self, key)!r}; "
                    "resume with the same pack and sampler options"
                )
        self.epoch = int(state["epoch"])
        self._position = min(int(state["global_position"]) // self.world_size, len(self))
        self._pinned = False
