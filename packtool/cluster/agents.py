"""Ray's two agents that a local cluster leaves running when its driver is killed, stopped by the
next local cluster packtool starts on the machine.

    driver (packtool) ── gcs_server, raylet      die with the driver (Ray sets their parent-death signal)
                          └─ raylet's children:   ray::DashboardAgent, ray::RuntimeEnvAgent
                                                  see their raylet gone, then wait on the dead GCS to
                                                  report it before they exit (Ray 2.60: up to a minute)

An agent is taken for left behind by Ray's own rule (ray._private.process_watcher): its parent is
no longer a running raylet. A live cluster's agents, this user's or another's, are never touched:
their parent is their raylet. Linux only (/proc); elsewhere nothing is stopped.
"""

from __future__ import annotations

import os
import signal

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
