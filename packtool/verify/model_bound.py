"""`verify --model` within bounds: the check of one architecture in a child process, given at most
LIMIT_S seconds of wall clock, MEMORY bytes resident and THREADS threads.

    parent                                   child (spawned, SIGINT ignored, THREADS torch threads)
      poll every POLL_S: a stage line?  ◀──── model_check.run(..., progress=send)
      elapsed > LIMIT_S or RSS > MEMORY:     ──▶ killed (by its pid): "not checked: ... exceeded"
      every HEARTBEAT_S: one progress line on stderr (the stage, the time used of the limit)
      the child's result (checks, report) ◀── pickled through the pipe

An architecture whose tiny copy is not tiny, or whose torch fallback is slow, ends in one line
"not checked: ... exceeded N s" instead of a silent hang. The child is spawned, not forked: a
fork of a process whose OpenMP pool already ran (torch, numba) can hang in its first parallel op.
On CUDA the check runs in this process, bounded by the parameter count only.
"""

from __future__ import annotations

import os
import signal
import sys
import time

LIMIT_S = 180  # wall clock per architecture
MEMORY = 4 * 2**30  # resident bytes of the check's process
THREADS = 4
HEARTBEAT_S = 10
POLL_S = 0.25


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
        from packtool.verify import model_check

        out = model_check.run(*args, progress=lambda text: conn.send(("stage", text)))
        conn.send(("done", out))
    except BaseException as e:  # sent back whole: the parent raises it as one line
        from packtool.errors import PacktoolError

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
    """model_check.run in a child process within the bounds; (checks, report) as run gives them."""
    from packtool.errors import PacktoolError
    from packtool.verify import model_check
    from packtool.verify.messages import not_checked_check

    args = (cfg_dict, path, where, samples, device, seed)
    if device != "cpu":
        return model_check.run(*args)
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
    report = {"model": where, "model_type": mt, "status": "not checked", "reason": reason}
    return [not_checked_check(reason)], report
