"""How long `packtool profile` takes from lengths alone (no tokenizer), per stage.

    python benchmarks/bench_profile.py                 # 1M and 10M lognormal lengths
    python benchmarks/bench_profile.py --n 1M 10M 30M --len 8192

Stages: draw the synthetic lengths; statistics (percentiles, histograms); the strategy simulation
(random and length-grouped batches, BFD and FFD packing). The first run compiles the numba
kernels (cached on disk afterwards); a warm-up on 10k lengths keeps that out of the numbers.

Measured on the 2-core dev box, shared (load average ~3), lognormal median 450, --len 4096, B 8:

| examples | draw lengths | profile (total) | statistics | random | grouped | BFD | FFD |
|---:|---:|---:|---:|---:|---:|---:|---:|
| 1,000,000 | 0.03 s | **0.21 s** | 0.04 s | 0.02 s | 0.02 s | 0.04 s | 0.10 s |
| 10,000,000 | 0.61 s | **3.15 s** | 0.65 s | 0.67 s | 0.27 s | 0.55 s | 0.99 s |

End to end, `packtool profile --synthetic lognormal:...,n=10M --json /dev/null --plot p.png`:
8.8 s wall (4.0 s CPU; the rest was waiting for the shared cores), imports and the PNG included.
"""

from __future__ import annotations

import argparse
import platform
import time

from packtool.profiler import ProfileConfig, profile_lengths
from packtool.stats.synthetic import _number, synthetic_lengths


def bench(n: int, pack_len: int, batch_size: int, window: int) -> dict:
    t0 = time.perf_counter()
    lengths = synthetic_lengths(f"lognormal:median=450,sigma=0.9,n={n},max={2 * pack_len},seed=0")
    draw = time.perf_counter() - t0
    stages: dict[str, float] = {}
    last = [time.perf_counter(), "setup"]

    def on_stage(name: str) -> None:
        now = time.perf_counter()
        stages[last[1]] = stages.get(last[1], 0.0) + now - last[0]
        last[:] = [now, name]

    t1 = time.perf_counter()
    r = profile_lengths(
        lengths,
        ProfileConfig(pack_len=pack_len, batch_size=batch_size, group_window=window),
        on_stage=on_stage,
    )
    total = time.perf_counter() - t1
    stages[last[1]] = stages.get(last[1], 0.0) + time.perf_counter() - last[0]
    return {
        "n": n,
        "draw": draw,
        "profile": total,
        "stages": stages,
        "occupancy_bfd": r.strategies["packed_bfd_varlen"].occupancy,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", nargs="+", default=["1M", "10M"], help="sizes, e.g. 1M 10M")
    ap.add_argument("--len", type=int, default=4096, dest="pack_len")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--group-window", type=int, default=512)
    args = ap.parse_args()
    bench(10_000, args.pack_len, args.batch_size, args.group_window)  # numba compile / cache load
    print(
        f"# {platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"--len {args.pack_len}, --batch-size {args.batch_size}, --group-window {args.group_window}"
    )
    print(
        "| examples | draw lengths | profile (total) | statistics | random | grouped | BFD | FFD |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for text in args.n:
        n = int(_number(text, "n", text))
        r = bench(n, args.pack_len, args.batch_size, args.group_window)
        s = r["stages"]
        cols = [s.get("setup", 0.0) + s.get("length statistics", 0.0)] + [
            s.get(k, 0.0)
            for k in ("random batches", "length-grouped batches", "packing (BFD)", "packing (FFD)")
        ]
        print(
            f"| {n:,} | {r['draw']:.2f} s | **{r['profile']:.2f} s** | "
            + " | ".join(f"{c:.2f} s" for c in cols)
            + " |"
        )


if __name__ == "__main__":
    main()
