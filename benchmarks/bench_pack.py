"""Benchmark the packer: (a) planning vs TRL's pack_dataset, (b) the pack stage to Parquet shards.

    python benchmarks/bench_pack.py                       # (a) n=20k,200k,1M and (b) at 1M examples
    python benchmarks/bench_pack.py --sizes 20000 --pack-n 100000 --no-trl   # quick
    python benchmarks/bench_pack.py --sizes "" --pack-n 2000000 --procs 1,2 --shard-rows 2048
                                       # (b) with 1 and 2 writer processes, side by side

(a) Seeded lognormal lengths (median 450, sigma 0.9, rounded, clipped to 1..4096), L=4096.  Ours:
    `plan_packs` BFD/FFD, best of --repeat after a warm-up (numba compile cached).  TRL:
    `trl.pack_dataset(ds, 4096, strategy="bfd")` on a datasets.Dataset whose input_ids have those
    lengths, timed once; with its default map batching (BFD inside batches of 1000 examples) and
    with `map_kwargs={"batch_size": None}` (one global BFD, what our planner does).
(b) Pre-tokenized Arrow data (random ids, ~30% prompt tokens labelled -100), memory-mapped from an
    Arrow file in record batches of 10k rows like a datasets cache file, packed by `pack_tokenized`
    to zstd Parquet shards in a child process.  Reports tokens/s, peak RSS (VmHWM: includes the
    pages of the memory-mapped input the gather touched) and peak anonymous RSS (sampled RssAnon:
    what the packer itself allocates).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PACK_LEN = 4096


def lognormal_lengths(
    n: int, seed: int = 0, median: float = 450, sigma: float = 0.9, cap: int = PACK_LEN
):
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 1, cap).astype(np.int64)


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def trl_rows_and_time(lengths: np.ndarray, global_batch: bool) -> tuple[int, float]:
    import datasets
    import pyarrow as pa
    from trl import pack_dataset

    offsets = np.zeros(lengths.size + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.array(np.ones(int(offsets[-1]), dtype=np.int32))
    ds = datasets.Dataset(
        pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), values)})
    )
    kwargs = {"map_kwargs": {"batch_size": None}} if global_batch else {}
    datasets.disable_progress_bars()
    t = time.perf_counter()
    packed = pack_dataset(ds, PACK_LEN, strategy="bfd", **kwargs)
    dt = time.perf_counter() - t
    return len(packed), dt


def bench_plan(sizes: list[int], repeat: int, with_trl: bool) -> list[dict]:
    from packtool.plan import lower_bound_rows, plan_packs

    plan_packs(lognormal_lengths(1000), PACK_LEN)  # warm-up (loads the numba cache)
    plan_packs(lognormal_lengths(1000), PACK_LEN, "ffd")
    out = []
    for n in sizes:
        lengths = lognormal_lengths(n)
        lb = lower_bound_rows(int(lengths.sum()), PACK_LEN)
        row = {"n": n, "tokens": int(lengths.sum()), "lower_bound": lb}
        for name, strategy, order in (
            ("bfd", "bfd", "sorted"),
            ("ffd", "ffd", "sorted"),
            ("bfd_random", "bfd", "random"),
        ):
            plan = plan_packs(lengths, PACK_LEN, strategy, order)
            secs = best_of(
                lambda s=strategy, o=order, x=lengths: plan_packs(x, PACK_LEN, s, o), repeat
            )
            row[name] = {
                "seconds": secs,
                "seq_per_s": n / secs,
                "rows": plan.num_rows,
                "rows_over_lb": plan.num_rows / lb,
            }
        if with_trl:
            for name, glob in (("trl_bfd", False), ("trl_bfd_global", True)):
                try:
                    rows, secs = trl_rows_and_time(lengths, glob)
                    row[name] = {
                        "seconds": secs,
                        "seq_per_s": n / secs,
                        "rows": rows,
                        "rows_over_lb": rows / lb,
                    }
                except Exception as e:  # noqa: BLE001 - report and continue
                    row[name] = {"error": f"{type(e).__name__}: {e}"}
        out.append(row)
        print_plan_row(row)
    return out


def print_plan_row(row: dict) -> None:
    n, lb = row["n"], row["lower_bound"]
    print(f"\n(a) n={n:,}  tokens={row['tokens']:,}  lower bound={lb:,} rows")
    ours = row["bfd"]["seconds"]
    for name in ("bfd", "ffd", "bfd_random", "trl_bfd", "trl_bfd_global"):
        r = row.get(name)
        if r is None:
            continue
        if "error" in r:
            print(f"    {name:15s} {r['error']}")
            continue
        print(
            f"    {name:15s} {r['seconds'] * 1e3:10.1f} ms  {r['seq_per_s'] / 1e6:8.2f} M seq/s  "
            f"rows {r['rows']:>9,}  rows/LB {r['rows_over_lb']:.5f}  time / ours-bfd {r['seconds'] / ours:9.1f}x"
        )


# ------------------------------------------------------------------------------------------------
# (b) the pack stage
# ------------------------------------------------------------------------------------------------


def make_pretokenized(path: Path, n: int, seed: int = 1, batch: int = 10_000) -> dict:
    """Write an Arrow stream file like a datasets cache file: input_ids, labels, length, ..."""
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(n, seed=seed)
    schema = pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("labels", pa.list_(pa.int32())),
            ("length", pa.int32()),
            ("num_loss_tokens", pa.int32()),
            ("source_index", pa.int64()),
        ]
    )
    loss_total = 0
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as w:
        for a in range(0, n, batch):
            ln = lengths[a : a + batch]
            off = np.zeros(ln.size + 1, dtype=np.int32)
            np.cumsum(ln, out=off[1:])
            ids = rng.integers(0, 151_643, int(off[-1]), dtype=np.int32)
            prompt = (ln * 0.3).astype(np.int64)
            pos = np.arange(int(off[-1])) - np.repeat(off[:-1], ln)
            labels = np.where(pos >= np.repeat(prompt, ln), ids, -100).astype(np.int32)
            loss = (ln - prompt).astype(np.int32)
            loss_total += int(loss.sum())
            offs = pa.array(off)
            w.write_batch(
                pa.record_batch(
                    [
                        pa.ListArray.from_arrays(offs, pa.array(ids)),
                        pa.ListArray.from_arrays(offs, pa.array(labels)),
                        pa.array(ln.astype(np.int32)),
                        pa.array(loss),
                        pa.array(np.arange(a, a + ln.size, dtype=np.int64)),
                    ],
                    schema=schema,
                )
            )
    return {
        "examples": n,
        "tokens": int(lengths.sum()),
        "loss_tokens": loss_total,
        "bytes": path.stat().st_size,
    }


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def child_pack(arrow_path: str, out: str, procs: int = 1, shard_rows: int = 0) -> None:
    """Runs in a fresh process: memory-map the input, pack it (`procs` writer processes, forced
    whatever the pack's size), print one JSON line."""
    import datasets

    from packtool.data.tokenized import TokenizedData
    from packtool.pack import PackConfig, pack_tokenized
    from packtool.pack import write as pack_write

    peak_anon = [0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak_anon[0] = max(peak_anon[0], _status_kb("RssAnon"))
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    t0 = time.perf_counter()
    ds = datasets.Dataset.from_file(arrow_path)  # memory-mapped
    lengths = ds.data.column("length").to_numpy()
    data = TokenizedData(
        table=ds,
        lengths=lengths,
        loss_counts=ds.data.column("num_loss_tokens").to_numpy(),
        source_index=ds.data.column("source_index").to_numpy(),
        num_read=len(ds),
        tokenizer={"name": "random", "pad_id": 151_643},
    )
    t1 = time.perf_counter()
    if procs > 1:
        pack_write.PROCESS_MIN_TOKENS = 0
    result = pack_tokenized(
        data, PackConfig(pack_len=PACK_LEN, shard_rows=shard_rows), out, procs=procs
    )
    t2 = time.perf_counter()
    stop.set()
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)  # the writer processes (--procs > 1)
    m = result.manifest
    print(
        json.dumps(
            {
                "load_s": t1 - t0,
                "pack_s": t2 - t1,
                "plan_s": result.seconds["plan"],
                "write_s": result.seconds["write"],
                "tokens_in": m["tokens"]["in"],
                "rows": m["counts"]["rows"],
                "lower_bound": m["lower_bound_rows"],
                "fill": m["fill"],
                "shards": len(m["shards"]),
                "out_bytes": sum(s["bytes"] for s in m["shards"]),
                "peak_rss_kb": _status_kb("VmHWM"),
                "peak_anon_kb": max(peak_anon[0], _status_kb("RssAnon")),
                "cpu_user_s": ru.ru_utime + rc.ru_utime,
                "cpu_sys_s": ru.ru_stime + rc.ru_stime,
                "minor_faults": ru.ru_minflt,
                "writers": min(pack_write.MAX_WRITERS, os.cpu_count() or 1, len(m["shards"])),
                "procs": procs,
                "shard_sha256": [s["sha256"] for s in m["shards"]],
            }
        )
    )


_GENERATED: dict = {}  # arrow path -> make_pretokenized's info (once per run)


def bench_pack_stage(n: int, workdir: Path, procs: int = 1, shard_rows: int = 0) -> dict:
    arrow = workdir / f"pretokenized-{n}.arrow"
    t = time.perf_counter()
    shutil.rmtree(workdir / "packed", ignore_errors=True)
    if arrow not in _GENERATED:
        _GENERATED[arrow] = make_pretokenized(arrow, n)
    info = _GENERATED[arrow]
    print(
        f"\n(b) {n:,} pre-tokenized examples, {info['tokens']:,} tokens, "
        f"{info['bytes'] / 2**30:.2f} GiB Arrow (generated in {time.perf_counter() - t:.1f} s)"
    )
    out = workdir / "packed"
    proc = subprocess.run(
        [sys.executable, __file__, "--_child", str(arrow), str(out), str(procs), str(shard_rows)],
        capture_output=True,
        text=True,
        cwd=str(ROOT),
    )
    if proc.returncode != 0:
        raise SystemExit(f"pack stage failed:\n{proc.stderr[-3000:]}")
    r = json.loads(proc.stdout.strip().splitlines()[-1])
    r["tokens_per_s"] = r["tokens_in"] / r["pack_s"]
    r["input_bytes"] = info["bytes"]
    print(
        f"    pack_tokenized: {r['pack_s']:.1f} s (plan+overflow {r['plan_s']:.2f} s, gather+write {r['write_s']:.1f} s)"
        f"  → {r['tokens_per_s'] / 1e6:.1f} M tokens/s"
    )
    print(
        f"    rows {r['rows']:,} (lower bound {r['lower_bound']:,}), fill {r['fill']:.4%}, {r['shards']} shards, "
        f"{r['out_bytes'] / 2**30:.2f} GiB Parquet"
    )
    print(
        f"    peak RSS {r['peak_rss_kb'] / 2**20:.2f} GiB (incl. memory-mapped input pages), "
        f"peak anonymous RSS {r['peak_anon_kb'] / 2**20:.2f} GiB"
    )
    print(
        f"    child process CPU: user {r['cpu_user_s']:.1f} s, sys {r['cpu_sys_s']:.1f} s, "
        f"{r['minor_faults']:,} minor faults, {r['writers']} writer threads, {procs} process(es)"
    )
    return r


def versions() -> dict:
    import datasets
    import numba
    import pyarrow

    v = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "pyarrow": pyarrow.__version__,
        "datasets": datasets.__version__,
        "cpus": os.cpu_count(),
    }
    try:
        import trl

        v["trl"] = trl.__version__
    except ImportError:
        v["trl"] = None
    return v


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--_child":
        child_pack(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="20000,200000,1000000")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-trl", action="store_true")
    ap.add_argument("--pack-n", type=int, default=1_000_000, help="examples for (b); 0 skips it")
    ap.add_argument(
        "--workdir", default=None, help="scratch folder for (b) (default: a temp dir, removed)"
    )
    ap.add_argument(
        "--procs",
        default="1",
        help="(b) once per writer-process count, side by side, e.g. 1,2 (same bytes checked)",
    )
    ap.add_argument("--shard-rows", type=int, default=0, help="(b) rows a shard (0: automatic)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    v = versions()
    print("versions:", json.dumps(v))
    with_trl = not args.no_trl
    if with_trl and v["trl"] is None:
        print("TRL is not installed (pip install -e '.[bench]'): printing ours only")
        with_trl = False
    results = {"versions": v, "plan": [], "pack": None}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if sizes:
        results["plan"] = bench_plan(sizes, args.repeat, with_trl)
    if args.pack_n:
        work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_pack-"))
        work.mkdir(parents=True, exist_ok=True)
        try:
            runs = [
                bench_pack_stage(args.pack_n, work, int(p), args.shard_rows)
                for p in args.procs.split(",")
            ]
            results["pack"] = runs[0] if len(runs) == 1 else runs
            if len(runs) > 1:
                same = all(r["shard_sha256"] == runs[0]["shard_sha256"] for r in runs)
                print(
                    "    processes side by side: "
                    + ", ".join(f"{r['procs']}: {r['pack_s']:.1f} s" for r in runs)
                    + f"; ratio {runs[0]['pack_s'] / runs[-1]['pack_s']:.2f}x; "
                    + ("identical shards" if same else "SHARDS DIFFER")
                )
        finally:
            if not args.workdir:
                shutil.rmtree(work, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
