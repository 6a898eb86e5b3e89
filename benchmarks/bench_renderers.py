"""Renderers side by side, end to end as a user runs them: does each earn its place?

    python benchmarks/bench_renderers.py DATA [--rounds 2] [--tokenizers all] [--inspect 3]

For each tokenizer (families.tokenizers_under_test: the built-in one with chatml-train, the
shared folders with TRL's training template), `packtool pack DATA --len 4096 --out OUT --no-cache
--force` runs once per renderer the fast path could use, in a fresh process each, wall and CPU
seconds (the process tree's), rounds alternating the order:

    native     the run's own choice (render/native.py's chatml for chatml-train and gptoss for TRL's
               gptoss_training: what a user gets; TRL's llama3_training: MiniJinja, as compiled)
    compiled   the native renderer turned off: MiniJinja renders every conversation
    jinja      transformers' jinja renders every conversation (fastokens still tokenizes)

The renderer is forced by BENCH_FORCE in a prelude (`force`) that patches packtool in the measured
process before the CLI runs (forked workers inherit it); packtool has no such switch. Every run's
shards must be byte-identical to the first run's (the manifest's shard sha256s), which is asserted.

--inspect K: `packtool inspect DATA --index 0` warm (caches filled by one untimed run), K rounds
alternating with and without tokenization/cut.py (without: the whole Rust tokenizer is built).

DATA: `packtool sample DATA --n N` (a template without tools, Llama 3's: DATA less its tool
records, families.without_tools). The tokenizer cache is warm (one untimed run per tokenizer).
"""

from __future__ import annotations

import argparse
import json
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

PRELUDE = """
import os, sys
sys.path.insert(0, {bench!r})
from bench_renderers import force
force(os.environ.get("BENCH_FORCE", ""))
from packtool.cli import main
sys.argv[0] = "packtool"
sys.exit(main())
"""


def force(what: str) -> None:
    """Patch packtool in this process: `what` "compiled" (no native renderer), "jinja" (no
    compiled or native one), "nocut" (inspect builds the whole tokenizer), "" (as it is)."""
    if what in ("compiled", "jinja"):
        from packtool.tokenization import render

        render.native_for = lambda text: None  # no native renderer at the chain's top
        own = render.best

        def best(template):
            if what == "jinja":
                return "jinja", None
            got = own(template)
            return ("compiled", None) if got[0] == "native" else got

        render.best = best  # (before pipeline imports it)
    if what == "nocut":
        from packtool.tokenization import cut

        cut.CutBackend._cut = lambda self, texts: self.engines.rust()


def timed(args: list[str], env: dict, what: str) -> tuple[float, float]:
    """(wall s, CPU s of the process tree) of one packtool run with `what` forced."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    prelude = PRELUDE.format(bench=str(Path(__file__).resolve().parent))
    out = subprocess.run(
        [sys.executable, "-c", prelude, *args],
        env={**env, "BENCH_FORCE": what},
        cwd=ROOT,
        capture_output=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"packtool {' '.join(args)} failed:\n{out.stderr.decode()[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def shards(out: Path) -> tuple[list, str]:
    m = json.loads((out / "manifest.json").read_text())
    return [s["sha256"] for s in m["shards"]], m["tokenizer_backend"].get("renderer", "?")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--renderers", default="native,compiled,jinja")
    ap.add_argument("--tokenizer", action="append")
    ap.add_argument("--tokenizers", choices=["all"])
    ap.add_argument("--inspect", type=int, default=0, help="rounds of inspect with / without cut")
    ap.add_argument("--no-pack", action="store_true")
    a = ap.parse_args()
    renderers = a.renderers.split(",")
    work = Path(tempfile.mkdtemp(prefix="bench-renderers-"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a user's machine runs it
    data = Path(a.data)
    try:
        for tok in tokenizers_under_test(a.tokenizer, a.tokenizers):
            own = data if tok.tools else without_tools(data)
            warm = {**env, "PACKTOOL_CACHE": str(work / f"cache-{tok.name}")}
            inspect = ["inspect", str(own), "--index", "0", "--json", str(work / "i.json")]
            timed([*inspect, *tok.flags], warm, "")  # fills the tokenizer and template caches
            if a.inspect:
                times: dict[str, list] = {"cut": [], "nocut": []}
                for r in range(a.inspect):
                    for what in ("", "nocut") if r % 2 == 0 else ("nocut", ""):
                        times[what or "cut"].append(timed([*inspect, *tok.flags], warm, what))
                for k, v in times.items():
                    walls = ", ".join(f"{w:.2f}" for w, _ in v)
                    print(f"{tok.name:<10} inspect warm {k:<6} {walls} s wall", flush=True)
            if a.no_pack:
                continue
            first = None
            for r in range(a.rounds):
                order = renderers if r % 2 == 0 else renderers[::-1]
                for what in order:
                    out = work / f"out-{tok.name}-{what}"
                    args = ["pack", str(own), "--len", "4096", "--out", str(out)]
                    args += ["--no-cache", "--force", *tok.flags]
                    wall, cpu = timed(args, warm, "" if what == "native" else what)
                    hashes, used = shards(out)
                    first = first or hashes
                    same = "identical" if hashes == first else "DIFFERENT"
                    print(
                        f"{tok.name:<10} round {r + 1} {what:<9} {wall:7.2f} s wall {cpu:7.2f} s CPU"
                        f"  (manifest renderer {used}; shards {same})",
                        flush=True,
                    )
                    if hashes != first:
                        raise SystemExit("shards differ between renderers")
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
