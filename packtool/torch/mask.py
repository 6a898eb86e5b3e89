"""document_block_mask: the FlexAttention BlockMask of packed rows, from their document_id.

The segments are the schema's (docs/ARCHITECTURE.md, "Schema"): every document, and the pad tail
(`document_id == schema.PAD_DOCUMENT_ID`) as one more. The mask is document-causal over them.
"""

from __future__ import annotations

import torch


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
