"""Joining or starting the Ray cluster, and turning what fails in it into packtool's errors.

    with Session(address=None, workers=None) as s:   address None: a local cluster, started here
        s.workers                                     and stopped at the end; "auto" or host:port
        ...                                           (ray://host:port) joins a running one
    s.run(fn, calls) -> [fn(*call) ...]               Ray tasks, at most s.workers at a time; on
                                                      a local cluster the driver is one of the
                                                      workers (below)
    Shared(x)                                         an argument every call of a run shares
    s.scratch() -> folder                             for the encoded parts; removed at the end
    s.scratch_parent, s.keep_tokens                   where they go; whether they are kept at all
    s.failure(e) -> PacktoolError                     a worker's PacktoolError as it was raised,
                                                      anything else as one line naming it

A local cluster starts on a thread of its own, which keeps it and stops it at the end (Ray's
processes die with the thread that started them: PR_SET_PDEATHSIG). It starts lean (`_start_local`)
and its workers run at nice 0, not Ray's 15. The driver is one of its `workers`: in every run when
there are two or more (Ray then has `workers` - 1 CPUs), else while the cluster starts. A thread of
the driver makes the calls in order until none is left; once the cluster is up Ray tasks take the
next ones too. Whoever is free takes the next call; a call's result does not depend on where it ran:

    time ─────────────────────────────────────────────────────────────────────▶
    owner thread   ray.init ························ up ─ (wait) ─ stop: ray.shutdown
    driver         call 0 ─ call 1 ─ call 2 ─ call 4 ─ call 6 ─ ...
    Ray tasks                           call 3 ─── call 5 ─ ...   (workers - 1 at a time)

A joined cluster (--ray-address, or one this process already started) is up at once: every call
is a Ray task. Ray's own output is kept quiet (no dashboard, worker logs not echoed): what the run
did is packtool's report. `memory()` is a process's peak and anonymous resident memory, which each
stage reports with its results (and whether the driver ran it).

Ray's two agents that a local cluster leaves running when its driver is killed are stopped by the
next local cluster packtool starts on the machine (`stop_left_behind`):

    driver (packtool) ── gcs_server, raylet      die with the driver (Ray sets their parent-death signal)
                          └─ raylet's children:   ray::DashboardAgent, ray::RuntimeEnvAgent
                                                  see their raylet gone, then wait on the dead GCS to
                                                  report it before they exit (Ray 2.60: up to a minute)

An agent is taken for left behind by Ray's own rule (ray._private.process_watcher): its parent is
no longer a running raylet. A live cluster's agents, this user's or another's, are never touched:
their parent is their raylet. Linux only (/proc); elsewhere nothing is stopped.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from packtool.errors import PacktoolError, UsageError
from packtool.io import files

PARTS_PREFIX = ".packtool-ray-parts-"  # + <pid>-<host>-XXXXXXXX (io.files)
_DRIVER_PID: int | None = None  # the process that holds a Session (memory(): "driver")


class Session:
    def __init__(self, address: str | None = None, workers: int | None = None):
        self.address, self.requested = address, workers
        self.started = False
        self.workers = 1
        # where scratch folders go: None, the system's temporary folder (a local cluster); the pack
        # command sets the pack's parent folder, a filesystem every worker writes to
        self.scratch_parent: str | None = None
        # False: tokenizing keeps lengths only (`profile`: nothing to write)
        self.keep_tokens = True
        self.driver_calls = 0  # calls `run` made in the driver (module docstring)
        # a local cluster of 2 or more workers: the driver is one of them in every run, and Ray
        # starts one worker process fewer (set by __enter__)
        self.driver_works = False
        self._scratch: list[Path] = []
        # one line for each parts folder of a run that died, removed by `scratch` (io.files)
        self.leftovers: list[str] = []
        self._up = threading.Event()  # set when the cluster is up, or failed to start
        self._stop = threading.Event()
        self._owner: threading.Thread | None = None  # the thread that starts and stops a local one
        self._failed: BaseException | None = None

    def __enter__(self) -> Session:
        from packtool.cluster import ray_missing

        why = ray_missing()
        if why is not None:
            raise UsageError(why)
        import ray

        global _DRIVER_PID
        _DRIVER_PID = os.getpid()
        if ray.is_initialized():
            self._joined()
        elif self.address:
            self._init()
            self._joined()
        else:  # a new local cluster: started on its owner thread
            self.workers = max(1, self.requested or os.cpu_count() or 1)
            self.driver_works = self.workers >= 2
            self._owner = threading.Thread(target=self._own, name="packtool-ray", daemon=True)
            self._owner.start()
        return self

    def _init(self) -> None:
        import ray

        kw = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": True}
        try:
            if self.address:
                ray.init(address=self.address, **kw)
            else:  # Ray agents a killed driver's cluster left are stopped first, and said
                self.leftovers += stop_left_behind()
                _start_local(  # "local": a new cluster, never one `ray start` left behind
                    address="local",
                    num_cpus=self.workers - self.driver_works,
                    include_dashboard=False,
                    # Ray runs its workers at nice 15 (its own processes keep priority): beside
                    # any other work on the machine they would wait; the driver runs at 0
                    _system_config={"worker_niceness": 0},
                    **kw,
                )
        except ConnectionError as e:
            raise UsageError(
                f"--ray-address {self.address}: cannot join a Ray cluster there ({_line(e)}); "
                "start one with `ray start --head`, or leave --ray-address out for a local cluster"
            ) from None
        except ImportError as e:  # ray:// is Ray Client, an extra of its own
            raise UsageError(
                f"--ray-address {self.address}: {_line(e)}; ray:// addresses need Ray Client "
                "(pip install 'ray[client]'), or give the cluster's HOST:PORT"
            ) from None
        except (ValueError, RuntimeError) as e:
            where = f"--ray-address {self.address}" if self.address else "a local Ray cluster"
            raise PacktoolError(f"{where}: cannot start Ray: {_line(e)}") from None
        self.started = True
        # a worker's failure is reported once, by packtool
        logging.getLogger("ray").setLevel(logging.CRITICAL)

    def _joined(self) -> None:
        import ray

        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(self.requested or cpus, cpus))
        self._up.set()

    def _own(self) -> None:
        """The owner thread of a local cluster: start it, wait for the end, stop it."""
        import ray

        try:
            self._init()
        except BaseException as e:  # noqa: BLE001 - raised in the driver by `up`
            self._failed = e
        finally:
            self._up.set()
        if self._failed is None:
            self._stop.wait()
            ray.shutdown()

    def up(self) -> bool:
        """Whether the cluster is up (False while a local one starts); what failed starting it is
        raised."""
        if not self._up.is_set():
            return False
        if self._failed is not None:
            raise self._failed
        return True

    def __exit__(self, *exc) -> bool:
        for folder in self._scratch:
            shutil.rmtree(folder, ignore_errors=True)
        if self._owner is not None:
            self._stop.set()
            while self._owner.is_alive():  # (a local cluster still starting: up, then stopped)
                self._owner.join(0.1)
        elif self.started:  # joined at --ray-address: this leaves it running
            import ray

            ray.shutdown()
        return False

    def scratch(self) -> Path:
        """A new empty folder for a run's encoded parts (cluster.parts), removed by `drop` or at
        the end of the session; the parts folders of drivers that died (kill -9) there are removed
        first, one line each in `leftovers`."""
        parent = self.scratch_parent
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        self.leftovers += files.remove_dead(parent)
        folder = files.owned_folder(parent, PARTS_PREFIX)
        self._scratch.append(folder)
        return folder

    def drop(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        if folder in self._scratch:
            self._scratch.remove(folder)

    def run(self, fn: Callable, calls: Iterable[tuple]) -> list:
        """fn(*call) for every call, each a Ray task of one CPU, at most `workers` at a time (on
        a local cluster, or while one starts: the driver's calls among them, module docstring);
        a call's arguments are made when it starts (an iterator may build them
        lazily); a Shared argument reaches a task through the object store. The results in the
        order of `calls`. On any error or Ctrl-C the tasks still running are cancelled, the
        driver's call is let end, and the error raised as it came (`failure` makes it
        packtool's)."""
        import ray

        todo = _Calls(calls)
        results: dict[int, object] = {}
        here = _InDriver(fn, todo, results) if self.driver_works or not self.up() else None
        running: dict = {}  # ObjectRef -> call number
        done: list = []  # ended tasks whose results are not fetched yet
        try:
            while here is not None and not self._up.wait(0.05) and here.is_alive():
                pass
            if self.up():
                task = ray.remote(num_cpus=1)(fn)
                while True:  # the driver, while it makes calls, is one of the `workers`
                    busy = len(running) - len(done) + (here is not None and here.is_alive())
                    while busy < self.workers:
                        nxt = todo.next()
                        if nxt is None:
                            break
                        args = tuple(a.ref() if isinstance(a, Shared) else a for a in nxt[1])
                        running[task.remote(*args)] = nxt[0]
                        busy += 1
                    for ref in done:  # (after the next tasks started: a worker does not wait)
                        results[running.pop(ref)] = ray.get(ref)
                    if not running:
                        break
                    done, _ = ray.wait(list(running), num_returns=1)
            if here is not None:
                here.finish()
                self.driver_calls += here.calls
        except BaseException:
            todo.close()
            for ref in running:
                ray.cancel(ref, force=True)
            if here is not None:
                here.finish(quiet=True)
            raise
        return [results[i] for i in range(len(results))]

    @staticmethod
    def failure(e: BaseException) -> PacktoolError:
        """The error to report for `e`, raised by Ray for something that failed in a worker: the
        worker's own PacktoolError (same class, same message) where there is one in the chain."""
        seen, todo, root = set(), [e], e
        while todo:
            x = todo.pop(0)
            if x is None or id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, PacktoolError):
                # Ray's wrapper class is a subclass; Ray Data appends lines about its retries
                message = str(x.args[0]).split("\n")[0] if x.args else str(x)
                return (UsageError if isinstance(x, UsageError) else PacktoolError)(message)
            if not type(x).__module__.startswith("ray"):
                root = x  # the deepest exception that is not one of Ray's wrappers
            todo += [getattr(x, "cause", None), x.__cause__, x.__context__]
        lines = [ln for ln in str(root).strip().splitlines() if ln.strip()]
        text = lines[-1].strip()[:300] if lines else ""
        name = type(root).__name__
        if type(root).__module__ not in ("builtins", "__main__"):
            name = f"{type(root).__module__}.{name}"
        return PacktoolError(
            f"a Ray worker failed: {name}: {text}; nothing was written (Ray logs: /tmp/ray/session_latest/logs on the node)"
        )


def _line(e: BaseException) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    return lines[0][:300] if lines else type(e).__name__


class _Calls:
    """The calls of a run, numbered, taken one at a time by the driver's thread and by the loop
    that starts Ray tasks (a lock between them); `close` ends them."""

    def __init__(self, calls: Iterable[tuple]):
        self._it = enumerate(calls)
        self._lock = threading.Lock()

    def next(self) -> tuple[int, tuple] | None:
        with self._lock:
            return next(self._it, None)

    def close(self) -> None:
        with self._lock:
            self._it = iter(())


class _InDriver(threading.Thread):
    """Calls made in the driver, in turn, until none is left."""

    def __init__(self, fn: Callable, todo: _Calls, results: dict):
        super().__init__(name="packtool-driver-calls", daemon=True)
        self.fn, self.todo, self.results = fn, todo, results
        self.calls = 0
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            while True:
                nxt = self.todo.next()
                if nxt is None:
                    return
                self.results[nxt[0]] = self.fn(*nxt[1])
                self.calls += 1
        except BaseException as e:  # noqa: BLE001 - raised in the caller's thread (finish)
            self.error = e
            self.todo.close()

    def finish(self, quiet: bool = False) -> None:
        """Wait for the call in progress; raise what failed in it (unless `quiet`)."""
        while self.is_alive():
            self.join(0.1)
        if self.error is not None and not quiet:
            raise self.error


class Shared:
    """An argument every call of a run shares (the encode step, the run's parts): the object
    itself in the driver; a Ray task gets a reference to it in the object store, put there once,
    and fetches it once per worker process (fetch_once)."""

    def __init__(self, value):
        self.value = value
        self._holder: list | None = None

    def ref(self) -> list:
        """[ObjectRef] (in a list, so that Ray does not fetch and unpickle it for every task)."""
        if self._holder is None:
            import ray

            self._holder = [ray.put(self.value)]
        return self._holder


def call(fn: Callable, *args):
    """fn(*args): one run of Session.run over calls of several functions ((fn, *args) each)."""
    return fn(*args)


def _start_local(**kw) -> None:
    """ray.init(**kw) of a new local cluster without the processes a packtool run never uses: the
    autoscaler's monitor (a fixed set of CPUs), the log monitor (worker logs are not echoed) and the
    dashboard's API server (benchmarks/README.md, Ray). A subclass of Ray's private Node class
    leaves their start methods empty while ray.init makes the node; where that class is not there,
    the cluster starts whole."""
    import ray

    try:
        import ray._private.node as ray_node

        base = ray_node.Node
    except (ImportError, AttributeError):
        ray.init(**kw)
        return

    def skip(self, *args, **kwargs):
        pass

    class LeanNode(base):
        start_monitor = start_log_monitor = start_api_server = skip

    ray_node.Node = LeanNode
    try:
        ray.init(**kw)
    finally:
        ray_node.Node = base


_FETCHED: dict[str, object] = {}  # per worker process: objects of the store, by object id


def fetch_once(holder: list | Shared):
    """The object of a Shared argument: in the driver the object itself; in a Ray task, whose
    argument is [ObjectRef] (Shared.ref), fetched once by this worker process and kept, with what
    it builds lazily (a step's tokenizer), for the next tasks of the run; a later run's objects
    replace them."""
    if isinstance(holder, Shared):
        return holder.value
    key = holder[0].hex()
    if key not in _FETCHED:
        import ray

        if len(_FETCHED) >= 4:  # a run's setup and reference step; a second try's
            _FETCHED.clear()
        _FETCHED[key] = ray.get(holder[0])
    return _FETCHED[key]


def memory() -> dict[str, int]:
    """This process's peak resident memory (VmHWM) and anonymous resident memory (RssAnon), bytes,
    and whether it is the driver (1: a call `run` made there while the cluster started)."""
    out = {"vmhwm": 0, "rss_anon": 0, "driver": int(os.getpid() == _DRIVER_PID)}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "RssAnon"):
                    out["vmhwm" if key == "VmHWM" else "rss_anon"] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


# /proc/<pid>/comm of the two agents: Ray renames them, the kernel keeps 15 bytes
AGENT_NAMES = ("ray::DashboardA", "ray::RuntimeEnv")


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _parent(pid: int) -> tuple[int, str]:
    """(parent pid, state letter) from /proc/<pid>/stat (the name field may hold spaces and ')')."""
    fields = _read(f"/proc/{pid}/stat").rpartition(")")[2].split()
    return int(fields[1]), fields[0]


def _live_raylet(pid: int) -> bool:
    try:
        name = _read(f"/proc/{pid}/comm").strip()
        _, state = _parent(pid)
    except (OSError, ValueError, IndexError):
        return False
    return name == "raylet" and state not in ("Z", "X")


def left_behind() -> list[int]:
    """This user's Ray agents whose raylet is gone, by pid."""
    uid, found = os.getuid(), []
    try:
        pids = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        try:
            if os.stat(f"/proc/{pid}").st_uid != uid:
                continue
            if _read(f"/proc/{pid}/comm").strip() not in AGENT_NAMES:
                continue
            parent, _ = _parent(pid)
        except (OSError, ValueError, IndexError):  # ended meanwhile
            continue
        if not _live_raylet(parent):
            found.append(pid)
    return found


def stop_left_behind() -> list[str]:
    """Stop (SIGKILL: they wait in a blocking call) the agents `left_behind` finds; one line
    saying so, or none."""
    stopped = []
    for pid in left_behind():
        try:
            os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
        except OSError:
            continue
    if not stopped:
        return []
    pids = ", ".join(map(str, stopped))
    return [
        f"stopped {len(stopped)} Ray agent process(es) (pid {pids}) that a local Ray cluster left "
        "running when its driver died"
    ]
