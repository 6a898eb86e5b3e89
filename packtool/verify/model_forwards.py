"""The forwards of `verify --model`: the user's architecture, tiny, fed exactly the trainer's batch.

For every sampled row and every input set (what `PackedCollator` gives, `INPUT_SETS`):

    packed     [A A A A B B B pad pad]  the collator's batch, as the trainer gives it: model(**batch)
    alone      [A A A A]  [B B B]       each document on its own, positions 0..n-1 (the truth)
    probe      the packed batch again, every decoder layer and every tracked module in it fed the clean
               input (the alone runs' input to the same module, laid out as in the row) so that its
               output difference is its own leak, not one carried in from the layers below
    control    [A A A A B B B pad pad]  positions 0..L-1, no boundaries: must differ, or the check
               has no power (a document that sees the one before it must change)

Differences are max |packed - alone| over every document's logits, divided by the largest |alone|
logit (relative, so a model's logit scale does not move the tolerance). A packed run that raises
(transformers refuses packed inputs without a kernel package) is recorded with its one-line error.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packtool.verify.forwards import tensors

# input set name -> PackedCollator options ("hf" mode); each adds to the one before it
INPUT_SETS = {
    "position_ids": {"flash_kwargs": False},
    "+cu_seq_lens": {"flash_kwargs": True},
    "+seq_idx": {"flash_kwargs": True, "seq_idx": True},
}


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

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []

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


def _item(sample, vocab: int) -> dict:
    """A sampled row as a dataset item, token ids taken modulo the tiny vocabulary."""
    ids, labels, pos = (t[0] for t in tensors([sample], "cpu", vocab=vocab))
    seq_lengths = np.asarray(sample.seq_lengths, np.int64)
    return {"input_ids": ids, "labels": labels, "position_ids": pos, "seq_lengths": seq_lengths}


def run_alone(model, recorder, sample, vocab: int, device):
    """Each document of `sample` on its own: [(logits [n, V], {module: (input, output)})]."""
    import torch

    row = tensors([sample], device, vocab=vocab)[0]
    out = []
    for a, b in sample.bounds:
        ids = row[:, a:b]
        pos = torch.arange(b - a, device=device)[None]
        recorder.inputs, recorder.outputs = {}, {}
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0].float()
        mods = {
            k: (recorder.inputs[k][0], recorder.outputs[k][0])
            for k in recorder.inputs
            if k in recorder.outputs
            and recorder.inputs[k].dim() == 3
            and recorder.inputs[k].shape[1] == b - a
        }
        out.append((logits, mods))
    return out


def causal_probe(model, sample, vocab: int, device) -> float:
    """How much the logits before a document's last token move when that token changes (0 for a
    causal model; an encoder attending both ways moves them)."""
    import torch

    row = tensors([sample], device, vocab=vocab)[0]
    a, b = sample.bounds[0]
    ids = row[:, a:b]
    if ids.shape[1] < 2:
        return 0.0
    other = ids.clone()
    other[0, -1] = (other[0, -1] + 1) % vocab
    pos = torch.arange(b - a, device=device)[None]
    with torch.no_grad():
        x = model(input_ids=ids, position_ids=pos, use_cache=False).logits[0, :-1]
        y = model(input_ids=other, position_ids=pos, use_cache=False).logits[0, :-1]
    return _rel_diff(y, x)


def _rel_diff(x, ref) -> float:
    """max |x - ref| over the largest |ref| (1 where ref is all zeros), in float32."""
    ref = ref.float()
    return float((x.float() - ref).abs().max()) / (float(ref.abs().max()) or 1.0)


def _doc_diff(logits, samples, alone, first_row: int, first_doc: int = 0) -> float:
    """The largest relative difference of a batch's documents (from each row's `first_doc`-th)
    from their alone runs."""
    worst = 0.0
    for r in range(logits.shape[0]):
        docs = list(zip(samples[r].bounds, alone[first_row + r], strict=True))[first_doc:]
        for (a, b), (ref, _) in docs:
            worst = max(worst, _rel_diff(logits[r, a:b], ref))
    return worst


def _clean_inputs(samples, alone, first_row: int, model_in: dict) -> dict:
    """Per tracked module: the packed run's own input with every document's span replaced by
    that document's alone input (the pad tail keeps the packed values)."""
    clean = {}
    for k, x in model_in.items():
        if x.dim() != 3 or x.shape[0] != len(samples):
            continue
        c = x.clone()
        ok = True
        for r, s in enumerate(samples):
            for (a, b), (_, mods) in zip(s.bounds, alone[first_row + r], strict=True):
                if k not in mods or c.shape[1] < b:
                    ok = False
                    break
                c[r, a:b] = mods[k][0].to(c.dtype)
        if ok:
            clean[k] = c
    return clean


def _module_diffs(recorder, samples, alone, first_row: int) -> dict[int, float]:
    diffs = {}
    for k, y in recorder.outputs.items():
        if y.dim() != 3 or y.shape[0] != len(samples):
            continue
        worst = 0.0
        for r, s in enumerate(samples):
            for (a, b), (_, mods) in zip(s.bounds, alone[first_row + r], strict=True):
                if k in mods:
                    worst = max(worst, _rel_diff(y[r, a:b], mods[k][1]))
        diffs[k] = worst
    return diffs


def run_set(
    model,
    recorder,
    name: str,
    samples,
    alone,
    vocab: int,
    device,
    batch_rows: int,
    tol: float | None,
):
    """Packed runs of every sampled row with the input set `name`; where a batch's logits differ
    by more than `tol`, a probe run names the modules that leak (tol None: no probe runs)."""
    import torch

    from packtool.torch import PackedCollator

    collator = PackedCollator("hf", **INPUT_SETS[name])
    res = SetResult(name)
    for start in range(0, len(samples), batch_rows):
        rows = samples[start : start + batch_rows]
        batch = collator([_item(s, vocab) for s in rows])
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


def run_control(model, samples, alone, vocab: int, device, batch_rows: int) -> float:
    """Positions counting through the row, no boundaries: the largest difference a document after
    the first of its row shows (the check's power; 0 = a leak would go unseen)."""
    import torch

    power = 0.0
    for start in range(0, len(samples), batch_rows):
        rows = samples[start : start + batch_rows]
        ids = tensors(rows, device, vocab=vocab)[0]
        pos = torch.arange(ids.shape[1], device=device)[None].expand_as(ids)
        with torch.no_grad():
            logits = model(input_ids=ids, position_ids=pos, use_cache=False).logits.float()
        power = max(power, _doc_diff(logits, rows, alone, start, first_doc=1))
    return power
