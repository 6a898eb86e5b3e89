"""The forwards of both isolation checks, and what they measure (differences, no verdict).

A sampled row (sampling.py), token ids taken modulo the tiny vocabulary (arch.tiny.VOCAB):

    Sample    input_ids, labels, position_ids  int32 [L]      seq_lengths [4, 3]   bounds [(0, 4), (4, 7)]
    alone     [A A A A]  [B B B]        each document on its own, positions 0..n-1: the truth
              run_alone -> {(row, document): (logits [n, V], token losses [n], {module: (in, out)})}

The isolation check (isolation.py: the preset models on each attention backend), `compare`:

    packed    [A A A A B B B pad pad]   batch_rows rows per forward, as a trainer runs them (no mask)
    swapped   [X X X X B B B pad pad]   document A's tokens (and its labels alike) replaced
    last      [A A A a B B b pad pad]   each document's last token replaced (the causal probe)
    control   [A A A A B B B pad pad]   positions 0..L-1, one segment: plain causal over the row

  A varlen backend also gets the segments of the rows laid end to end, pad tail included:

    rows [[4, 3], [9]], L = 9  ->  cu_seq_lens_q/k [0, 4, 7, 9, 18], max_length_q/k 9

  Loss as Hugging Face computes it (unshifted labels); differences are absolute max |Δ| (`Diffs`).

verify --model (model_check.py: the user's architecture), per input set (`INPUT_SETS`, what
`PackedCollator` gives), `run_set`:

    packed    the collator's batch, as the trainer gives it: model(**batch)
    probe     the packed batch again, every decoder layer and tracked module fed the clean input (the
              alone runs' input to the same module, laid out as in the row; `Recorder`), so that its
              output difference is its own leak, not one carried in from the layers below
    control   positions 0..L-1, no boundaries (`run_control`): must differ, or the check has no power

  Differences are relative: max |packed - alone| over the largest |alone| logit. A packed run that
  raises (transformers refusing packed inputs without a kernel package) is recorded with its error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.arch.tiny import VOCAB
from packtool.verify import backends as bk
from packtool.verify.sampling import Sample

# input set name -> PackedCollator options ("hf" mode); each adds to the one before it
INPUT_SETS = {
    "position_ids": {"flash_kwargs": False},
    "+cu_seq_lens": {"flash_kwargs": True},
    "+seq_idx": {"flash_kwargs": True, "seq_idx": True},
}


def tf_version() -> str:
    import transformers

    return transformers.__version__


def quiet_transformers() -> None:
    from transformers.utils import logging

    logging.set_verbosity_error()


def _cu(lengths_per_row: list[list[int]], pack_len: int, device):
    """cu_seqlens over the flattened batch (int32, the pad tail its own segment) and the longest segment."""
    import torch

    cu = schema.cu_seqlens(lengths_per_row, pack_len)
    return torch.tensor(cu, dtype=torch.int32, device=device), int(np.diff(cu).max())


def forward(model, ids, pos, lengths_per_row: list[list[int]], varlen: bool = False):
    """One forward as a trainer drives the model (`varlen`: with cu_seq_lens / max_length) ->
    float32 logits [B, S, V]."""
    import torch

    kw = {}
    if varlen:
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

    B = logits.shape[0]
    lab = labels[:, 1:]
    valid = lab != schema.IGNORE_INDEX
    lp = torch.log_softmax(logits[:, :-1], dim=-1)
    nll = -lp.gather(-1, lab.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    nll = torch.where(valid, nll, torch.zeros_like(nll))
    return torch.cat([torch.zeros(B, 1, device=logits.device), nll], dim=1)


def tensors(samples: list[Sample], device, swap_seed: int | None = None, last_seed=None):
    """ids, labels, positions as int64 tensors [B, L], ids and labels modulo VOCAB; with swap_seed
    document A (the first) has other tokens (labels alike), with last_seed every document's last
    token is another one."""
    import torch

    ids = np.stack([s.input_ids for s in samples]).astype(np.int64) % VOCAB
    lab = np.stack([s.labels for s in samples]).astype(np.int64)
    lab = np.where(lab == schema.IGNORE_INDEX, lab, lab % VOCAB)
    pos = np.stack([s.position_ids for s in samples]).astype(np.int64)
    if swap_seed is not None:
        rng = np.random.default_rng(swap_seed)
        for i, s in enumerate(samples):
            a0, a1 = s.bounds[0]
            ids[i, a0:a1] = (ids[i, a0:a1] + rng.integers(1, VOCAB, size=a1 - a0)) % VOCAB
            keep = lab[i, a0:a1] != schema.IGNORE_INDEX
            lab[i, a0:a1] = np.where(keep, ids[i, a0:a1], schema.IGNORE_INDEX)
    if last_seed is not None:
        rng = np.random.default_rng(last_seed)
        for i, s in enumerate(samples):
            for _, e in s.bounds:
                ids[i, e - 1] = (ids[i, e - 1] + rng.integers(1, VOCAB)) % VOCAB
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
    return t(ids), t(lab), t(pos)


def run_alone(model, samples: list[Sample], device, varlen: bool = False, recorder=None) -> dict:
    """Every document run on its own (positions 0..n-1): {(sample, document): (logits [n, V],
    token losses [n], {module: (input, output)} as `recorder` saw them, {} without one)}."""
    import torch

    out = {}
    for i, s in enumerate(samples):
        ids, lab, _ = tensors([s], device)
        for j, (a, e) in enumerate(s.bounds):
            pos = torch.arange(e - a, device=device)[None]
            if recorder is not None:
                recorder.inputs, recorder.outputs = {}, {}
            logits = forward(model, ids[:, a:e], pos, [[e - a]], varlen)
            mods = recorder.own(e - a) if recorder is not None else {}
            out[i, j] = (logits[0], token_losses(logits, lab[:, a:e])[0], mods)
    return out


# --------------------------------------------------------------------------------------------
# the isolation check: absolute differences of the packed, swapped, last-token and control runs


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


def _finite(x: float) -> float:
    """NaN compares false with everything: an infinite difference, never a pass."""
    return math.inf if math.isnan(x) else x


def track_worst(best: float, where: dict, x, ref, at: dict) -> tuple[float, dict]:
    """The largest max |x - ref| so far (NaN counts as inf) and where it is: `at` with the slot of
    that largest difference added to at["position"] (the first slot of the span x covers)."""
    gap_t = (x - ref).abs().amax(-1).nan_to_num(nan=math.inf)
    diff = gap_t.max().item()
    if diff > best or not where:
        return max(best, diff), {**at, "position": at["position"] + int(gap_t.argmax().item())}
    return best, where


def compare(model, backend, samples, alone, *, control, loss_tol, batch_rows, swap_seed) -> Diffs:
    """Differences packed-vs-alone, loss sums, swap and (not for the control) the causal probe,
    over all samples. With `control`, the packed run is a plain causal row (positions 0..L-1, one
    segment) and document 0, which a causal mask leaves untouched, is left out of the comparison."""
    import torch

    d, dev, varlen = Diffs(), backend.device, backend.varlen_kwargs
    for b0 in range(0, len(samples), batch_rows):
        chunk = samples[b0 : b0 + batch_rows]
        ids, lab, pos = tensors(chunk, dev)
        L = ids.shape[1]  # cropped rows (sampling.crop): the same within a batch
        sids, _, _ = tensors(chunk, dev, swap_seed=swap_seed + b0)
        if control:
            pos = torch.arange(L, device=dev).expand(len(chunk), L).contiguous()
            lens = [[L] for _ in chunk]
        else:
            lens = [[int(x) for x in s.seq_lengths] for s in chunk]
        packed = forward(model, ids, pos, lens, varlen)
        swapped = forward(model, sids, pos, lens, varlen)
        last = None
        if not control:
            lids, _, _ = tensors(chunk, dev, last_seed=swap_seed + 7919 + b0)
            last = forward(model, lids, pos, lens, varlen)
        pl = token_losses(packed, lab)
        for i, s in enumerate(chunk):
            for j, (a, e) in enumerate(s.bounds):
                if control and j == 0:
                    continue
                al_logits, al_loss, _ = alone[b0 + i, j]
                at = {"shard": s.shard, "row": s.row, "document": j, "position": a}
                d.logits, d.worst = track_worst(d.logits, d.worst, packed[i, a:e], al_logits, at)
                n_loss = int((lab[i, a + 1 : e] != schema.IGNORE_INDEX).sum().item())
                # includes label position a (must be IGNORE_INDEX)
                sum_packed = pl[i, a:e].double().sum().item()
                gap = _finite(abs(sum_packed - al_loss.double().sum().item()))
                d.loss_sum_abs = max(d.loss_sum_abs, gap)
                d.loss_sum = max(d.loss_sum, gap / (loss_tol * math.sqrt(n_loss + 1)))
                if j > 0:
                    gap = _finite((swapped[i, a:e] - packed[i, a:e]).abs().max().item())
                    d.swap = max(d.swap, gap)
                if last is not None and e - a >= 2:
                    before, at_changed = last[i, a : e - 1], {**at, "changed": e - 1}
                    d.causal, d.causal_worst = track_worst(
                        d.causal, d.causal_worst, before, packed[i, a : e - 1], at_changed
                    )
                    own = _finite((last[i, e - 1] - packed[i, e - 1]).abs().max().item())
                    d.causal_power = min(d.causal_power, own)
                    d.causal_docs += 1
                d.docs += 1
                d.tokens += e - a
    return d


# --------------------------------------------------------------------------------------------
# verify --model: relative differences per input set, and the probe naming the module that leaks


@dataclass
class SetResult:
    """One input set's runs over every sampled row."""

    name: str
    logits: float = 0.0  # max relative |packed - alone| over every document
    modules: dict = field(default_factory=dict)  # "layer i path" -> max relative difference
    error: str | None = None  # the packed run raised: transformers' own words

    def to_dict(self) -> dict:
        return {"logits": self.logits, "modules": self.modules, "error": self.error}


def _hidden(args, kwargs):
    """The hidden-states tensor a module was called with, and how to put another in its place."""
    if args:
        return args[0], lambda t: ((t, *args[1:]), kwargs)
    for key in ("hidden_states", "x", "input", "inputs"):
        if key in kwargs:
            return kwargs[key], lambda t, key=key: (args, {**kwargs, key: t})
    return None, None


def _first_tensor(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return getattr(out, "last_hidden_state", None)


class Recorder:
    """Hooks on the tracked modules: record (alone runs) or substitute-and-record (probe runs)."""

    def __init__(self, modules):
        self.modules = modules  # [(layer, path, kind, module)]
        self.inputs: dict[int, object] = {}
        self.outputs: dict[int, object] = {}
        self.clean: dict[int, object] | None = None  # module index -> clean input [B, S, H]
        # modules called more than once in one forward (a block shared between layers): which
        # call's input is "the" input is ambiguous, so they are neither recorded nor substituted
        self.shared: set[int] = set()
        self.handles = []

    def __enter__(self):
        for k, (_, _, _, module) in enumerate(self.modules):
            self.handles.append(module.register_forward_pre_hook(self._pre(k), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._post(k)))
        return self

    def __exit__(self, *_):
        for h in self.handles:
            h.remove()
        self.handles = []

    def own(self, n: int) -> dict:
        """{module: (input [n, H], output [n, H])} of the one-row run of n tokens just made."""
        return {
            k: (x[0], self.outputs[k][0])
            for k, x in self.inputs.items()
            if k in self.outputs and x.dim() == 3 and x.shape[1] == n
        }

    def _pre(self, k):
        def hook(module, args, kwargs):
            x, replace = _hidden(args, kwargs)
            if x is None or k in self.shared:
                return None
            if self.clean is None and k in self.inputs:  # a second call in this forward
                self.shared.add(k)
                self.inputs.pop(k, None)
                self.outputs.pop(k, None)
                return None
            if self.clean is not None and k in self.clean:
                c = self.clean[k]
                if c.shape == x.shape:
                    return replace(c.to(x.dtype))
            self.inputs[k] = x.detach()
            return None

        return hook

    def _post(self, k):
        def hook(module, args, kwargs_or_out, out=None):
            t = _first_tensor(out if out is not None else kwargs_or_out)
            if t is not None and k not in self.shared:
                self.outputs[k] = t.detach()

        return hook


def causal_probe(model, sample, device) -> float:
    """How much the logits before a document's last token move when that token changes (0 for a
    causal model; an encoder attending both ways moves them)."""
    import torch

    a, b = sample.bounds[0]
    ids = tensors([sample], device)[0][:, a:b]
    if ids.shape[1] < 2:
        return 0.0
    other = ids.clone()
    other[0, -1] = (other[0, -1] + 1) % VOCAB
    pos = torch.arange(b - a, device=device)[None]
    x, y = (forward(model, t, pos, [[b - a]])[0, :-1] for t in (ids, other))
    return _rel_diff(y, x)


def _rel_diff(x, ref) -> float:
    """max |x - ref| over the largest |ref| (1 where ref is all zeros), in float32."""
    ref = ref.float()
    return float((x.float() - ref).abs().max()) / (float(ref.abs().max()) or 1.0)


def _docs(samples, alone, first_row: int, first_doc: int = 0):
    """(row in the batch, start, end, its alone run) of a batch's documents, from `first_doc` on."""
    for r, s in enumerate(samples):
        for j, (a, b) in enumerate(s.bounds[first_doc:], first_doc):
            yield r, a, b, alone[first_row + r, j]


def _doc_diff(logits, samples, alone, first_row: int, first_doc: int = 0) -> float:
    """The largest relative difference of a batch's documents from their alone runs."""
    docs = _docs(samples, alone, first_row, first_doc)
    return max((_rel_diff(logits[r, a:b], run[0]) for r, a, b, run in docs), default=0.0)


def _clean_inputs(samples, alone, first_row: int, model_in: dict) -> dict:
    """Per tracked module: the packed run's own input with every document's span replaced by
    that document's alone input (the pad tail keeps the packed values)."""
    clean = {}
    for k, x in model_in.items():
        if x.dim() != 3 or x.shape[0] != len(samples):
            continue
        c = x.clone()
        for r, a, b, (_, _, mods) in _docs(samples, alone, first_row):
            if k not in mods or c.shape[1] < b:
                break
            c[r, a:b] = mods[k][0].to(c.dtype)
        else:
            clean[k] = c
    return clean


def _module_diffs(recorder, samples, alone, first_row: int) -> dict[int, float]:
    diffs = {}
    for k, y in recorder.outputs.items():
        if y.dim() == 3 and y.shape[0] == len(samples):
            docs = _docs(samples, alone, first_row)
            gaps = [_rel_diff(y[r, a:b], mods[k][1]) for r, a, b, (_, _, mods) in docs if k in mods]
            diffs[k] = max(gaps, default=0.0)
    return diffs


def _item(sample) -> dict:
    """A sampled row as a dataset item, token ids taken modulo the tiny vocabulary."""
    ids, labels, pos = (t[0] for t in tensors([sample], "cpu"))
    seq_lengths = np.asarray(sample.seq_lengths, np.int64)
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "seq_lengths": seq_lengths}


def run_set(model, recorder, name: str, samples, alone, device, batch_rows: int, tol):
    """Packed runs of every sampled row with the input set `name`; where a batch's logits differ
    by more than `tol`, a probe run names the modules that leak (tol None: no probe runs)."""
    import torch

    from packtool.torch import PackedCollator

    collator = PackedCollator("hf", **INPUT_SETS[name])
    res = SetResult(name)
    for start in range(0, len(samples), batch_rows):
        rows = samples[start : start + batch_rows]
        batch = collator([_item(s) for s in rows])
        batch = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in batch.items()}
        recorder.inputs, recorder.outputs, recorder.clean = {}, {}, None
        try:
            with torch.no_grad():
                logits = model(**batch).logits.float()
        except Exception as e:  # transformers refusing packed inputs: its words are the finding
            res.error = " ".join(f"{type(e).__name__}: {e}".split())
            return res
        diff = _doc_diff(logits, rows, alone, start)
        res.logits = max(res.logits, diff)
        if tol is None or diff <= tol:
            continue
        recorder.clean = _clean_inputs(rows, alone, start, dict(recorder.inputs))
        recorder.outputs = {}
        with torch.no_grad():
            model(**batch)
        recorder.clean = None
        for k, d in _module_diffs(recorder, rows, alone, start).items():
            layer, path, kind, _ = recorder.modules[k]
            key = f"layer {layer} {path}".strip()
            res.modules[key] = max(res.modules.get(key, 0.0), d)
    return res


def run_control(model, samples, alone, device, batch_rows: int) -> float:
    """Positions counting through the row, no boundaries: the largest difference a document after
    the first of its row shows (the check's power; 0 = a leak would go unseen)."""
    import torch

    power = 0.0
    for start in range(0, len(samples), batch_rows):
        rows = samples[start : start + batch_rows]
        ids = tensors(rows, device)[0]
        pos = torch.arange(ids.shape[1], device=device)[None].expand_as(ids)
        logits = forward(model, ids, pos, [])
        power = max(power, _doc_diff(logits, rows, alone, start, first_doc=1))
    return power
