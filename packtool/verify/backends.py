"""Attention backends for the isolation check: which kernel runs, and how it is fed.

    backend        transformers attn_implementation   fed with                         where
    sdpa           "sdpa"                              position_ids only (no mask)      cpu, cuda
    eager          "eager"                             position_ids only (no mask)      cpu, cuda
    flex           "flex_attention"                    position_ids only (no mask)      cpu, cuda
    reference      "packtool_reference" (ours)         cu_seq_lens_q/k + max_length_q/k cpu, cuda
    flash-attn     "flash_attention_2"                 cu_seq_lens_q/k + max_length_q/k cuda + flash-attn
    torch-varlen   "packtool_torch_varlen" (ours)      cu_seq_lens_q/k + max_length_q/k cuda (torch >= 2.9)

sdpa/eager/flex isolate documents only because transformers 5.x detects packed sequences from
`position_ids` (`masking_utils.find_packed_sequence_indices`) when no attention_mask and no cache
are given; they receive nothing else, so the check proves that detection. `reference` is registered
with transformers' AttentionInterface and runs every cu_seqlens segment as its own causal SDPA
call (no mask, nothing shared between segments): varlen semantics by construction. `torch-varlen` calls `torch.nn.attention.varlen.varlen_attn`, PyTorch's bundled
FlashAttention varlen kernel (causal via window_size=(-1, 0); its default is *non*-causal).
"""

from __future__ import annotations

import importlib.util
import inspect
from dataclasses import dataclass

from packtool.errors import UsageError

BACKENDS = ("auto", "flash-attn", "torch-varlen", "sdpa", "eager", "flex", "reference")
DEVICES = ("auto", "cpu", "cuda")
NO_TORCH = "isolation needs PyTorch: pip install 'packtool[torch]', or run integrity only with --rows 0"
REFERENCE = "packtool_reference"
TORCH_VARLEN = "packtool_torch_varlen"


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


def require_torch():
    """The torch module, or UsageError (exit 2, one line) when the optional extra is not installed."""
    try:
        import torch
    except ImportError as e:
        raise UsageError(NO_TORCH) from e
    return torch


def cuda_available() -> bool:
    return bool(require_torch().cuda.is_available())


def resolve_device(device: str) -> str:
    if device not in DEVICES:
        raise UsageError(f"--device {device!r} is not one of {'|'.join(DEVICES)}")
    has_cuda = cuda_available()
    if device == "cuda" and not has_cuda:
        raise UsageError("--device cuda: torch sees no CUDA device here; use --device cpu (or auto)")
    if device == "auto":
        return "cuda" if has_cuda else "cpu"
    return device


def _flash_attn_version() -> str | None:
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        import flash_attn

        return getattr(flash_attn, "__version__", "unknown")
    except Exception:  # installed but broken (ABI mismatch): cannot run
        return None


def _has_torch_varlen() -> bool:
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except Exception:
        return False
    return True


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
    if name == "flash-attn":
        if device != "cuda":
            raise UsageError("--backend flash-attn needs a CUDA device and none is in use here (no CUDA or "
                             "--device cpu); the FlashAttention kernel cannot be exercised. Use --backend "
                             "sdpa|eager|reference on CPU")
        ver = _flash_attn_version()
        if ver is None:
            raise UsageError("--backend flash-attn: the flash-attn package is not importable; install it "
                             "(pip install flash-attn) or use --backend torch-varlen (PyTorch's bundled kernel)")
        kernel = f"flash_attn.flash_attn_varlen_func {ver} via transformers flash_attention_2"
        return Backend(name, "flash_attention_2", kernel, device, "bfloat16", True, False)
    if name == "torch-varlen":
        if device != "cuda":
            raise UsageError("--backend torch-varlen needs a CUDA device (varlen_attn has no CPU kernel); "
                             "use --backend sdpa|eager|reference on CPU")
        if not _has_torch_varlen():
            import torch

            raise UsageError(f"--backend torch-varlen: torch {torch.__version__} has no "
                             f"torch.nn.attention.varlen.varlen_attn (needs torch >= 2.9)")
        kernel = "torch.nn.attention.varlen.varlen_attn (PyTorch's bundled FlashAttention varlen kernel)"
        return Backend(name, TORCH_VARLEN, kernel, device, "bfloat16", True, False)
    raise UsageError(f"--backend {name!r} is not one of {'|'.join(BACKENDS)}")


def resolve(backend: str, device: str) -> list[Backend]:
    """`auto`: on CUDA the FlashAttention varlen kernel (flash-attn, else torch's) plus the
    reference; on CPU transformers' sdpa path plus the reference."""
    if backend not in BACKENDS:
        raise UsageError(f"--backend {backend!r} is not one of {'|'.join(BACKENDS)}")
    dev = resolve_device(device)
    if backend != "auto":
        return [make(backend, dev)]
    if dev == "cuda":
        first = "flash-attn" if _flash_attn_version() else ("torch-varlen" if _has_torch_varlen() else "sdpa")
        return [make(first, dev), make("reference", dev)]
    return [make("sdpa", dev), make("reference", dev)]


# --------------------------------------------------------------------------------------------
# custom attention functions registered with transformers' AttentionInterface


def _segments(kwargs, total: int):
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise RuntimeError("varlen attention called without cu_seq_lens_q: the caller must pass "
                           "cu_seq_lens_q/k and max_length_q/k")
    cu = [int(x) for x in cu.tolist()]
    if cu[0] != 0 or cu[-1] != total:
        raise RuntimeError(f"cu_seq_lens_q spans {cu[0]}..{cu[-1]} but the batch holds {total} tokens")
    return cu


def reference_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Causal attention run separately on every cu_seqlens segment of the flattened batch: each
    segment is its own `scaled_dot_product_attention(is_causal=True)` call, so no token can reach
    another segment whatever the mask machinery does (there is none: attention_mask is ignored).

    query [B, H, S, D], key/value [B, Hkv, S, D] -> output [B, S, H, D] (transformers' layout)."""
    import torch
    import torch.nn.functional as F

    B, H, S, D = query.shape
    hkv = key.shape[1]
    q = query.transpose(1, 2).reshape(B * S, H, D)
    k = key.transpose(1, 2).reshape(B * S, hkv, D)
    v = value.transpose(1, 2).reshape(B * S, hkv, D)
    if hkv != H:
        k = k.repeat_interleave(H // hkv, dim=1)
        v = v.repeat_interleave(H // hkv, dim=1)
    out = torch.empty_like(q)
    cu = _segments(kwargs, B * S)
    for s, e in zip(cu[:-1], cu[1:], strict=True):
        if e <= s:
            continue
        # 4-D [1, H, n, D]: with 3-D inputs torch 2.13 takes the math path on CPU (14x slower at 4096)
        qs, ks, vs = (t[s:e].transpose(0, 1).unsqueeze(0) for t in (q, k, v))
        o = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scaling)
        out[s:e] = o[0].transpose(0, 1)
    return out.reshape(B, S, H, D), None


def torch_varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """torch.nn.attention.varlen.varlen_attn over the flattened batch, causal within segments."""
    import torch
    from torch.nn.attention.varlen import varlen_attn

    B, H, S, D = query.shape
    hkv = key.shape[1]
    q = query.transpose(1, 2).reshape(B * S, H, D)
    k = key.transpose(1, 2).reshape(B * S, hkv, D)
    v = value.transpose(1, 2).reshape(B * S, hkv, D)
    params = inspect.signature(varlen_attn).parameters
    extra = {}
    if hkv != H:
        if "enable_gqa" in params:
            extra["enable_gqa"] = True
        else:
            k = k.repeat_interleave(H // hkv, dim=1)
            v = v.repeat_interleave(H // hkv, dim=1)
    if "window_size" in params:  # torch >= 2.10: (-1, -1) is full attention, (-1, 0) is causal
        extra["window_size"] = (-1, 0)
    elif "is_causal" in params:  # torch 2.9
        extra["is_causal"] = True
    else:
        raise RuntimeError("varlen_attn offers neither window_size nor is_causal: cannot make it causal")
    if "scale" in params and scaling is not None:
        extra["scale"] = scaling
    _segments(kwargs, B * S)
    cu = kwargs["cu_seq_lens_q"].to(device=q.device, dtype=torch.int32)
    cuk = kwargs.get("cu_seq_lens_k", cu).to(device=q.device, dtype=torch.int32)
    out = varlen_attn(q, k, v, cu, cuk, int(kwargs["max_length_q"]), int(kwargs["max_length_k"]), **extra)
    if isinstance(out, tuple):
        out = out[0]
    return out.reshape(B, S, H, D), None


_registered = False


def register() -> None:
    """Make our two varlen functions known to transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface

    AttentionInterface.register(REFERENCE, reference_attention)
    AttentionInterface.register(TORCH_VARLEN, torch_varlen_attention)
    _registered = True
