"""PackedCollator: a list of packed rows -> one batch for a transformers model, a varlen kernel or
FlexAttention (the three layouts are drawn in `packtool.torch`'s docstring).

Rows are stacked, never padded or truncated: every row already holds `pack_len` tokens. Where
attention may look is the schema's rule (`schema.segments`: every document a segment, the pad tail
one more): position_ids rebuilt from seq_lengths are `schema.position_ids`, cu_seqlens are
`schema.cu_seqlens`, converted to torch tensors here.

Layouts (schema/layout.py): in a pack written with --pad-to-multiple N, seq_lengths are the padded
slots (what the kernel runs over: `cu_seqlens`) and items carry seq_lengths_unpadded, from which
varlen batches also get `cu_seqlens_unpadded` (the same segments in real tokens, 0 for the pad
tail; TransformerEngine's cu_seqlens beside cu_seqlens_padded). With fixed_docs=True (a pack
written with --fixed-docs) every row gives K + 1 segments, so cu_seqlens has B*(K+1)+1 entries for
every batch of B rows:

    K = 3, rows [[4, 4, 0], [8, 0, 0]], L = 12
    cu_seqlens            [0, 4, 8, 8, 12, 20, 20, 20, 24]      max_seqlen 8
    cu_seqlens_unpadded   [0, 3, 7, 7, 7, 12, 12, 12, 12]       max_seqlen_unpadded 5
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from packtool import schema

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
    """Turn a list of `PackedDataset` items into one batch for `mode` ("hf", "varlen", "flex").

    Segments (for cu_seqlens) are the rows' seq_lengths plus the pad tail (`schema.cu_seqlens`);
    items without seq_lengths have them read off position_ids (a segment starts at every 0). Rows
    are stacked, never padded or truncated: every row already holds `pack_len` tokens.

    mode="hf" keys: input_ids, labels, position_ids [B, L] int64; use_cache=False; and when
        flash_kwargs (default): cu_seq_lens_q/k int32 over the flattened B*L tokens, max_length_q/k int.
        transformers' flash-attention path then runs one varlen call for the batch; with batch size
        > 1 it needs them (it reads packing from position_ids only when the batch size is 1).
        sdpa/eager/flex ignore these keys and isolate documents from position_ids.
    mode="varlen" keys: input_ids, labels, position_ids [T] int64; cu_seqlens int32; max_seqlen int;
        T = B*L, or the documents' slots only with drop_padding=True (shape then varies per batch);
        items with seq_lengths_unpadded (--pad-to-multiple) add cu_seqlens_unpadded int32 (same
        shape) and max_seqlen_unpadded int. fixed_docs=True: K + 1 segments per row (static shape).
    mode="flex" keys: input_ids, labels, position_ids [B, L] int64; document_id [B, L] int32.

    seq_idx=True adds seq_idx int32 (mode "hf" [B, L], "varlen" [1, T]): per token, its segment's
    index (within the row for "hf", within the flattened batch for "varlen"; the pad tail is a
    segment). Mamba-2 / causal-conv1d / gated-delta-net kernels (mamba-ssm, causal-conv1d,
    flash-linear-attention) reset their state where it changes; attention ignores it.

        row  a0 a1 a2 a3 | b0 b1 b2 | p  p    seq_idx 0 0 0 0 1 1 1 2 2

    `PackedCollator.for_model(model_or_config)` sets it for architectures with such layers
    (`packtool.arch`).
    """

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
                f"{mt} cannot be trained packed ({f.kinds}): {f.note}. Train it unpacked: pack "
                "with `packtool pack ... --max-docs 1` (one document per row) and use "
                "PackedCollator() on that pack"
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
        if mode == "hf":
            options.setdefault("flash_kwargs", True)
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
