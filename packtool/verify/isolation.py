"""Isolation layer: tiny random-weight decoders prove that packed documents cannot see each other.

For sampled rows holding >= 2 documents (token ids taken modulo the tiny vocabulary):

    packed   [A A A A B B B pad pad]   one forward, as a trainer runs it (no mask, use_cache=False)
    alone    [A A A A]  [B B B]       each document on its own, positions 0..n-1
    swapped  [X X X X B B B pad pad]  document A's tokens replaced
    last     [A A A a B B b pad pad]  each document's last token replaced
    control  [A A A A B B B pad pad]  positions 0..L-1, one segment: plain causal over the row

    logits     packed[B] == alone[B] for every document (tolerance per dtype)
    loss       per-document loss sums packed == alone (the shift across A|B must be ignored)
    swap       swapped[B] == packed[B] (bit-exact where the backend is deterministic)
    causal     last[A A A] == packed[A A A], bit-identical: no position reads a later token
    reference  alone on the backend == alone on the fp32 reference (bf16 tolerance)
    control    must FAIL the logits, loss and swap comparisons; if it passes them they have no power

packed/alone/swap run the backend against itself, so a kernel that is wrong the same way in both
runs (e.g. non-causal: attends to later tokens of the same document) passes them; the causal probe
and the comparison with the reference are what catch it.

Two models: Llama-style (RoPE, relative: barely moved by positions that keep counting) and GPT-2
style (learned absolute position embeddings: any position error moves its logits). Both come from
transformers configs with random weights (seeded), nothing is downloaded.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.verify import Check
from packtool.verify import backends as bk
from packtool.verify.backends import Backend

VOCAB = 1024  # tiny vocabulary: real ids are taken modulo this
HIDDEN = 64
LAYERS = 2  # attention layers per model: a varlen backend makes LAYERS varlen calls per forward
HEADS = 4
KV_HEADS = 2  # the Llama model uses grouped-query attention (GPT-2 has HEADS)
INIT_STD = 0.1  # larger than the usual 0.02 so attention is sharp and the control has power
# Tolerances are max |difference| of logits (magnitude ~4-5 for these models). bf16 keeps 8 mantissa
# bits: 1 ulp is 0.016-0.03 at |logit| 2-4. The bf16 numbers below were measured on CPU (sdpa in
# bf16, 2-16 rows of 192-4096 tokens); the GPU kernels have not run yet: `measure_tolerances` (run
# by benchmarks/gpu_check.sh) prints the max |Δ| per model and comparison, to set them from data.
#
# packed vs alone, same backend: fp32 differs only by reduction order (measured <= 3.4e-6 at 4096
# tokens with sdpa; the reference is bit-exact). bf16: measured <= 0.051 at 4096 tokens -> 0.125,
# ~2.5x that; the negative control moves logits by 4.5-5.5.
BF16_LOGIT_TOL = 0.125
LOGIT_TOL = {"float32": 1e-4, "bfloat16": BF16_LOGIT_TOL, "float16": 0.03}
# backend alone vs the fp32 reference alone: bf16 rounds the weights and every activation, so this
# is looser than packed vs alone. Measured <= 0.054 (192 tokens), 0.068 (1024), 0.119 (4096 tokens;
# Llama, the larger of the two models) -> 0.25. A non-causal kernel is off by 3.4 (GPT-2) to 6.6.
BF16_REFERENCE_TOL = 0.25
REFERENCE_TOL = {"float32": 1e-4, "bfloat16": BF16_REFERENCE_TOL, "float16": 0.06}
# swap A: the swapped run has the packed run's shapes, cu_seqlens and max lengths, so every kernel
# takes the same tiles, splits and reduction order, and B's outputs are computed from B's inputs by
# the same instructions: bit-exact is expected (measured exact on CPU in bf16). 1e-3 is below one
# bf16 step of any logit above 0.25 in magnitude, so a leak that moves a logit by a single rounding
# step still fails, while a kernel with some run-to-run nondeterminism in the last bits of
# near-zero logits would not turn the check red. Deterministic (CPU fp32) backends must be exact.
BF16_SWAP_TOL = 1e-3
SWAP_TOL = {"float32": 0.0, "bfloat16": BF16_SWAP_TOL, "float16": 1e-3}
# causal probe: the positions before a changed token see it only through masked scores, which
# contribute exactly 0 (exp(-inf) or an underflow), and every other op is per token: the earlier
# logits are bit-identical in any dtype, or some position read a later token.
CAUSAL_TOL = 0.0
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
    causal: float = 0.0  # max |Δ| of logits before each document's changed last token
    causal_power: float = math.inf  # min over documents of |Δ| at the changed token itself
    causal_docs: int = 0
    docs: int = 0
    tokens: int = 0
    worst: dict = field(default_factory=dict)  # where the largest logits difference was
    causal_worst: dict = field(default_factory=dict)


def build_model(kind: str, backend: Backend, pack_len: int, seed: int):
    """A tiny random-weight decoder from a transformers config (no download)."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    common = {"attn_implementation": backend.attn_implementation, "use_cache": False}
    if kind == "llama":
        cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
                          num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
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
    bk.note_forward()
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


def _tensors(samples: list[Sample], device, swap_seed: int | None = None, last_seed: int | None = None):
    """ids, labels, positions as int64 tensors [B, L]; with swap_seed document A (the first) has
    other tokens (labels alike), with last_seed every document's last token is another one."""
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
    """Differences packed-vs-alone, loss sums, swap and (not for the control) the causal probe,
    over all samples. With `control`, the packed run is a plain causal row (positions 0..L-1, one
    segment) and document 0, which a causal mask leaves untouched, is left out of the comparison."""
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
        last = None
        if not control:
            lids, _, _ = _tensors(chunk, backend.device, last_seed=swap_seed + 7919 + b0)
            last = _forward(model, backend, lids, pos, lens)
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
                if last is not None and e - a >= 2:
                    before = (last[i, a:e - 1] - packed[i, a:e - 1]).abs().amax(-1).nan_to_num(nan=math.inf)
                    gap = before.max().item()
                    if gap > d.causal or not d.causal_worst:
                        d.causal = max(d.causal, gap)
                        d.causal_worst = {"shard": s.shard, "row": s.row, "document": j,
                                          "position": a + int(before.argmax().item()), "changed": e - 1}
                    own = _finite((last[i, e - 1] - packed[i, e - 1]).abs().max().item())
                    d.causal_power = min(d.causal_power, math.inf if math.isinf(own) else own)
                    d.causal_docs += 1
                d.docs += 1
                d.tokens += e - a
    return d


def run_isolation(samples: list[Sample], backends: list[Backend], *, pack_len: int, seed: int = 0,
                  batch_rows: int = 2, models: tuple[str, ...] = MODELS) -> list[Check]:
    """Isolation checks for each (model, backend): logits, loss sums, swap, causal probe, agreement
    with the fp32 reference, negative control. Every check's evidence carries `kernel_calls`: what
    computed attention in that (model, backend) group, counted (see backends.counting)."""
    import torch

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
    checks: list[Check] = []
    for kind in models:
        ref_alone = {}  # per device: the fp32 reference run of every document alone, shared by the backends
        for backend in backends:
            label = f"isolation {kind}/{backend.name}"
            if kind == "gpt2" and not backend.gpt2:
                checks.append(Check(label, False, f"transformers {_tf_version()} has no {backend.attn_implementation} "
                                    f"for GPT-2: the absolute-position model does not run on this backend",
                                    {"kernel": backend.kernel, "backend": backend.name, "model_type": kind},
                                    skipped=True))
                continue
            is_ref = backend.attn_implementation == bk.REFERENCE and backend.dtype == "float32"
            try:
                if not is_ref and backend.device not in ref_alone:
                    ref = bk.make("reference", backend.device)
                    ref_alone[backend.device] = _alone(build_model(kind, ref, pack_len, seed), ref, samples)
            except Exception as e:  # the reference failing is a failed check, not a traceback
                checks.append(Check(label, False, f"the fp32 reference run failed: {bk.one_line(e)}",
                                    {"backend": backend.name, "model_type": kind}))
                continue
            checks.extend(_group(kind, backend, samples, ref_alone, is_ref, pack_len=pack_len, seed=seed,
                                 batch_rows=batch_rows))
    return checks


def _group(kind, backend, samples, ref_alone, is_ref, *, pack_len, seed, batch_rows) -> list[Check]:
    """The checks of one (model, backend): every forward runs under one kernel-call counter."""
    import torch

    label = f"isolation {kind}/{backend.name}"
    tol, loss_tol = LOGIT_TOL[backend.dtype], LOSS_TOL[backend.dtype]
    swap_tol = 0.0 if backend.deterministic else SWAP_TOL[backend.dtype]
    ref_tol = REFERENCE_TOL[backend.dtype]
    source = ("synthetic rows built from the pack's documents (no row holds >= 2 documents)"
              if samples[0].synthetic else "rows of the pack")
    t0 = time.perf_counter()
    with bk.counting() as calls:
        try:
            model = build_model(kind, backend, pack_len, seed)
            # the reference's own alone run, when another backend already made it (same seed: same weights)
            alone = ref_alone.get(backend.device) if is_ref else None
            alone = alone if alone is not None else _alone(model, backend, samples)
            good = _compare(model, backend, samples, alone, control=False, loss_tol=loss_tol,
                            batch_rows=batch_rows, swap_seed=seed + 1)
            ctrl = _compare(model, backend, samples, alone, control=True, loss_tol=loss_tol,
                            batch_rows=batch_rows, swap_seed=seed + 1)
        except Exception as e:  # a kernel that raises fails its checks, with the reason
            return [Check(label, False, f"the {backend.name} kernel raised {bk.one_line(e)}",
                          {"kernel": backend.kernel, "backend": backend.name, "model_type": kind,
                           "device": backend.device, "dtype": backend.dtype, "kernel_calls": calls.to_dict()})]
    if is_ref:
        ref_alone[backend.device] = alone
    ev = {"kernel": backend.kernel, "backend": backend.name, "model_type": kind, "device": backend.device,
          "dtype": backend.dtype, "model": _model_desc(kind), "rows_tested": len(samples), "rows_from": source,
          "documents": good.docs, "tokens": good.tokens, "batch_rows": batch_rows,
          "kernel_calls": {**calls.to_dict(), "attention_layers": LAYERS},
          "torch": torch.__version__, "transformers": _tf_version(),
          "seconds": round(time.perf_counter() - t0, 2)}
    out = []
    at = (f"; worst: {good.worst['shard']} row {good.worst['row']} document {good.worst['document']} "
          f"position {good.worst['position']}") if good.worst else ""
    ok = good.logits <= tol
    out.append(Check(f"{label} logits", ok,
                     f"packed == alone: max|Δ| {good.logits:.3g} {'≤' if ok else '>'} tol {tol:g}"
                     + ("" if ok else at + ": documents see each other or positions are wrong"),
                     {**ev, "max_abs_diff": good.logits, "tol": tol, "worst": good.worst}))
    ok = good.loss_sum <= 1.0
    out.append(Check(f"{label} loss sums", ok,
                     f"per-document loss sums packed == alone: max|Δ| {good.loss_sum_abs:.3g} "
                     f"({'within' if ok else 'beyond'} {loss_tol:g}·sqrt(loss tokens + 1))"
                     + ("" if ok else at + ": a label crosses a document boundary or outputs leak"),
                     {**ev, "max_abs_diff": good.loss_sum_abs, "tol_sqrt_tokens": loss_tol}))
    ok = good.swap <= swap_tol
    exact = good.swap == 0.0
    out.append(Check(f"{label} swap A", ok,
                     f"document A replaced: later documents max|Δ| {good.swap:.3g}"
                     + (" (bit-exact)" if exact else f" (tol {swap_tol:g})")
                     + ("" if ok else ": document A leaks into later documents"),
                     {**ev, "max_abs_diff": good.swap, "tol": swap_tol, "exact": exact}))
    out.append(_causal_check(label, good, ev))
    if not is_ref:
        out.append(_reference_check(label, alone, ref_alone[backend.device], ref_tol, samples, ev))
    out.append(_control_check(label, ctrl, tol, ev))
    return out


def _causal_check(label: str, good: _Diffs, ev: dict) -> Check:
    w = good.causal_worst
    ok = good.causal <= CAUSAL_TOL and good.causal_power > 0 and good.causal_docs > 0
    if not good.causal_docs:
        msg = "no document of 2 or more tokens: nothing to probe"
    elif good.causal > CAUSAL_TOL:
        msg = (f"each document's last token changed: earlier logits moved by max|Δ| {good.causal:.3g} "
               f"(must be bit-identical); worst: {w['shard']} row {w['row']} document {w['document']} position "
               f"{w['position']} moved when position {w['changed']} changed: the kernel is not causal, tokens "
               f"read later tokens")
    elif not good.causal_power > 0:
        msg = "probe has no power: changing a document's last token did not change its own logits"
    else:
        msg = (f"each document's last token changed: earlier logits bit-identical over {good.causal_docs} "
               f"documents (the changed token's own logits moved ≥ {good.causal_power:.3g})")
    return Check(f"{label} causal", ok, msg, {**ev, "max_abs_diff": good.causal, "tol": CAUSAL_TOL,
                                              "changed_token_min_diff": _json_float(good.causal_power),
                                              "documents_probed": good.causal_docs, "worst": w})


def _reference_check(label: str, alone: dict, ref: dict, tol: float, samples, ev: dict) -> Check:
    worst, where = 0.0, {}
    for key, (logits, _) in alone.items():
        gap_t = (logits - ref[key][0]).abs().amax(-1).nan_to_num(nan=math.inf)
        diff = gap_t.max().item()
        if diff > worst or not where:
            worst = max(worst, diff)
            s = samples[key[0]]
            where = {"shard": s.shard, "row": s.row, "document": key[1],
                     "position": s.bounds[key[1]][0] + int(gap_t.argmax().item())}
    ok = worst <= tol
    msg = f"alone == fp32 reference alone: max|Δ| {worst:.3g} {'≤' if ok else '>'} tol {tol:g}"
    if not ok:
        msg += (f"; worst: {where['shard']} row {where['row']} document {where['document']} position "
                f"{where['position']}: the kernel computes something else than causal attention (non-causal, "
                f"wrong scale or heads)")
    return Check(f"{label} vs reference", ok, msg, {**ev, "max_abs_diff": worst, "tol": tol, "worst": where})


def _control_check(label: str, ctrl: _Diffs, tol: float, ev: dict) -> Check:
    """The control must fail every comparison, by a margin above the tolerance."""
    power = {"logits": ctrl.logits / tol, "loss": ctrl.loss_sum, "swap": ctrl.swap / tol}
    power = {k: float(f"{v:.3g}") for k, v in power.items()}
    weak = [k for k, v in power.items() if not v > CONTROL_MARGIN]
    msg = (f"plain causal row (positions 0..L-1) fails as it must: logits Δ {ctrl.logits:.3g}, "
           f"loss-sum Δ {ctrl.loss_sum_abs:.3g}, swap Δ {ctrl.swap:.3g} (≥ {min(power.values()):.3g}× tol)")
    if weak:
        msg = (f"check has no power: a plain causal mask with positions not reset passes the "
               f"{', '.join(weak)} comparison(s) (logits Δ {ctrl.logits:.3g} vs tol {tol:g}); the "
               f"isolation result above proves nothing")
    return Check(f"{label} control", not weak, msg,
                 {**ev, "control_logits_diff": ctrl.logits, "control_loss_sum_diff": ctrl.loss_sum_abs,
                  "control_swap_diff": ctrl.swap, "power_over_tol": power})


COMPARISONS = {"logits": "packed~alone", "vs reference": "vs fp32 ref", "swap A": "swap", "causal": "causal",
               "loss sums": "loss sums"}


def measure_tolerances(backends: list[Backend], *, pack_lens=(1024, 4096), rows: int = 4, seed: int = 0,
                       models: tuple[str, ...] = MODELS, echo=print) -> dict:
    """Run the isolation checks on correct synthetic rows (selftest.sample_rows) and report, per
    (pack_len, model, backend), the max |Δ| of every comparison beside the tolerance verify
    applies, and the control's logits Δ: the data to set BF16_*_TOL from on a GPU. `ok` is False
    when a correct row already exceeds a tolerance (verify would fail a good pack) or a run failed."""
    from packtool.verify.selftest import sample_rows

    table, failures = [], []
    for L in pack_lens:
        checks = run_isolation(sample_rows(L, rows, seed=seed), backends, pack_len=L, seed=seed, models=models)
        groups: dict = {}
        for c in checks:
            if c.skipped or "backend" not in c.evidence:
                continue
            g = groups.setdefault((c.evidence["model_type"], c.evidence["backend"]),
                                  {"pack_len": L, "model": c.evidence["model_type"], "backend": c.evidence["backend"],
                                   "dtype": c.evidence.get("dtype"), "kernel_calls": c.evidence.get("kernel_calls")})
            what = c.name.split(" ", 2)[2] if c.name.count(" ") >= 2 else "run"
            if what in COMPARISONS:
                g[COMPARISONS[what]] = (c.evidence.get("max_abs_diff"), c.evidence.get("tol", c.evidence.get(
                    "tol_sqrt_tokens")))
            elif what == "control":
                g["control Δ"] = c.evidence.get("control_logits_diff")
            if not c.passed:
                failures.append(f"{L} {c.name}: {c.message}")
        table.extend(groups.values())
    cols = ["packed~alone", "vs fp32 ref", "swap", "causal"]
    echo(f"{'len':>5} {'model':<6} {'backend':<13} {'dtype':<9} " + " ".join(f"{c + ' (tol)':>22}" for c in cols)
         + f" {'control Δ':>10}")
    for g in table:
        cells = []
        for c in cols:
            v = g.get(c)
            cells.append(f"{'-':>22}" if v is None else f"{_num(v[0]) + ' (' + _num(v[1]) + ')':>22}")
        echo(f"{g['pack_len']:>5} {g['model']:<6} {g['backend']:<13} {g['dtype'] or '?':<9} " + " ".join(cells)
             + f" {_num(g.get('control Δ')):>10}")
    worst = {}
    for c in cols:
        vals = [g[c] for g in table if g.get(c) is not None and g[c][0] is not None]
        if vals:
            m = max(vals, key=lambda v: v[0])
            worst[c] = {"max_abs_diff": m[0], "tol": m[1], "headroom": (m[1] / m[0]) if m[0] else None}
            echo(f"max {c}: {_num(m[0])} against tol {_num(m[1])}"
                 + (f" ({m[1] / m[0]:.1f}x headroom)" if m[0] else " (bit-exact)"))
    for f in failures:
        echo(f"FAIL {f}")
    return {"rows": table, "max": worst, "failures": failures, "ok": not failures and bool(table)}


def _num(v) -> str:
    if v is None:
        return "-"
    return "0" if v == 0 else f"{v:.3g}"


def _json_float(x: float):
    return None if math.isinf(x) or math.isnan(x) else x


def _model_desc(kind: str) -> str:
    pos = "RoPE" if kind == "llama" else "learned absolute positions"
    return f"{kind} {LAYERS}x{HIDDEN}, {HEADS} heads, vocab {VOCAB}, {pos}, random init std {INIT_STD}"


def _tf_version() -> str:
    import transformers

    return transformers.__version__


def _quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()
