"""The GPU path of `verify`, driven on CPU: the flash-attn and torch-varlen backends made "available"
here, their library functions replaced by stand-ins with the real signatures that check every
argument the way the kernels need it and compute causal attention per segment with torch SDPA.

    stand-in          computes                                      verify must
    correct           causal attention inside each cu_seqlens segment  pass; count varlen calls, 0 dense
    non-causal        full attention inside each segment             fail the causal probe (and the reference)
    ignores cu_seqlens  causal attention over the whole flat batch   fail isolation (logits, swap)
    raises / wrong    (trial call in `auto`)                         fall back to the next backend, saying why

Also: verifying a pack and `verify --self-test` need only numpy, pyarrow, torch, transformers and
numba (the CUDA image this project can use has no datasets, fastokens, trl or flash-attn).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch.nn.functional as F  # noqa: E402

from packtool import schema  # noqa: E402
from packtool.arch import tiny  # noqa: E402
from packtool.errors import UsageError  # noqa: E402
from packtool.verify import backends as bk  # noqa: E402
from packtool.verify import isolation as iso  # noqa: E402
from packtool.verify import selftest as st  # noqa: E402
from packtool.verify.run import VerifyConfig, verify  # noqa: E402

L = 128
HEADS = {"llama": (tiny.HEADS, 2), "gpt2": (tiny.HEADS, tiny.HEADS)}  # llama: grouped-query


@pytest.fixture(scope="module")
def samples():
    return st.sample_rows(L, 2, seed=3, max_len=40)


# ---------------------------------------------------------------------------------------------
# stand-ins with the real signatures


def _check_args(q, k, v, cu_q, cu_k, max_q, max_k, seen):
    """What flash_attn_varlen_func and varlen_attn require of their arguments (and what a wrong
    caller gets silently wrong): layout (total_tokens, heads, head_dim), GQA head counts, bf16,
    int32 cu_seqlens on q's device spanning every token, python int max lengths."""
    assert q.dim() == k.dim() == v.dim() == 3, (q.shape, k.shape)
    total, h, d = q.shape
    assert k.shape == v.shape == (total, k.shape[1], d) and h % k.shape[1] == 0, (q.shape, k.shape)
    assert q.dtype == k.dtype == v.dtype == torch.bfloat16, q.dtype
    assert q.stride(-1) == k.stride(-1) == v.stride(-1) == 1
    for cu in (cu_q, cu_k):
        assert cu.dtype == torch.int32 and cu.device == q.device and cu.dim() == 1, (
            cu.dtype,
            cu.device,
        )
        assert int(cu[0]) == 0 and int(cu[-1]) == total and bool((cu[1:] >= cu[:-1]).all())
    for m in (max_q, max_k):
        assert type(m) is int, type(m)
    assert max_q == int((cu_q[1:] - cu_q[:-1]).max())
    seen.add((h, k.shape[1]))


def _segments_sdpa(q, k, v, cu, causal, scale):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    out = torch.empty_like(q)
    bounds = cu.tolist()
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e > s:
            qs, ks, vs = (t[s:e].transpose(0, 1)[None] for t in (q, k, v))
            out[s:e] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale)[
                0
            ].transpose(0, 1)
    return out


class StandIns:
    """Stand-ins for flash_attn.flash_attn_varlen_func (flash-attn 2.8) and torch's varlen_attn
    (torch 2.13 signature). `mode`: correct | noncausal | ignore_cu | raise."""

    def __init__(self, mode="correct"):
        self.mode, self.seen, self.calls = mode, set(), 0

    def _run(self, q, k, v, cu, causal, scale):
        self.calls += 1
        if self.mode == "raise":
            raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")
        if self.mode == "ignore_cu":
            cu = torch.tensor([0, q.shape[0]], dtype=torch.int32)
        return _segments_sdpa(q, k, v, cu, causal and self.mode != "noncausal", scale)

    def flash_attn_varlen_func(
        self,
        q,
        k,
        v,
        cu_seqlens_q,
        cu_seqlens_k,
        max_seqlen_q,
        max_seqlen_k,
        dropout_p=0.0,
        softmax_scale=None,
        causal=False,
        window_size=(-1, -1),
        softcap=0.0,
        alibi_slopes=None,
        deterministic=False,
        return_attn_probs=False,
        block_table=None,
    ):
        _check_args(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, self.seen)
        assert (
            causal is True
            and dropout_p == 0.0
            and window_size == (-1, -1)
            and not return_attn_probs
        )
        return self._run(q, k, v, cu_seqlens_q, causal, softmax_scale)

    def varlen_attn(
        self,
        query,
        key,
        value,
        cu_seq_q,
        cu_seq_k,
        max_q,
        max_k,
        *,
        return_aux=None,
        scale=None,
        window_size=(-1, -1),
        enable_gqa=False,
        seqused_k=None,
        block_table=None,
        num_splits=None,
    ):
        _check_args(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, self.seen)
        assert window_size == (-1, 0), (
            f"window_size {window_size}: (-1, -1), the default, is NOT causal"
        )
        assert enable_gqa == (key.shape[1] != query.shape[1]) and return_aux is None
        return self._run(query, key, value, cu_seq_q, window_size == (-1, 0), scale)

    def fn(self, name):
        return self.flash_attn_varlen_func if name == "flash-attn" else self.varlen_attn


@pytest.fixture
def gpu(monkeypatch):
    """Make both varlen backends available on CPU (an sm90 device) and route them to stand-ins;
    returns a function installing a StandIns per backend."""
    monkeypatch.setattr(bk, "KERNEL_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(bk, "_capability", lambda device: (9, 0))
    monkeypatch.setattr(bk, "_flash_attn_version", lambda: "2.8.3 (stand-in)")
    monkeypatch.setattr(bk, "_has_torch_varlen", lambda: True)
    installed = {"flash-attn": StandIns(), "torch-varlen": StandIns()}
    monkeypatch.setattr(bk, "_varlen_fn", lambda name: installed[name].fn(name))

    def install(name, mode):
        installed[name] = StandIns(mode)
        return installed[name]

    install.installed = installed
    return install


def _checks(samples, name, models=iso.MODELS):
    return {
        c.name: c
        for c in iso.run_isolation(samples, [bk.make(name, "cpu")], pack_len=L, models=models)
    }


def test_torch_varlen_standin_has_the_installed_signature():
    if not bk._has_torch_varlen():
        pytest.skip("this torch has no varlen_attn")
    from torch.nn.attention.varlen import varlen_attn

    real = inspect.signature(varlen_attn).parameters
    ours = inspect.signature(StandIns().varlen_attn).parameters
    assert [(p.name, p.kind) for p in real.values()] == [(p.name, p.kind) for p in ours.values()]


# ---------------------------------------------------------------------------------------------
# (1) a correct kernel passes, and what ran is counted


@pytest.mark.parametrize("name", bk.VARLEN)
def test_correct_standin_passes_and_calls_are_counted(gpu, samples, name):
    stand = gpu(name, "correct")
    checks = _checks(samples, name)
    bad = [f"{n}: {c.message}" for n, c in checks.items() if not c.passed]
    assert not bad, bad
    assert (
        len(checks) == 12
        and checks[f"isolation llama/{name} causal"].evidence["max_abs_diff"] == 0.0
    )
    assert stand.seen == {
        HEADS["llama"],
        HEADS["gpt2"],
    }  # GQA reached the kernel as 4 query / 2 kv heads
    for kind in iso.MODELS:
        calls = checks[f"isolation {kind}/{name} logits"].evidence["kernel_calls"]
        assert (
            calls["varlen_calls"] == calls["forwards"] * iso.LAYERS > 0
            and calls["dense_calls"] == 0
        )
        assert calls["varlen_tokens"] > 0
    assert stand.calls == sum(
        checks[f"isolation {k}/{name} logits"].evidence["kernel_calls"]["varlen_calls"]
        for k in iso.MODELS
    )


@pytest.fixture(scope="module")
def pack(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("gpu") / "pack")
    st.write_documents(out, st.make_documents(24, seed=5, min_len=8, max_len=60), L)
    return out


def test_verify_auto_takes_the_flash_kernel_and_reports_counted_calls(gpu, pack):
    res = verify(VerifyConfig(path=pack, device="cpu", rows=2))
    assert res.passed, [f"{c.name}: {c.message}" for c in res.failed]
    flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
    assert flash.passed and flash.message.startswith("exercised: flash_attn.flash_attn_varlen_func")
    ev = flash.evidence
    assert ev["backend"] == "flash-attn" and ev["dense_calls"] == 0
    assert ev["varlen_calls"] == ev["expected_varlen_calls"] > 0 and ev["varlen_tokens"] > 0
    assert ev["trial"].startswith("trial call (20 tokens, 4 segments, 4/2 heads, bfloat16) matches")
    doc = json.loads(json.dumps(res.to_dict()))
    assert doc["kernel_calls"]["flash-attn"]["gpt2"]["varlen_calls"] > 0
    assert doc["kernel_calls"]["reference"]["llama"]["dense_calls"] == 0
    assert [k.split(":")[0] for k in doc["kernels"]] == ["flash-attn", "reference"]


def test_flash_kernel_not_claimed_when_the_model_ran_something_else(gpu, pack, monkeypatch):
    """The old report inferred "exercised" from check names: a backend called torch-varlen whose
    model really ran sdpa passes every isolation check, but made 0 varlen calls."""
    impostor = [
        bk.Backend("torch-varlen", "sdpa", "varlen_attn", "cpu", "bfloat16", False, False),
        bk.make("reference", "cpu"),
    ]
    monkeypatch.setattr(bk, "resolve", lambda backend, device: impostor)
    res = verify(VerifyConfig(path=pack, device="cpu", rows=1))
    assert all(c.passed for c in res.checks if c.name.startswith("isolation"))
    flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
    assert not flash.passed and not flash.skipped and not res.passed
    assert "made no varlen call" in flash.message and flash.evidence["dense_calls"] > 0


# ---------------------------------------------------------------------------------------------
# (2) non-causal and (3) segment-ignoring kernels fail


@pytest.mark.parametrize("name", bk.VARLEN)
def test_noncausal_kernel_fails_the_causal_probe(gpu, samples, name):
    gpu(name, "noncausal")
    checks = _checks(samples, name)
    for kind in iso.MODELS:
        causal = checks[f"isolation {kind}/{name} causal"]
        assert not causal.passed and "the kernel is not causal" in causal.message
        assert causal.evidence["max_abs_diff"] > 0.1
        assert not checks[f"isolation {kind}/{name} vs reference"].passed
        # blind spots the probe closes: packed and alone run the same wrong kernel
        assert (
            checks[f"isolation {kind}/{name} logits"].passed
            and checks[f"isolation {kind}/{name} swap A"].passed
        )


@pytest.mark.parametrize("name", bk.VARLEN)
def test_kernel_ignoring_cu_seqlens_fails_isolation(gpu, samples, name):
    gpu(name, "ignore_cu")
    checks = _checks(samples, name, models=("llama",))
    for what in ("logits", "swap A"):
        c = checks[f"isolation llama/{name} {what}"]
        assert not c.passed and ("documents see each other" in c.message or "leaks" in c.message)


# ---------------------------------------------------------------------------------------------
# (4) auto: capability and trial call decide, with a note saying why


def test_auto_falls_back_when_the_trial_call_raises(gpu):
    gpu("flash-attn", "raise")
    first, ref = bk.resolve("auto", "cpu")
    assert first.name == "torch-varlen" and ref.name == "reference"
    (note,) = first.notes
    assert note.startswith("flash-attn: trial call (20 tokens") and note.endswith(
        "failed: RuntimeError: FlashAttention only supports Ampere GPUs or newer."
    )
    assert first.trial.startswith("trial call") and "matches the fp32 reference" in first.trial


def test_auto_falls_back_to_sdpa_when_no_kernel_is_right(gpu, pack):
    gpu("flash-attn", "noncausal")
    gpu("torch-varlen", "ignore_cu")
    first, _ = bk.resolve("auto", "cpu")
    assert first.name == "sdpa"
    assert [n.split(":")[0] for n in first.notes] == ["flash-attn", "torch-varlen"]
    assert all("differs from the fp32 reference" in n for n in first.notes), first.notes
    res = verify(VerifyConfig(path=pack, device="cpu", rows=1))
    assert res.passed
    flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
    assert flash.skipped and "auto fell back to sdpa: flash-attn: trial call" in flash.message
    assert flash.evidence["fallback"] == list(first.notes)


def test_capability_below_sm80_is_a_note_in_auto_and_a_usage_error_when_asked(gpu, monkeypatch):
    monkeypatch.setattr(bk, "_capability", lambda device: (7, 5))
    first, _ = bk.resolve("auto", "cpu")
    assert first.name == "sdpa" and len(first.notes) == 2
    assert all("compute capability 7.5 < 8.0" in n for n in first.notes)
    with pytest.raises(
        UsageError,
        match=r"--backend torch-varlen: compute capability 7.5 < 8.0.*use --backend sdpa",
    ):
        bk.make("torch-varlen", "cpu")


def test_auto_skips_an_absent_flash_attn_without_a_trial(gpu, monkeypatch):
    monkeypatch.setattr(bk, "_flash_attn_version", lambda: None)
    first, _ = bk.resolve("auto", "cpu")
    assert first.name == "torch-varlen"
    assert first.notes == ("flash-attn: the flash-attn package is not importable",)
    assert gpu.installed["flash-attn"].calls == 0


# ---------------------------------------------------------------------------------------------
# the verify path imports no datasets / fastokens / trl / flash-attn

BLOCKER = """
import importlib.abc, importlib.util, sys
BLOCK = set(sys.argv[1].split(","))
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None
sys.meta_path.insert(0, Blocker())
_find_spec = importlib.util.find_spec
def find_spec(name, package=None):  # as where the package is absent (transformers probes this way)
    return None if name.partition(".")[0] in BLOCK else _find_spec(name, package)
importlib.util.find_spec = find_spec
"""

API = (
    BLOCKER
    + """
import json
from packtool.report.verify import verify_json
from packtool.verify.run import VerifyConfig
from packtool.verify.selftest import run_self_test
res = run_self_test(VerifyConfig(rows=2, device="cpu", seed=0))
loaded = sorted(n for n in BLOCK if sys.modules.get(n) is not None)
print(json.dumps({"passed": res.passed, "failed": [c.name for c in res.failed], "loaded": loaded,
                  "doc": verify_json(res)["schema"]}))
"""
)

CLI = (
    BLOCKER
    + """
sys.argv = ["packtool", "verify", "--self-test", "--rows", "2", "--device", "cpu"]
from packtool.cli import main
main()
"""
)

GPU_IMAGE_ABSENT = ("datasets", "fastokens", "trl", "flash_attn")


def _blocked_run(code, blocked):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", code, ",".join(blocked)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_self_test_api_needs_only_numpy_pyarrow_torch_transformers():
    """Beyond the GPU image's missing packages, also without the CLI and report extras (rich,
    typer, click, matplotlib, pandas): the API path runs on numpy, pyarrow, numba, torch and
    transformers alone."""
    blocked = (
        *GPU_IMAGE_ABSENT,
        "rich",
        "typer",
        "click",
        "matplotlib",
        "pandas",
        "orjson",
        "xxhash",
    )
    r = _blocked_run(API, blocked)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["passed"], out["failed"]
    assert out["loaded"] == [] and out["doc"] == "packtool.verify/v1"


def test_verify_self_test_command_without_datasets_fastokens_trl_flash_attn():
    r = _blocked_run(CLI, GPU_IMAGE_ABSENT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (
        "verify passed" in r.stderr and "FlashAttention kernel not exercised (no CUDA)" in r.stderr
    )


def test_sample_rows_follow_the_row_layout():
    (s,) = st.sample_rows(256, 1, seed=1)
    n = int(s.seq_lengths.sum())
    assert len(s.seq_lengths) >= 2 and n <= 256
    starts = np.concatenate(([0], np.cumsum(s.seq_lengths)[:-1]))
    assert (s.position_ids[starts] == 0).all() and (s.labels[starts] == schema.IGNORE_INDEX).all()
    assert (s.labels[n:] == schema.IGNORE_INDEX).all() and (
        s.position_ids[n:] == np.arange(256 - n)
    ).all()


def test_explicit_backend_reports_its_trial_but_is_judged_by_the_checks(gpu, pack):
    gpu("torch-varlen", "noncausal")
    (b,) = bk.resolve("torch-varlen", "cpu")
    assert "differs from the fp32 reference" in b.trial
    res = verify(VerifyConfig(path=pack, backend="torch-varlen", device="cpu", rows=1))
    assert not res.passed and "isolation llama/torch-varlen causal" in [c.name for c in res.failed]
    flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
    assert (
        flash.passed and flash.evidence["trial"] == b.trial
    )  # it ran (counted), and computed the wrong thing
