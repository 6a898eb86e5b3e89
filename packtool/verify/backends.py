"""Attention backends for the isolation check: which kernel runs, how it is fed, and what it did.

    backend        transformers attn_implementation   fed with                         where
    sdpa           "sdpa"                              position_ids only (no mask)      cpu, cuda
    eager          "eager"                             position_ids only (no mask)      cpu, cuda
    flex           "flex_attention"                    position_ids only (no mask)      cpu, cuda
    reference      "packtool_reference" (ours)         cu_seq_lens_q/k + max_length_q/k cpu, cuda
    flash-attn     "packtool_fa_varlen" (ours)         cu_seq_lens_q/k + max_length_q/k cuda sm80+, flash-attn
    torch-varlen   "packtool_torch_varlen" (ours)      cu_seq_lens_q/k + max_length_q/k cuda sm80+, torch >= 2.9

sdpa/eager/flex isolate documents only through transformers 5.x detecting packed sequences from
`position_ids` (`masking_utils.find_packed_sequence_indices`: no attention_mask, no cache); the
three others are registered with transformers' AttentionInterface and get the varlen kwargs:

    query [B, H, S, D] ──flatten──▶ q [B*S, H, D], k/v [B*S, Hkv, D] (GQA: Hkv divides H)
    cu_seq_lens_q/k ──▶ int32 [N+1] on q's device        max_length_q/k ──▶ python int
    reference      one causal SDPA call per segment (fp32): varlen semantics by construction
    flash-attn     flash_attn_varlen_func(q, k, v, cu_seqlens_q=, ..., causal=True): the call of
                   transformers' padding-free path, made here directly so that it is counted and
                   no silent fallback (hub kernels) can replace it
    torch-varlen   torch.nn.attention.varlen.varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, ...):
                   causal through window_size=(-1, 0) (torch >= 2.10) or is_causal=True (2.9); its
                   default is *non*-causal. GQA through enable_gqa where offered, else repeated heads.

Every varlen call goes through `call_varlen`, which counts it (`counting()`): calls, query tokens,
and dense `scaled_dot_product_attention` calls made outside a varlen call (0 on a varlen path).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
from dataclasses import dataclass

from packtool.config import DEVICES
from packtool.config import VERIFY_BACKENDS as BACKENDS
from packtool.errors import UsageError

VARLEN = ("flash-attn", "torch-varlen")  # the FlashAttention varlen kernels, in `auto`'s order
NO_TORCH = (
    "isolation needs PyTorch: pip install 'packtool[torch]', or run integrity only with --rows 0"
)
REFERENCE = "packtool_reference"
TORCH_VARLEN = "packtool_torch_varlen"
# no "flash" in the name: transformers takes any implementation named *flash* for a FlashAttention
# request (its own mask, its flash glue, a hub-kernel lookup) and fails on ours
FLASH_VARLEN = "packtool_fa_varlen"
# where the FlashAttention kernels can run (the CPU tests add "cpu" with stand-ins)
KERNEL_DEVICES = ("cuda",)
# FlashAttention 2 (flash-attn, and the copy bundled in torch): Ampere sm80 or newer
MIN_CAPABILITY = (8, 0)
# trial call: unit-normal q/k/v rounded to bf16, fp32 reference on the same rounded values, so only the
# kernel's own bf16 steps differ (P cast to bf16 before P·V, the output rounded): |o| <= ~2, 2^-8
# relative -> ~0.01. A non-causal or segment-ignoring kernel is off by 0.3-1 on these inputs.
TRIAL_TOL = 3e-2


@dataclass(frozen=True)
class Backend:
    name: str  # CLI name
    attn_implementation: str  # what transformers is told
    kernel: str  # what actually computes attention, in words
    device: str
    dtype: str  # "float32" | "bfloat16"
    varlen_kwargs: bool  # pass cu_seq_lens_q/k + max_length_q/k (a trainer's varlen collator)
    deterministic: bool  # replacing document A must leave B bit-identical
    gpt2: bool = True  # transformers' GPT-2 supports this implementation
    notes: tuple[str, ...] = ()  # why `auto` passed over the backends before this one
    trial: str = ""  # the trial call's result, where one was made


@dataclass
class KernelCalls:
    varlen_calls: int = 0  # calls through call_varlen or the reference loop (one per layer)
    varlen_tokens: int = 0  # query tokens those calls received
    dense_calls: int = 0  # torch scaled_dot_product_attention calls made outside a varlen call
    forwards: int = 0  # model forwards (isolation counts them)


_calls: KernelCalls | None = None
_inside_varlen = 0


@contextlib.contextmanager
def counting():
    """Count attention calls while the block runs. Dense calls are counted by wrapping
    torch.nn.functional.scaled_dot_product_attention (transformers' sdpa path looks it up at call
    time); calls made inside a varlen function (the reference loop, CPU stand-ins) do not count."""
    global _calls
    import torch.nn.functional as F

    calls, prev, sdpa = KernelCalls(), _calls, F.scaled_dot_product_attention

    def counted_sdpa(*args, **kwargs):
        if _calls is not None and not _inside_varlen:
            _calls.dense_calls += 1
        return sdpa(*args, **kwargs)

    F.scaled_dot_product_attention = counted_sdpa
    _calls = calls
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = sdpa
        _calls = prev


def note_forward() -> None:
    if _calls is not None:
        _calls.forwards += 1


@contextlib.contextmanager
def _varlen_call(tokens: int):
    global _inside_varlen
    _inside_varlen += 1
    try:
        yield
    finally:
        _inside_varlen -= 1
    if _calls is not None:
        _calls.varlen_calls += 1
        _calls.varlen_tokens += tokens


def one_line(e: BaseException) -> str:
    """`TypeName: first line of the message` (kernel errors can run to pages)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def require_torch():
    """The torch module, or UsageError (exit 2, one line) when the optional extra is not installed."""
    try:
        import torch
    except ImportError as e:
        raise UsageError(NO_TORCH) from e
    return torch


def resolve_device(device: str) -> str:
    if device not in DEVICES:
        raise UsageError(f"--device {device!r} is not one of {'|'.join(DEVICES)}")
    has_cuda = bool(require_torch().cuda.is_available())
    if device == "cuda" and not has_cuda:
        raise UsageError(
            "--device cuda: torch sees no CUDA device here; use --device cpu (or auto)"
        )
    if device == "auto":
        return "cuda" if has_cuda else "cpu"
    return device


def _flash_attn_version() -> str | None:
    try:
        import flash_attn
    except Exception:  # absent, or installed but broken (ABI mismatch): cannot run
        return None
    return getattr(flash_attn, "__version__", "unknown")


def _has_torch_varlen() -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except Exception:
        return False
    return True


def _capability(device: str) -> tuple[int, int]:
    import torch

    return tuple(torch.cuda.get_device_capability(device))


def _varlen_fn(name: str):
    """The library function behind a varlen backend (the CPU tests substitute stand-ins)."""
    if name == "flash-attn":
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func
    from torch.nn.attention.varlen import varlen_attn

    return varlen_attn


def _unavailable(name: str, device: str) -> tuple[str, str] | None:
    """Why the varlen backend `name` cannot run on `device`: (reason, fix), or None."""
    if device not in KERNEL_DEVICES:
        why = "needs a CUDA device (varlen_attn has no CPU kernel)"
        if name == "flash-attn":
            why = (
                "needs a CUDA device and none is in use here (no CUDA or --device cpu); the "
                "FlashAttention kernel cannot be exercised"
            )
        return why, "use --backend sdpa|eager|reference on CPU"
    if name == "flash-attn" and _flash_attn_version() is None:
        return (
            "the flash-attn package is not importable",
            "install it (pip install flash-attn) or use --backend torch-varlen (PyTorch's bundled kernel)",
        )
    if name == "torch-varlen" and not _has_torch_varlen():
        import torch

        return (
            f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn (needs torch >= 2.9)",
            "upgrade torch or use --backend sdpa",
        )
    cap = _capability(device)
    if cap < MIN_CAPABILITY:
        return (
            f"compute capability {cap[0]}.{cap[1]} < {MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]}: FlashAttention's "
            f"varlen kernels need Ampere (sm80) or newer",
            "use --backend sdpa",
        )
    return None


def make(name: str, device: str) -> Backend:
    """The Backend `name` on `device`; UsageError (exit 2) when it cannot run here."""
    if name == "sdpa":
        kernel = "torch scaled_dot_product_attention + transformers' packed mask from position_ids"
        return Backend(name, "sdpa", kernel, device, "float32", False, True)
    if name == "eager":
        kernel = "transformers eager matmul-softmax + packed mask from position_ids"
        return Backend(name, "eager", kernel, device, "float32", False, True)
    if name == "flex":
        kernel = "torch flex_attention (BlockMask from position_ids)"
        return Backend(name, "flex_attention", kernel, device, "float32", False, True, gpt2=False)
    if name == "reference":
        kernel = "packtool reference: one causal SDPA call per cu_seqlens segment (no mask), fp32"
        return Backend(name, REFERENCE, kernel, device, "float32", True, True)
    if name in VARLEN:
        why = _unavailable(name, device)
        if why is not None:
            sep = " " if why[0].startswith("needs") else ": "
            raise UsageError(f"--backend {name}{sep}{why[0]}; {why[1]}")
        if name == "flash-attn":
            kernel = f"flash_attn.flash_attn_varlen_func {_flash_attn_version()} (causal=True, cu_seqlens int32)"
            return Backend(name, FLASH_VARLEN, kernel, device, "bfloat16", True, False)
        kernel = "torch.nn.attention.varlen.varlen_attn (PyTorch's bundled FlashAttention varlen kernel, causal)"
        return Backend(name, TORCH_VARLEN, kernel, device, "bfloat16", True, False)
    raise UsageError(f"--backend {name!r} is not one of {'|'.join(BACKENDS)}")


def resolve(backend: str, device: str) -> list[Backend]:
    """`auto`: on CUDA the first FlashAttention varlen kernel that runs here (sm80+) and whose trial
    call matches the fp32 reference (flash-attn, else torch's), else sdpa with notes saying why,
    plus the reference; on CPU transformers' sdpa path plus the reference. A varlen backend named
    explicitly is used as asked (UsageError where it cannot run), its trial call only reported."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r} is not one of {'|'.join(BACKENDS)}")
    dev = resolve_device(device)
    if backend != "auto":
        b = make(backend, dev)
        # asked for by name: the trial is evidence; the isolation checks judge the kernel
        if b.name in VARLEN:
            b = dataclasses.replace(b, trial=trial(b)[1])
        return [b]
    if dev not in KERNEL_DEVICES:
        return [make("sdpa", dev), make("reference", dev)]
    notes = []
    for name in VARLEN:
        why = _unavailable(name, dev)
        if why is None:
            b = make(name, dev)
            ok, result = trial(b)
            if ok:
                return [
                    dataclasses.replace(b, notes=tuple(notes), trial=result),
                    make("reference", dev),
                ]
            why = (result, "")
        notes.append(f"{name}: {why[0]}")
    return [dataclasses.replace(make("sdpa", dev), notes=tuple(notes)), make("reference", dev)]


def trial(backend: Backend) -> tuple[bool, str]:
    """One varlen call on tiny tensors (4 segments, one of a single token; GQA heads) through the
    same code path as the isolation models, compared with the fp32 per-segment reference.
    Returns (ok, what happened)."""
    torch = require_torch()
    heads, kv_heads, head_dim = 4, 2, 16  # the tiny Llama's head layout
    lens = [5, 1, 11, 3]
    total = sum(lens)
    g = torch.Generator().manual_seed(0)
    dt = getattr(torch, backend.dtype)
    q = torch.randn(total, heads, head_dim, generator=g).to(backend.device, dt)
    k = torch.randn(total, kv_heads, head_dim, generator=g).to(backend.device, dt)
    v = torch.randn(total, kv_heads, head_dim, generator=g).to(backend.device, dt)
    bounds = [0, *itertools.accumulate(lens)]
    cu = torch.tensor(bounds, dtype=torch.int32, device=backend.device)
    what = f"trial call ({total} tokens, {len(lens)} segments, {heads}/{kv_heads} heads, {backend.dtype})"
    try:
        out = call_varlen(backend.name, q, k, v, cu, cu, max(lens), max(lens), None)
        if backend.device == "cuda":
            torch.cuda.synchronize()
    except Exception as e:  # the kernel itself failing is what the trial is for
        return False, f"{what} failed: {one_line(e)}"
    if (shape := tuple(out.shape)) != (total, heads, head_dim):
        return False, f"{what} returned shape {shape}, expected {(total, heads, head_dim)}"
    ref = per_segment_attention(q.float(), k.float(), v.float(), bounds, None)
    diff = (out.float() - ref).abs().max().item()
    if not diff <= TRIAL_TOL:  # NaN fails too
        return False, (
            f"{what} differs from the fp32 reference by {diff:.3g} > {TRIAL_TOL:g} (non-causal, "
            f"ignoring cu_seqlens, or wrong)"
        )
    return True, f"{what} matches the fp32 reference: max|Δ| {diff:.3g} ≤ {TRIAL_TOL:g}"


# --------------------------------------------------------------------------------------------
# the varlen calls, and the attention functions registered with transformers' AttentionInterface


def call_varlen(name: str, q, k, v, cu_q, cu_k, max_q: int, max_k: int, scale):
    """The FlashAttention varlen kernel `name`, causal within segments, counted.

    q [T, H, D], k/v [T, Hkv, D] (Hkv divides H), cu_q/cu_k int32 [N+1] on q's device, max_q/max_k
    python ints -> [T, H, D]."""
    fn = _varlen_fn(name)
    if name == "flash-attn":  # GQA native; the keywords transformers' _flash_attention_forward uses
        args = (q, k, v)
        kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max_q, max_seqlen_k=max_k)
        kw |= dict(dropout_p=0.0, softmax_scale=scale, causal=True)
    else:
        params = inspect.signature(fn).parameters
        kw = {}
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in params:
                kw["enable_gqa"] = True
            else:
                rep = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        if "window_size" in params:  # torch >= 2.10: (-1, -1) is full attention, (-1, 0) is causal
            kw["window_size"] = (-1, 0)
        elif "is_causal" in params:  # torch 2.9
            kw["is_causal"] = True
        else:
            raise RuntimeError(
                "varlen_attn offers neither window_size nor is_causal: cannot make it causal"
            )
        if "scale" in params and scale is not None:
            kw["scale"] = scale
        elif scale is not None and abs(scale - q.shape[-1] ** -0.5) > 1e-6:
            raise RuntimeError(
                f"varlen_attn takes no scale here and the model wants {scale:g}, not 1/sqrt(head_dim)"
            )
        args = (q, k, v, cu_q, cu_k, max_q, max_k)
    with _varlen_call(int(q.shape[0])):
        out = fn(*args, **kw)
    return out[0] if isinstance(out, tuple) else out


def per_segment_attention(q, k, v, bounds: list[int], scale):
    """Causal attention of q [T, H, D] over k/v [T, Hkv, D], each segment [bounds[i], bounds[i+1])
    its own `scaled_dot_product_attention(is_causal=True)` call: no token can reach another segment."""
    import torch.nn.functional as F

    H, hkv = q.shape[1], k.shape[1]
    if hkv != H:
        k = k.repeat_interleave(H // hkv, dim=1)
        v = v.repeat_interleave(H // hkv, dim=1)
    out = q.new_empty(q.shape)
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        if e <= s:
            continue
        # 4-D [1, H, n, D]: with 3-D inputs torch takes its slow math path on CPU
        qs, ks, vs = (t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        out[s:e] = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scale)[
            0
        ].transpose(0, 1)
    return out


def _segments(kwargs, total: int) -> list[int]:
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise RuntimeError(
            "varlen attention called without cu_seq_lens_q: the caller must pass "
            "cu_seq_lens_q/k and max_length_q/k"
        )
    cu = [int(x) for x in cu.tolist()]
    if cu[0] != 0 or cu[-1] != total:
        raise RuntimeError(
            f"cu_seq_lens_q spans {cu[0]}..{cu[-1]} but the batch holds {total} tokens"
        )
    return cu


def _flatten(query, key, value):
    """[B, H, S, D] (transformers' layout) -> contiguous [B*S, H, D] (the varlen layout)."""
    B, _, S, D = query.shape
    return tuple(
        t.transpose(1, 2).reshape(B * S, t.shape[1], D).contiguous() for t in (query, key, value)
    )


def reference_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """Causal attention run separately on every cu_seqlens segment of the flattened batch (no mask:
    attention_mask is ignored). query [B, H, S, D], key/value [B, Hkv, S, D] -> [B, S, H, D]."""
    B, H, S, D = query.shape
    q, k, v = _flatten(query, key, value)
    cu = _segments(kwargs, B * S)
    with _varlen_call(B * S):
        out = per_segment_attention(q, k, v, cu, scaling)
    return out.reshape(B, S, H, D), None


def _varlen_attention(
    name, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """The varlen kernel `name` (registered per kernel with the name bound) over the flattened
    batch, causal within cu_seqlens segments; attention_mask is ignored."""
    import torch

    B, H, S, D = query.shape
    q, k, v = _flatten(query, key, value)
    _segments(kwargs, B * S)
    if kwargs.get("max_length_q") is None:
        raise RuntimeError(
            "varlen attention called without max_length_q/k: pass them with cu_seq_lens_q/k"
        )
    cu = kwargs["cu_seq_lens_q"].to(device=q.device, dtype=torch.int32)
    cuk = kwargs.get("cu_seq_lens_k")
    cuk = cu if cuk is None else cuk.to(device=q.device, dtype=torch.int32)
    mq = int(kwargs["max_length_q"])
    mk = int(kwargs["max_length_k"]) if kwargs.get("max_length_k") is not None else mq
    out = call_varlen(name, q, k, v, cu, cuk, mq, mk, scaling)
    return out.reshape(B, S, H, D), None


@functools.cache
def register() -> None:
    """Make our varlen functions known to transformers (once)."""
    from transformers import AttentionInterface

    AttentionInterface.register(REFERENCE, reference_attention)
    AttentionInterface.register(TORCH_VARLEN, functools.partial(_varlen_attention, "torch-varlen"))
    AttentionInterface.register(FLASH_VARLEN, functools.partial(_varlen_attention, "flash-attn"))
