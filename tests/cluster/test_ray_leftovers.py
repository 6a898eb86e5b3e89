"""What a Ray driver killed with kill -9 leaves of the local cluster it started (cluster.reaper):
its watcher stops the cluster's processes and removes its folder; where the watcher died too, the
next Ray run does, and says so in one line. A live driver's cluster, another machine's, and a
folder packtool did not name are never touched. The decisions run on fake cluster folders and
harmless sleeping processes; one slow test kills a real `packtool pack --engine ray`."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from packtool.cluster import reaper
from packtool.cluster.session import Session
from packtool.demo_data import write_sample
from packtool.io import leftovers

HOST = leftovers.host_tag()
OTHER_HOST = "00000000" if HOST != "00000000" else "11111111"
SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _process(folder: Path, how: str) -> subprocess.Popen:
    """A sleeping process tied to `folder` as Ray's are: "mark" its environment, "arg" a path in
    its command line (the GCS, the raylet), "log" its stdout in the folder (a worker); "tail" a
    `tail -f` of a log there, which is not the cluster's."""
    logs = folder / "session_1" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != reaper.MARK}
    if how == "mark":
        return subprocess.Popen(SLEEP, env={**env, reaper.MARK: str(folder)})
    if how == "arg":
        return subprocess.Popen([*SLEEP, f"--log_dir={logs}"], env=env)
    with open(logs / "worker.out", "w") as out:  # (closed here: only the child holds it)
        if how == "log":
            return subprocess.Popen(SLEEP, stdout=out, env=env)
    return subprocess.Popen(["tail", "-f", str(logs / "worker.out")], env=env)


def _end(procs) -> None:
    for p in procs:
        p.kill()
        p.wait()


def test_a_dead_drivers_cluster_is_stopped_removed_and_said_once(tmp_path):
    dead = _dead_pid()
    folders = {
        "dead": tmp_path / f"{reaper.PREFIX}{dead}-{HOST}",
        "live": tmp_path / f"{reaper.PREFIX}{os.getpid()}-{HOST}",
        "other machine": tmp_path / f"{reaper.PREFIX}{dead}-{OTHER_HOST}",
        "ray start": tmp_path / "ray" / f"session_2026-01-01_00-00-00_000000_{dead}",
    }
    cluster = [_process(folders["dead"], how) for how in ("mark", "arg", "log")]
    kept = [
        _process(folders["dead"], "tail"),
        _process(folders["live"], "mark"),
        _process(folders["other machine"], "mark"),
        _process(folders["ray start"], "arg"),
    ]
    try:
        assert sorted(reaper.members(folders["dead"])) == sorted(p.pid for p in cluster)
        said = reaper.remove_dead([tmp_path, tmp_path / "ray"])
        assert said == [
            f"stopped 3 Ray processes of a run that died (pid {dead}) and removed {folders['dead']}"
        ]
        assert [p.wait(5) for p in cluster] == [-signal.SIGKILL] * 3
        assert [p.poll() for p in kept] == [None] * 4
        assert not folders["dead"].exists()
        assert all(folders[k].is_dir() for k in ("live", "other machine", "ray start"))
        assert reaper.remove_dead([tmp_path]) == []  # said once
    finally:
        _end(cluster + kept)


def test_a_dead_drivers_folder_without_processes_and_a_failed_runs_kept_logs(tmp_path):
    dead = _dead_pid()
    died = tmp_path / f"{reaper.PREFIX}{dead}-{HOST}"
    (died / "session_1" / "logs").mkdir(parents=True)
    failed = tmp_path / f"{reaper.PREFIX}{_dead_pid()}-{HOST}"
    failed.mkdir()
    (failed / reaper.ENDED).touch()  # a run that ended with an error kept its logs
    not_a_folder = tmp_path / f"{reaper.PREFIX}{_dead_pid()}-{HOST}"
    not_a_folder.write_text("")
    assert reaper.remove_dead([tmp_path]) == [
        f"removed {died}, a leftover Ray cluster folder of a run that died (pid {dead})"
    ]
    assert not died.exists() and not failed.exists() and not_a_folder.is_file()


def test_the_watcher_stops_the_cluster_when_the_driver_dies_and_not_when_it_ends(tmp_path):
    ends, dies = tmp_path / "ends", tmp_path / "dies"
    procs = {f: [_process(f, "mark"), _process(f, "log")] for f in (ends, dies)}
    try:
        ended = reaper.watch(ends)
        ended.done()  # the driver stopped its cluster itself
        assert ended.proc.returncode == 0
        died = reaper.watch(dies)
        os.close(died._pipe)  # the driver's end of the pipe closes without a word: it died
        assert died.proc.wait(10) == 0
        assert [p.wait(5) for p in procs[dies]] == [-signal.SIGKILL] * 2
        assert not dies.exists()
        assert [p.poll() for p in procs[ends]] == [None] * 2 and ends.is_dir()
    finally:
        _end(procs[ends] + procs[dies])


def test_a_local_clusters_folder_is_removed_at_the_end_and_kept_after_an_error(tmp_path):
    for failed in (False, True):
        s = Session()
        s._folder = tmp_path / f"{reaper.PREFIX}{os.getpid()}-{HOST}"
        straggler = _process(s._folder, "mark")  # still running after ray.shutdown
        s._watcher = reaper.watch(s._folder)
        try:
            s._end_local(failed=failed)
            assert straggler.wait(5) == -signal.SIGKILL
            assert s._watcher.proc.returncode == 0
            assert (s._folder / reaper.ENDED).is_file() if failed else not s._folder.exists()
        finally:
            _end([straggler])


def test_the_folder_is_where_rays_would_be_unless_its_sockets_would_not_fit(monkeypatch):
    monkeypatch.setenv("RAY_TMPDIR", "/var/tmp")
    assert reaper.folder_for(4194304) == Path(f"/var/tmp/{reaper.PREFIX}4194304-{HOST}")
    assert reaper.roots() == [Path("/var/tmp"), Path("/tmp")]
    monkeypatch.setenv("RAY_TMPDIR", "/var/tmp/" + "x" * 40)
    assert reaper.folder_for(4194304) == Path(f"/tmp/{reaper.PREFIX}4194304-{HOST}")


def _wait(what, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.1)
    return what()


def _watcher_of(folder: Path) -> int | None:
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except (OSError, ValueError):
            continue
        if any(b"_watcher" in a for a in args) and str(folder).encode() in args:
            return int(name)
    return None


@pytest.mark.slow
@pytest.mark.xdist_group("ray")
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_kill_9_of_a_real_ray_driver_leaves_nothing_running(tmp_path):
    pytest.importorskip("ray")
    data, small = tmp_path / "s.jsonl", tmp_path / "small.jsonl"
    write_sample(data, n=20000)  # long enough to be killed while it runs
    write_sample(small, n=200)
    root = Path(tempfile.mkdtemp(prefix="p", dir="/tmp"))  # short: Ray's sockets are below
    env = {**os.environ, "RAY_TMPDIR": str(root)}
    env.pop(reaper.MARK, None)
    cmd = [sys.executable, "-m", "packtool", "pack", "--len", "4096", "--engine", "ray"]
    cmd += ["--num-proc", "2", "--force"]
    folders = []
    try:
        for also_the_watcher in (False, True):
            out = tmp_path / f"o{int(also_the_watcher)}"
            driver = subprocess.Popen([*map(str, cmd), str(data), "--out", str(out)], env=env)
            folder = root / f"{reaper.PREFIX}{driver.pid}-{HOST}"
            folders.append(folder)
            # up: the GCS, the raylet and both agents (those that outlived the driver before)
            up = lambda f=folder, d=driver: len(reaper.members(f)) >= 4 or d.poll() is not None  # noqa: E731
            assert _wait(up)
            assert driver.poll() is None, "the run ended before it could be killed"
            watcher = _watcher_of(folder)
            assert watcher is not None
            if also_the_watcher:
                os.kill(watcher, signal.SIGKILL)
            driver.kill()
            driver.wait()
            if not also_the_watcher:  # the watcher stops them and removes the folder
                assert _wait(lambda f=folder: not reaper.members(f) and not f.exists(), 10)
                continue
            assert reaper.members(folder)  # Ray's agents still wait for the dead GCS
            r = subprocess.run(  # the next run
                [*map(str, cmd), str(small), "--out", str(out)],
                env=env,
                capture_output=True,
                text=True,
            )
            assert r.returncode == 0, r.stderr
            said = " ".join(r.stdout.split() + r.stderr.split())
            assert f"of a run that died (pid {driver.pid}) and removed {folder}" in said
            assert "stopped" in said and "Traceback" not in said
            assert not reaper.members(folder) and not folder.exists()
        assert not list(root.iterdir())  # the next run's own folder is gone too
    finally:
        for folder in folders:
            reaper.stop(folder)
        shutil.rmtree(root, ignore_errors=True)
