"""The parts folder a Ray driver killed with kill -9 left beside --out is removed by the next Ray
run's Session.scratch, and said (one line, handed on as a warning of the run); a live driver's is
kept. No cluster is started: scratch() needs none."""

from __future__ import annotations

import subprocess
import sys

from packtool.cluster.session import PARTS_PREFIX, Session
from packtool.io import files


def _pid(alive: bool) -> tuple[int, subprocess.Popen]:
    code = "import time; time.sleep(60)" if alive else "pass"
    p = subprocess.Popen([sys.executable, "-c", code])
    if not alive:
        p.wait()
    return p.pid, p


def test_scratch_removes_a_dead_drivers_parts_and_keeps_a_live_ones(tmp_path):
    dead, _ = _pid(False)
    live, proc = _pid(True)
    try:
        folders = {}
        for name, pid in (("dead", dead), ("live", live)):
            folders[name] = tmp_path / f"{PARTS_PREFIX}{pid}-{files.host_tag()}-a1b2c3d4"
            folders[name].mkdir()
            (folders[name] / "part-00000.bin").write_bytes(b"\0" * 64)
        s = Session()
        s.scratch_parent = str(tmp_path)
        mine = s.scratch()
        assert mine.name.startswith(f"{PARTS_PREFIX}") and mine.is_dir()
        assert not folders["dead"].exists() and folders["live"].exists()
        assert s.leftovers == [
            f"removed {folders['dead']}, a leftover Ray parts folder of a run that died "
            f"(pid {dead})"
        ]
        s.drop(mine)
        assert not mine.exists()
    finally:
        proc.kill()
        proc.wait()
