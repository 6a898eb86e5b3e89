"""packtool.torch.collate: document_block_mask against a dense document-causal reference."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from packtool.torch import document_block_mask  # noqa: E402


def test_document_block_mask_matches_dense_reference():
    from torch.nn.attention.flex_attention import flex_attention

    document_id = torch.tensor(
        [[0] * 5 + [1] * 7 + [2] * 4 + [-1] * 4, [0] * 9 + [1] * 3 + [2] * 8], dtype=torch.int32
    )
    bm = document_block_mask(document_id)
    b, length = document_id.shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, 2, length, 8, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=".*without torch.compile"
        )  # unfused CPU reference
        out = flex_attention(q, k, v, block_mask=bm)
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool))
    dense = (document_id[:, :, None] == document_id[:, None, :]) & causal
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense[:, None])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # pad queries see only pad keys: perturbing every document leaves the pad outputs unchanged
    v2 = v.clone()
    v2[0, :, :16] += 1.0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile")
        out2 = flex_attention(q, k, v2, block_mask=bm)
    torch.testing.assert_close(out2[0, :, 16:], out[0, :, 16:])
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        document_block_mask(document_id[0])
