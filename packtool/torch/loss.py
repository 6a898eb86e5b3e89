"""Token-weighted loss over packed rows: count the loss tokens of a step, sum the token losses.

A token carries loss when its label is not `schema.IGNORE_INDEX` (-100). Labels are unshifted (the
model shifts): with shift=True the count is over `labels[..., 1:]`, which for packtool rows equals
the unshifted count (every document's first token is -100; docs/ARCHITECTURE.md, "Semantics").
`global_loss_tokens` draws one training step with `accumulation_groups` and `token_loss_sum`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch

from packtool import schema


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
    return sum_over_ranks(total, group=group, device=device)


def sum_over_ranks(
    total: torch.Tensor, *, group: Any = None, device: torch.device | str | None = None
) -> torch.Tensor:
    """A count of this rank, summed over the ranks of `group` when torch.distributed is initialized
    (every rank must call it), on `device` (default: where it is; CUDA for an nccl group)."""
    if device is not None:
        total = total.to(device)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        if device is None and torch.distributed.get_backend(group) == "nccl":
            total = total.cuda()
        torch.distributed.all_reduce(total, op=torch.distributed.ReduceOp.SUM, group=group)
    return total


def token_loss_sum(
    logits: torch.Tensor, labels: torch.Tensor, *, shift: bool = True
) -> torch.Tensor:
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
