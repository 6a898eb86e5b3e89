"""PackedCollator: a list of packed rows -> one batch for a transformers model, a varlen kernel or
FlexAttention (the three layouts are drawn in `packtool.torch`'s docstring); PairCollator, the same
for preference packs; document_block_mask, the FlexAttention BlockMask of a "flex" batch.

Rows are stacked, never padded or truncated: every row already holds `pack_len` tokens. Where
attention may look is the schema's rule (`schema.row_segments`: every document a segment, the pad
tail one more): position_ids rebuilt from seq_lengths are `schema.position_ids`, cu_seqlens are
`schema.cu_seqlens`, converted to torch tensors here.

Layouts (`schema.Layout`): in a pack written with --pad-to-multiple N, seq_lengths are the padded
slots (what the kernel runs over: `cu_seqlens`) and items carry seq_lengths_unpadded, from which
varlen batches also get `cu_seqlens_unpadded` (the same segments in real tokens, 0 for the pad
tail; TransformerEngine's cu_seqlens beside cu_seqlens_padded). With fixed_docs=True (a pack
written with --fixed-docs) every row gives K + 1 segments, so cu_seqlens has B*(K+1)+1 entries for
every batch of B rows:

    K = 3, rows [[4, 4, 0], [8, 0, 0]], L = 12
    cu_seqlens            [0, 4, 8, 8, 12, 20, 20, 20, 24]      max_seqlen 8
    cu_seqlens_unpadded   [0, 3, 7, 7, 7, 12, 12, 12, 12]       max_seqlen_unpadded 5

PairCollator adds `batch["pairs"]`: where each document of the batch lies, which side it is and
which pair it belongs to. Documents are numbered through the batch in row order (d = 0 .. D-1,
D = 2P); pair p is documents 2p (chosen) and 2p+1 (rejected). For two rows of L = 10 (mode "hf";
flat positions b*L + t):

    row 0   P P c c | P P r | p p p        row 1   Q c' | Q r' r' | p p p p p
    document  0 0 0 0 1 1 1 -1 -1 -1               2 2  3 3 3  -1 -1 -1 -1 -1

    pairs["side"]          [0, 1, 0, 1]     int64 [D]   0 chosen, 1 rejected
    pairs["pair"]          [0, 0, 1, 1]     int64 [D]   the pair each document belongs to
    pairs["last"]          [3, 6, 11, 14]   int64 [D]   flat position of each document's last real token
    pairs["source_index"]  [7, 12]          int64 [P]   the pair's input record
    pairs["tokens_hash"]   [h0, h1]         int64 [P]   hash of both sides' ids and labels
    pairs["document"]      as above         int64, the shape of batch["labels"]: the document of each
                                            slot, -1 on the pad tail and --pad-to-multiple padding

The model gets `model_inputs(batch)` (the batch without labels and pairs). A row that breaks the
pair layout (an odd number of documents, sides out of order, a pair's two sources differing: a pair
split across rows) is refused with a ValueError, never trained.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.schema import SIDE_COLUMN

MODES = ("hf", "varlen", "flex")


def _stack(features: Sequence[Mapping[str, Any]], name: str, dtype: torch.dtype) -> torch.Tensor:
    return torch.stack([torch.as_tensor(f[name]) for f in features]).to(dtype)


def _missing(name: str) -> KeyError:
    return KeyError(
        f"batch items have no {name!r}; if a Trainer dropped it, pass remove_unused_columns=False "
        "in TrainingArguments/SFTConfig"
    )


def _segments_read_off(position_ids: torch.Tensor) -> list[int]:
    """The segment lengths of a 1-D run of position_ids: a segment starts at every 0 (for items
    that carry position_ids but no seq_lengths, e.g. rows a caller built itself)."""
    starts = torch.nonzero(position_ids == 0).flatten().tolist()
    return [b - a for a, b in zip(starts, [*starts[1:], position_ids.numel()], strict=True)]


def _seq_idx(cu: torch.Tensor, total: int) -> torch.Tensor:
    """int32 [total]: the index of the segment (cu: int32 boundaries [N+1]) each token lies in,
    counting only segments that hold tokens (fixed_docs' empty entries take no index, so a row's
    indices run 0, 1, 2, ... with no gap)."""
    lengths = (cu[1:] - cu[:-1]).long()
    lengths = lengths[lengths > 0]
    return torch.repeat_interleave(torch.arange(lengths.numel(), dtype=torch.int32), lengths)[
        :total
    ]


class PackedCollator:
    """Turn a list of `PackedDataset` items into one batch for `mode` ("hf", "varlen", "flex"; the
    keys of each are drawn in `packtool.torch`'s docstring). Items without seq_lengths have their
    segments read off position_ids (a segment starts at every 0).

    mode="hf": flash_kwargs (default) adds cu_seq_lens_q/k and max_length_q/k; transformers'
        flash-attention path then runs one varlen call for the batch (with batch size > 1 it needs
        them); sdpa/eager/flex ignore them and isolate documents from position_ids.
    mode="varlen": drop_padding=True keeps only the documents' slots (the shape then varies per
        batch); fixed_docs=True gives K + 1 segments per row (static shape).

    seq_idx=True adds seq_idx int32 (mode "hf" [B, L], "varlen" [1, T]): per token, its segment's
    index (within the row for "hf", within the flattened batch for "varlen"; the pad tail is a
    segment). Mamba-2 / causal-conv1d / gated-delta-net kernels (mamba-ssm, causal-conv1d,
    flash-linear-attention) reset their state where it changes; attention ignores it.

        row  a0 a1 a2 a3 | b0 b1 b2 | p  p    seq_idx 0 0 0 0 1 1 1 2 2

    `PackedCollator.for_model(model_or_config)` sets it for architectures with such layers
    (`packtool.arch`).
    """

    # for_model's advice where the architecture cannot be trained packed
    UNPACKED = "pack with `packtool pack ... --max-docs 1` (one document per row) and use it"

    def __init__(
        self,
        mode: str = "hf",
        *,
        flash_kwargs: bool = True,
        drop_padding: bool = False,
        fixed_docs: bool = False,
        seq_idx: bool = False,
    ):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; choose one of {', '.join(MODES)}")
        if drop_padding and mode != "varlen":
            raise ValueError("drop_padding=True only applies to mode='varlen'")
        self.mode = mode
        self.flash_kwargs = flash_kwargs
        self.drop_padding = drop_padding
        self.fixed_docs = fixed_docs
        self.seq_idx = seq_idx
        if seq_idx and mode == "flex":
            raise ValueError("seq_idx=True applies to mode='hf' or 'varlen'")

    @classmethod
    def for_model(cls, model_or_config, mode: str = "hf", **options) -> PackedCollator:
        """The collator whose batch keeps this model's packed documents apart: cu_seq_lens always,
        seq_idx where the architecture has Mamba, conv or linear-attention layers
        (`packtool.arch.inputs_for`). model_or_config: a model (its .config), a PretrainedConfig,
        a config.json dict, or a model folder / config.json path / cached hub id (its config.json
        is read). Options (drop_padding, fixed_docs) pass through. Architectures no batch keeps
        apart (Mamba, Mamba-2, RWKV, RecurrentGemma, xLSTM: `packtool.arch.packable`): ValueError
        saying why and what to do, never a collator."""
        import os

        from packtool.arch import family, inputs_for, packable

        config = getattr(model_or_config, "config", model_or_config)
        if isinstance(config, (str, os.PathLike)):
            from packtool.arch.config import read_config

            config = read_config(os.fspath(config))[0]
        if not isinstance(config, Mapping) and not getattr(config, "model_type", None):
            raise TypeError(
                f"PackedCollator.for_model takes a model, its config, a config.json dict or a model "
                f"folder; got {type(model_or_config).__name__} (no model_type to read)"
            )
        config = dict(config) if isinstance(config, Mapping) else config
        if not packable(config):
            f = family(config)
            mt = config.get("model_type") if isinstance(config, dict) else config.model_type
            raise ValueError(
                f"{mt} cannot be trained packed ({f.kinds}): {f.note}. Train it unpacked: "
                f"{cls.UNPACKED}"
            )
        needs = inputs_for(config)
        if mode == "flex" and "seq_idx" in needs and options.get("seq_idx", True):
            raise ValueError(
                "this architecture's Mamba / conv / linear-attention layers keep packed documents "
                "apart only from seq_idx, which mode='flex' batches do not carry; use mode='hf' or "
                "'varlen'"
            )
        if mode != "flex":
            options.setdefault("seq_idx", "seq_idx" in needs)
        return cls(mode, **options)

    def __repr__(self) -> str:
        return (
            f"PackedCollator(mode={self.mode!r}, flash_kwargs={self.flash_kwargs}, "
            f"drop_padding={self.drop_padding}, fixed_docs={self.fixed_docs}, seq_idx={self.seq_idx})"
        )

    def _position_ids(self, features, pack_len: int) -> torch.Tensor:
        first = features[0]
        if "position_ids" in first:
            return _stack(features, "position_ids", torch.long)
        if "seq_lengths" in first:
            return torch.stack(
                [
                    torch.from_numpy(schema.position_ids(f["seq_lengths"], pack_len)).long()
                    for f in features
                ]
            )
        raise _missing("position_ids")

    def _lengths(self, features, key: str) -> list[list[int]]:
        lengths = [[int(n) for n in f[key]] for f in features]
        if self.fixed_docs and len({len(x) for x in lengths}) > 1:
            raise ValueError(
                f"fixed_docs=True but the rows list {sorted({len(x) for x in lengths})} documents; "
                "a pack written with --fixed-docs lists exactly --max-docs in every row"
            )
        return lengths

    def _cu_seqlens(
        self, features, position_ids: torch.Tensor, flat_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """int32 segment boundaries over the batch's output tokens (B*L, or the documents' slots
        only), and the same segments in real tokens when the items carry seq_lengths_unpadded."""
        pack_len = position_ids.shape[1]
        unpadded = None
        if all("seq_lengths" in f for f in features):
            lengths = self._lengths(features, "seq_lengths")
            if all(schema.UNPADDED_COLUMN in f for f in features):
                unpadded = self._lengths(features, schema.UNPADDED_COLUMN)
            # the pad tails are gone: the documents, end to end, fill the stream
            if self.drop_padding:
                lengths = [[n for lens in lengths for n in lens]]
                unpadded = unpadded and [[n for lens in unpadded for n in lens]]
                pack_len = flat_pos.numel()
        elif self.drop_padding:
            lengths, pack_len = [_segments_read_off(flat_pos)], flat_pos.numel()
        else:
            lengths = [_segments_read_off(row) for row in position_ids]
        # fixed docs: K entries and the pad tail per row; without pad tails (drop_padding) the
        # stream is exactly the rows' K entries each, end to end: B*K + 1 boundaries
        fixed = (
            self.fixed_docs and not self.drop_padding and all("seq_lengths" in f for f in features)
        )
        cu = torch.from_numpy(schema.cu_seqlens(lengths, pack_len, fixed))
        if unpadded is None:
            return cu, None
        real = schema.cu_seqlens_unpadded(lengths, unpadded, pack_len, fixed)
        return cu, torch.from_numpy(real)

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        if not features:
            raise ValueError("empty batch")
        for name in ("input_ids", "labels"):
            if name not in features[0]:
                raise _missing(name)
        input_ids = _stack(features, "input_ids", torch.long)
        labels = _stack(features, "labels", torch.long)
        if input_ids.dim() != 2 or labels.shape != input_ids.shape:
            raise ValueError(
                f"rows must all have the same length; got input_ids {tuple(input_ids.shape)}"
            )
        position_ids = self._position_ids(features, input_ids.shape[1])
        if position_ids.shape != input_ids.shape or bool((position_ids[:, 0] != 0).any()):
            raise ValueError(
                "position_ids must have the row shape and start every row at 0 (schema v1)"
            )

        if self.mode == "flex":
            if "document_id" not in features[0]:
                raise _missing("document_id")
            document_id = _stack(features, "document_id", torch.int32)
            return {
                "input_ids": input_ids,
                "labels": labels,
                "position_ids": position_ids,
                "document_id": document_id,
            }

        keep = None  # the slots a batch keeps: all, or the documents' slots (drop_padding)
        if self.mode == "varlen" and self.drop_padding:
            first = features[0]
            if "seq_lengths" in first or "num_tokens" in first:  # their padding included
                n = [
                    int(sum(f["seq_lengths"]) if "seq_lengths" in first else f["num_tokens"])
                    for f in features
                ]
                keep = torch.arange(input_ids.shape[1])[None, :] < torch.tensor(n)[:, None]
            elif "document_id" in first:  # the pad tail is PAD_DOCUMENT_ID (-1)
                keep = _stack(features, "document_id", torch.int32) >= 0
            else:
                raise _missing("num_tokens")
        flat_ids, flat_labels, flat_pos = (
            t.reshape(-1) if keep is None else t[keep] for t in (input_ids, labels, position_ids)
        )

        cu, cu_real = self._cu_seqlens(features, position_ids, flat_pos)
        max_len = int((cu[1:] - cu[:-1]).max()) if cu.numel() > 1 else 0

        if self.mode == "varlen":
            out = {
                "input_ids": flat_ids,
                "labels": flat_labels,
                "position_ids": flat_pos,
                "cu_seqlens": cu,
                "max_seqlen": max_len,
            }
            if self.seq_idx:
                out["seq_idx"] = _seq_idx(cu, flat_ids.numel())[None, :]
            if cu_real is not None:
                out["cu_seqlens_unpadded"] = cu_real
                out["max_seqlen_unpadded"] = (
                    int((cu_real[1:] - cu_real[:-1]).max()) if cu_real.numel() > 1 else 0
                )
            return out
        batch = {
            "input_ids": input_ids,
            "labels": labels,
            "position_ids": position_ids,
            "use_cache": False,
        }
        if self.flash_kwargs:
            batch.update(
                cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=max_len, max_length_k=max_len
            )
        if self.seq_idx:  # per row: the document index within the row (cu is over B*L tokens)
            flat = _seq_idx(cu, input_ids.numel()).view(input_ids.shape)
            batch["seq_idx"] = (flat - flat[:, :1]).to(torch.int32)
        return batch


CHOSEN, REJECTED = 0, 1  # the side column's codes (manifest preference.sides)

PAIRS = "pairs"


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """What the model's forward takes: the batch without `labels` (the pair losses read them, the
    model would only add a cross-entropy) and `pairs`."""
    return {k: v for k, v in batch.items() if k not in ("labels", PAIRS)}


def tokens_hash(sides: Sequence[tuple[np.ndarray, np.ndarray]]) -> int:
    """int64 hash (blake2b, 8 bytes) of a pair's documents: each side's length, ids and labels."""
    h = hashlib.blake2b(digest_size=8)
    for ids, labels in sides:
        h.update(np.int64(len(ids)).tobytes())
        h.update(np.ascontiguousarray(ids, dtype="<i4").tobytes())
        h.update(np.ascontiguousarray(labels, dtype="<i4").tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def _row_documents(
    f: Mapping[str, Any], r: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(slot starts, real lengths, sides, sources) of the documents of row `r`, checked against the
    pair layout."""
    seq = np.asarray(f["seq_lengths"], dtype=np.int64)
    real = np.asarray(f.get(schema.UNPADDED_COLUMN, seq), dtype=np.int64)
    if SIDE_COLUMN not in f:
        raise KeyError(
            f"batch items have no {SIDE_COLUMN!r}: read a preference pack with PairDataset (and "
            "pass remove_unused_columns=False to a Trainer)"
        )
    side = np.asarray(f[SIDE_COLUMN], dtype=np.int64)
    src = np.asarray(f["source_index"], dtype=np.int64)
    if not len(seq) == len(real) == len(side) == len(src):
        raise ValueError(f"row {r}: seq_lengths, side and source_index differ in length")
    starts = np.concatenate([[0], np.cumsum(seq)[:-1]])
    docs = np.flatnonzero(seq > 0)  # fixed docs: the empty entries are no documents
    if len(docs) % 2:
        raise ValueError(
            f"row {r} holds {len(docs)} documents: a pair is split across rows (run packtool verify)"
        )
    want = np.tile([CHOSEN, REJECTED], len(docs) // 2)
    if not np.array_equal(side[docs], want):
        raise ValueError(
            f"row {r}: sides {side[docs].tolist()}, expected chosen, rejected alternating "
            "(run packtool verify)"
        )
    if not np.array_equal(src[docs][0::2], src[docs][1::2]):
        raise ValueError(
            f"row {r}: the two sides of a pair come from different records "
            f"({src[docs].tolist()}): a pair is split across rows (run packtool verify)"
        )
    return starts[docs].tolist(), real[docs].tolist(), side[docs].tolist(), src[docs].tolist()


class PairCollator(PackedCollator):
    """`PackedCollator` for preference packs: the same modes, options and batch (cu_seq_lens,
    seq_idx, `for_model`), plus `batch["pairs"]` (drawn in this module's docstring)."""

    UNPACKED = (
        "a preference pack holds each pair's two sides in one row, so none can train it; train on "
        "unpacked pairs (TRL's DPOTrainer with padding_free=False)"
    )

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        batch[PAIRS] = self._pairs(features, batch["labels"].shape)
        return batch

    def _pairs(self, features, shape) -> dict[str, torch.Tensor]:
        pack_len = int(np.asarray(features[0]["input_ids"]).shape[-1])
        dropped = self.mode == "varlen" and self.drop_padding
        document = np.full(shape, -1, dtype=np.int64).reshape(-1)
        side, last, source, hashes = [], [], [], []
        offset = 0  # flat position of the row's slot 0
        for r, f in enumerate(features):
            starts, lengths, sides, sources = _row_documents(f, r)
            ids, labels = np.asarray(f["input_ids"]), np.asarray(f["labels"])
            spans = []
            for a, n, s in zip(starts, lengths, sides, strict=True):
                document[offset + a : offset + a + n] = len(side)
                side.append(s)
                last.append(offset + a + n - 1)
                spans.append((ids[a : a + n], labels[a : a + n]))
            source += sources[0::2]
            hashes += [tokens_hash(spans[i : i + 2]) for i in range(0, len(spans), 2)]
            offset += int(np.asarray(f["seq_lengths"]).sum()) if dropped else pack_len
        d = torch.arange(len(side), dtype=torch.int64)
        return {
            "side": torch.tensor(side, dtype=torch.int64),
            "pair": d // 2,
            "last": torch.tensor(last, dtype=torch.int64),
            "source_index": torch.tensor(source, dtype=torch.int64),
            "tokens_hash": torch.tensor(hashes, dtype=torch.int64),
            "document": torch.from_numpy(document.reshape(shape)),
        }


def document_block_mask(
    document_id: torch.Tensor, *, block_size: int = 128, num_heads: int | None = None
):
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

    return create_block_mask(
        document_causal, batch, num_heads, length, length, device=doc.device, BLOCK_SIZE=block_size
    )
