"""Isolation layer: tiny random-weight decoders prove that packed documents cannot see each other.

For sampled rows holding >= 2 documents (token ids taken modulo the tiny vocabulary):

    packed   [A A A A B B B pad pad]   one forward, as a trainer runs it (no mask, use_cache=False)
    alone    [A A A A]  [B B B]       each document on its own, positions 0..n-1
    swapped  [X X X X B B B pad pad]  document A's tokens replaced
    control  [A A A A B B B pad pad]  positions 0..L-1, one segment: plain causal over the row

    logits     packed[B] == alone[B] for every document (tolerance per dtype)
    loss       per-document loss sums packed == alone (the shift across A|B must be ignored)
    swap       swapped[B] == packed[B] (bit-exact where the backend is deterministic)
    control    must FAIL the three comparisons above; if it passes them the check has no power

Two models: Llama-style (RoPE, relative: barely moved by positions that keep counting) and GPT-2
style (learned absolute position embeddings: any position error moves its logits). Both come from
transformers configs with random weights (seeded), nothing is downloaded.
Comparisons are always the same backend packed vs alone, never across implementations.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.verify import Check
from packtool.verify.backends import Backend

VOCAB = 1024  # tiny vocabulary: real ids are taken modulo this
HIDDEN = 64
LAYERS = 2
HEADS = 4
INIT_STD = 0.1  # larger than the usual 0.02 so attention is sharp and the control has power
# max |difference| allowed between packed and alone, per dtype (logits of magnitude ~4-5).
# float32 runs differ only by reduction order: measured <= 3.4e-6 at 4096 tokens (sdpa; the reference
# is bit-exact). bfloat16 keeps 8 mantissa bits (1 ulp = 0.03 at 4): measured <= 0.051 with sdpa in
# bf16 on CPU at 4096 tokens, so 0.125 (~4 ulps); the negative control moves logits by 4.5-5.5.
LOGIT_TOL = {"float32": 1e-4, "bfloat16": 0.125, "float16": 0.03}
# per-document loss sums: |sum packed - sum alone| <= LOSS_TOL * sqrt(loss tokens + 1) (rounding
# errors add like a random walk); a label left on a document's first token adds one whole
# cross-entropy term (~log(vocab) = 6.9), far above it. Measured bf16 noise: <= 0.35 per document.
LOSS_TOL = {"float32": 2e-4, "bfloat16": 0.05, "float16": 0.01}
CONTROL_MARGIN = 2.0  # the control must miss every tolerance by at least this factor
MODELS = ("llama", "gpt2")


@dataclass
class Sample:
    """One packed row to test: its documents' lengths and the token columns (int32 [L])."""

    shard: str
    row: int
    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    seq_lengths: np.ndarray
    synthetic: bool = False

    @property
    def bounds(self) -> list[tuple[int, int]]:
        cs = np.concatenate(([0], np.cumsum(self.seq_lengths)))
        return [(int(a), int(b)) for a, b in zip(cs[:-1], cs[1:], strict=True)]


@dataclass
class _Diffs:
    logits: float = 0.0
    loss_sum: float = 0.0  # max over documents of |sum packed - sum alone| / tolerance units
    loss_sum_abs: float = 0.0
    swap: float = 0.0
    docs: int = 0
    tokens: int = 0
    worst: dict = field(default_factory=dict)  # where the largest logits difference was


def build_model(kind: str, backend: Backend, pack_len: int, seed: int):
    """A tiny random-weight decoder from a transformers config (no download)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    common = {"attn_implementation": backend.attn_implementation, "use_cache": False}
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                          num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS // 2,
                          max_position_embeddings=max(pack_len, 64), initializer_range=INIT_STD,
                          bos_token_id=None, eos_token_id=None, pad_token_id=None, **common)
        model = LlamaForCausalLM(cfg)
    elif kind == "gpt2":
        cfg = GPT2Config(vocab_size=VOCAB, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                         n_positions=max(pack_len, 64), initializer_range=INIT_STD, resid_pdrop=0.0,
                         embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None, **common)
        model = GPT2LMHeadModel(cfg)
    else:
        raise ValueError(kind)
    dtype = getattr(torch, backend.dtype)
    return model.to(device=backend.device, dtype=dtype).eval()


def _cu(lengths_per_row: list[list[int]], pack_len: int, device):
    """cu_seqlens over the flattened batch (int32) and the longest segment."""
    import torch

    segs = []
    for lens in lengths_per_row:
        used = int(sum(lens))
        segs.extend(int(x) for x in lens)
        if used < pack_len:
            segs.append(pack_len - used)  # the pad tail is its own segment
    cu = torch.tensor(np.concatenate(([0], np.cumsum(segs))), dtype=torch.int32, device=device)
    return cu, int(max(segs))


def _forward(model, backend: Backend, ids, pos, lengths_per_row: list[list[int]]):
    """One forward the way a trainer drives this backend; returns float32 logits [B, S, V]."""
    import torch

    kw = {}
    if backend.varlen_kwargs:
        cu, mx = _cu(lengths_per_row, ids.shape[1], ids.device)
        kw = {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": mx, "max_length_k": mx}
    with torch.no_grad():
        out = model(input_ids=ids, position_ids=pos, use_cache=False, **kw)
    return out.logits.float()


def _token_losses(logits, labels):
    """Unshifted labels (HF convention): loss at label position p uses logits[p-1]. Returns [B, S]
    float32 with 0 where the label is -100 (and at p = 0)."""
    import torch

    B, S, V = logits.shape
    lab = labels[:, 1:]
    valid = lab != schema.IGNORE_INDEX
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    nll = -lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    nll = torch.where(valid, nll, torch.zeros_like(nll))
    return torch.cat([torch.zeros(B, 1, device=logits.device), nll], dim=1)


def _tensors(samples: list[Sample], device, swap_seed: int | None = None):
    import torch

    ids = np.stack([s.input_ids for s in samples]).astype(np.int64) % VOCAB
    lab = np.stack([s.labels for s in samples]).astype(np.int64)
    lab = np.where(lab == schema.IGNORE_INDEX, lab, lab % VOCAB)
    pos = np.stack([s.position_ids for s in samples]).astype(np.int64)
    if swap_seed is not None:  # replace document A (the first) by different tokens, labels alike
        rng = np.random.default_rng(swap_seed)
        for i, s in enumerate(samples):
            a0, a1 = s.bounds[0]
            shift = rng.integers(1, VOCAB, size=a1 - a0)
            ids[i, a0:a1] = (ids[i, a0:a1] + shift) % VOCAB
            keep = lab[i, a0:a1] != schema.IGNORE_INDEX
            lab[i, a0:a1] = np.where(keep, ids[i, a0:a1], schema.IGNORE_INDEX)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return t(ids), t(lab), t(pos)


def _finite(x: float) -> float:
    """NaN compares false with everything: count it as an infinite difference, never a pass."""
    return math.inf if math.isnan(x) else x


def _alone(model, backend: Backend, samples: list[Sample]) -> dict:
    """Every document run on its own (positions 0..n-1): {(sample, doc): (logits, token losses)}."""
    import torch

    out = {}
    for i, s in enumerate(samples):
        ids, lab, _ = _tensors([s], backend.device)
        for j, (a, e) in enumerate(s.bounds):
            n = e - a
            pos = torch.arange(n, device=backend.device)[None]
            logits = _forward(model, backend, ids[:, a:e], pos, [[n]])
            out[i, j] = (logits[0], _token_losses(logits, lab[:, a:e])[0])
    return out


def _compare(model, backend: Backend, samples: list[Sample], alone: dict, *, control: bool,
             loss_tol: float, batch_rows: int, swap_seed: int) -> _Diffs:
    """Differences packed-vs-alone, loss sums and swap, over all samples. With `control`, the
    packed run is a plain causal row (positions 0..L-1, one segment) and document 0, which a
    causal mask leaves untouched, is left out of the comparison."""
    import torch

    d = _Diffs()
    L = len(samples[0].input_ids)
    for b0 in range(0, len(samples), batch_rows):
        chunk = samples[b0:b0 + batch_rows]
        ids, lab, pos = _tensors(chunk, backend.device)
        sids, _, _ = _tensors(chunk, backend.device, swap_seed=swap_seed + b0)
        if control:
            pos = torch.arange(L, device=backend.device).expand(len(chunk), L).contiguous()
            lens = [[L] for _ in chunk]
        else:
            lens = [[int(x) for x in s.seq_lengths] for s in chunk]
        packed = _forward(model, backend, ids, pos, lens)
        swapped = _forward(model, backend, sids, pos, lens)
        pl = _token_losses(packed, lab)
        for i, s in enumerate(chunk):
            for j, (a, e) in enumerate(s.bounds):
                if control and j == 0:
                    continue
                al_logits, al_loss = alone[b0 + i, j]
                gap_t = (packed[i, a:e] - al_logits).abs().amax(-1).nan_to_num(nan=math.inf)
                diff = gap_t.max().item()
                if diff > d.logits or not d.worst:
                    d.logits = max(d.logits, diff)
                    d.worst = {"shard": s.shard, "row": s.row, "document": j,
                               "position": a + int(gap_t.argmax().item())}
                n_loss = int((lab[i, a + 1:e] != schema.IGNORE_INDEX).sum().item())
                sum_packed = pl[i, a:e].double().sum().item()  # includes label position a (must be -100)
                gap = _finite(abs(sum_packed - al_loss.double().sum().item()))
                d.loss_sum_abs = max(d.loss_sum_abs, gap)
                d.loss_sum = max(d.loss_sum, gap / (loss_tol * math.sqrt(n_loss + 1)))
                if j > 0:
                    d.swap = max(d.swap, _finite((swapped[i, a:e] - packed[i, a:e]).abs().max().item()))
                d.docs += 1
                d.tokens += e - a
    return d


def run_isolation(samples: list[Sample], backends: list[Backend], *, pack_len: int, seed: int = 0,
                  batch_rows: int = 2, models: tuple[str, ...] = MODELS) -> list[Check]:
    """Isolation checks for each (model, backend): logits, loss sums, swap, negative control."""
    import torch

    from packtool.verify import backends as bk

    bk.register()
    _quiet_transformers()
    if not samples:
        return [Check("isolation", False, "no row to test: the pack holds no valid row", {})]
    threads = torch.get_num_threads()
    if all(b.device == "cpu" for b in backends):
        # one thread: these tiny forwards are latency-bound, and on a shared 2-core box OpenMP
        # spinning made a 100-token forward take 260 ms with 2 threads against 1.5 ms with one
        torch.set_num_threads(1)
    try:
        return _run(samples, backends, pack_len=pack_len, seed=seed, batch_rows=batch_rows, models=models)
    finally:
        torch.set_num_threads(threads)


def _run(samples, backends, *, pack_len, seed, batch_rows, models) -> list[Check]:
    import torch

    checks: list[Check] = []
    rows_tested = len(samples)
    source = ("synthetic rows built from the pack's documents (no row holds >= 2 documents)"
              if samples[0].synthetic else "rows of the pack")
    for backend in backends:
        tol = LOGIT_TOL[backend.dtype]
        loss_tol = LOSS_TOL[backend.dtype]
        swap_tol = 0.0 if backend.deterministic else tol
        for kind in models:
            label = f"isolation {kind}/{backend.name}"
            if kind == "gpt2" and not backend.gpt2:
                checks.append(Check(label, False, f"transformers {_tf_version()} has no {backend.attn_implementation} "
                                    f"for GPT-2: the absolute-position model does not run on this backend",
                                    {"kernel": backend.kernel, "backend": backend.name, "model_type": kind},
                                    skipped=True))
                continue
            t0 = time.perf_counter()
            model = build_model(kind, backend, pack_len, seed)
            alone = _alone(model, backend, samples)
            good = _compare(model, backend, samples, alone, control=False, loss_tol=loss_tol,
                            batch_rows=batch_rows, swap_seed=seed + 1)
            ctrl = _compare(model, backend, samples, alone, control=True, loss_tol=loss_tol,
                            batch_rows=batch_rows, swap_seed=seed + 1)
            ev = {"kernel": backend.kernel, "backend": backend.name, "model_type": kind, "device": backend.device,
                  "dtype": backend.dtype, "model": _model_desc(kind), "rows_tested": rows_tested, "rows_from": source,
                  "documents": good.docs, "tokens": good.tokens, "batch_rows": batch_rows,
                  "torch": torch.__version__, "transformers": _tf_version(),
                  "seconds": round(time.perf_counter() - t0, 2)}
            at = (f"; worst: {good.worst['shard']} row {good.worst['row']} document {good.worst['document']} "
                  f"position {good.worst['position']}") if good.worst else ""
            ok = good.logits <= tol
            checks.append(Check(f"{label} logits", ok,
                                f"packed == alone: max|Δ| {good.logits:.3g} {'≤' if ok else '>'} tol {tol:g}"
                                + ("" if ok else at + ": documents see each other or positions are wrong"),
                                {**ev, "max_abs_diff": good.logits, "tol": tol, "worst": good.worst}))
            ok = good.loss_sum <= 1.0
            checks.append(Check(f"{label} loss sums", ok,
                                f"per-document loss sums packed == alone: max|Δ| {good.loss_sum_abs:.3g} "
                                f"({'within' if ok else 'beyond'} {loss_tol:g}·sqrt(loss tokens + 1))"
                                + ("" if ok else at + ": a label crosses a document boundary or outputs leak"),
                                {**ev, "max_abs_diff": good.loss_sum_abs, "tol_sqrt_tokens": loss_tol}))
            ok = good.swap <= swap_tol
            exact = good.swap == 0.0
            checks.append(Check(f"{label} swap A", ok,
                                f"document A replaced: later documents max|Δ| {good.swap:.3g}"
                                + (" (bit-exact)" if exact else f" (tol {swap_tol:g})")
                                + ("" if ok else ": document A leaks into later documents"),
                                {**ev, "max_abs_diff": good.swap, "tol": swap_tol, "exact": exact}))
            # the control must fail every comparison, by a margin above the tolerance
            power = {"logits": ctrl.logits / tol, "loss": ctrl.loss_sum, "swap": ctrl.swap / tol}
            power = {k: float(f"{v:.3g}") for k, v in power.items()}
            weak = [k for k, v in power.items() if not v > CONTROL_MARGIN]
            msg = (f"plain causal row (positions 0..L-1) fails as it must: logits Δ {ctrl.logits:.3g}, "
                   f"loss-sum Δ {ctrl.loss_sum_abs:.3g}, swap Δ {ctrl.swap:.3g} (≥ {min(power.values()):.3g}× tol)")
            if weak:
                msg = (f"check has no power: a plain causal mask with positions not reset passes the "
                       f"{', '.join(weak)} comparison(s) (logits Δ {ctrl.logits:.3g} vs tol {tol:g}); the "
                       f"isolation result above proves nothing")
            checks.append(Check(f"{label} control", not weak, msg,
                                {**ev, "control_logits_diff": ctrl.logits, "control_loss_sum_diff": ctrl.loss_sum_abs,
                                 "control_swap_diff": ctrl.swap, "power_over_tol": power}))
            del model, alone
    return checks


def _model_desc(kind: str) -> str:
    pos = "RoPE" if kind == "llama" else "learned absolute positions"
    return f"{kind} {LAYERS}x{HIDDEN}, {HEADS} heads, vocab {VOCAB}, {pos}, random init std {INIT_STD}"


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
