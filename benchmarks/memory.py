"""Wall time and peak memory of a command and of every process it starts (shared by the benchmarks).

    from memory import measure, measure_python
    m = measure([".venv/bin/packtool", "pack", ...], env={"PACKTOOL_CACHE": tmp})
    m = measure_python("import datasets; ...")          # a python snippet, in a fresh interpreter
    m = measure_callable("benchmarks/x.py", "fn", 1, 2)  # x.fn(1, 2) in a fresh interpreter
    print(m.wall_s, m.main_hwm_kb, m.peak_anon_kb, m.peak_file_kb)

    python benchmarks/memory.py -- CMD ARGS...          # measure one command, print a summary

Everything measured is a subprocess (started in its own session, so a timeout kills the whole tree).
A sampler thread in this process polls the tree every `interval` seconds (default 20 ms): the main
process, then its children recursively via /proc/<pid>/task/<tid>/children (psutil when the
kernel lacks that file), reading /proc/<pid>/status of each:

  wall_s         Popen → wait4 return: start-up, imports and exit included
  main_hwm_kb    VmHWM (peak RSS) of the main process, as last sampled before it exited. VmHWM is a
                 high-water mark, so this is exact unless the peak was reached in the last
                 `interval` before exit; when no descendant was ever seen, the max with
                 ru_maxrss (then exact)
  ru_maxrss_kb   ru_maxrss from wait4: exact, but Linux folds in the ru_maxrss of every descendant
                 the process reaped, so with forked workers it is the largest process of the tree
                 (a worker counts the pages it shares with its parent), not the main one
  max_hwm_kb     the largest VmHWM of any one process of the tree (sampled, and ru_maxrss)
  sum_hwm_kb     Σ over processes of each one's VmHWM: an upper bound for the tree; forked workers
                 count the pages they share with their parent again
  peak_anon_kb   max over samples of Σ RssAnon over the tree (what the processes allocated; COW
                 pages shared after fork count once per process)
  peak_file_kb   max over samples of Σ RssFile (mapped files, shared libraries: clean page-cache
                 pages the kernel can reclaim; memory-mapped Arrow data lands here)
  peak_rss_kb    max over samples of Σ (RssAnon + RssFile + RssShmem)
  peak_pss_kb    with pss=True only: max over samples of Σ Pss from /proc/<pid>/smaps_rollup (shared
                 pages split between the processes that map them: the honest sum of a forked
                 tree). Reading smaps_rollup walks page tables, so it costs the measured program
                 a little CPU; off by default.
  cpu_user_s, cpu_sys_s   from wait4's rusage: the main process plus the children it reaped

A sample can miss a peak that lasts less than `interval`, and a worker that lives less than that.
The sampler itself costs about 3% of one core (measured: a tree of 3 processes and 30 threads,
240 samples in 5 s), the same for every command measured.

    python benchmarks/memory.py --self-test     # 300 MiB in a parent and in each of 2 forks
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

KIB = 1024
GIB_KB = 1 << 20  # KiB in a GiB
RESULT_MARKER = "@@MEASURE-RESULT@@ "
_STATUS_KEYS = (b"VmHWM:", b"VmRSS:", b"RssAnon:", b"RssFile:", b"RssShmem:")


@dataclass
class Measurement:
    argv: list[str]
    returncode: int
    wall_s: float
    main_hwm_kb: int
    ru_maxrss_kb: int
    max_hwm_kb: int
    sum_hwm_kb: int
    peak_anon_kb: int
    peak_file_kb: int
    peak_rss_kb: int
    peak_pss_kb: int | None
    peak_procs: int
    samples: int
    cpu_user_s: float
    cpu_sys_s: float
    timed_out: bool = False
    stdout: str = field(default="", repr=False)
    stderr: str = field(default="", repr=False)
    hwm_by_pid: dict[int, dict] = field(
        default_factory=dict, repr=False
    )  # pid -> {"cmd", "hwm_kb"}
    result: object = field(
        default=None, repr=False
    )  # measure_callable: the function's return value

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def gib(self, key: str) -> float:
        v = getattr(self, key)
        return float("nan") if v is None else v / GIB_KB

    def summary(self) -> str:
        pss = f", peak Σ PSS {self.gib('peak_pss_kb'):.2f}" if self.peak_pss_kb is not None else ""
        return (
            f"rc {self.returncode}{' (timed out)' if self.timed_out else ''}, {self.wall_s:.2f} s wall, "
            f"cpu {self.cpu_user_s:.1f}u+{self.cpu_sys_s:.1f}s; VmHWM main {self.gib('main_hwm_kb'):.2f} GiB "
            f"(max process {self.gib('max_hwm_kb'):.2f}, Σ {self.gib('sum_hwm_kb'):.2f}, "
            f"ru_maxrss {self.gib('ru_maxrss_kb'):.2f}), "
            f"peak Σ anon {self.gib('peak_anon_kb'):.2f}, Σ file {self.gib('peak_file_kb'):.2f}, "
            f"Σ RSS {self.gib('peak_rss_kb'):.2f}{pss}; {self.peak_procs} process(es), {self.samples} samples"
        )

    def to_json(self, with_output: bool = False) -> dict:
        d = asdict(self)
        d["hwm_by_pid"] = {str(k): v for k, v in self.hwm_by_pid.items()}
        if not with_output:
            d.pop("stdout")
            d.pop("stderr")
        try:
            json.dumps(d["result"])
        except (TypeError, ValueError):
            d["result"] = repr(d["result"])
        return d


# ------------------------------------------------------------------------------------------------
# /proc readers
# ------------------------------------------------------------------------------------------------


def read_status(pid: int) -> dict[str, int] | None:
    """VmHWM, VmRSS, RssAnon, RssFile, RssShmem in KiB; None once the process is gone (or a zombie)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    out: dict[str, int] = {}
    for line in data.split(b"\n"):
        if line.startswith(_STATUS_KEYS):
            k, v = line.split(b":", 1)
            out[k.decode()] = int(v.split()[0])
    return out if "VmHWM" in out else None  # zombies and kernel threads have no Vm* lines


def read_pss(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            parts = f.read().split(b"\0")
        return " ".join(p.decode(errors="replace") for p in parts if p)[:200]
    except OSError:
        return "?"


_HAS_CHILDREN_FILE = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def children(pid: int) -> list[int]:
    """Direct children of every thread of `pid`."""
    if _HAS_CHILDREN_FILE:
        out: list[int] = []
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return out
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                pass
        return out
    try:
        import psutil

        return [c.pid for c in psutil.Process(pid).children(recursive=False)]
    except Exception:  # noqa: BLE001 - psutil missing or the process is gone
        return []


def tree(pid: int) -> list[int]:
    seen, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.append(p)
        todo.extend(children(p))
    return seen


# ------------------------------------------------------------------------------------------------
# the sampler
# ------------------------------------------------------------------------------------------------


class _Sampler(threading.Thread):
    def __init__(self, pid: int, interval: float, pss: bool):
        super().__init__(daemon=True)
        self.pid, self.interval, self.pss = pid, interval, pss
        self.stop = threading.Event()
        self.hwm: dict[int, int] = {}
        self.cmd: dict[int, str] = {}
        self.peak_anon = self.peak_file = self.peak_rss = self.peak_pss = 0
        self.peak_procs = 0
        self.samples = 0

    def sample(self) -> None:
        anon = file = rss = pss = procs = 0
        for p in tree(self.pid):
            st = read_status(p)
            if st is None:
                continue
            procs += 1
            if p not in self.cmd:
                self.cmd[p] = _cmdline(p)
            self.hwm[p] = max(self.hwm.get(p, 0), st.get("VmHWM", 0))
            a, f, s = st.get("RssAnon", 0), st.get("RssFile", 0), st.get("RssShmem", 0)
            anon += a
            file += f
            rss += a + f + s
            if self.pss:
                pss += read_pss(p) or 0
        if procs:
            self.samples += 1
            self.peak_procs = max(self.peak_procs, procs)
            self.peak_anon = max(self.peak_anon, anon)
            self.peak_file = max(self.peak_file, file)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.sample()
            self.stop.wait(max(0.0, self.interval - (time.perf_counter() - t)))


# ------------------------------------------------------------------------------------------------
# entry points
# ------------------------------------------------------------------------------------------------


def measure(
    argv: list[str],
    env: dict[str, str] | None = None,
    *,
    cwd: str | os.PathLike | None = None,
    replace_env: bool = False,
    interval: float = 0.02,
    timeout: float | None = None,
    pss: bool = False,
    stdin_text: str | None = None,
) -> Measurement:
    """Run `argv` (its output captured) and measure it and its descendants.

    `env` is added to os.environ (or replaces it with replace_env=True). The command runs in a new
    session; on `timeout` seconds the whole process group is killed and timed_out is set.
    """
    full_env = dict(env or {}) if replace_env else {**os.environ, **(env or {})}
    # as a user's machine runs it: this sandbox sets PYTHONDONTWRITEBYTECODE, which would make
    # every measured process compile packtool's modules from source (~0.07 s for a start-up)
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        stdin = subprocess.PIPE if stdin_text is not None else subprocess.DEVNULL
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [str(a) for a in argv],
            env=full_env,
            cwd=cwd,
            stdout=out,
            stderr=err,
            stdin=stdin,
            start_new_session=True,
        )
        sampler = _Sampler(proc.pid, interval, pss)
        sampler.start()
        if stdin_text is not None:
            proc.stdin.write(stdin_text.encode())
            proc.stdin.close()
        timed_out = False
        timer = None
        if timeout:

            def kill():
                nonlocal timed_out
                timed_out = True
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

            timer = threading.Timer(timeout, kill)
            timer.start()
        _, status, ru = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(
            status
        )  # reaped here: keep Popen from waiting again
        if timer:
            timer.cancel()
        sampler.stop.set()
        sampler.join()
        # The group may still hold children the main process left behind: stop them.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode(errors="replace")
        stderr = err.read().decode(errors="replace")
    maxrss = int(ru.ru_maxrss)  # KiB on Linux
    hwm = dict(sampler.hwm)
    if len(hwm) <= 1:  # no descendant was ever seen: ru_maxrss is the main process's own, exact
        main_hwm = max(hwm.get(proc.pid, 0), maxrss)
    else:
        main_hwm = hwm.get(proc.pid, 0)
    hwm[proc.pid] = main_hwm
    return Measurement(
        argv=[str(a) for a in argv],
        returncode=proc.returncode,
        wall_s=wall,
        main_hwm_kb=main_hwm,
        ru_maxrss_kb=maxrss,
        max_hwm_kb=max(maxrss, *hwm.values()),
        sum_hwm_kb=sum(hwm.values()),
        peak_anon_kb=sampler.peak_anon,
        peak_file_kb=sampler.peak_file,
        peak_rss_kb=sampler.peak_rss,
        peak_pss_kb=sampler.peak_pss if pss else None,
        peak_procs=sampler.peak_procs,
        samples=sampler.samples,
        cpu_user_s=ru.ru_utime,
        cpu_sys_s=ru.ru_stime,
        timed_out=timed_out,
        stdout=stdout,
        stderr=stderr,
        hwm_by_pid={p: {"cmd": sampler.cmd.get(p, "?"), "hwm_kb": v} for p, v in hwm.items()},
    )


def measure_python(
    code: str, env: dict[str, str] | None = None, *, python: str = sys.executable, **kw
) -> Measurement:
    """`python -c code` in a fresh interpreter (imports included in the time)."""
    return measure([python, "-c", code], env, **kw)


def measure_callable(
    module_path: str | os.PathLike,
    func: str,
    *args,
    env: dict[str, str] | None = None,
    python: str = sys.executable,
    **kw,
) -> Measurement:
    """`func(*args)` from the file `module_path`, in a fresh interpreter; its JSON-able return value
    lands in .result (printed by the child on a marker line of its stdout). Args must be JSON-able.
    The module is imported in the child, so keep its top level light: what it imports is timed."""
    code = (
        "import importlib.util, json, sys\n"
        f"spec = importlib.util.spec_from_file_location('_measured', {str(Path(module_path).resolve())!r})\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['_measured'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        f"res = getattr(mod, {func!r})(*json.loads(sys.argv[1]))\n"
        "sys.stdout.flush()\n"
        f"print({RESULT_MARKER!r} + json.dumps(res, default=str), flush=True)\n"
    )
    m = measure([python, "-c", code, json.dumps(list(args))], env, **kw)
    m.result = parse_result(m.stdout)
    return m


def parse_result(stdout: str):
    """The value a measured child printed after RESULT_MARKER (its last such line), else None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(RESULT_MARKER):
            return json.loads(line[len(RESULT_MARKER) :])
    return None


# ------------------------------------------------------------------------------------------------
# self-test / command-line use
# ------------------------------------------------------------------------------------------------


def _alloc(mb: int, workers: int = 0) -> dict:
    """Self-test target: touch `mb` MiB anonymous in this process and in each of `workers` forks."""
    import multiprocessing as mp

    block = bytearray(mb << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    procs = []
    for _ in range(workers):
        p = mp.get_context("fork").Process(target=_child_alloc, args=(mb,))
        p.start()
        procs.append(p)
    for p in procs:
        p.join()
    time.sleep(0.1)
    return {"mb": mb, "workers": workers}


def _child_alloc(mb: int) -> None:
    block = bytearray(mb << 20)
    for i in range(0, len(block), 4096):
        block[i] = 2
    time.sleep(0.3)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        m = measure_callable(__file__, "_alloc", 300, 2)
        print(m.summary())
        print("result:", m.result)
        for pid, v in m.hwm_by_pid.items():
            print(f"  pid {pid}: VmHWM {v['hwm_kb'] / KIB:.0f} MiB  {v['cmd'][:80]}")
        assert m.ok, m.stderr
        assert 290 << 10 < m.main_hwm_kb < 450 << 10, m.main_hwm_kb  # the parent's own 300 MiB
        assert m.max_hwm_kb > 590 << 10, (
            m.max_hwm_kb
        )  # a worker: the parent's 300 (shared) + its own 300
        assert m.peak_anon_kb > 800 << 10, m.peak_anon_kb  # 300 MiB parent + 2 x 300 MiB workers
        assert m.peak_procs == 3, m.peak_procs
        t = measure([sys.executable, "-c", "import time; time.sleep(5)"], timeout=0.5)
        assert t.timed_out and t.wall_s < 2, (t.timed_out, t.wall_s)
        print("self-test ok")
        return
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        raise SystemExit(__doc__)
    m = measure(argv, pss=True)
    sys.stdout.write(m.stdout)
    sys.stderr.write(m.stderr)
    print(m.summary(), file=sys.stderr)
    raise SystemExit(m.returncode)


if __name__ == "__main__":
    main()


def _cpu_ticks() -> tuple[int, int]:
    """(idle, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    return parts[3], sum(parts[:8])  # user nice system idle iowait irq softirq steal


# the guest kernel's free page reporting (virtio-balloon): how many KiB it has handed back to the
# host so far. After a run frees memory, the kernel reports it in passes ~2 s apart for 10 s or more
# (2.5 GiB freed: reported over ~15 s), and a run started meanwhile pays for it: ours cold at 20k
# took 7.0-7.6 s right after a 2.5 GiB allocation was freed, 5.2-6.4 s alone (benchmarks/README.md)
REPORTED_KIB = "/sys/module/page_reporting/parameters/reported_kib"


def _reported_kib() -> int | None:
    try:
        with open(REPORTED_KIB) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def settle(
    max_wait: float = 30.0, idle: float = 0.9, window: float = 0.5, reporting: float = 3.0
) -> tuple[float, float]:
    """Wait until the machine is quiet before a measured run: the previous run's dirty pages
    written back (os.sync), two `window`s in a row with at least `idle` of every CPU idle (the
    kernel's writeback, or a process still ending, would slow whatever runs next) and, where the
    kernel reports free pages to a hypervisor (REPORTED_KIB), no page reported for `reporting`
    seconds (longer than its passes' interval); at most `max_wait` seconds. Returns (seconds
    waited, last idle share); without /proc/stat, (0, nan) at once."""
    t0 = time.perf_counter()
    os.sync()
    try:
        last = _cpu_ticks()
    except OSError:
        return 0.0, float("nan")
    quiet, share = 0, float("nan")
    reported, changed = _reported_kib(), t0
    while time.perf_counter() - t0 < max_wait:
        time.sleep(window)
        now = _cpu_ticks()
        share = (now[0] - last[0]) / max(1, now[1] - last[1])
        quiet = quiet + 1 if share >= idle else 0
        last = now
        kib = _reported_kib()
        if kib != reported:
            reported, changed = kib, time.perf_counter()
        if quiet >= 2 and (kib is None or time.perf_counter() - changed >= reporting):
            break
    return time.perf_counter() - t0, share


def versions(*packages: str) -> dict:
    """Python, core count and the installed versions of `packages`, for the printed header."""
    import importlib.metadata as md
    import platform

    v = {"python": platform.python_version(), "cpus": os.cpu_count()}
    for pkg in packages:
        try:
            v[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            v[pkg] = None
    return v
