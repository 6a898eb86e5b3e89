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


def _quiet_data() -> None:
    from ray.data import DataContext  # (configures Ray Data's loggers: quieted after it)

    for name in ("ray", "ray.data"):  # a worker's failure is reported once, by packtool
        logging.getLogger(name).setLevel(logging.CRITICAL)
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
