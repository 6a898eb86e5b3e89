"""The folder of a local Ray cluster that packtool starts, named by its driver, and the end of the
cluster's processes when the driver dies (kill -9, the OOM killer, a lost terminal).

    <root>/packtool-ray-<pid>-<host>/       Ray's temporary folder (ray.init's _temp_dir): its
        session_<date>_<pid>/logs, sockets       sessions, logs, sockets and spilled objects
        ended                                    written when the run ended with an error (its
                                                 logs are kept for the message that names them)

<root> is where Ray puts /tmp/ray ($RAY_TMPDIR, $TMPDIR on Linux, else /tmp; /tmp where that path
leaves no room for Ray's socket names, 107 bytes). <pid> is the driver, <host> io.leftovers's
8 hex digits of the machine. Ray's GCS and raylet die with the driver (PR_SET_PDEATHSIG), but the
raylet's two agents notice and then wait for the dead GCS for a minute (Ray 2.60), and nothing
else of Ray's stops them. Two things do:

    watch(folder) -> Watcher     a small process (its own session: a terminal's signals pass it
                                 by) that waits on a pipe from the driver: the driver's end
                                 closing without `done()` means it died; the watcher stops every
                                 process of the folder and removes it
    remove_dead() -> [line]      in every Ray run: the folders of drivers that died on this
                                 machine whose watcher died too (kill -9 of the whole group):
                                 their processes stopped, the folder removed, one line each

A process is the folder's (/proc, Linux) when its environment has PACKTOOL_RAY_CLUSTER=<folder>,
which the driver sets while ray.init starts the GCS and the raylet and their agents and workers
inherit (though Ray's renaming of a process may blank it), or when it is a Python or Ray program
whose command line or open files name a path in the folder (the GCS and raylet their arguments,
agents their logs, workers their stdout; a `tail -f` of a log is neither). A folder of a live
driver, of another machine or another user, and any folder named otherwise (/tmp/ray of
`ray start` and of other programs) are never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

PREFIX = "packtool-ray-"
_NAME = re.compile(r"packtool-ray-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})")
MARK = "PACKTOOL_RAY_CLUSTER"  # in the environment of the cluster's processes: its folder
_PYTHON = re.compile(r"python[0-9.]*")
ENDED = "ended"  # in a folder kept after a run that ended with an error: no driver died there
# the longest of Ray's socket paths below the folder: session_<date>_<usec>_<pid>/sockets/plasma_store
_SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_") + len("/sockets/plasma_store")
_SOCKET_MAX = 103 if sys.platform == "darwin" else 107  # AF_UNIX path bytes, as Ray counts


def _ray_root() -> Path:
    """Where Ray puts its own folder, `ray`: $RAY_TMPDIR, $TMPDIR on Linux, else /tmp (Ray's
    own rule, ray._common.utils)."""
    try:
        from ray._common.utils import get_default_system_temp_dir as root
    except ImportError:  # an older Ray
        try:
            from ray._private.utils import get_user_temp_dir as root
        except ImportError:
            return Path("/tmp")
    return Path(root())


def roots() -> list[Path]:
    """The folders a local cluster's folder may be in: Ray's root, and /tmp (its fallback)."""
    return list(dict.fromkeys([_ray_root(), Path("/tmp")]))


def folder_for(pid: int) -> Path:
    from packtool.io.leftovers import host_tag

    name = f"{PREFIX}{pid}-{host_tag()}"
    root = _ray_root()
    if len(os.fsencode(root / name)) + _SOCKET_TAIL + len(str(pid)) > _SOCKET_MAX:
        root = Path("/tmp")
    return root / name


def make() -> Path:
    """A new folder for this process's local cluster. One there already is a dead process's that
    had this pid: its processes are stopped and it is removed first."""
    folder = folder_for(os.getpid())
    if folder.exists():
        stop(folder)
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def members(folder: Path) -> list[int]:
    """The processes of this user (not this one) that are the cluster's in `folder`: with
    MARK=`folder` in their environment, or a Python or Ray program with a path in `folder` in its
    command line or among its open files; none where there is no /proc."""
    mark = f"{MARK}={folder}".encode()
    paths = {f"{folder}/", f"{os.path.realpath(folder)}/"}
    me, uid, found = os.getpid(), os.getuid(), []
    try:
        entries = [e.name for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        return []
    for name in entries:
        try:
            if int(name) == me or (uid != 0 and os.stat(f"/proc/{name}").st_uid != uid):
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                marked = mark in f.read().split(b"\0")
            if marked or (_ray_program(name) and _names(name, paths)):
                found.append(int(name))
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


def _ray_program(pid: str) -> bool:
    """A Python interpreter (Ray's agents and workers) or one of Ray's programs (GCS, raylet)."""
    exe = os.readlink(f"/proc/{pid}/exe")
    return f"{os.sep}ray{os.sep}" in exe or _PYTHON.fullmatch(os.path.basename(exe)) is not None


def _names(pid: str, paths: set[str]) -> bool:
    """Whether the process's command line or one of its open files names a path in `paths`."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmdline = f.read()
    if any(p.encode() in cmdline for p in paths):
        return True
    fds = f"/proc/{pid}/fd"
    for fd in os.listdir(fds):
        try:
            target = os.readlink(f"{fds}/{fd}")
        except OSError:
            continue
        if any(target.startswith(p) for p in paths):
            return True
    return False


@contextmanager
def marked(folder: Path):
    """MARK=`folder` in this process's environment, which the processes started meanwhile (Ray's
    GCS and raylet, and through the raylet its agents and workers) keep."""
    os.environ[MARK] = str(folder)
    try:
        yield
    finally:
        os.environ.pop(MARK, None)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[-1].split()[0] in (b"Z", b"X")  # a zombie: ended
    except OSError:
        return True


def stop(folder: Path, wait: float = 5.0) -> int:
    """SIGKILL every process of `folder` (its driver is gone: nothing of the cluster is worth
    keeping), again for any that appear meanwhile, until none is left or `wait` seconds passed;
    how many there were."""
    killed: set[int] = set()
    deadline = time.monotonic() + wait
    while True:
        found = [p for p in members(folder) if p not in killed or not _gone(p)]
        if not found:
            return len(killed)
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.05)


def remove_dead(where: list[Path] | None = None) -> list[str]:
    """Stop the processes of the clusters whose driver died here and remove their folders (in
    `where`, default `roots()`); one line for each run that died."""
    from packtool.io.leftovers import alive, host_tag

    here, uid, said = host_tag(), os.getuid(), []
    for root in where if where is not None else roots():
        try:
            entries = sorted(os.scandir(root), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            m = _NAME.fullmatch(entry.name)
            try:
                if m is None or not entry.is_dir(follow_symlinks=False) or m["host"] != here:
                    continue
                if alive(int(m["pid"])) or (uid != 0 and entry.stat().st_uid != uid):
                    continue
            except OSError:
                continue
            folder, pid = Path(entry.path), int(m["pid"])
            ended = (folder / ENDED).exists()
            n = stop(folder)
            shutil.rmtree(folder, ignore_errors=True)
            if n:
                died = "an earlier run" if ended else "a run that died"
                said.append(
                    f"stopped {n} Ray process{'es' * (n != 1)} of {died} (pid {pid}) and "
                    f"removed {folder}"
                )
            elif not ended and not folder.exists():
                said.append(
                    f"removed {folder}, a leftover Ray cluster folder of a run that died (pid {pid})"
                )
    return said


class Watcher:
    """The driver's end of a watcher process (`watch`)."""

    def __init__(self, proc: subprocess.Popen, pipe: int):
        self.proc, self._pipe = proc, pipe

    def done(self) -> None:
        """The driver ended its cluster itself: the watcher leaves without doing anything."""
        if self._pipe < 0:
            return
        try:
            os.write(self._pipe, b".")
        except OSError:  # the watcher is gone already
            pass
        os.close(self._pipe)
        self._pipe = -1
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def watch(folder: Path) -> Watcher | None:
    """Start the watcher of `folder` (module docstring); None where it cannot start (the next Ray
    run is left to clean up). The driver keeps the pipe's write end, which no child inherits
    (os.pipe: close-on-exec)."""
    read, write = os.pipe()
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); "
        "from packtool.cluster.reaper import _watcher; _watcher(sys.argv[2])"
    )
    package_parent = str(Path(__file__).resolve().parents[2])
    try:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code, package_parent, str(folder)],
            stdin=read,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        os.close(write)
        return None
    finally:
        os.close(read)
    return Watcher(proc, write)


def _watcher(folder: str) -> None:
    """The watcher process: wait for the driver's word or its death (end of the pipe)."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's, should one reach it
        signal.signal(sig, signal.SIG_IGN)
    try:
        word = os.read(0, 1)
    except OSError:
        word = b""
    if word:
        return
    stop(Path(folder))
    shutil.rmtree(folder, ignore_errors=True)
