"""Joining or starting the Ray cluster, and turning what fails in it into packtool's errors.

    with Session(address=None, workers=None) as s:   address None: a local cluster, started here
        s.workers                                     and stopped at the end; "auto" or host:port
        ...                                           (ray://host:port) joins a running one
    s.failure(e) -> PacktoolError                     a worker's PacktoolError as it was raised,
                                                      anything else as one line naming it

Ray's own output is kept quiet (no dashboard, no progress bars, worker logs not echoed): what the
run did is packtool's report. `memory()` is a worker's peak and anonymous resident memory, which
each stage reports with its results.
"""

from __future__ import annotations

import logging
import os

from packtool.errors import PacktoolError, UsageError


class Session:
    def __init__(self, address: str | None = None, workers: int | None = None):
        self.address, self.requested = address, workers
        self.started = False
        self.workers = 1

    def __enter__(self) -> Session:
        import ray

        from packtool.cluster import ray_missing

        why = ray_missing()
        if why is not None:
            raise UsageError(why)
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        for name in ("ray", "ray.data", "ray.data._internal"):
            logging.getLogger(name).setLevel(logging.ERROR)
        if not ray.is_initialized():
            kw = {"log_to_driver": False, "logging_level": logging.ERROR, "configure_logging": True}
            try:
                if self.address:
                    ray.init(address=self.address, **kw)
                else:
                    ray.init(
                        num_cpus=self.requested or os.cpu_count() or 1,
                        include_dashboard=False,
                        **kw,
                    )
            except ConnectionError as e:
                raise UsageError(
                    f"--ray-address {self.address}: cannot join a Ray cluster there ({e}); start "
                    "one with `ray start --head`, or leave --ray-address out for a local cluster"
                ) from None
            self.started = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(self.requested or cpus, cpus))
        _quiet_data()
        return self

    def __exit__(self, *exc) -> bool:
        if self.started:
            import ray

            ray.shutdown()
        return False

    @staticmethod
    def failure(e: BaseException) -> PacktoolError:
        """The error to report for `e`, raised by Ray for something that failed in a worker: the
        worker's own PacktoolError (same class, same message) where there is one in the chain."""
        seen, todo = set(), [e]
        while todo:
            x = todo.pop(0)
            if x is None or id(x) in seen:
                continue
            seen.add(id(x))
            if isinstance(x, PacktoolError):
                return type(x)(*x.args) if type(x) in (PacktoolError, UsageError) else x
            todo += [getattr(x, "cause", None), x.__cause__, x.__context__]
        first = (str(e).strip().splitlines() or [""])[-1][:300]
        return PacktoolError(f"a Ray worker failed: {type(e).__name__}: {first}")


def _quiet_data() -> None:
    from ray.data import DataContext

    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False
    for attr in ("print_on_execution_start", "enable_operator_progress_bars"):
        if hasattr(ctx, attr):
            setattr(ctx, attr, False)


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
