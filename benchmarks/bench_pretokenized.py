"""Pre-tokenized Parquet → packed shards: `packtool pack` end to end on 1M rows, cold and warm.

    python benchmarks/bench_pretokenized.py                          # N = 1,000,000, packtool's default --num-proc
    python benchmarks/bench_pretokenized.py --n 200000 --num-proc 1,2 --json pretok.json
    python benchmarks/bench_pretokenized.py --n 20000                # quick harness check

Input: a seeded Parquet file of N rows (default 1,000,000) with lognormal lengths (median 450,
sigma 0.9, rounded, clipped to [8, 16384]; ~675 tokens a row on average), columns input_ids
list<int32> (uniform random ids < 150000) and labels list<int32> (-100 on a random prompt prefix of
1..len-1 tokens, then equal to input_ids), snappy-compressed row groups of 10,000 rows. It is
generated with numpy one row group at a time (a few hundred MB at most) into --data-dir (default
/tmp/packtool-bench), keyed by N and seed, and reused by later runs. Being freshly written or
read, it is normally in the page cache: "cold" below means packtool's caches, not the disk.

Runs, each a fresh `packtool` process measured from start to exit by benchmarks/memory.py (the
whole process tree, sampled every 20 ms), HF_HUB_OFFLINE=1 and a fresh HF_DATASETS_CACHE:

  cold   packtool pack FILE --len 4096 --out OUT --overflow split --force --no-cache [--num-proc P]
         with a fresh, empty PACKTOOL_CACHE: read + validate the labels, write the tokenization
         cache entry, plan, pack and write the zstd Parquet shards + manifest
  warm   the same command without --no-cache, on the cold run's PACKTOOL_CACHE: the checked
         cache entry is memory-mapped and packed (whether it was a cache hit is printed)

--num-proc "1,2" runs both (and both runs) for each value; without it the flag is not passed
(packtool's default). --repeat R runs the whole sequence R times; times are then median
[min–max], memory the max over runs.

Printed per run: wall seconds, end-to-end tokens/s = the manifest's tokens.in / wall, CPU seconds
(user + sys of the tree, from wait4) and tokens per CPU-second (steadier than wall on a shared box;
the load average before each run is printed too),
VmHWM of the main process (peak RSS, counting the pages of memory-mapped files it touched), peak
Σ RssAnon over the tree (memory the processes allocated), peak Σ RssFile (mapped files: clean,
reclaimable page cache), and the stages in the pack JSON report (`timings`; "before pack" = wall
- timings.total: start-up, reading, validation, cache). Goals: >= 20M tokens/s end to end, cold;
peak RSS < 2 GiB, judged separately on VmHWM and on anonymous memory.

Before each run the machine settles (memory.settle, as in bench_e2e.py: the previous run's dirty
pages written back, the CPUs idle and, on a VM that reports free pages to its host, the memory of
the cache entry and shards just deleted handed back; at most 30 s). --no-settle skips it.

--cold-only skips the warm runs. --trees A,B runs each cold (and warm) run once per source tree,
alternating A, B, A, B, ... (PYTHONPATH=tree; e.g. --trees /work/main,. to set a change beside
main on a noisy box), and prints them side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import GIB_KB, measure, settle, versions  # noqa: E402

PACK_LEN = 4096
VOCAB = 150_000
MEDIAN, SIGMA, MIN_LEN, MAX_LEN = 450, 0.9, 8, 16384
ROW_GROUP = 10_000
GOAL_TPS = 20e6
GOAL_RSS_GIB = 2.0


# ------------------------------------------------------------------------------------------------
# the input
# ------------------------------------------------------------------------------------------------


def generate(path: Path, n: int, seed: int) -> dict:
    """Write the Parquet file one row group at a time; return its stats."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32()))])
    tokens = loss = 0
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with pq.ParquetWriter(str(tmp), schema, compression="snappy", use_dictionary=False) as w:
        for a in range(0, n, ROW_GROUP):
            m = min(ROW_GROUP, n - a)
            ln = np.clip(
                np.round(rng.lognormal(np.log(MEDIAN), SIGMA, m)), MIN_LEN, MAX_LEN
            ).astype(np.int32)
            off = np.zeros(m + 1, dtype=np.int32)
            np.cumsum(ln, out=off[1:])
            total = int(off[-1])
            ids = rng.integers(0, VOCAB, total, dtype=np.int32)
            prompt = rng.integers(
                1, ln, dtype=np.int32
            )  # 1..len-1 prompt tokens: every row has loss
            pos = np.arange(total, dtype=np.int32) - np.repeat(off[:-1], ln)
            labels = np.where(pos >= np.repeat(prompt, ln), ids, np.int32(-100)).astype(
                np.int32, copy=False
            )
            del pos
            offs = pa.array(off)
            w.write_table(
                pa.table(
                    [
                        pa.ListArray.from_arrays(offs, pa.array(ids)),
                        pa.ListArray.from_arrays(offs, pa.array(labels)),
                    ],
                    schema=schema,
                ),
                row_group_size=m,
            )
            tokens += total
            loss += int((ln - prompt).sum())
    tmp.rename(path)
    return {
        "rows": n,
        "tokens": tokens,
        "loss_tokens": loss,
        "bytes": path.stat().st_size,
        "seed": seed,
    }


def input_file(data_dir: Path, n: int, seed: int) -> tuple[Path, dict]:
    path = data_dir / f"pretok-n{n}-seed{seed}.parquet"
    meta = path.with_name(path.name + ".json")
    if path.exists() and meta.exists():
        info = json.loads(meta.read_text())
        print(f"input: {path} (reused; {info['tokens']:,} tokens, {info['bytes'] / 2**30:.2f} GiB)")
        return path, info
    data_dir.mkdir(parents=True, exist_ok=True)
    t = time.perf_counter()
    info = generate(path, n, seed)
    info["generate_s"] = time.perf_counter() - t
    meta.write_text(json.dumps(info) + "\n")
    print(
        f"input: generated {path}: {n:,} rows, {info['tokens']:,} tokens ({info['loss_tokens']:,} with loss), "
        f"{info['bytes'] / 2**30:.2f} GiB, in {info['generate_s']:.1f} s"
    )
    return path, info


# ------------------------------------------------------------------------------------------------
# runs
# ------------------------------------------------------------------------------------------------


def packtool_bin() -> str:
    cand = Path(sys.executable).parent / "packtool"
    return str(cand) if cand.exists() else (shutil.which("packtool") or "packtool")


def run_pack(
    args,
    packtool: str,
    data: Path,
    cache: Path,
    work: Path,
    num_proc: int | None,
    no_cache: bool,
    tree: str | None = None,
) -> dict:
    out, report, hf = work / "out", work / "report.json", work / "hf"
    for p in (out, hf):
        shutil.rmtree(p, ignore_errors=True)
    report.unlink(missing_ok=True)
    cmd = [
        packtool,
        "pack",
        str(data),
        "--len",
        str(PACK_LEN),
        "--out",
        str(out),
        "--overflow",
        "split",
        "--force",
    ]
    cmd += ["--no-cache"] if no_cache else []
    cmd += ["--num-proc", str(num_proc)] if num_proc else []
    cmd += ["--json", str(report)]
    env = {"PACKTOOL_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(hf)}
    if tree:
        env["PYTHONPATH"] = str(Path(tree).resolve())
    m = measure(cmd, env, timeout=args.timeout, pss=args.pss)
    r = {"measurement": m, "cmd": cmd}
    if m.ok:
        manifest = json.loads((out / "manifest.json").read_text())
        r["tokens_in"] = manifest["tokens"]["in"]
        r["rows"] = manifest["counts"]["rows"]
        r["lower_bound"] = manifest["lower_bound_rows"]
        r["fill"] = manifest["fill"]
        r["shards"] = len(manifest["shards"])
        r["out_bytes"] = sum(s.get("bytes", 0) for s in manifest["shards"])
        r["cache_hit"] = "(from cache)" in m.stderr
        try:
            r["timings"] = json.loads(report.read_text()).get("timings") or {}
        except (OSError, ValueError):
            r["timings"] = {}
    else:
        r["error"] = f"rc {m.returncode}{' (timed out)' if m.timed_out else ''}: {m.stderr[-2500:]}"
    for p in (out, hf):
        shutil.rmtree(p, ignore_errors=True)
    return r


def cache_bytes(cache: Path) -> int:
    return sum(f.stat().st_size for f in cache.rglob("*") if f.is_file()) if cache.exists() else 0


# ------------------------------------------------------------------------------------------------
# reporting
# ------------------------------------------------------------------------------------------------


def _t(xs: list[float]) -> str:
    if len(xs) == 1:
        return f"{xs[0]:.2f} s"
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}–{max(xs):.2f}]"


def print_table(groups: dict[str, list[dict]], tokens: int) -> dict:
    print(
        f"\n{'':18s} {'wall':>22s} {'tokens/s':>11s} {'CPU s':>7s} {'tok/CPU-s':>10s} {'VmHWM':>10s} {'Σ anon':>10s} "
        f"{'Σ file':>10s} {'Σ RSS':>10s}  stages (median s)"
    )
    summary = {}
    for name, runs in groups.items():
        good = [r for r in runs if "error" not in r]
        for r in runs:
            if "error" in r:
                print(f"  {name:16s} FAILED: {r['error'].strip()[-600:]}")
        if not good:
            continue
        ms = [r["measurement"] for r in good]
        walls = [m.wall_s for m in ms]
        med = statistics.median(walls)
        s = {
            "runs": len(good),
            "walls_s": walls,
            "wall_median_s": med,
            "tokens_per_s": tokens / med,
            "best_tokens_per_s": tokens / min(walls),
            "main_hwm_kb": max(m.main_hwm_kb for m in ms),
            "max_hwm_kb": max(m.max_hwm_kb for m in ms),
            "peak_anon_kb": max(m.peak_anon_kb for m in ms),
            "peak_file_kb": max(m.peak_file_kb for m in ms),
            "peak_rss_kb": max(m.peak_rss_kb for m in ms),
            "peak_pss_kb": max((m.peak_pss_kb or 0) for m in ms) or None,
            "cpu_s": statistics.median(m.cpu_user_s + m.cpu_sys_s for m in ms),
            "procs": max(m.peak_procs for m in ms),
            "cache_hit": [r["cache_hit"] for r in good],
        }
        stages: dict[str, list[float]] = {}
        for r, m in zip(good, ms, strict=True):
            tm = dict(r.get("timings") or {})
            if "total" in tm:
                tm = {"before pack": m.wall_s - tm["total"], **tm}
            for k, v in tm.items():
                stages.setdefault(k, []).append(float(v))
        s["stages_s"] = {k: statistics.median(v) for k, v in stages.items()}
        summary[name] = s
        st = ", ".join(f"{k} {v:.2f}" for k, v in s["stages_s"].items())
        procs = (
            f" ({s['procs']} procs, max process {s['max_hwm_kb'] / GIB_KB:.2f})"
            if s["procs"] > 1
            else ""
        )
        pss = f" Σ PSS {s['peak_pss_kb'] / GIB_KB:.2f} GiB" if s["peak_pss_kb"] else ""
        print(
            f"  {name:16s} {_t(walls):>22s} {s['tokens_per_s'] / 1e6:7.1f} M/s {s['cpu_s']:7.1f} {tokens / s['cpu_s'] / 1e6:6.1f} M/s "
            f"{s['main_hwm_kb'] / GIB_KB:6.2f} GiB {s['peak_anon_kb'] / GIB_KB:6.2f} GiB "
            f"{s['peak_file_kb'] / GIB_KB:6.2f} GiB {s['peak_rss_kb'] / GIB_KB:6.2f} GiB  {st}{procs}{pss}"
            + ("" if all(s["cache_hit"]) or name.startswith("cold") else "  (NB: no cache hit)")
        )
    return summary


def print_goals(summary: dict) -> None:
    if not summary:
        return
    print("\ngoals (each run judged on its median wall and its max memory):")
    for name, s in summary.items():
        tps_ok = s["tokens_per_s"] >= GOAL_TPS
        hwm, anon = s["main_hwm_kb"] / GIB_KB, s["peak_anon_kb"] / GIB_KB
        print(
            f"  {name:16s} {s['tokens_per_s'] / 1e6:6.1f} M tokens/s (best {s['best_tokens_per_s'] / 1e6:.1f}) "
            f"{'>=' if tps_ok else '<'} {GOAL_TPS / 1e6:.0f}M: {'met' if tps_ok else 'NOT met'};  "
            f"VmHWM {hwm:.2f} GiB {'<' if hwm < GOAL_RSS_GIB else '>='} 2: {'met' if hwm < GOAL_RSS_GIB else 'NOT met'};  "
            f"peak anon {anon:.2f} GiB {'<' if anon < GOAL_RSS_GIB else '>='} 2: "
            f"{'met' if anon < GOAL_RSS_GIB else 'NOT met'}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--num-proc", default="", help='comma list, e.g. "1,2"; empty: do not pass --num-proc'
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--data-dir", default="/tmp/packtool-bench")
    ap.add_argument(
        "--work-dir",
        default=None,
        help="scratch for caches and output (default: a temp dir, removed)",
    )
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument(
        "--pss", action="store_true", help="also sample Σ PSS (smaps_rollup; costs a little CPU)"
    )
    ap.add_argument("--packtool", default=None)
    ap.add_argument("--cold-only", action="store_true", help="skip the warm runs")
    ap.add_argument(
        "--trees",
        default="",
        help="comma list of source trees, run alternately (PYTHONPATH=tree); empty: as installed",
    )
    ap.add_argument(
        "--no-settle", action="store_true", help="start each run at once, machine quiet or not"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    packtool = args.packtool or packtool_bin()
    nps: list[int | None] = [int(x) for x in args.num_proc.split(",") if x.strip()] or [None]
    trees: list[str | None] = [t.strip() for t in args.trees.split(",") if t.strip()] or [None]
    kinds = (("cold", True),) if args.cold_only else (("cold", True), ("warm", False))
    v = versions("packtool", "numpy", "numba", "pyarrow", "datasets")
    print("versions:", json.dumps(v))
    print(f"packtool: {packtool}; load average {os.getloadavg()[0]:.2f}")
    data, info = input_file(Path(args.data_dir), args.n, args.seed)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_pretok-"))
    work.mkdir(parents=True, exist_ok=True)
    groups: dict[str, list[dict]] = {}
    tokens = None
    try:
        for rnd in range(args.repeat):
            for np_, tree in ((a, b) for a in nps for b in trees):
                label = f"--num-proc {np_}" if np_ else "default num-proc"
                cache = work / "cache"
                shutil.rmtree(cache, ignore_errors=True)
                for kind, no_cache in kinds:
                    name = f"{kind}, {label}" if len(nps) > 1 or np_ else kind
                    name += f" [{tree}]" if tree else ""
                    waited = 0.0 if args.no_settle else settle()[0]
                    load = os.getloadavg()[0]
                    r = run_pack(args, packtool, data, cache, work, np_, no_cache, tree)
                    r["load_before"], r["settled_s"] = load, waited
                    r["cache_bytes"] = cache_bytes(cache)
                    groups.setdefault(name, []).append(r)
                    m = r["measurement"]
                    if "error" in r:
                        print(f"  [{rnd + 1}/{args.repeat}] {name}: FAILED after {m.wall_s:.1f} s")
                    else:
                        tokens = r["tokens_in"]
                        print(
                            f"  [{rnd + 1}/{args.repeat}] {name}: {m.wall_s:.2f} s, "
                            f"{r['tokens_in'] / m.wall_s / 1e6:.1f} M tokens/s (load avg before {load:.1f}, "
                            f"settled {waited:.1f} s); "
                            + m.summary().split(";", 1)[1].strip()
                            + f"; rows {r['rows']:,} (lower bound {r['lower_bound']:,}), {r['shards']} shards "
                            f"{r['out_bytes'] / 2**30:.2f} GiB, cache {r['cache_bytes'] / 2**30:.2f} GiB"
                            + (", cache hit" if r["cache_hit"] else ""),
                            flush=True,
                        )
                shutil.rmtree(cache, ignore_errors=True)
    finally:
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{args.n:,} pre-tokenized rows, {(tokens or info['tokens']):,} tokens in (manifest; generated "
        f"{info['tokens']:,}), input {info['bytes'] / 2**30:.2f} GiB Parquet; {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    summary = print_table(groups, tokens or info["tokens"])
    print_goals(summary)
    if args.json:
        out = {
            "versions": v,
            "args": vars(args),
            "input": info,
            "tokens_in": tokens,
            "summary": summary,
            "runs": {
                k: [
                    {
                        **{a: b for a, b in r.items() if a != "measurement"},
                        "measurement": r["measurement"].to_json(),
                    }
                    for r in rs
                ]
                for k, rs in groups.items()
            },
        }
        Path(args.json).write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
