"""Reference log-probs, computed once and stored keyed to each pair and to its tokens.

DPO, IPO and hinge compare the policy with a frozen reference model on the same pair. Running the
reference beside the policy costs a forward per step; computing it once over the pack and storing
the result costs one forward pass over the pack, once. The store keys every pair by its
source_index (its input record) and `tokens_hash` (both sides' ids and labels, computed by
`PairCollator`), so a value can never be attached to other tokens:

    source_index  tokens_hash           chosen     rejected          saved as .npz
    7             -4120937710032145893  -41.0625   -52.5000
    12            8811202934100234551   -12.2500   -11.8750

`for_batch(batch)` looks up the batch's pairs: a pair missing from the store, or stored with other
tokens (another tokenizer, chat template, truncation or pack), is a PacktoolError naming it.
The values do not depend on pack_len or the row layout: a store serves any pack of the same pairs.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch

from packtool.errors import PacktoolError
from packtool.torch.logps import sequence_logps
from packtool.torch.pair_collate import model_inputs

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
