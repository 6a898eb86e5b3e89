#!/usr/bin/env bash
# The GPU path of packtool, checked on a CUDA machine in a few minutes, then a PASS/FAIL table.
#
#   benchmarks/gpu_check.sh              # on a CUDA machine (sm80+ for the FlashAttention kernels)
#   benchmarks/gpu_check.sh --dry-run    # on CPU, with stand-in kernels: proves the script, not the GPU
#
#   step        what                                                               fails when
#   env         python, torch, CUDA, device, capability, transformers, flash-attn  no CUDA, a required module missing
#   probe       trial call of each varlen kernel; max|Δ| of every isolation        no varlen kernel passes its trial,
#               comparison (bf16 kernel vs itself and vs the fp32 reference)       or correct rows exceed a tolerance
#   verify      a pack built in a temp dir (no datasets/fastokens), `packtool      a check fails, or the FlashAttention
#               verify PACK` (CLI if typer+rich, else the API), --self-test        kernel was not counted running
#   negatives   damaged pack (positions not reset); the real kernel made           any of them PASSES verify
#               non-causal; the real kernel fed one segment for the whole batch
#   train       PackedDataset + PackedCollator, one AdamW step of a tiny Llama     non-finite loss/grads, no varlen call,
#               through the varlen kernel and through sdpa (same weights)          the two losses disagree
#   hybrid      `verify --model` on tiny copies of each architecture family       the llama copy or a control fails, a
#               (llama, qwen3.5, qwen3-next, nemotron-h, falcon-h1, lfm2, gpt-oss,    family with all its kernels installed
#               mamba2) through the kernels installed here: the input matrix         still mixes documents, or it raises
#   bench       benchmarks/bench_train.py --device cuda (padded vs packed)         it fails
#
# Needs only numpy, pyarrow, numba, torch, transformers (packtool runs from this tree through
# PYTHONPATH; nothing is installed). Environment: PYTHON (default python3), GPU_CHECK_OUT (where
# logs and JSON go; default a new temp dir), GPU_CHECK_STEP_TIMEOUT (seconds per step, default 240).
# Exit status 0 only if every step passes.
set -u -o pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
DRY=0
[[ "${1:-}" == "--dry-run" ]] && DRY=1
OUT_DIR="${GPU_CHECK_OUT:-$(mktemp -d -t packtool-gpu-check-XXXXXX)}"
mkdir -p "$OUT_DIR/py"
STEP_TIMEOUT="${GPU_CHECK_STEP_TIMEOUT:-240}"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PACKTOOL_CACHE="$OUT_DIR/cache" GPU_CHECK_OUT="$OUT_DIR"
export GPU_CHECK_DEVICE=cuda GPU_CHECK_DRY_RUN="$DRY" PYTHONUNBUFFERED=1
cd "$REPO"

if [[ $DRY == 1 ]]; then
  export GPU_CHECK_DEVICE=cpu
  mkdir -p "$OUT_DIR/dryrun"
  export PYTHONPATH="$OUT_DIR/dryrun:$PYTHONPATH"
  # The CUDA image this project can use has no datasets, fastokens, trl or flash-attn: block them
  # (import fails, importlib.util.find_spec gives None), plus GPU_CHECK_BLOCK (comma-separated, e.g.
  # rich,typer,pandas) to rehearse a leaner image. Then stand-in kernels (the real signatures; causal
  # only when asked, cu_seqlens honoured) on a pretend sm90 CPU device.
  cat > "$OUT_DIR/dryrun/sitecustomize.py" <<'EOF'
import importlib.abc
import importlib.util
import os
import sys

if os.environ.get("GPU_CHECK_DRY_RUN") == "1":
    BLOCK = {"datasets", "fastokens", "trl", "flash_attn"} | set(filter(None, os.environ.get("GPU_CHECK_BLOCK", "").split(",")))

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCK:
                raise ModuleNotFoundError(f"No module named {name!r} (gpu_check --dry-run)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    _find_spec = importlib.util.find_spec
    importlib.util.find_spec = lambda name, package=None: (
        None if name.partition(".")[0] in BLOCK else _find_spec(name, package))

    from packtool.verify import backends as bk

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, return_aux=None, scale=None,
                    window_size=(-1, -1), enable_gqa=False, seqused_k=None, block_table=None, num_splits=None):
        import torch
        import torch.nn.functional as F

        assert cu_seq_q.dtype == torch.int32 and type(max_q) is int and query.dim() == 3
        rep = query.shape[1] // key.shape[1]
        k, v = key.repeat_interleave(rep, dim=1), value.repeat_interleave(rep, dim=1)
        out, cu = [], cu_seq_q.tolist()
        for s, e in zip(cu[:-1], cu[1:]):
            qs, ks, vs = (t[s:e].transpose(0, 1)[None] for t in (query, k, v))
            out.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=tuple(window_size) == (-1, 0),
                                                      scale=scale)[0].transpose(0, 1))
        return torch.cat(out)

    bk.KERNEL_DEVICES = ("cuda", "cpu")
    bk._capability = lambda device: (9, 0)
    bk._has_torch_varlen = lambda: True
    bk._varlen_fn = lambda name: varlen_attn
EOF
fi

# ------------------------------------------------------------------------------------------------
# the steps, as Python files next to the logs

cat > "$OUT_DIR/py/gpucheck.py" <<'EOF'
"""Shared by the steps: device, output folder, the pack, and kernel wrappers for the negatives."""
import inspect
import json
import os
import sys

DEVICE = os.environ["GPU_CHECK_DEVICE"]
OUT = os.environ["GPU_CHECK_OUT"]
PACK = os.path.join(OUT, "pack")
PACK_LEN = 2048
problems = []


def check(ok, what):
    print(("  ok    " if ok else "  FAIL  ") + what, flush=True)
    if not ok:
        problems.append(what)
    return ok


def done(data=None, name=None):
    if data is not None and name:
        with open(os.path.join(OUT, name), "w") as f:
            json.dump(data, f, indent=1, default=str)
    if problems:
        print(f"{len(problems)} problem(s): " + "; ".join(problems))
        sys.exit(1)


def ensure_pack():
    from packtool.verify import selftest as st

    if not os.path.isdir(PACK):
        st.build_self_test_pack(PACK, pack_len=PACK_LEN, n_docs=240, seed=0)
    return PACK


def sync():
    if DEVICE == "cuda":
        import torch

        torch.cuda.synchronize()


def wrapped_kernel(mode):
    """bk._varlen_fn replacement: the real kernel, made non-causal (its own default) or fed a single
    segment spanning the whole flattened batch."""
    import torch

    from packtool.verify import backends as bk

    real = bk._varlen_fn

    def fn_for(name):
        fn = real(name)

        def wrapper(*args, **kwargs):
            args = list(args)
            if mode == "noncausal":
                if name == "flash-attn":
                    kwargs["causal"] = False
                if "window_size" in kwargs:
                    kwargs["window_size"] = (-1, -1)
                if "is_causal" in kwargs:
                    kwargs["is_causal"] = False
            else:
                total = args[0].shape[0]
                one = torch.tensor([0, total], dtype=torch.int32, device=args[0].device)
                if name == "flash-attn":
                    kwargs.update(cu_seqlens_q=one, cu_seqlens_k=one, max_seqlen_q=total, max_seqlen_k=total)
                else:
                    args[3:7] = [one, one, total, total]
            return fn(*args, **kwargs)

        wrapper.__signature__ = inspect.signature(fn)
        return wrapper

    return fn_for
EOF

cat > "$OUT_DIR/py/env.py" <<'EOF'
import importlib.metadata
import importlib.util
import platform

from gpucheck import DEVICE, check, done

info = {"python": platform.python_version(), "platform": platform.platform()}
try:
    import torch

    info |= {"torch": torch.__version__, "torch CUDA": torch.version.cuda, "CUDA available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        cap = torch.cuda.get_device_capability(0)
        info |= {"device": torch.cuda.get_device_name(0), "capability": f"{cap[0]}.{cap[1]}",
                 "devices": torch.cuda.device_count(), "cuDNN": torch.backends.cudnn.version()}
except Exception as e:
    info["torch"] = f"not importable: {e}"
for mod in ("transformers", "numpy", "pyarrow", "numba", "flash_attn", "datasets", "fastokens", "trl", "typer",
            "rich", "pandas"):
    if importlib.util.find_spec(mod) is None:
        info[mod] = "absent"
        continue
    try:
        info[mod] = importlib.metadata.version(mod.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        info[mod] = "present (no metadata)"
if info.get("flash_attn") not in (None, "absent"):
    try:
        import flash_attn  # noqa: F401
    except Exception as e:  # installed but broken: say so
        info["flash_attn"] += f" (import fails: {type(e).__name__}: {e})"
try:
    import inspect

    from torch.nn.attention.varlen import varlen_attn

    info["torch varlen_attn"] = str(inspect.signature(varlen_attn))
except Exception as e:
    info["torch varlen_attn"] = f"absent ({type(e).__name__})"
width = max(map(len, info))
for k, v in info.items():
    print(f"  {k:<{width}}  {v}")
for mod in ("torch", "transformers", "numpy", "pyarrow", "numba"):
    check(not str(info.get(mod, "absent")).startswith(("absent", "not importable")), f"{mod} importable")
if DEVICE == "cuda":
    check(bool(info.get("CUDA available")), "torch sees a CUDA device")
done(info, "env.json")
EOF

cat > "$OUT_DIR/py/measure.py" <<'EOF'
"""measure_tolerances: the max |Δ| of correct rows per isolation comparison, beside the tolerance
verify applies (packtool/verify/tolerances.py), and the control's logits Δ; the probe step runs it.

    for each pack_len: selftest.sample_rows (correct synthetic rows) ──▶ isolation.run_isolation
      per (model, backend): max |Δ| of packed~alone, vs fp32 ref, swap, causal, loss sums
    ──▶ a printed table, the worst of each comparison with its headroom, and `ok`
"""
from packtool.verify.backends import Backend
from packtool.verify.isolation import MODELS, run_isolation
from packtool.verify.selftest import sample_rows

COMPARISONS = {
    "logits": "packed~alone",
    "vs reference": "vs fp32 ref",
    "swap A": "swap",
    "causal": "causal",
    "loss sums": "loss sums",
}


def measure_tolerances(
    backends: list[Backend],
    *,
    pack_lens=(1024, 4096),
    rows: int = 4,
    seed: int = 0,
    models: tuple[str, ...] = MODELS,
    echo=print,
) -> dict:
    """Run the isolation checks on correct synthetic rows (selftest.sample_rows) and report, per
    (pack_len, model, backend), the max |Δ| of every comparison beside the tolerance verify
    applies, and the control's logits Δ: the data to set BF16_*_TOL from on a GPU. `ok` is False
    when a correct row already exceeds a tolerance (verify would fail a good pack) or a run failed."""
    table, failures = [], []
    for L in pack_lens:
        checks = run_isolation(
            sample_rows(L, rows, seed=seed), backends, pack_len=L, seed=seed, models=models
        )
        groups: dict = {}
        for c in checks:
            if c.skipped or "backend" not in c.evidence:
                continue
            g = groups.setdefault(
                (c.evidence["model_type"], c.evidence["backend"]),
                {
                    "pack_len": L,
                    "model": c.evidence["model_type"],
                    "backend": c.evidence["backend"],
                    "dtype": c.evidence.get("dtype"),
                    "kernel_calls": c.evidence.get("kernel_calls"),
                },
            )
            what = c.name.split(" ", 2)[2] if c.name.count(" ") >= 2 else "run"
            if what in COMPARISONS:
                g[COMPARISONS[what]] = (
                    c.evidence.get("max_abs_diff"),
                    c.evidence.get("tol", c.evidence.get("tol_sqrt_tokens")),
                )
            elif what == "control":
                g["control Δ"] = c.evidence.get("control_logits_diff")
            if not c.passed:
                failures.append(f"{L} {c.name}: {c.message}")
        table.extend(groups.values())
    cols = ["packed~alone", "vs fp32 ref", "swap", "causal"]
    echo(
        f"{'len':>5} {'model':<6} {'backend':<13} {'dtype':<9} "
        + " ".join(f"{c + ' (tol)':>22}" for c in cols)
        + f" {'control Δ':>10}"
    )
    for g in table:
        cells = [
            f"{'-' if g.get(c) is None else f'{_num(g[c][0])} ({_num(g[c][1])})':>22}" for c in cols
        ]
        echo(
            f"{g['pack_len']:>5} {g['model']:<6} {g['backend']:<13} {g['dtype'] or '?':<9} "
            + " ".join(cells)
            + f" {_num(g.get('control Δ')):>10}"
        )
    worst = {}
    for c in cols:
        vals = [g[c] for g in table if g.get(c) is not None and g[c][0] is not None]
        if vals:
            m = max(vals, key=lambda v: v[0])
            worst[c] = {
                "max_abs_diff": m[0],
                "tol": m[1],
                "headroom": (m[1] / m[0]) if m[0] else None,
            }
            echo(
                f"max {c}: {_num(m[0])} against tol {_num(m[1])}"
                + (f" ({m[1] / m[0]:.1f}x headroom)" if m[0] else " (bit-exact)")
            )
    for f in failures:
        echo(f"FAIL {f}")
    return {"rows": table, "max": worst, "failures": failures, "ok": not failures and bool(table)}


def _num(v) -> str:
    return "-" if v is None else "0" if v == 0 else f"{v:.3g}"
EOF

cat > "$OUT_DIR/py/probe.py" <<'EOF'
import dataclasses

from gpucheck import DEVICE, check, done

from packtool.verify import backends as bk
from packtool.verify import tolerances as tol
from measure import measure_tolerances

bk.register()
usable, report = [], {}
for name in bk.VARLEN:
    why = bk._unavailable(name, DEVICE)
    if why is not None:
        print(f"  {name}: not available: {why[0]}")
        report[name] = {"available": False, "why": why[0]}
        continue
    backend = bk.make(name, DEVICE)
    ok, msg = bk.trial(backend)
    print(f"  {name}: {msg}")
    report[name] = {"available": True, "trial_ok": ok, "trial": msg}
    if ok:
        usable.append(backend)
chosen = bk.resolve("auto", DEVICE)
print(f"  auto -> {chosen[0].name}" + (f" (passed over: {'; '.join(chosen[0].notes)})" if chosen[0].notes else ""))
report["auto"] = {"backend": chosen[0].name, "notes": list(chosen[0].notes)}
check(bool(usable), "a FlashAttention varlen kernel runs here and matches the fp32 reference on its trial call")
check(chosen[0].name in bk.VARLEN, f"auto picks a varlen kernel (got {chosen[0].name})")
sdpa16 = dataclasses.replace(bk.make("sdpa", DEVICE), dtype="bfloat16", deterministic=False)
print("\n  tolerance measurement: max|Δ| on correct rows (bf16 kernels vs themselves and vs the fp32 reference)")
meas = measure_tolerances(usable + [sdpa16], pack_lens=(1024, 4096), rows=4, echo=lambda s: print("  " + s))
check(meas["ok"], "every comparison of correct rows is within its tolerance, and the control keeps its power")
print(f"  constants now: BF16_LOGIT_TOL {tol.BF16_LOGIT_TOL}, BF16_REFERENCE_TOL {tol.BF16_REFERENCE_TOL}, "
      f"BF16_SWAP_TOL {tol.BF16_SWAP_TOL}, CAUSAL_TOL {tol.CAUSAL_TOL} (packtool/verify/tolerances.py)")
done({"kernels": report, "measurement": meas}, "probe.json")
EOF

cat > "$OUT_DIR/py/verify.py" <<'EOF'
import importlib.util
import json
import os
import subprocess
import sys

from gpucheck import DEVICE, OUT, check, done, ensure_pack

from packtool.report.verify import verify_json
from packtool.verify import backends as bk
from packtool.verify.run import VerifyConfig, verify
from packtool.verify.selftest import run_self_test

pack = ensure_pack()
print(f"  pack: {pack} (built with packtool's packer and shard writer, no datasets)")


def verify_pack(backend, tag):
    path = os.path.join(OUT, f"verify-{tag}.json")
    if importlib.util.find_spec("typer") and importlib.util.find_spec("rich"):
        cmd = [sys.executable, "-m", "packtool", "verify", pack, "--device", DEVICE, "--backend", backend,
               "--json", path]
        print("  $ " + " ".join(cmd), flush=True)
        rc = subprocess.run(cmd).returncode
        doc = json.load(open(path))
        check(rc == (0 if doc["passed"] else 1), f"exit code {rc} matches the report")
    else:
        print("  (typer/rich absent: verifying through the API)")
        doc = verify_json(verify(VerifyConfig(path=pack, backend=backend, device=DEVICE)))
        json.dump(doc, open(path, "w"), indent=1)
    return doc


def flash_ok(doc, tag):
    check(doc["passed"], f"{tag}: verify passes ({', '.join(doc['failed']) or 'no failed check'})")
    fa = next(c for c in doc["checks"] if c["name"] == "FlashAttention kernel")
    ev = fa["evidence"]
    print(f"  {tag}: FlashAttention kernel: {fa['status']}: {fa['message']}")
    check(fa["status"] == "pass" and ev.get("varlen_calls", 0) == ev.get("expected_varlen_calls", -1) > 0
          and ev.get("dense_calls") == 0, f"{tag}: varlen calls counted = layers x forwards, 0 dense")
    for name in ("logits", "swap A", "causal", "vs reference"):
        diffs = [c["evidence"].get("max_abs_diff") for c in doc["checks"]
                 if c["name"].endswith(" " + name) and c["evidence"].get("backend") in bk.VARLEN]
        print(f"  {tag}: {name}: max|Δ| {max(diffs) if diffs else '-'}")


auto = verify_pack("auto", "auto")
flash_ok(auto, "auto")
chosen = bk.resolve("auto", DEVICE)[0].name
for name in bk.VARLEN:
    if name != chosen and bk._unavailable(name, DEVICE) is None:
        flash_ok(verify_pack(name, name), name)
st = run_self_test(VerifyConfig(device=DEVICE, rows=4))
check(st.passed, f"verify --self-test passes ({', '.join(c.name for c in st.failed) or 'no failed check'})")
done({"auto": auto, "self_test": verify_json(st)}, "verify.json")
EOF

cat > "$OUT_DIR/py/negatives.py" <<'EOF'
import os
import shutil

import numpy as np
from gpucheck import DEVICE, OUT, check, done, ensure_pack, wrapped_kernel

from packtool.verify import backends as bk
from packtool.verify import scan
from packtool.verify import selftest as st
from packtool.verify.run import VerifyConfig, verify

pack = ensure_pack()
broken = os.path.join(OUT, "broken")
if not os.path.isdir(broken):  # every row's positions count on across documents (the classic bug)
    shutil.copytree(pack, broken)
    for i in range(len(os.listdir(os.path.join(broken, "data")))):
        rel, table = st.read_shard(broken, i)
        pos = st.token_column(table, "position_ids")
        pos[:] = np.arange(pos.shape[1])
        st.write_shard(broken, rel, st.replace_columns(table, position_ids=pos))
res = verify(VerifyConfig(path=broken, device=DEVICE, rows=4))
failed = [c.name for c in res.failed]
print(f"  damaged pack (positions not reset in any row): failed {failed}")
check(not res.passed and scan.POS in failed, "damaged pack fails the position check")
check(any(n.startswith("isolation gpt2/") and n.endswith(" logits") for n in failed),
      "damaged pack fails the GPT-2 isolation logits (absolute positions)")
name = bk.resolve("auto", DEVICE)[0].name
summary = {"damaged": failed}
if check(name in bk.VARLEN, f"a varlen kernel to damage (auto gave {name})"):
    real = bk._varlen_fn
    for mode, must in (("noncausal", ("causal", "vs reference")), ("one-segment", ("logits", "swap A"))):
        bk._varlen_fn = wrapped_kernel(mode)
        try:
            res = verify(VerifyConfig(path=pack, backend=name, device=DEVICE, rows=4))
        finally:
            bk._varlen_fn = real
        failed = [c.name for c in res.failed]
        summary[mode] = failed
        print(f"  {name} {mode}: failed {failed}")
        for kind in ("llama", "gpt2"):
            for what in must:
                check(f"isolation {kind}/{name} {what}" in failed, f"{mode} kernel fails isolation {kind}/{name} {what}")
done(summary, "negatives.json")
EOF

cat > "$OUT_DIR/py/train.py" <<'EOF'
import importlib.util
import math

import torch
from gpucheck import DEVICE, check, done, ensure_pack, sync
from transformers import LlamaConfig, LlamaForCausalLM

from packtool.torch import PackedCollator, PackedDataset
from packtool.verify import backends as bk

bk.register()
ds = PackedDataset(ensure_pack())
batch = PackedCollator()([ds[0], ds[1]])
batch = {k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
print(f"  batch: input_ids {tuple(batch['input_ids'].shape)}, {int(batch['cu_seq_lens_q'].numel()) - 1} segments, "
      f"max_length {batch['max_length_q']}, keys {sorted(batch)}")
chosen = bk.resolve("auto", DEVICE)[0]
impls = ([chosen.attn_implementation] if chosen.name in bk.VARLEN else []) + ["sdpa"]
if DEVICE == "cuda" and importlib.util.find_spec("flash_attn"):
    impls.append("flash_attention_2")  # transformers' own flash glue, as a trainer runs it
losses = {}
for impl in impls:
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=8192, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=4096,
                      attn_implementation=impl)
    model = LlamaForCausalLM(cfg).to(DEVICE, torch.bfloat16 if DEVICE == "cuda" else torch.float32).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with bk.counting() as calls:
        loss = model(**batch).loss
        loss.backward()
        sync()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    finite = all(bool(torch.isfinite(g).all()) for g in grads)
    opt.step()
    sync()
    losses[impl] = float(loss.detach())
    print(f"  {impl}: loss {losses[impl]:.4f}, {len(grads)} grads, varlen calls {calls.varlen_calls}, "
          f"dense calls {calls.dense_calls}")
    check(math.isfinite(losses[impl]) and finite and any(bool(g.abs().sum() > 0) for g in grads),
          f"{impl}: finite loss and gradients, one optimizer step")
    if impl == chosen.attn_implementation:
        check(calls.varlen_calls == cfg.num_hidden_layers and calls.dense_calls == 0,
              f"{impl}: one varlen call per layer in the forward, 0 dense")
ref = losses["sdpa"]
for impl, v in losses.items():
    check(abs(v - ref) < 0.05, f"{impl} loss {v:.4f} == sdpa loss {ref:.4f} (same weights, bf16)")
done(losses, "train.json")
EOF

cat > "$OUT_DIR/py/hybrid.py" <<'EOF'
"""verify --model on every architecture family of packtool.arch, through this machine's kernels."""
import os

from gpucheck import DEVICE, OUT, check, done, ensure_pack

from packtool import arch
from packtool.arch import tiny
from packtool.config import VerifyConfig
from packtool.verify.messages import cells
from packtool.verify.run import verify

FAMILIES = ("llama", "qwen3_5_text", "qwen3_next", "nemotron_h", "falcon_h1", "lfm2", "gpt_oss", "mamba2")
pack = ensure_pack()
report = {}
for mt in FAMILIES:  # each one's config: packtool.arch.tiny.PRESETS (the table the tests use)
    folder = os.path.join(OUT, "configs", mt)
    tiny.full(mt).save_pretrained(folder)
    rows = 16 if DEVICE == "cuda" else 4  # the dry run proves the step, not the speed
    res = verify(VerifyConfig(path=pack, device=DEVICE, model=folder, rows=rows))
    iso = next(c for c in res.checks if c.name == "model isolation")
    ctl = next(c for c in res.checks if c.name == "model control")
    report[mt] = res.model
    words = ", ".join(f"{k}: {v}" for k, v in cells(res.model).items())
    print(f"  {mt:<13} {res.model['attention']:<18} {words}", flush=True)
    check(ctl.passed, f"{mt}: the negative control differs")
    missing = arch.missing_kernels({"model_type": mt})
    if mt == "llama":
        check(iso.passed, f"{mt}: documents stay apart ({iso.message[:160]})")
    elif arch.family({"model_type": mt}).kernels and not missing:
        check(iso.passed, f"{mt}: every kernel of its family installed, documents stay apart")
    else:
        state = "apart" if iso.passed else "not safe here"
        print(f"  note  {mt}: {state} (missing: {', '.join(missing) or 'none'})")
done(report, "hybrid.json")
EOF

# ------------------------------------------------------------------------------------------------

NAMES=()
RESULTS=()
SECONDS_TAKEN=()

run_step() {
  local name=$1
  shift
  echo
  echo "=== $name: $*"
  local t0=$SECONDS
  timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local rc=${PIPESTATUS[0]}
  [[ $rc == 124 ]] && echo "  FAIL  timed out after ${STEP_TIMEOUT}s"
  NAMES+=("$name")
  RESULTS+=("$rc")
  SECONDS_TAKEN+=("$((SECONDS - t0))")
}

echo "packtool GPU check: $REPO ($(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo 'no git')), output in $OUT_DIR"
[[ $DRY == 1 ]] && echo "DRY RUN on CPU with stand-in kernels: this proves the script, not the GPU kernels"

run_step env "$PY" "$OUT_DIR/py/env.py"
if [[ ${RESULTS[0]} != 0 ]]; then
  echo "environment not usable: the remaining steps are skipped"
else
  run_step probe "$PY" "$OUT_DIR/py/probe.py"
  run_step verify "$PY" "$OUT_DIR/py/verify.py"
  run_step negatives "$PY" "$OUT_DIR/py/negatives.py"
  run_step train "$PY" "$OUT_DIR/py/train.py"
  run_step hybrid "$PY" "$OUT_DIR/py/hybrid.py"
  if [[ $DRY == 1 ]]; then
    run_step bench "$PY" benchmarks/bench_train.py --device cpu --docs 120 --len 256 --hidden 64 --steps 2 --warmup 1
  else
    run_step bench "$PY" benchmarks/bench_train.py --device cuda --steps 10 --warmup 3
  fi
fi

echo
echo "step        result   seconds   log"
failed=0
for i in "${!NAMES[@]}"; do
  if [[ ${RESULTS[$i]} == 0 ]]; then res=PASS; else res=FAIL; failed=$((failed + 1)); fi
  printf "%-11s %-8s %7s   %s\n" "${NAMES[$i]}" "$res" "${SECONDS_TAKEN[$i]}" "$OUT_DIR/${NAMES[$i]}.log"
done
total=${#NAMES[@]}
if [[ $failed == 0 && $total == 7 ]]; then
  echo "GPU CHECK PASS ($total/$total steps$([[ $DRY == 1 ]] && echo ', dry run on CPU'))"
  exit 0
fi
echo "GPU CHECK FAIL ($failed of $total steps failed$([[ $total != 7 ]] && echo ', some not run'))"
exit 1
