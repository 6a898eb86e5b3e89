"""The Ray engine against the local one: `packtool pack --engine local|ray` on the same input.

    python benchmarks/bench_scale.py                          # 2k (overhead) and 100k conversations
    python benchmarks/bench_scale.py --sizes 1000000 --variants local,ray2   # the 1M memory run
    python benchmarks/bench_scale.py --sizes 2000 --json scale.json           # quick check

Input: the built-in chat sample (`packtool sample`, OpenAI messages, ~8% with tools, ~370
tokens each): 10k distinct conversations written once, repeated to N lines (a JSON Lines file of
~2.1 KB a conversation) in --data-dir. Each variant is the CLI a user runs, in a fresh process
tree measured by benchmarks/memory.py (a local Ray cluster is started and stopped by the command,
so its start-up is in the wall time):

  local   packtool pack DATA --len 4096 --out OUT --overflow split --no-cache --num-proc 2
  ray1    ... --engine ray --num-proc 1     (a local Ray cluster of 1 CPU: one worker)
  ray2    ... --engine ray --num-proc 2     (2 CPUs: two workers)

With --repeat N the variants run in turn N times and each shows its fastest run (all walls
listed): on a shared machine the best of a few is the fairer comparison. Reported per variant:
wall seconds, tokens/s (manifest tokens.in / wall), the stages as the
command timed them (tokenizing: read + encode + collect, on Ray from the first task to the
lengths on the driver; plan; write: on Ray the shard-writing tasks, which pread the part files), the
ratio to local, peak memory of the whole tree (Σ anonymous RSS, the largest VmHWM of one
process), the largest VmHWM / anonymous RSS a Ray worker reported (the pack's JSON `engine`),
the driver's VmHWM, the peak size of Ray's object spill folder, and (drv) the calls the driver
made itself while the local cluster started (cluster.session: files, probes, parts). Every Ray pack's manifest and
shards are compared byte for byte with the local pack's. Then the planner's rate on 10M lengths,
and a projection for N machines (`projection`) from the marginal per-stage rates measured here.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from memory import measure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKTOOL = str(Path(sys.executable).with_name("packtool"))
DISTINCT = 10_000
SPILL_GLOB = "ray_spilled_objects*"


def make_input(folder: Path, n: int) -> Path:
    """N conversations: the first min(N, 10k) of the sample, repeated."""
    folder.mkdir(parents=True, exist_ok=True)
    base = folder / f"sample-{DISTINCT}.jsonl"
    if not base.exists():
        from packtool.demo_data import write_sample

        write_sample(base, n=DISTINCT, seed=0)
    path = folder / f"chats-{n}.jsonl"
    if path.exists():
        return path
    lines = base.read_bytes().splitlines(keepends=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        for start in range(0, n, DISTINCT):
            f.writelines(lines[: min(DISTINCT, n - start)])
    tmp.rename(path)
    return path


class SpillWatch:
    """The largest size Ray's spill folders under /tmp/ray/session_latest reach while running."""

    def __init__(self):
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _size(self) -> int:
        total = 0
        root = Path("/tmp/ray/session_latest")
        for folder in root.glob(SPILL_GLOB) if root.exists() else []:
            for p in folder.rglob("*"):
                try:
                    total += p.stat().st_size if p.is_file() else 0
                except OSError:
                    pass
        return total

    def _run(self):
        while not self._stop.wait(0.5):
            self.peak = max(self.peak, self._size())

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        return False


def pack_hashes(out: Path) -> dict[str, str]:
    return {
        p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.rglob("*"))
        if p.is_file()
    }


def run_variant(name: str, data: Path, work: Path, length: int) -> dict:
    out, report = work / f"out-{name}", work / f"report-{name}.json"
    shutil.rmtree(out, ignore_errors=True)
    argv = [PACKTOOL, "pack", str(data), "--len", str(length), "--out", str(out)]
    argv += ["--overflow", "split", "--no-cache", "--json", str(report)]
    argv += {"local": ["--num-proc", "2"], "ray1": ["--engine", "ray", "--num-proc", "1"]}.get(
        name, ["--engine", "ray", "--num-proc", "2"]
    )
    env = {"PACKTOOL_CACHE": str(work / f"cache-{name}"), "HF_HUB_OFFLINE": "1"}
    with SpillWatch() as spill:
        m = measure(argv, env=env)
    if not m.ok:
        raise SystemExit(f"{name} failed ({m.returncode}):\n{m.stderr[-3000:]}")
    rep = json.loads(report.read_text())
    tokens = rep["manifest"]["tokens"]["in"]
    engine = rep.get("engine", {})
    stages = {
        "plan": rep["timings"]["plan"],
        "write": rep["timings"]["write"],
    }
    return {
        "variant": name,
        "wall_s": round(m.wall_s, 2),
        "tokens": tokens,
        "tokens_per_s": round(tokens / m.wall_s),
        "stages": stages,
        "tree_peak_anon_mib": round(m.peak_anon_kb / 1024),
        "tree_max_hwm_mib": round(m.max_hwm_kb / 1024),
        "main_hwm_mib": round(m.main_hwm_kb / 1024),
        "worker_vmhwm_mib": round(engine.get("worker_vmhwm", 0) / 2**20),
        "worker_rss_anon_mib": round(engine.get("worker_rss_anon", 0) / 2**20),
        "parts": engine.get("parts"),
        "driver_calls": engine.get("driver_calls"),
        "spill_peak_mib": round(spill.peak / 2**20),
        "hashes": pack_hashes(out),
        "rows": rep["manifest"]["counts"]["rows"],
        "documents": rep["manifest"]["counts"]["documents"],
        "pack_bytes": sum(e["bytes"] for e in rep["manifest"]["shards"]),
    }


def planner_seconds(n: int = 10_000_000, length: int = 4096) -> float:
    """Seconds the driver's planner (overflow + BFD plan) takes for n lengths like the sample's."""
    import numpy as np

    from packtool.pack.overflow import apply_overflow
    from packtool.plan import plan_packs

    rng = np.random.default_rng(0)
    lengths = np.clip(rng.lognormal(np.log(300), 0.6, n), 8, 3 * length).astype(np.int64)
    plan_packs(lengths[:1000].clip(1, length), length, "bfd", "sorted", 0, 0)  # compiled
    t = time.perf_counter()
    pieces = apply_overflow(lengths, np.arange(n, dtype=np.int64), length, "split")
    plan_packs(pieces.length, length, "bfd", "sorted", 0, 0)
    return time.perf_counter() - t


@dataclass
class Assumed:
    """What the projection assumes and this box cannot measure (each printed with the result)."""

    cores: int = 32  # cores per machine, each a worker
    net_gbps: float = 10.0  # network of one machine, Gbit/s, to the shared storage
    storage_gbps: float = 100.0  # the shared storage's total bandwidth, Gbit/s, for all machines
    read_ms: float = 0.5  # one small random read (pread) on the shared storage, milliseconds


def projection(results: list[dict], n_docs: int, plan_10m_s: float, a: Assumed) -> list[str]:
    """What N machines of `a.cores` cores would take for n_docs conversations, with the part files
    and the pack on shared storage every machine mounts (the design of packtool.cluster):

    measured here (the 2-worker Ray run, marginal between the two largest sizes: start-up cancels)
      tokenize       seconds per conversation of one worker (wall - plan - write), reading and
                     writing the part files on a local disk; / (N x cores) workers
      write          the same for the shard writers (pread from the part files, gather, Parquet
                     encoding, the shard on a local disk); / (N x cores) workers
      plan           the planner on the driver, at its rate timed here (it does not scale out)
      fixed          the run's intercept at 0 conversations here (cluster start and stop, task
                     start-ups): another cluster's differs
    assumed (Assumed)
      storage        bytes through the shared storage: the part files written and read (8 bytes a
                     token each way: ids and labels) and the pack written (its measured bytes), at
                     min(N x net_gbps, storage_gbps)
      piece reads    a writer reads each piece's ids and labels with two preads, one at a time:
                     documents x 2 x read_ms / (N x cores) (0 on a local disk, not 0 on shared
                     storage: one request per piece)
    The stages run one after the other; the total is their sum."""
    runs = [(r["conversations"], r["variants"]["ray2"]) for r in results if "ray2" in r["variants"]]
    if len(runs) < 2:
        return ["projection: needs two sizes with ray2 (--sizes A,B)"]
    (n0, r0), (n1, r1) = runs[-2], runs[-1]

    def tok(r):
        return r["wall_s"] - r["stages"]["plan"] - r["stages"]["write"]

    tok_per = (tok(r1) - tok(r0)) / (n1 - n0) * 2  # one worker's seconds per conversation
    write_per = (r1["stages"]["write"] - r0["stages"]["write"]) / (n1 - n0) * 2
    fixed = r1["wall_s"] - (tok_per + write_per) / 2 * n1 - r1["stages"]["plan"]
    tokens_per_doc = r1["tokens"] / n1
    docs_per_conv = r1["documents"] / n1  # pieces (a split conversation is several)
    bytes_per_doc = 16 * tokens_per_doc + r1["pack_bytes"] / n1
    out = [
        f"projection for {n_docs:,} conversations (~{tokens_per_doc:.0f} tokens each) on N machines, "
        f"part files and pack on shared storage. Measured here (marginal {n0:,}→{n1:,}, ray2): per "
        f"worker {1 / tok_per:,.0f} conversations/s tokenized, {1 / write_per:,.0f} written; planner "
        f"{10_000_000 / plan_10m_s / 1e6:.1f}M conversations/s on the driver; fixed {fixed:.1f} s; "
        f"{docs_per_conv:.3f} pieces and {bytes_per_doc / 1e3:.1f} kB through storage a "
        f"conversation. Assumed: {a.cores} cores a machine, {a.net_gbps:g} Gbit/s a machine, "
        f"storage {a.storage_gbps:g} Gbit/s in all, {a.read_ms:g} ms a random read:"
    ]
    for n in (1, 4, 16, 64, 256):
        workers = n * a.cores
        stages = {
            "tokenize": tok_per * n_docs / workers,
            "plan (driver)": plan_10m_s * n_docs / 10_000_000,
            "write": write_per * n_docs / workers,
            "storage": n_docs * bytes_per_doc * 8 / (min(n * a.net_gbps, a.storage_gbps) * 1e9),
            "piece reads": n_docs * docs_per_conv * 2 * a.read_ms / 1e3 / workers,
            "fixed": fixed,
        }
        total = sum(stages.values())
        bound = max(stages, key=stages.get)
        parts = ", ".join(f"{k} {v / 60:.2f}" for k, v in stages.items())
        out.append(f"  N={n:>3}: {total / 60:8.1f} min  ({parts})  bound by {bound}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="2000,100000")
    ap.add_argument("--variants", default="local,ray1,ray2")
    ap.add_argument("--len", type=int, default=4096, dest="length")
    ap.add_argument("--data-dir", default="/tmp/packtool-bench-scale")
    ap.add_argument("--project", type=int, default=100_000_000, help="conversations to project")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each variant, in turn: the fastest is shown"
    )
    for f in dataclasses.fields(Assumed):
        ap.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                        help=f"projection: assumed {f.name} (default %(default)s)")  # fmt: skip
    args = ap.parse_args()
    import ray

    import packtool

    print(f"packtool {packtool.__version__}, ray {ray.__version__}, python {sys.version.split()[0]}, "
          f"{os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}")  # fmt: skip
    results = []
    for n in [int(x) for x in args.sizes.split(",")]:
        data = make_input(Path(args.data_dir), n)
        work = Path(tempfile.mkdtemp(prefix=f"scale-{n}-"))
        rows, walls = {}, {}
        for _ in range(args.repeat):  # the variants in turn; per variant its fastest run
            for name in args.variants.split(","):
                r = run_variant(name, data, work, args.length)
                walls.setdefault(name, []).append(r["wall_s"])
                if name not in rows or r["wall_s"] < rows[name]["wall_s"]:
                    rows[name] = r
        for name, r in rows.items():
            r["walls"] = walls[name]
        base = rows.get("local")
        print(
            f"\n{n:,} conversations ({data.stat().st_size / 2**20:,.0f} MiB JSONL), --len {args.length}"
        )
        print(f"  {'variant':8} {'wall s':>8} {'tok/s':>10} {'x local':>8} {'start+tok':>9} {'plan':>6} "
              f"{'write':>7} {'Σanon MiB':>10} {'max proc':>9} {'worker':>7} {'w.anon':>7} "
              f"{'driver':>7} {'spill':>6} parts  drv  same   walls")  # fmt: skip
        for name, r in rows.items():
            same = "-" if base is None or name == "local" else str(r["hashes"] == base["hashes"])
            ratio = r["wall_s"] / base["wall_s"] if base else float("nan")
            tok = r["wall_s"] - r["stages"]["plan"] - r["stages"]["write"]
            print(f"  {name:8} {r['wall_s']:8.1f} {r['tokens_per_s']:10,} {ratio:8.2f} {tok:9.1f} "
                  f"{r['stages']['plan']:6.2f} {r['stages']['write']:7.1f} "
                  f"{r['tree_peak_anon_mib']:10,} {r['tree_max_hwm_mib']:9,} "
                  f"{r['worker_vmhwm_mib']:7,} {r['worker_rss_anon_mib']:7,} {r['main_hwm_mib']:7,} "
                  f"{r['spill_peak_mib']:6,} {r['parts'] or '-':>5} {r['driver_calls'] or '-':>4}  {same:5}  "
                  f"{' '.join(f'{w:.1f}' for w in r['walls'])}")  # fmt: skip
            if same == "False":
                raise SystemExit(f"{name} wrote another pack than local at {n:,} conversations")
        results.append({"conversations": n, "variants": rows})
        shutil.rmtree(work, ignore_errors=True)
    plan_s = planner_seconds()
    print(f"\nplanner (overflow split + BFD) on the driver: 10M lengths in {plan_s:.2f} s")
    assumed = Assumed(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Assumed)})
    for line in projection(results, args.project, plan_s, assumed):
        print(line)
    if args.json:
        for r in results:
            for v in r["variants"].values():
                v.pop("hashes")
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
