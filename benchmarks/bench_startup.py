"""Start-up: what a user waits for before any data, per tokenizer, as the CLI runs it.

Each command runs as its own process (`python -m packtool ...`), wall time and CPU time (user +
sys of the child) measured, best of --repeat:

  --help            packtool --help                                      goal < 0.3 s
  inspect warm      packtool inspect DATA --index 0, after one run filled the caches (tokenizer
                    spec, template verdict)                              goal < 1 s
  profile cold      packtool profile DATA (--n records) with an empty $PACKTOOL_CACHE: the
                    tokenizer resolved, the template probed, both backends built, checked
                    goal < 10 s with a 200k-vocabulary tokenizer (gpt-oss)
  profile warm      the same with --no-cache on warm caches: what a new input costs

DATA is `packtool sample`'s chats (seed 0), the first --n records (less those with tools for a
template that renders none: families.without_tools). Tokenizers: --tokenizer FOLDER
(repeatable; "built-in") or --tokenizers all (families.tokenizers_under_test).

    python benchmarks/bench_startup.py [--n 150] [--repeat 2] [--tokenizers all]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import tokenizers_under_test, without_tools  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def timed(args: list[str], env: dict) -> tuple[float, float]:
    """(wall s, CPU s) of one `python -m packtool ARGS` run; a failure stops the benchmark."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "packtool", *args], env=env, cwd=ROOT, capture_output=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"packtool {' '.join(args)} failed:\n{out.stderr.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def best(runs: list[tuple[float, float]]) -> str:
    wall, cpu = min(runs)
    return f"{wall:6.2f} s wall {cpu:6.2f} s CPU"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=150)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--tokenizer", action="append")
    ap.add_argument("--tokenizers", choices=["all"])
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    # as a user's machine runs it: no PYTHONDONTWRITEBYTECODE (set in this sandbox), which would
    # make every process compile packtool's modules from source (~0.07 s of a start-up)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        data = work / "sample.jsonl"
        timed(["sample", str(work / "all.jsonl")], {**env, "PACKTOOL_CACHE": str(work / "c0")})
        lines = (work / "all.jsonl").read_text().splitlines(keepends=True)[: a.n]
        data.write_text("".join(lines))
        print(f"--help                 {best([timed(['--help'], env) for _ in range(a.repeat)])}")
        for tok in tokenizers_under_test(a.tokenizer, a.tokenizers):
            flags = list(tok.flags)
            own = data if tok.tools else without_tools(data)  # (Llama 3's template: no tools)
            warm = {**env, "PACKTOOL_CACHE": str(work / f"warm-{tok.name}")}
            inspect = ["inspect", str(own), "--index", "0", "--json", str(work / "i.json")]
            timed(inspect + flags, warm)  # fills the caches
            profile = ["profile", str(own), "--json", str(work / "p.json"), *flags]
            cold = []
            for k in range(a.repeat):
                cache = work / f"cold-{tok.name}-{k}"
                cold.append(timed(profile, {**env, "PACKTOOL_CACHE": str(cache)}))
                shutil.rmtree(cache, ignore_errors=True)
            print(
                f"{tok.name:<10} inspect warm  {best([timed(inspect + flags, warm) for _ in range(a.repeat)])}"
            )
            print(f"{tok.name:<10} profile cold  {best(cold)}   ({a.n} records)")
            print(
                f"{tok.name:<10} profile warm  {best([timed(profile + ['--no-cache'], warm) for _ in range(a.repeat)])}"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
