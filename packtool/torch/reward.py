"""Reward models (Bradley-Terry) on pair batches: each side's score read at its last real token.

A sequence-classification head pools the last non-pad token of each ROW: on packed rows that is
the last document's, whatever the row holds. Score every token instead and read each document's
own last token (`batch["pairs"]["last"]`):

    slot        0  1  2  3  4 | 5  6  7  8 | 9
    input_ids   P  P  c  c  c | P  P  r  r | pad
    last                     ^            ^          side_scores -> [s(c), s(r)]

With a transformers *ForSequenceClassification model (num_labels=1):

    hidden = model.base_model(**model_inputs(batch)).last_hidden_state   # [B, L, H]
    scores = side_scores(model.score(hidden), batch)                     # [2P]
    loss_sum, pairs = reward_loss(scores)                                # / global_pairs(step)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch


def side_scores(token_scores: torch.Tensor, batch: Mapping[str, Any]) -> torch.Tensor:
    """[2P] (chosen, rejected, ...): each document's score at its last real token.
    `token_scores`: one score per slot, [B, L] / [B, L, 1] (mode "hf") or [T] / [1, T, 1] (varlen)."""
    flat = token_scores.reshape(-1)
    n = batch["labels"].numel()
    if flat.numel() != n:
        raise ValueError(
            f"token_scores hold {flat.numel()} values, the batch has {n} slots: pass one score per "
            "slot (the head applied to every hidden state, num_labels=1)"
        )
    return flat[batch["pairs"]["last"].to(flat.device)]


def reward_loss(scores: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(Bradley-Terry loss summed over the pairs, number of pairs) for per-document scores [2P]:
    -log sigmoid(s_chosen - s_rejected) per pair (TRL RewardTrainer's loss, without margin)."""
    if scores.dim() != 1 or scores.numel() % 2:
        raise ValueError(
            f"scores must be [2P] (chosen, rejected per pair); got {tuple(scores.shape)}"
        )
    per_pair = -torch.nn.functional.logsigmoid(scores[0::2] - scores[1::2])
    return per_pair.sum(), per_pair.numel()
