"""Isolation layer: tiny random-weight decoders, every CPU backend, the negative control, and the
transformers 5.x pitfalls that make packed training silently wrong (kept as evidence tests: if a
transformers upgrade changes one of them, this file says so).

GPU: `test_gpu_smoke` runs the FlashAttention varlen path in bf16 where CUDA exists (marker gpu).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from packtool.arch import tiny  # noqa: E402
from packtool.errors import UsageError  # noqa: E402
from packtool.verify import backends as bk  # noqa: E402
from packtool.verify import isolation as iso  # noqa: E402
from packtool.verify import selftest as st  # noqa: E402
from packtool.verify import tolerances as tol  # noqa: E402

L = 192


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("iso") / "pack")
    st.write_documents(out, st.make_documents(40, seed=11, min_len=6, max_len=90), L)
    _, table = st.read_shard(out, 0)
    cols = {c: st.token_column(table, c) for c in ("input_ids", "labels", "position_ids")}
    seq = table.column("seq_lengths").to_pylist()
    rows = [r for r, s in enumerate(seq) if len(s) >= 3][:2]
    assert len(rows) == 2
    return [
        iso.Sample(
            "data/s.parquet",
            r,
            cols["input_ids"][r],
            cols["labels"][r],
            cols["position_ids"][r],
            np.asarray(seq[r]),
        )
        for r in rows
    ]


def test_varlen_segments_are_the_contracts():
    """A varlen backend gets schema.cu_seqlens over the batch: the pad tail is a segment of its own."""
    from packtool.verify import forwards

    cu, longest = forwards._cu([[4, 3], [9]], 9, "cpu")
    assert cu.dtype == torch.int32 and cu.tolist() == [0, 4, 7, 9, 18] and longest == 9


def _by_name(checks):
    return {c.name: c for c in checks}


def _run(samples, backend="reference", models=iso.MODELS):
    return _by_name(
        iso.run_isolation(samples, [bk.make(backend, "cpu")], pack_len=L, models=models)
    )


@pytest.mark.parametrize("backend", ["sdpa", "eager", "reference"])
def test_correct_rows_pass_on_cpu_backend(samples, backend):
    checks = _run(samples, backend)
    # 2 models x (logits, loss sums, swap, causal, vs reference, control); the reference is not compared with itself
    assert len(checks) == (10 if backend == "reference" else 12)
    bad = [f"{c.name}: {c.message}" for c in checks.values() if not c.passed]
    assert not bad, bad
    ev = checks[f"isolation gpt2/{backend} logits"].evidence
    assert ev["rows_tested"] == 2 and ev["dtype"] == "float32" and ev["max_abs_diff"] <= ev["tol"]
    assert checks[f"isolation llama/{backend} swap A"].evidence[
        "exact"
    ]  # deterministic on CPU: bit-exact
    causal = checks[f"isolation llama/{backend} causal"].evidence
    assert (
        causal["max_abs_diff"] == 0.0
        and causal["documents_probed"] >= 4
        and causal["changed_token_min_diff"] > 0
    )
    power = checks[f"isolation llama/{backend} control"].evidence["power_over_tol"]
    assert min(power.values()) > 10
    calls = ev[
        "kernel_calls"
    ]  # counted: the reference loop is a varlen call per layer; sdpa dense; eager neither
    if backend == "reference":
        assert (
            calls["varlen_calls"] == calls["forwards"] * iso.LAYERS > 0
            and calls["dense_calls"] == 0
        )
    elif backend == "sdpa":
        assert (
            calls["varlen_calls"] == 0
            and calls["dense_calls"] == calls["forwards"] * iso.LAYERS > 0
        )
    else:
        assert calls["varlen_calls"] == calls["dense_calls"] == 0 and calls["forwards"] > 0
    if backend != "reference":
        ref = checks[f"isolation llama/{backend} vs reference"].evidence
        assert ref["max_abs_diff"] <= ref["tol"] == tol.REFERENCE_TOL["float32"]


@pytest.mark.slow
def test_flex_isolates_llama_and_says_gpt2_cannot_run(samples):
    """flex_attention on CPU compiles per shape (~1 min here): slow marker."""
    checks = _run(samples, "flex")
    assert all(c.passed for n, c in checks.items() if n.startswith("isolation llama/flex"))
    assert checks["isolation gpt2/flex"].skipped


def test_flex_gpt2_is_reported_as_skipped_not_passed(samples):
    checks = _run(samples, "flex", models=("gpt2",))
    (c,) = checks.values()
    assert c.skipped and not c.passed and "GPT-2" in c.message


def _positions_continue(samples):
    out = []
    for s in samples:
        n = int(s.seq_lengths.sum())
        pos = s.position_ids.copy()
        pos[:n] = np.arange(n)
        out.append(iso.Sample(s.shard, s.row, s.input_ids, s.labels, pos, s.seq_lengths))
    return out


def test_gpt2_sees_positions_not_reset_where_attention_is_isolated(samples):
    """reference attention isolates by cu_seqlens, so only the positions are wrong: the absolute
    position model (GPT-2) must fail on logits, naming where."""
    checks = _run(_positions_continue(samples), "reference")
    c = checks["isolation gpt2/reference logits"]
    assert not c.passed
    assert (
        "worst: data/s.parquet row" in c.message
        and "documents see each other or positions are wrong" in c.message
    )
    assert c.evidence["max_abs_diff"] > 100 * c.evidence["tol"]


def test_sdpa_with_positions_not_reset_attends_across_documents(samples):
    """Without restarting positions transformers detects no packing: both models leak."""
    checks = _run(_positions_continue(samples), "sdpa")
    for model in iso.MODELS:
        assert not checks[f"isolation {model}/sdpa logits"].passed
        assert not checks[f"isolation {model}/sdpa swap A"].passed


def test_first_label_not_masked_fails_loss_sums(samples):
    broken = []
    for s in samples:
        lab = s.labels.copy()
        b = int(s.seq_lengths[0])
        lab[b] = s.input_ids[b]  # document B's first token trained from A's last
        broken.append(iso.Sample(s.shard, s.row, s.input_ids, lab, s.position_ids, s.seq_lengths))
    checks = _run(broken, "reference", models=("llama",))
    assert checks["isolation llama/reference logits"].passed
    c = checks["isolation llama/reference loss sums"]
    assert not c.passed and "a label crosses a document boundary" in c.message


def test_control_without_power_fails_verify(samples, monkeypatch):
    """A model whose attention output is zeroed cannot see other tokens at all: packed == alone
    holds for any mask, so the control passes and verify must say the check has no power."""
    build = iso.build_model

    def deaf(kind, backend, pack_len, seed):
        m = build(kind, backend, pack_len, seed)
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith(("o_proj.weight", "attn.c_proj.weight", "attn.c_proj.bias")):
                    p.zero_()
        return m

    monkeypatch.setattr(iso, "build_model", deaf)
    checks = _run(samples, "reference", models=("llama",))
    c = checks["isolation llama/reference control"]
    assert not c.passed and c.message.startswith("check has no power")


def test_nan_outputs_fail_instead_of_passing(samples, monkeypatch):
    build = iso.build_model

    def poisoned(kind, backend, pack_len, seed):
        m = build(kind, backend, pack_len, seed)
        with torch.no_grad():
            next(m.parameters()).fill_(float("nan"))
        return m

    monkeypatch.setattr(iso, "build_model", poisoned)
    checks = _run(samples, "reference", models=("llama",))
    assert not checks["isolation llama/reference logits"].passed


# ---------------------------------------------------------------------------------------------
# transformers 5.x pitfalls (docs/ARCHITECTURE.md, "Verify"), measured: why verify feeds models the way it does


def _leak(impl: str, kind: str = "llama", **call):
    from transformers.utils import logging

    logging.set_verbosity_error()
    backend = bk.Backend(impl, impl, impl, "cpu", "float32", False, True)
    model = iso.build_model(kind, backend, 64, 0)
    ids = torch.randint(0, tiny.VOCAB, (1, 48), generator=torch.Generator().manual_seed(0))
    pos = torch.cat([torch.arange(20), torch.arange(28)])[None]
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, **call).logits
        alone = model(input_ids=ids[:, 20:], use_cache=False).logits
    return (packed[0, 20:] - alone[0]).abs().max().item()


@pytest.mark.parametrize("kind", iso.MODELS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_position_ids_alone_isolate(impl, kind):
    """transformers 5.x detects packing from restarting position_ids, for GPT-2 as for Llama."""
    assert _leak(impl, kind, use_cache=False) < 1e-4


@pytest.mark.parametrize("kind", iso.MODELS)
@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_pitfall_all_ones_attention_mask_attends_across_documents(impl, kind):
    assert (
        _leak(impl, kind, use_cache=False, attention_mask=torch.ones(1, 48, dtype=torch.long))
        > 0.01
    )


@pytest.mark.parametrize("kind", iso.MODELS)
def test_pitfall_cache_disables_packed_detection(kind):
    """use_cache=True creates a cache, and with a cache packed detection is skipped."""
    assert _leak("sdpa", kind, use_cache=True) > 0.01


# ---------------------------------------------------------------------------------------------
# backends that cannot run here fail loudly


def test_gpu_backends_on_cpu_are_usage_errors():
    with pytest.raises(UsageError, match="--backend flash-attn needs a CUDA device"):
        bk.make("flash-attn", "cpu")
    with pytest.raises(UsageError, match="--backend torch-varlen needs a CUDA device"):
        bk.make("torch-varlen", "cpu")
    with pytest.raises(UsageError, match="not one of"):
        bk.resolve("magic", "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA path")
def test_cuda_device_without_cuda_is_usage_error():
    with pytest.raises(UsageError, match="--device cuda: torch sees no CUDA device"):
        bk.resolve("auto", "cuda")
    assert [b.name for b in bk.resolve("auto", "auto")] == ["sdpa", "reference"]


def test_reference_attention_requires_cu_seqlens():
    q = torch.zeros(1, 2, 4, 8)
    with pytest.raises(RuntimeError, match="without cu_seq_lens_q"):
        bk.reference_attention(None, q, q, q, None)


# ---------------------------------------------------------------------------------------------
# GPU: FlashAttention varlen kernel, bf16, driven like a trainer


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_smoke(tmp_path):
    """One pack, verified on CUDA with the auto backend (flash-attn if importable, else torch's
    varlen_attn) and explicitly with torch-varlen: every check passes, the kernel is reported,
    and the control has power in bf16."""
    import time

    from packtool.verify.run import VerifyConfig, verify

    out = tmp_path / "pack"
    st.build_self_test_pack(str(out), pack_len=2048, n_docs=120)
    names = ["auto"] + (["torch-varlen"] if bk._has_torch_varlen() else [])
    for backend in names:
        t = time.perf_counter()
        res = verify(VerifyConfig(path=str(out), backend=backend, device="cuda", rows=8))
        seconds = time.perf_counter() - t
        bad = [f"{c.name}: {c.message}" for c in res.failed]
        assert res.passed, bad
        flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
        assert flash.passed and not flash.skipped, flash.message
        ev = (
            flash.evidence
        )  # counted, not inferred: one varlen call per layer and forward, nothing dense
        assert ev["varlen_calls"] == ev["expected_varlen_calls"] > 0 and ev["dense_calls"] == 0, ev
        assert res.to_dict()["kernel_calls"][ev["backend"]]["llama"]["varlen_calls"] > 0
        diffs = {
            c.name: (c.evidence.get("max_abs_diff"), c.evidence.get("dtype"))
            for c in res.checks
            if c.name.endswith("logits")
        }
        print(f"\nGPU {backend}: {res.kernels} {seconds:.1f}s {diffs}")


def test_bf16_tolerances_hold_and_control_keeps_power(samples):
    """The bf16 tolerances (set for the GPU kernels) measured on CPU bf16 sdpa: the correct rows
    pass, including the comparison with the fp32 reference, swap and the causal probe (exact), and
    the negative control still fails by more than CONTROL_MARGIN."""
    import dataclasses

    backend = dataclasses.replace(bk.make("sdpa", "cpu"), dtype="bfloat16", deterministic=False)
    checks = _by_name(iso.run_isolation(samples, [backend], pack_len=L))
    bad = [f"{c.name}: {c.message}" for c in checks.values() if not c.passed]
    assert not bad, bad
    assert checks["isolation llama/sdpa logits"].evidence["tol"] == tol.BF16_LOGIT_TOL
    assert checks["isolation llama/sdpa vs reference"].evidence["tol"] == tol.BF16_REFERENCE_TOL
    assert checks["isolation llama/sdpa swap A"].evidence["tol"] == tol.BF16_SWAP_TOL
    assert checks["isolation gpt2/sdpa causal"].evidence["max_abs_diff"] == 0.0


def test_kernel_that_raises_is_a_failed_check_not_a_traceback(samples, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: no kernel image is available\nmore lines")

    monkeypatch.setattr(bk, "per_segment_attention", broken)
    backend = bk.make("reference", "cpu")
    (c,) = iso.run_isolation(samples, [backend], pack_len=L, models=("llama",))
    assert not c.passed and c.name == "isolation llama/reference"
    assert (
        c.message
        == "the reference kernel raised RuntimeError: CUDA error: no kernel image is available"
    )


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
def test_padded_fixed_docs_rows_are_isolated(tmp_path, backend):
    """--pad-to-multiple 8 --fixed-docs: each document runs alone as its slots (its padding
    included), the empty entries are no documents; packed equals alone on every check."""
    from packtool.verify.run import VerifyConfig, verify

    out = tmp_path / "pack"
    docs = st.make_documents(40, seed=2, min_len=3, max_len=60)
    st.write_documents(
        str(out), docs, 128, shard_rows=8, max_docs=4, pad_to_multiple=8, fixed_docs=True
    )
    res = verify(VerifyConfig(path=str(out), backend=backend, device="cpu", rows=2))
    assert res.passed, [f"{c.name}: {c.message}" for c in res.failed]
    assert any(c.name == "document padding" and c.passed for c in res.checks)


@pytest.mark.parametrize("backend", ["sdpa", "reference"])
def test_cropped_rows_keep_two_documents_and_the_control_its_power(samples, backend):
    """row_tokens=1 cuts every row to the least it may keep: its first two documents whole. The
    checks still compare documents after the first (the control would have no power with one
    document a row) and pass; a row whose positions are not reset still fails on the cut rows."""
    pick = dict(pack_len=L, models=("gpt2",), row_tokens=1)
    checks = _by_name(iso.run_isolation(samples, [bk.make(backend, "cpu")], **pick))
    bad = [f"{c.name}: {c.message}" for c in checks.values() if not c.passed]
    assert not bad, bad
    ev = checks[f"isolation gpt2/{backend} control"].evidence
    ends = [int(s.seq_lengths[:2].sum()) for s in samples]
    assert ev["row_slots"] == [max(ends)] * 2 and max(ends) < L and ev["documents"] >= 4
    assert "its first two documents whole" in ev["rows_from"]
    assert min(ev["power_over_tol"].values()) > 10
    leak = _by_name(
        iso.run_isolation(_positions_continue(samples), [bk.make(backend, "cpu")], **pick)
    )
    assert not leak[f"isolation gpt2/{backend} logits"].passed


def test_verify_on_cpu_cuts_rows_to_row_tokens(tmp_path, monkeypatch):
    """verify passes run.ROW_TOKENS of the device to the isolation layer: padded, fixed-docs rows
    cut to their first two documents (the empty entries are none) still pass every check."""
    from packtool.verify import run

    monkeypatch.setitem(run.ROW_TOKENS, "cpu", 1)
    out = tmp_path / "pack"
    docs = st.make_documents(40, seed=2, min_len=3, max_len=60)
    st.write_documents(
        str(out), docs, 128, shard_rows=8, max_docs=4, pad_to_multiple=8, fixed_docs=True
    )
    res = run.verify(run.VerifyConfig(path=str(out), backend="reference", device="cpu", rows=2))
    assert res.passed, [f"{c.name}: {c.message}" for c in res.failed]
    ev = next(c for c in res.checks if c.name == "isolation llama/reference control").evidence
    assert max(ev["row_slots"]) < 128 and ev["documents"] >= 4
