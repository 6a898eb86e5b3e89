"""`verify PACK --model MODEL`: isolation proven on the user's own architecture, not only a Llama.

    config.json (arch.config) ──▶ family (arch: what the batch needs, which kernels)
    sampled rows (integrity) ──fit──▶ rows of <= TOKENS[device] tokens, >= 2 documents each
    tiny model (arch.tiny: every layer kind once, random weights, attention sdpa | eager | flash)
    per input set (forwards.INPUT_SETS): packed vs alone, per module when it differs
    control (positions through the row, no boundaries): must differ by MODEL_POWER x MODEL_TOL

The report (messages.py words its checks) carries every set's difference or error, the minimum set
that keeps documents apart here, and per layer kind where it leaks.

On CPU the check runs in a spawned child (`bounded`), given at most LIMIT_S seconds of wall clock,
MEMORY bytes resident and THREADS threads, so that an architecture whose tiny copy is not tiny, or
whose torch fallback is slow, ends in one line "not checked: ... exceeded N s" instead of a hang
(spawned, not forked: a fork of a process whose OpenMP pool already ran can hang). On CUDA it runs
in this process, bounded by the parameter count only.

    parent                                   child (spawned, SIGINT ignored, THREADS torch threads)
      poll every POLL_S: a stage line?  ◀──── model_check.run(..., progress=send)
      elapsed > LIMIT_S or RSS > MEMORY:     ──▶ killed (by its pid): "not checked: ... exceeded"
      every HEARTBEAT_S: one progress line on stderr (the stage, the time used of the limit)
      the child's result (checks, report) ◀── pickled through the pipe
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

from packtool import arch
from packtool.arch import layers, tiny
from packtool.arch.config import concern
from packtool.errors import NotChecked, PacktoolError
from packtool.verify import forwards as mf
from packtool.verify import messages
from packtool.verify.sampling import Sample, packed
from packtool.verify.tolerances import MODEL_POWER as POWER
from packtool.verify.tolerances import MODEL_TOL as TOL

TOKENS = {"cpu": 1024, "cuda": 8192}  # row prefix run per sample (CPU attention is L^2 per row)
MAX_PARAMS = 20_000_000  # a tiny copy has < 2M; more means its widths were not shrunk
LIMIT_S = 180  # bounded: wall clock per architecture
MEMORY = 4 * 2**30  # resident bytes of the check's process
THREADS = 4
HEARTBEAT_S = 10
POLL_S = 0.25


def fit(sample: Sample, tokens: int) -> Sample | None:
    """The row cut to its first `tokens` slots with >= 2 documents: documents in order, the first
    cut to half the budget when it is longer (a document's prefix is itself a document)."""
    lens = [int(n) for n in sample.seq_lengths if n > 0]
    if len(lens) < 2:
        return None
    used, pieces = 0, []
    starts = np.concatenate(([0], np.cumsum(lens)))
    for i, n in enumerate(lens):
        room = tokens - used if i else max(1, min(n, tokens // 2))
        take = min(n, room)
        if take < 1:
            break
        pieces.append((int(starts[i]), int(starts[i]) + take))
        used += take
    if len(pieces) < 2:
        return None
    docs = [(sample.input_ids[a:b], sample.labels[a:b]) for a, b in pieces]
    return packed(sample.shard, sample.row, docs, used, sample.synthetic)


def pad(sample: Sample, length: int) -> Sample:
    """The row with a pad tail up to `length` slots (sampling.packed), so that fitted rows of
    different lengths stack into one batch; the documents and their bounds are unchanged."""
    if len(sample.input_ids) >= length:
        return sample
    docs = [(sample.input_ids[a:b], sample.labels[a:b]) for a, b in sample.bounds]
    return packed(sample.shard, sample.row, docs, length, sample.synthetic)


def build(cfg_dict: dict, path: str, samples: list[Sample], device: str, seed: int, say):
    """(model, tiny config, attention implementation, kinds per layer, declared kinds missing from
    the tiny copy) or NotChecked."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    mt = cfg_dict.get("model_type")
    try:
        full = AutoConfig.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as e:
        raise NotChecked(
            f"transformers {mf.tf_version()} cannot read a {mt!r} config ({type(e).__name__}: "
            f"{_line(e)}); verify never runs remote code: upgrade transformers if it is new"
        ) from e
    docs = [int(n) for s in samples for n in s.seq_lengths if n > 1]
    window = max(2, min(docs) // 2) if docs else 2
    pack_len = max(len(s.input_ids) for s in samples)
    say(f"building a tiny {mt}")
    try:
        wide = tiny.widths(full, pack_len=pack_len, window=window)
        with torch.device("meta"):
            meta = AutoModelForCausalLM.from_config(wide)
        # every layer kind the modules show and every kind the config declares, once at least
        depth = max(
            layers.shortest_prefix(layers.layer_kinds(meta, wide)), layers.declared_prefix(wide)
        )
        cfg = tiny.cut(wide, depth)
        with torch.device("meta"):
            small = AutoModelForCausalLM.from_config(cfg)
        size = sum(p.numel() for p in small.parameters())
    except Exception as e:
        raise NotChecked(
            f"cannot build a tiny {mt} for the check ({type(e).__name__}: {_line(e)}); "
            "this architecture is not covered by verify --model"
        ) from e
    if size > MAX_PARAMS:  # widths in fields tiny.py does not know (sub-configs): not tiny
        raise NotChecked(
            f"cannot build a tiny {mt} for the check: at the widths packtool sets it still has "
            f"{size / 1e6:.0f}M parameters (its sizes live in fields packtool does not shrink); "
            "this architecture is not covered by verify --model"
        )
    missing = layers.not_built(wide, cfg)
    built = {k for ks in layers.layer_kinds(small, cfg) for k in ks}
    missing += sorted(k for ks in layers.layer_kinds(meta, wide) for k in ks if k not in built)
    last = None
    flash = device == "cuda" and arch.installed("flash_attn")
    for attn in ("flash_attention_2",) * flash + ("sdpa", "eager"):
        try:
            dtype = "bfloat16" if attn == "flash_attention_2" else "float32"
            model = tiny.build(cfg, attn, device, dtype, seed)
            return model, cfg, attn, layers.layer_kinds(model, cfg), sorted(set(missing))
        except Exception as e:  # this attention implementation is not offered: the next one
            last = e
    raise NotChecked(
        f"cannot build a tiny {mt} for the check ({type(last).__name__}: {_line(last)})"
    )


def _line(e) -> str:
    return " ".join(str(e).split())[:300]


def run(
    cfg_dict, path: str, where: str, samples: list[Sample], device: str, seed: int, progress=None
):
    """([Check, Check] or [a not-checked Check], the report dict) for the sampled rows through
    the tiny model of the config at `path` (read as `cfg_dict`; `where` is how the user named it).
    What cannot be built or run is "not checked" (NotChecked's words), never a pass."""
    try:
        if why := concern(cfg_dict, where):  # before transformers is asked: remote code, unknown
            raise NotChecked(why)
        return _run(cfg_dict, path, where, samples, device, seed, progress)
    except NotChecked as e:
        return _not_checked(cfg_dict, where, str(e), transformers=mf.tf_version())


def _not_checked(cfg_dict: dict, where: str, reason: str, **more):
    report = {"model": where, "model_type": cfg_dict.get("model_type"), "status": "not checked"}
    return [messages.not_checked_check(reason)], {**report, "reason": reason, **more}


def _run(cfg_dict, path, where, samples, device, seed, progress):
    import torch

    say = progress or (lambda text: None)
    mf.quiet_transformers()
    rows = [r for r in (fit(s, TOKENS[device]) for s in samples) if r is not None]
    if not rows:
        raise PacktoolError("verify --model: no sampled row holds two documents")
    width = max(len(r.input_ids) for r in rows)  # rows cut short of the budget: one batch shape
    rows = [pad(r, width) for r in rows]
    model, cfg, attn, kinds, missing = build(cfg_dict, path, rows, device, seed, say)
    dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    tol = TOL.get(dtype, 1e-4)
    fam = arch.family(cfg_dict)
    needs = arch.inputs_for(cfg_dict)
    given = "+seq_idx" if "seq_idx" in needs else "+cu_seq_lens"
    decoder = layers.decoder_layers(model)
    whole = [(i, "", "layer", m) for i, m in enumerate(decoder if decoder is not None else [])]
    recorder = mf.Recorder(whole + layers.tracked(model, cfg))
    batch_rows = 4
    try:
        if (moved := mf.causal_probe(model, rows[0], device)) > tol:  # hooks not yet on
            raise NotChecked(
                f"{cfg_dict.get('model_type')} is not a causal LM as built here: changing a "
                f"document's last token moves the logits before it by {moved:.2g} (it attends "
                "both ways, an encoder); packed causal training does not apply to it"
            )
        with torch.no_grad(), recorder:
            say(f"running {len(rows)} rows alone")
            alone = mf.run_alone(model, rows, device, recorder=recorder)
            sets = {}
            for name in mf.INPUT_SETS:  # probe runs (which layer leaks): the first leaking set
                say(f"running {len(rows)} rows packed, {name}")
                probe = tol if not any(r.modules for r in sets.values()) else None
                sets[name] = mf.run_set(
                    model, recorder, name, rows, alone, device, batch_rows, probe
                )
        control = mf.run_control(model, rows, alone, device, batch_rows)
    except NotChecked:
        raise
    except Exception as e:  # the tiny model does not run unpacked: not a finding about packing
        raise NotChecked(
            f"the tiny {cfg_dict.get('model_type')} built for the check does not run "
            f"({type(e).__name__}: {_line(e)}); this architecture is not covered by verify --model"
        ) from e
    exact = {n: r.error is None and r.logits <= tol for n, r in sets.items()}
    minimum = next((n for n in mf.INPUT_SETS if exact[n]), None)
    report = {
        "model": where,
        "model_type": cfg_dict.get("model_type"),
        "family": fam.name,
        "attention": attn,
        "dtype": dtype,
        "device": device,
        "layers": [list(k) for k in kinds],
        "layer_types": messages.layer_words(cfg, kinds),
        "not_built": missing,
        "rows": len(rows),
        "tokens_per_row": max(len(r.input_ids) for r in rows),
        "documents": sum(len(r.seq_lengths) for r in rows),
        "tolerance": tol,
        "matrix": {n: r.to_dict() for n, r in sets.items()},
        "control": control,
        "minimum": minimum,
        "collator": given,
        "leaks": _by_kind(sets, recorder.modules, tol),
        "leaking_layers": _by_layer(sets, recorder.modules, tol),
        "missing_kernels": arch.missing_kernels(cfg_dict),
        "transformers": mf.tf_version(),
    }
    iso = messages.isolation_check(report, fam)
    report["status"] = "passed" if iso.passed else "not checked" if iso.unchecked else "failed"
    return [iso, messages.control_check(report, POWER)], report


def _by_kind(sets, modules, tol) -> dict:
    """kind -> {set: {"diff": max, "layers": [...]}} for the token-mixing modules that leak fed
    their clean input."""
    kind_of = {f"layer {i} {path}": kind for i, path, kind, _ in modules if path}
    out: dict = {}
    for name, r in sets.items():
        for key, d in r.modules.items():
            if d > tol and key in kind_of:
                e = out.setdefault(kind_of[key], {}).setdefault(name, {"diff": 0.0, "layers": []})
                e["diff"] = max(e["diff"], d)
                layer = int(key.split()[1])
                if layer not in e["layers"]:
                    e["layers"].append(layer)
    return out


def _by_layer(sets, modules, tol) -> dict:
    """set -> [{"layer": i, "diff": d, "modules": [class names]}]: the decoder layers whose output
    differs although their input was the clean one (the probe: where the leak happens)."""
    classes, whole = {}, {}
    for i, path, _, module in modules:
        if path:
            classes.setdefault(i, []).append((f"layer {i} {path}", type(module).__name__))
        else:
            whole[i] = type(module).__name__
    out = {}
    for name, r in sets.items():
        found = []
        for key, d in r.modules.items():
            parts = key.split()
            if len(parts) == 2 and d > tol:  # "layer i": a whole decoder layer
                i = int(parts[1])
                own = classes.get(i, [])
                leaking = [c for k, c in own if r.modules.get(k, 0.0) > tol]
                names = leaking or [c for _, c in own] or [whole.get(i, "?")]
                found.append({"layer": i, "diff": d, "modules": sorted(set(names))})
        if found:
            out[name] = sorted(found, key=lambda e: e["layer"])
    return out


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _child(conn, args, threads: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends this one
    try:
        import torch

        torch.set_num_threads(max(1, threads))
        out = run(*args, progress=lambda text: conn.send(("stage", text)))
        conn.send(("done", out))
    except BaseException as e:  # sent back whole: the parent raises it as one line
        conn.send(("error", (isinstance(e, PacktoolError), f"{type(e).__name__}: {e}")))
    finally:
        conn.close()


def _say(text: str) -> None:
    sys.stderr.write(f"model   {text}\n")
    sys.stderr.flush()


def bounded(
    cfg_dict: dict,
    path: str,
    where: str,
    samples,
    device: str,
    seed: int,
    *,
    limit_s: float = LIMIT_S,
    memory: int = MEMORY,
    threads: int = THREADS,
    say=_say,
):
    """`run` in a child process within the bounds; (checks, report) as run gives them."""
    args = (cfg_dict, path, where, samples, device, seed)
    if device != "cpu":
        return run(*args)
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, args, threads), daemon=True)
    mt = cfg_dict.get("model_type")
    stage, why = "starting", None
    start = time.monotonic()
    beat = HEARTBEAT_S
    proc.start()
    child.close()
    try:
        while True:
            if parent.poll(POLL_S):
                try:
                    kind, value = parent.recv()
                except EOFError:  # the child ended without a word (killed by the system?)
                    proc.join(5)
                    why = f"its process ended with exit code {proc.exitcode} while {stage}"
                    break
                if kind == "stage":
                    stage = value
                    continue
                proc.join(5)
                if kind == "done":
                    return value
                is_packtool, text = value
                if is_packtool:
                    raise PacktoolError(text.split(": ", 1)[1])
                why = f"it raised {text[:300]} while {stage}"
                break
            elapsed = time.monotonic() - start
            if elapsed > limit_s:
                why = f"exceeded {limit_s:.0f} s (while {stage})"
                break
            if (rss := _rss(proc.pid)) > memory:
                why = f"exceeded {memory / 2**30:.1f} GiB of memory ({rss / 2**30:.1f} GiB while {stage})"
                break
            if not proc.is_alive() and not parent.poll(0):
                why = f"its process ended with exit code {proc.exitcode} while {stage}"
                break
            if elapsed >= beat:
                say(f"{mt}: {stage} ({elapsed:.0f} s of at most {limit_s:.0f} s)")
                beat += HEARTBEAT_S
    finally:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join(5)
        parent.close()
    reason = f"the check of a tiny {mt} {why}; this architecture is not covered by verify --model"
    return _not_checked(cfg_dict, where, reason)
