"""Joining or starting the Ray cluster, and turning what fails in it into packtool's errors.

    with Session(address=None, workers=None) as s:   address None: a local cluster, started here
        s.workers                                     and stopped at the end; "auto" or host:port
        ...                                           (ray://host:port) joins a running one
    s.run(fn, calls) -> [fn(*call) ...]               Ray tasks, at most s.workers at a time
    s.scratch() -> folder                             for the encoded parts; removed at the end
    s.scratch_parent, s.keep_tokens                   where they go; whether they are kept at all
    s.failure(e) -> PacktoolError                     a worker's PacktoolError as it was raised,
                                                      anything else as one line naming it

Ray's own output is kept quiet (no dashboard, worker logs not echoed): what the run did is
packtool's report. `memory()` is a worker's peak and anonymous resident memory, which each stage
reports with its results.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from packtool.errors import PacktoolError, UsageError


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
        self._scratch: list[Path] = []

    def __enter__(self) -> Session:
        from packtool.cluster import ray_missing

        why = ray_missing()
        if why is not None:
            raise UsageError(why)
        import ray

        if not ray.is_initialized():
            kw = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": True}
            try:
                if self.address:
                    ray.init(address=self.address, **kw)
                else:
                    ray.init(  # "local": a new cluster, never one `ray start` left behind
                        address="local",
                        num_cpus=self.requested or os.cpu_count() or 1,
                        include_dashboard=False,
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
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(self.requested or cpus, cpus))
        # a worker's failure is reported once, by packtool
        logging.getLogger("ray").setLevel(logging.CRITICAL)
        return self

    def __exit__(self, *exc) -> bool:
        for folder in self._scratch:
            shutil.rmtree(folder, ignore_errors=True)
        if self.started:
            import ray

            ray.shutdown()
        return False

    def scratch(self) -> Path:
        """A new empty folder for a run's encoded parts (cluster.parts), removed by `drop` or at
        the end of the session."""
        parent = self.scratch_parent
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".packtool-ray-parts-", dir=parent))
        self._scratch.append(folder)
        return folder

    def drop(self, folder: Path) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        if folder in self._scratch:
            self._scratch.remove(folder)

    def run(self, fn: Callable, calls: Iterable[tuple]) -> list:
        """fn(*call) for every call, each a Ray task of one CPU, at most `workers` at a time (a
        call's arguments are made when it starts: an iterator may build them lazily); the results
        in the order of `calls`. On any error or Ctrl-C the tasks still running are cancelled
        and the error raised as it came (`failure` makes it packtool's)."""
        import ray

        task = ray.remote(num_cpus=1)(fn)
        todo = iter(enumerate(calls))
        running: dict = {}  # ObjectRef -> call number
        results: dict[int, object] = {}
        try:
            while True:
                while len(running) < self.workers:
                    nxt = next(todo, None)
                    if nxt is None:
                        break
                    running[task.remote(*nxt[1])] = nxt[0]
                if not running:
                    break
                done, _ = ray.wait(list(running), num_returns=1)
                for ref in done:
                    results[running.pop(ref)] = ray.get(ref)
        except BaseException:
            for ref in running:
                ray.cancel(ref, force=True)
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


_FETCHED: dict[str, object] = {}  # per worker process: objects of the store, by object id


def fetch_once(holder: list):
    """The object of holder[0], an ObjectRef (in a list, so that Ray does not fetch and unpickle
    it for every task), fetched once by this worker process and kept, with what it builds lazily
    (a step's tokenizer), for the next tasks of the run; a later run's objects replace them."""
    key = holder[0].hex()
    if key not in _FETCHED:
        import ray

        if len(_FETCHED) >= 4:  # a run's setup and reference step; a second try's
            _FETCHED.clear()
        _FETCHED[key] = ray.get(holder[0])
    return _FETCHED[key]


def memory() -> dict[str, int]:
    """This process's peak resident memory (VmHWM) and anonymous resident memory (RssAnon), bytes."""
    out = {"vmhwm": 0, "rss_anon": 0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmHWM", "RssAnon"):
                    out["vmhwm" if key == "VmHWM" else "rss_anon"] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out
