"""The temporary folders a run makes beside what it writes, named by their owner, and the removal
of those whose owner died (kill -9, a crash, a machine lost) by the next run that writes there.

    .OUT.packtool-tmp-<pid>-<host>-XXXXXXXX     a pack or an export being written (io.shards)
    .OUT.packtool-old-<pid>-<host>-XXXXXXXX     the OUT it replaces, for the moment of the swap
    .packtool-ray-parts-<pid>-<host>-XXXXXXXX   a Ray run's encoded parts (cluster.session)

A folder is taken for dead only when it was made on this machine (<host>: its name, hashed) and no
process has its <pid>; another machine's run on shared storage, a live run and a folder named
otherwise are never touched.

An `old` folder whose OUT is missing holds the only copy of the OUT that a run was replacing when
it died: it is kept, and said, never removed.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
import tempfile
from pathlib import Path

_NAME = re.compile(
    r"\.(?:(?P<out>.+)\.)?packtool-(?P<kind>tmp|old|ray-parts)-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-"
    r"[A-Za-z0-9_]+"
)
WHAT = {"tmp": "temporary folder", "old": "replaced output", "ray-parts": "Ray parts folder"}


def host_tag() -> str:
    """8 hex digits naming this machine (its host name, hashed: any name gives a plain tag)."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def make(parent: str | Path | None, prefix: str) -> Path:
    """A new folder `prefix<pid>-<host>-XXXXXXXX` in `parent` (None: the system's temporary
    folder); `prefix` ends in one of the kinds above and a dash (".OUT.packtool-tmp-")."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{host_tag()}-", dir=parent))


def alive(pid: int) -> bool:
    """Whether a process has this pid on this machine (another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # not a pid at all
        return False
    return True


def remove_dead(parent: str | Path | None) -> list[str]:
    """Remove the folders of runs that died from `parent` (None: the system's temporary folder);
    one line for each folder removed, or kept (an `old` folder whose OUT is gone: the only copy)."""
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    try:
        names = [e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    here, said = host_tag(), []
    for name in sorted(names):
        m = _NAME.fullmatch(name)
        if m is None or m["host"] != here or alive(int(m["pid"])):
            continue
        path, pid, kind = parent / name, int(m["pid"]), m["kind"]
        if kind == "old" and m["out"] and not (parent / m["out"]).exists():
            said.append(
                f"kept {path}: it holds {parent / m['out']} as it was before a run that died "
                f"(pid {pid}) began replacing it; move {path / 'old'} back to {parent / m['out']}"
            )
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            said.append(f"removed {path}, a leftover {WHAT[kind]} of a run that died (pid {pid})")
    return said
