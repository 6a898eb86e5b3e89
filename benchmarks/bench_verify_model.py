"""`packtool verify PACK --model MODEL` per architecture family, as a user runs it (a process each).

    python benchmarks/bench_verify_model.py [--rows 16] [--models llama,qwen3_5_text,...]

The pack: `packtool sample` (600 chats) packed at --len 4096 with the built-in tokenizer. Each
model: its preset config (packtool.arch.tiny.full: the default, lfm2 given conv layers), then
`packtool verify PACK --model DIR --rows N --json -` timed: wall seconds, CPU seconds of the
process (user + system), peak RSS (VmHWM, from the process's rusage), the result and the input set
that keeps documents apart here. The goal (issue 22): every architecture under 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

# the architectures timed; each one's config is arch.tiny.full(model_type) (PRESETS: one table)
MODELS = (
    "llama",
    "qwen3",
    "gemma3",
    "qwen3_5_text",
    "qwen3_next",
    "nemotron_h",
    "falcon_h1",
    "lfm2",
    "gpt_oss",
    "mamba2",
)


def _status(pid: int) -> dict[str, float]:
    """VmHWM and RssAnon (MiB) of a running process, from /proc (empty once it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "RssAnon"):
                    out[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return out


def run(argv: list[str], env: dict):
    """(stdout, stderr, returncode, wall s, CPU s, VmHWM MiB, peak RssAnon MiB) of one process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    hwm = anon = 0.0
    while proc.poll() is None:
        st = _status(proc.pid)
        hwm, anon = max(hwm, st.get("VmHWM", 0.0)), max(anon, st.get("RssAnon", 0.0))
        time.sleep(0.05)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return out, err, proc.returncode, wall, cpu, hwm, anon


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    import torch
    import transformers

    import packtool
    from packtool.arch import tiny

    work = tempfile.mkdtemp(prefix="bench-verify-model-")
    env = dict(os.environ, HF_HUB_OFFLINE="1", PACKTOOL_CACHE=os.path.join(work, "cache"))
    cli = [sys.executable, "-m", "packtool"]
    subprocess.run(
        [*cli, "sample", f"{work}/sample.jsonl"], env=env, check=True, capture_output=True
    )
    subprocess.run(
        [*cli, "pack", f"{work}/sample.jsonl", "--len", "4096", "--out", f"{work}/packed"],
        env=env,
        check=True,
        capture_output=True,
    )
    print(
        f"packtool {packtool.__version__}, transformers {transformers.__version__}, torch "
        f"{torch.__version__}, python {platform.python_version()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d')}; pack: 600 sample chats at --len 4096; --rows {args.rows}"
    )
    print(
        f"{'model_type':<13} {'wall s':>7} {'CPU s':>7} {'VmHWM':>7} {'RssAnon':>8}  result  "
        "minimum inputs (MiB: peak of the verify process)"
    )
    worst = 0.0
    for mt in args.models.split(","):
        folder = os.path.join(work, "configs", mt)
        tiny.full(mt).save_pretrained(folder)
        argv = [*cli, "verify", f"{work}/packed", "--model", folder, "--rows", str(args.rows)]
        out, err, rc, wall, cpu, hwm, anon = run([*argv, "--json", "-"], env)
        try:
            doc = json.loads(out)
            result = "pass" if doc["passed"] else "FAIL"
            minimum = doc.get("model", {}).get("minimum") or "none here"
        except ValueError:
            result, minimum = f"exit {rc}", err.strip()[-120:]
        worst = max(worst, wall)
        print(
            f"{mt:<13} {wall:7.1f} {cpu:7.1f} {hwm:7.0f} {anon:8.0f}  {result:<6}  {minimum}",
            flush=True,
        )
    print(f"slowest: {worst:.1f} s wall (goal < 30 s)")


if __name__ == "__main__":
    main()
