"""The forwards of the isolation check, and what they measure (max |differences|, no verdict).

A sampled row, and the runs made of it (token ids taken modulo the tiny vocabulary):

    Sample    input_ids, labels, position_ids  int32 [L]      seq_lengths [4, 3]   bounds [(0, 4), (4, 7)]
              (sampling.py)
    packed    [A A A A B B B pad pad]   batch_rows rows per forward, as a trainer runs them (no mask)
    alone     [A A A A]  [B B B]        each document on its own, positions 0..n-1
    swapped   [X X X X B B B pad pad]   document A's tokens (and its labels alike) replaced
    last      [A A A a B B b pad pad]   each document's last token replaced (the causal probe)
    control   [A A A A B B B pad pad]   positions 0..L-1, one segment: plain causal over the row

A varlen backend also gets the segments of the batch's rows laid end to end, the pad tail included
(`schema.cu_seqlens`, docs/ARCHITECTURE.md, "Schema"):

    rows [[4, 3], [9]], L = 9  ->  cu_seq_lens_q/k [0, 4, 7, 9, 18], max_length_q/k 9

Loss is computed the Hugging Face way (unshifted labels: the label at p is predicted from
logits[p-1]; IGNORE_INDEX contributes 0). `run_alone` returns the alone runs, `compare` a `Diffs`
of the others against them; isolation.py judges the numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.verify import backends as bk
from packtool.verify.backends import Backend
from packtool.verify.sampling import Sample
from packtool.verify.tiny_models import VOCAB


@dataclass
class Diffs:
    logits: float = 0.0
    loss_sum: float = 0.0  # max over documents of |sum packed - sum alone| / tolerance units
    loss_sum_abs: float = 0.0
    swap: float = 0.0
    causal: float = 0.0  # max |Δ| of logits before each document's changed last token
    causal_power: float = math.inf  # min over documents of |Δ| at the changed token itself
    causal_docs: int = 0
    docs: int = 0
    tokens: int = 0
    worst: dict = field(default_factory=dict)  # where the largest logits difference was
    causal_worst: dict = field(default_factory=dict)


def _cu(lengths_per_row: list[list[int]], pack_len: int, device):
    """cu_seqlens over the flattened batch (int32, the pad tail its own segment) and the longest segment."""
    import torch

    cu = schema.cu_seqlens(lengths_per_row, pack_len)
    return torch.tensor(cu, dtype=torch.int32, device=device), int(np.diff(cu).max())


def forward(model, backend: Backend, ids, pos, lengths_per_row: list[list[int]]):
    """One forward the way a trainer drives this backend; returns float32 logits [B, S, V]."""
    import torch

    kw = {}
    if backend.varlen_kwargs:
        cu, mx = _cu(lengths_per_row, ids.shape[1], ids.device)
        kw = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": mx, "max_length_k": mx}
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=pos, use_cache=False, **kw)
    bk.note_forward()
    return out.logits.float()


def token_losses(logits, labels):
    """Unshifted labels (HF convention): loss at label position p uses logits[p-1]. Returns [B, S]
    float32 with 0 where the label is IGNORE_INDEX (and at p = 0)."""
    import torch

    B, S, V = logits.shape
    lab = labels[:, 1:]
    valid = lab != schema.IGNORE_INDEX
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    nll = -lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    nll = torch.where(valid, nll, torch.zeros_like(nll))
    return torch.cat([torch.zeros(B, 1, device=logits.device), nll], dim=1)


def tensors(
    samples: list[Sample],
    device,
    swap_seed: int | None = None,
    last_seed: int | None = None,
    vocab: int = VOCAB,
):
    """ids, labels, positions as int64 tensors [B, L], ids and labels modulo `vocab`; with
    swap_seed document A (the first) has other tokens (labels alike), with last_seed every
    document's last token is another one."""
    import torch

    ids = np.stack([s.input_ids for s in samples]).astype(np.int64) % vocab
    lab = np.stack([s.labels for s in samples]).astype(np.int64)
    lab = np.where(lab == schema.IGNORE_INDEX, lab, lab % vocab)
    pos = np.stack([s.position_ids for s in samples]).astype(np.int64)
    if swap_seed is not None:  # replace document A (the first) by different tokens, labels alike
        rng = np.random.default_rng(swap_seed)
        for i, s in enumerate(samples):
            a0, a1 = s.bounds[0]
            shift = rng.integers(1, VOCAB, size=a1 - a0)
            ids[i, a0:a1] = (ids[i, a0:a1] + shift) % VOCAB
            keep = lab[i, a0:a1] != schema.IGNORE_INDEX
            lab[i, a0:a1] = np.where(keep, ids[i, a0:a1], schema.IGNORE_INDEX)
    if last_seed is not None:
        rng = np.random.default_rng(last_seed)
        for i, s in enumerate(samples):
            for _, e in s.bounds:
                ids[i, e - 1] = (ids[i, e - 1] + rng.integers(1, VOCAB)) % VOCAB
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return t(ids), t(lab), t(pos)


def _finite(x: float) -> float:
    """NaN compares false with everything: count it as an infinite difference, never a pass."""
    return math.inf if math.isnan(x) else x


def track_worst(best: float, where: dict, x, ref, at: dict) -> tuple[float, dict]:
    """The largest max |x - ref| so far (NaN counts as inf) and where it is: `at` with the slot of
    that largest difference added to at["position"] (the first slot of the span x covers)."""
    gap_t = (x - ref).abs().amax(-1).nan_to_num(nan=math.inf)
    diff = gap_t.max().item()
    if diff > best or not where:
        return max(best, diff), {**at, "position": at["position"] + int(gap_t.argmax().item())}
    return best, where


def run_alone(model, backend: Backend, samples: list[Sample]) -> dict:
    """Every document run on its own (positions 0..n-1): {(sample, doc): (logits, token losses)}."""
    import torch

    out = {}
    for i, s in enumerate(samples):
        ids, lab, _ = tensors([s], backend.device)
        for j, (a, e) in enumerate(s.bounds):
            n = e - a
            pos = torch.arange(n, device=backend.device)[None]
            logits = forward(model, backend, ids[:, a:e], pos, [[n]])
            out[i, j] = (logits[0], token_losses(logits, lab[:, a:e])[0])
    return out


def compare(
    model,
    backend: Backend,
    samples: list[Sample],
    alone: dict,
    *,
    control: bool,
    loss_tol: float,
    batch_rows: int,
    swap_seed: int,
) -> Diffs:
    """Differences packed-vs-alone, loss sums, swap and (not for the control) the causal probe,
    over all samples. With `control`, the packed run is a plain causal row (positions 0..L-1, one
    segment) and document 0, which a causal mask leaves untouched, is left out of the comparison."""
    import torch

    d = Diffs()
    for b0 in range(0, len(samples), batch_rows):
        chunk = samples[b0 : b0 + batch_rows]
        ids, lab, pos = tensors(chunk, backend.device)
        L = ids.shape[1]  # cropped rows (sampling.crop): the same within a batch
        sids, _, _ = tensors(chunk, backend.device, swap_seed=swap_seed + b0)
        if control:
            pos = torch.arange(L, device=backend.device).expand(len(chunk), L).contiguous()
            lens = [[L] for _ in chunk]
        else:
            lens = [[int(x) for x in s.seq_lengths] for s in chunk]
        packed = forward(model, backend, ids, pos, lens)
        swapped = forward(model, backend, sids, pos, lens)
        last = None
        if not control:
            lids, _, _ = tensors(chunk, backend.device, last_seed=swap_seed + 7919 + b0)
            last = forward(model, backend, lids, pos, lens)
        pl = token_losses(packed, lab)
        for i, s in enumerate(chunk):
            for j, (a, e) in enumerate(s.bounds):
                if control and j == 0:
                    continue
                al_logits, al_loss = alone[b0 + i, j]
                at = {"shard": s.shard, "row": s.row, "document": j, "position": a}
                d.logits, d.worst = track_worst(d.logits, d.worst, packed[i, a:e], al_logits, at)
                n_loss = int((lab[i, a + 1 : e] != schema.IGNORE_INDEX).sum().item())
                # includes label position a (must be IGNORE_INDEX)
                sum_packed = pl[i, a:e].double().sum().item()
                gap = _finite(abs(sum_packed - al_loss.double().sum().item()))
                d.loss_sum_abs = max(d.loss_sum_abs, gap)
                d.loss_sum = max(d.loss_sum, gap / (loss_tol * math.sqrt(n_loss + 1)))
                if j > 0:
                    d.swap = max(
                        d.swap, _finite((swapped[i, a:e] - packed[i, a:e]).abs().max().item())
                    )
                if last is not None and e - a >= 2:
                    d.causal, d.causal_worst = track_worst(
                        d.causal,
                        d.causal_worst,
                        last[i, a : e - 1],
                        packed[i, a : e - 1],
                        {**at, "changed": e - 1},
                    )
                    own = _finite((last[i, e - 1] - packed[i, e - 1]).abs().max().item())
                    d.causal_power = min(d.causal_power, math.inf if math.isinf(own) else own)
                    d.causal_docs += 1
                d.docs += 1
                d.tokens += e - a
    return d
