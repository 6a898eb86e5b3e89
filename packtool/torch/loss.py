"""Losses over packed rows: the token-weighted SFT loss, per-document log-probs of a pair batch,
pairwise preference and reward losses, and reference log-probs computed once.

A token carries loss when its label is not `schema.IGNORE_INDEX` (-100). Labels are unshifted (the
model shifts): with shift=True the count is over `labels[..., 1:]`, which for packtool rows equals
the unshifted count: every document's first token is -100, so the prediction made at the last token
of document A (whose target is B's first token) is never trained, in [B, L] rows and in a flattened
varlen stream alike (docs/ARCHITECTURE.md, "Semantics").
`global_loss_tokens` draws one training step with `accumulation_groups` and `token_loss_sum`.

`sequence_logps`: slot t counts for document d when t and t+1 both lie in d's real tokens and the
label at t+1 is not -100 (the prompt is -100), so a document's first token is never predicted from
the previous document, in [B, L] rows and in flat varlen streams alike:

    slot        0  1  2  3  4 | 5  6  7  8 | 9
    input_ids   P  P  c  c  c | P  P  r  r | pad
    document    0  0  0  0  0 | 1  1  1  1 | -1
    label      -100 -100 c c c|-100 -100 r r| -100
    predicts       .  c  c  c  x  .  r  r  x      (x: t+1 is another document's: never counted)
    last                     ^            ^       side_scores -> [s(c), s(r)]

`pair_loss`, with the policy's logps l, the reference's r and the answer token counts n, per pair
(c chosen, j rejected; TRL's DPOTrainer loss_type "sigmoid", "hinge", "ipo", and CPOTrainer's
"simpo" with simpo_gamma = gamma):

    sigmoid (DPO)   -log sigmoid(beta * ((l_c - r_c) - (l_j - r_j)))
    hinge           relu(1 - beta * ((l_c - r_c) - (l_j - r_j)))
    ipo             ((l_c - r_c) / n_c - (l_j - r_j) / n_j - 1 / (2 beta))^2
    simpo           -log sigmoid(beta * (l_c / n_c - l_j / n_j) - gamma)      (no reference)

It returns the SUM over the batch's pairs: divide by `global_pairs` of the optimizer step (all
micro-batches, all ranks) and every pair weighs the same whatever the split.

Reward models: a sequence-classification head pools the last non-pad token of each ROW (on packed
rows, the last document's); score every token instead and read each document's own last token
(`side_scores`). With a transformers *ForSequenceClassification model (num_labels=1):

    hidden = model.base_model(**model_inputs(batch)).last_hidden_state   # [B, L, H]
    scores = side_scores(model.score(hidden), batch)                     # [2P]
    loss_sum, pairs = reward_loss(scores)                                # / global_pairs(step)

`ReferenceLogps`: the frozen reference model's logps, computed once over the pack instead of a
forward per step, keyed by each pair's source_index and `tokens_hash` (both sides' ids and labels,
computed by `PairCollator`), so a value can never be attached to other tokens:

    source_index  tokens_hash           chosen     rejected          saved as .npz
    7             -4120937710032145893  -41.0625   -52.5000
    12            8811202934100234551   -12.2500   -11.8750

A pair missing from the store, or stored with other tokens (another tokenizer, chat template,
truncation or pack), is a PacktoolError naming it. The values do not depend on pack_len or the row
layout: a store serves any pack of the same pairs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.errors import PacktoolError
from packtool.torch.collate import model_inputs


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
    pairs = sum(int(mb["pairs"]["source_index"].numel()) for mb in micro_batches)
    total = torch.tensor(pairs, dtype=torch.int64)
    return sum_over_ranks(total, group=group, device=device)


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


_KEYS = ("source_index", "tokens_hash", "chosen", "rejected")


def _to(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch


class ReferenceLogps:
    """Per pair: the reference model's summed answer log-probs, chosen and rejected (float32).

    refs = ReferenceLogps.compute(ref_model, DataLoader(ds, batch_size=8, collate_fn=collator))
    refs.save("ref_logps.npz")                 # later: ReferenceLogps.load("ref_logps.npz")
    ref = refs.for_batch(batch)                # [2P] float32, chosen, rejected, ... like logps
    """

    def __init__(self, source_index, tokens_hash, chosen, rejected):
        self.source_index = np.asarray(source_index, dtype=np.int64)
        self.tokens_hash = np.asarray(tokens_hash, dtype=np.int64)
        self.chosen = np.asarray(chosen, dtype=np.float32)
        self.rejected = np.asarray(rejected, dtype=np.float32)
        n = len(self.source_index)
        if not len(self.tokens_hash) == len(self.chosen) == len(self.rejected) == n:
            raise ValueError("source_index, tokens_hash, chosen and rejected differ in length")
        self._order = np.argsort(self.source_index, kind="stable")
        ordered = self.source_index[self._order]
        twice = ordered[1:][ordered[1:] == ordered[:-1]]
        if len(twice):
            raise PacktoolError(
                f"reference log-probs list source_index {int(twice[0])} more than once; each pair "
                "is stored once"
            )
        self._sorted = ordered

    def __len__(self) -> int:
        return len(self.source_index)

    @classmethod
    def compute(
        cls,
        model: torch.nn.Module,
        batches: Iterable[Mapping[str, Any]],
        *,
        device: torch.device | str | None = None,
    ) -> ReferenceLogps:
        """Run `model` (the reference, frozen: eval mode, no grad) once over `batches` (PairCollator
        batches, e.g. a DataLoader over the PairDataset) and keep each pair's logps."""
        device = torch.device(device) if device is not None else next(model.parameters()).device
        was_training = model.training
        model.eval()
        parts: dict[str, list[np.ndarray]] = {k: [] for k in _KEYS}
        try:
            with torch.no_grad():
                for batch in batches:
                    batch = _to(batch, device)
                    logits = model(**model_inputs(batch)).logits
                    logps = sequence_logps(logits, batch)[0].cpu().numpy()
                    pairs = batch["pairs"]
                    parts["source_index"].append(pairs["source_index"].cpu().numpy())
                    parts["tokens_hash"].append(pairs["tokens_hash"].cpu().numpy())
                    parts["chosen"].append(logps[0::2])
                    parts["rejected"].append(logps[1::2])
        finally:
            model.train(was_training)
        return cls(*(np.concatenate(parts[k]) if parts[k] else [] for k in _KEYS))

    def save(self, path: str | os.PathLike) -> None:
        """Write the store as an .npz (the four arrays)."""
        with open(path, "wb") as f:  # a file object: numpy adds no suffix to the name given
            np.savez(f, **{k: getattr(self, k) for k in _KEYS})

    @classmethod
    def load(cls, *paths: str | os.PathLike) -> ReferenceLogps:
        """The store saved at `paths` (several: e.g. one per rank, concatenated)."""
        parts = []
        for p in paths:
            with np.load(p) as z:
                missing = [k for k in _KEYS if k not in z.files]
                if missing:
                    raise PacktoolError(f"{p} is not a reference log-probs file: no {missing}")
                parts.append([z[k] for k in _KEYS])
        return cls(*(np.concatenate(col) for col in zip(*parts, strict=True)))

    def for_batch(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """float32 [2P] on the batch's device: the stored chosen and rejected logps of the batch's
        pairs, in its document order (as `sequence_logps` gives the policy's). PacktoolError when
        a pair is not stored, or was stored for other tokens."""
        pairs = batch["pairs"]
        src = pairs["source_index"].cpu().numpy()
        got = pairs["tokens_hash"].cpu().numpy()
        at = np.searchsorted(self._sorted, src).clip(max=max(len(self._sorted) - 1, 0))
        found = self._sorted[at] == src if len(self._sorted) else np.zeros(len(src), bool)
        if not found.all():
            s = int(src[~found][0])
            raise PacktoolError(
                f"no reference log-probs for pair source_index {s}: compute them over this pack "
                "(ReferenceLogps.compute)"
            )
        rows = self._order[at]
        wrong = self.tokens_hash[rows] != got
        if wrong.any():
            k = int(np.flatnonzero(wrong)[0])
            raise PacktoolError(
                f"reference log-probs for pair source_index {int(src[k])} were computed on other "
                f"tokens (hash {int(self.tokens_hash[rows[k]])}, this batch {int(got[k])}): another "
                "tokenizer, template, truncation or pack; recompute them over this pack"
            )
        out = np.stack([self.chosen[rows], self.rejected[rows]], axis=1).reshape(-1)
        return torch.from_numpy(out).to(pairs["side"].device)
