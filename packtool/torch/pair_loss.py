"""Pairwise preference losses over a pair batch, summed, with the pair count to normalise by.

Inputs are per document, in the batch's order (`batch["pairs"]`: documents 2p and 2p+1 are pair
p's chosen and rejected side), as `sequence_logps` returns them. With the policy's logps l, the
reference's r and the answer token counts n, per pair (c chosen, j rejected):

    sigmoid (DPO)   -log sigmoid(beta * ((l_c - r_c) - (l_j - r_j)))
    hinge           relu(1 - beta * ((l_c - r_c) - (l_j - r_j)))
    ipo             ((l_c - r_c) / n_c - (l_j - r_j) / n_j - 1 / (2 beta))^2
    simpo           -log sigmoid(beta * (l_c / n_c - l_j / n_j) - gamma)      (no reference)

(TRL's DPOTrainer loss_type "sigmoid", "hinge", "ipo", and CPOTrainer's "simpo" with
simpo_gamma = gamma.) `pair_loss` returns the SUM over the batch's pairs: divide by
`global_pairs` of the optimizer step (all micro-batches, all ranks) and every pair weighs the same
whatever the split; a mean per micro-batch weighs a pair by 1 / (pairs in its micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from packtool.torch.loss import sum_over_ranks

LOSSES = ("sigmoid", "hinge", "ipo", "simpo")


def pair_loss(
    logps: torch.Tensor,
    ref_logps: torch.Tensor | None = None,
    *,
    counts: torch.Tensor | None = None,
    loss: str = "sigmoid",
    beta: float = 0.1,
    gamma: float = 0.5,
) -> tuple[torch.Tensor, int]:
    """(loss summed over the pairs, number of pairs) for per-document `logps` [2P] (chosen,
    rejected, chosen, ...), `ref_logps` [2P] the reference's (`ReferenceLogps.for_batch`; not
    used by simpo), `counts` [2P] the answer token counts (ipo and simpo)."""
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}; choose one of {', '.join(LOSSES)}")
    if logps.dim() != 1 or logps.numel() % 2:
        raise ValueError(
            f"logps must be [2P] (chosen, rejected per pair); got {tuple(logps.shape)}"
        )
    if loss in ("ipo", "simpo") and counts is None:
        raise ValueError(f"loss={loss!r} is length-normalised: pass counts (from sequence_logps)")
    if loss == "simpo":
        avg = logps / counts.to(logps.device).clamp(min=1)
        per_pair = -torch.nn.functional.logsigmoid(beta * (avg[0::2] - avg[1::2]) - gamma)
        return per_pair.sum(), per_pair.numel()
    if ref_logps is None:
        raise ValueError(f"loss={loss!r} needs the reference log-probs (ReferenceLogps.for_batch)")
    ratio = logps - ref_logps.to(logps.device)
    if loss == "ipo":
        ratio = ratio / counts.to(logps.device).clamp(min=1)
    delta = ratio[0::2] - ratio[1::2]
    if loss == "sigmoid":
        per_pair = -torch.nn.functional.logsigmoid(beta * delta)
    elif loss == "hinge":
        per_pair = torch.relu(1 - beta * delta)
    else:
        per_pair = (delta - 1 / (2 * beta)) ** 2
    return per_pair.sum(), per_pair.numel()


def count_pairs(batch: Mapping[str, Any]) -> int:
    """The pairs of one pair batch."""
    return int(batch["pairs"]["source_index"].numel())


def global_pairs(
    micro_batches: Iterable[Mapping[str, Any]],
    *,
    group: Any = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The number of pairs in one optimizer step: all micro-batches here, summed over all ranks
    (all-reduced over `group` when torch.distributed is initialized: every rank calls it once per
    step). DDP averages gradients over ranks: multiply each rank's loss by the world size.

        for micro_batches in accumulation_groups(loader, grad_accum):
            n = global_pairs(micro_batches)
            for mb in micro_batches:
                logps, counts = sequence_logps(model(**model_inputs(mb)).logits, mb)
                loss_sum, _ = pair_loss(logps, refs.for_batch(mb), counts=counts)
                (loss_sum / n * world_size).backward()
            optimizer.step(); optimizer.zero_grad()
    """
    total = torch.tensor(sum(count_pairs(mb) for mb in micro_batches), dtype=torch.int64)
    return sum_over_ranks(total, group=group, device=device)
