"""Per-sequence log-probabilities of a pair batch: from the model's logits, each document's summed
log p(answer token | everything before it in the document), and how many tokens that sums.

The model shifts: the logits at slot t predict the token at t+1. Slot t counts for document d
when t and t+1 both lie in d's real tokens and the label at t+1 is not -100 (the prompt is -100):

    slot        0  1  2  3  4 | 5  6  7  8 | 9
    input_ids   P  P  c  c  c | P  P  r  r | pad
    document    0  0  0  0  0 | 1  1  1  1 | -1
    label      -100 -100 c c c|-100 -100 r r| -100
    predicts       .  c  c  c  x  .  r  r  x      (x: t+1 is another document's: never counted)

so a document's first token is never predicted from the previous document, in [B, L] rows
(flattened, a row's last slot never predicts the next row) and in flat varlen streams alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from packtool import schema


def sequence_logps(
    logits: torch.Tensor, batch: Mapping[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logps float32 [D], counts int64 [D]): per document of the batch (`batch["pairs"]`'s order:
    chosen, rejected, chosen, ...), the summed log-probability of its trained tokens and their
    number. `logits`: the model's [B, L, V] (mode "hf"/"flex") or [1, T, V] / [T, V] (varlen), for
    `batch["labels"]` unshifted. Only the predicted slots' logits are turned into log-probs
    (float32, one cross-entropy), so memory follows the answer tokens, not B*L*V."""
    pairs = batch["pairs"]
    labels = batch["labels"].reshape(-1).to(logits.device)
    document = pairs["document"].reshape(-1).to(logits.device)
    flat = logits.reshape(-1, logits.shape[-1])
    if flat.shape[0] != labels.numel():
        raise ValueError(
            f"logits hold {flat.shape[0]} positions, the batch's labels {labels.numel()}; pass the "
            "logits of this batch's forward"
        )
    target = document[1:]
    at = torch.nonzero(
        (target >= 0) & (target == document[:-1]) & (labels[1:] != schema.IGNORE_INDEX)
    ).flatten()
    token_logps = -torch.nn.functional.cross_entropy(
        flat[at].float(), labels[at + 1], reduction="none"
    )
    n = pairs["side"].numel()
    doc = target[at]
    logps = torch.zeros(n, dtype=torch.float32, device=logits.device).index_add(0, doc, token_logps)
    counts = torch.zeros(n, dtype=torch.int64, device=logits.device).index_add(
        0, doc, torch.ones_like(doc)
    )
    return logps, counts
