"""Ray agents left running by a local cluster whose driver was killed are stopped by the next local
cluster packtool starts, and said; a live cluster's agents (their parent a raylet) are never touched.

The fast tests stand in for Ray with processes named as the kernel shows Ray's agents and raylet
(prctl PR_SET_NAME); the slow one kills a real `pack --engine ray` driver with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from packtool.cluster import session as agents

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

# a process that renames itself (the kernel's comm) and sleeps; with a child name it first starts
# that child (so the child's parent carries the first name)
NAMED = """
import ctypes, subprocess, sys, time
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)
if len(sys.argv) > 2:
    child = subprocess.Popen([sys.executable, "-c", sys.argv[3], sys.argv[2]])
    print(child.pid, flush=True)
else:
    print(0, flush=True)
time.sleep(60)
"""


def _named(name: str, child: str | None = None) -> tuple[subprocess.Popen, int]:
    args = [sys.executable, "-c", NAMED, name] + ([child, NAMED] if child else [])
    p = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    child_pid = int(p.stdout.readline())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the renames have happened
        names = [Path(f"/proc/{pid}/comm").read_text().strip() for pid in (p.pid, child_pid) if pid]
        if names == [name, child][: len(names)]:
            break
        time.sleep(0.02)
    return p, child_pid


def _gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            return True
        if state in ("Z", "X"):  # killed, not yet reaped by its parent
            return True
        time.sleep(0.02)
    return False


def test_an_agent_whose_raylet_is_gone_is_stopped_and_said():
    orphan, _ = _named("ray::RuntimeEnv")  # its parent is this test, not a raylet
    try:
        assert orphan.pid in agents.left_behind()
        lines = agents.stop_left_behind()
        assert _gone(orphan.pid)
        assert len(lines) == 1 and f"{orphan.pid}" in lines[0]
        assert "left running when its driver died" in lines[0]
    finally:
        orphan.kill()
        orphan.wait()


def test_a_live_clusters_agent_and_other_processes_are_kept():
    raylet, agent = _named("raylet", "ray::DashboardA")
    other, _ = _named("ray::Dashboard")  # a near name: not one of Ray's agents
    try:
        found = agents.left_behind()
        assert agent not in found and other.pid not in found and raylet.pid not in found
        agents.stop_left_behind()
        assert not _gone(agent, timeout=0.3) and not _gone(other.pid, timeout=0.1)
    finally:
        for p in (raylet, other):
            p.kill()
            p.wait()
        try:
            os.kill(agent, signal.SIGKILL)
        except OSError:
            pass


@pytest.mark.slow
def test_the_next_ray_run_stops_the_agents_a_killed_driver_left(tmp_path):
    """kill -9 of a real driver leaves Ray's two agents (they wait on the dead GCS); the next
    `pack --engine ray` stops them and says so."""
    pytest.importorskip("ray")
    data = tmp_path / "d.jsonl"
    with data.open("w") as f:
        for i in range(100_000):
            f.write(json.dumps({"instruction": f"say {i} " * 30, "output": "ok " * 60}) + "\n")
    cmd = [
        sys.executable,
        "-m",
        "packtool",
        "pack",
        "--len",
        "4096",
        "--engine",
        "ray",
        "--no-cache",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    driver = subprocess.Popen(
        [*cmd, str(data), "--out", str(tmp_path / "a")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    mine = []
    while time.monotonic() < deadline and len(mine) < 2 and driver.poll() is None:
        time.sleep(0.2)
        mine = [p for p in _descendants(driver.pid) if _comm(p) in agents.AGENT_NAMES]
    assert len(mine) == 2, "the driver's cluster did not start its two agents"
    driver.kill()
    driver.wait()
    time.sleep(2)  # its GCS and raylet end with it; the agents stay
    assert all(not _gone(p, timeout=0.1) for p in mine)
    small = tmp_path / "small.jsonl"
    small.write_text("".join(data.read_text().splitlines(keepends=True)[:50]))
    r = subprocess.run(
        [*cmd, str(small), "--out", str(tmp_path / "b")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert all(_gone(p) for p in mine)
    said = " ".join(r.stderr.split())
    assert "Ray agent process(es)" in said and "left running when its driver died" in said


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for e in os.scandir("/proc"):
        if e.name.isdigit():
            try:
                ppid = int(Path(f"/proc/{e.name}/stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(e.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out
