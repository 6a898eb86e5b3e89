"""Train on packed shards with PyTorch: dataset, collator, sampler, FlexAttention mask, token-weighted loss.

The only packtool package that imports torch (nothing outside it does at module level, so
`packtool --help` never loads PyTorch). A pack folder (schema v1, see `packtool.schema` and
docs/ARCHITECTURE.md, "Schema") holds rows of exactly `pack_len` tokens; a batch of B rows becomes,
per consumer:

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
                   A pack written with --pad-to-multiple N adds cu_seqlens_unpadded (the same segments
                   in real tokens) and max_seqlen_unpadded; `ds.collator("varlen")` passes the pack's
                   --fixed-docs on, so cu_seqlens has B*(K+1)+1 entries for every batch (CUDA graphs).
    mode="flex"    input_ids, labels, position_ids  [B, L] int64 and document_id [B, L] int32, for
                   `document_block_mask(document_id)` -> FlexAttention BlockMask.

`use_cache=False` is part of every "hf" batch: transformers (5.x) models default to building a cache
even in train mode, and a cache switches off the detection of packed sequences from position_ids,
so documents silently attend to each other.

Labels are unshifted (the model shifts). For a shifted loss the count of loss tokens is
`labels[..., 1:] != -100` (`schema.IGNORE_INDEX`); `packtool.torch.loss` says why packing needs no
extra care there.

Who does what (the rows' segments, position_ids and cu_seqlens are `packtool/schema/shard.py`'s,
the ignore index `schema.IGNORE_INDEX`: this package defines neither):

    dataset.py   PackedDataset: manifest + shards (cached as memory-mapped Arrow IPC) -> one item
                 per row; PairDataset: a preference pack's rows, plus `side`
    collate.py   PackedCollator: items -> an "hf" / "varlen" / "flex" batch; PairCollator: plus
                 batch["pairs"], model_inputs; document_block_mask: document_id -> BlockMask
    loss.py      count_loss_tokens, global_loss_tokens, token_loss_sum, accumulation_groups;
                 sequence_logps, pair_loss, global_pairs, side_scores, reward_loss, ReferenceLogps
    sampler.py   PackedSampler: seeded, epoch-aware, resumable, rank-split row order
"""

from __future__ import annotations

from packtool.torch.collate import MODES as MODES  # importable, not in __all__
from packtool.torch.collate import PackedCollator, PairCollator, document_block_mask, model_inputs
from packtool.torch.dataset import PackedDataset, PairDataset
from packtool.torch.loss import (
    ReferenceLogps,
    accumulation_groups,
    count_loss_tokens,
    global_loss_tokens,
    global_pairs,
    pair_loss,
    reward_loss,
    sequence_logps,
    side_scores,
    token_loss_sum,
)
from packtool.torch.sampler import PackedSampler

__all__ = [
    "PackedDataset",
    "PackedCollator",
    "PackedSampler",
    "document_block_mask",
    "count_loss_tokens",
    "global_loss_tokens",
    "token_loss_sum",
    "accumulation_groups",
    "PairDataset",
    "PairCollator",
    "model_inputs",
    "sequence_logps",
    "pair_loss",
    "global_pairs",
    "ReferenceLogps",
    "side_scores",
    "reward_loss",
]
