"""What a run killed with kill -9 leaves beside --out (io.files): the next export there removes
it and says so in one line; a live run's folder, another machine's, and the only copy of a
replaced output are never removed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from packs import make_docs, real_pack
from typer.testing import CliRunner

from packtool.cli import app
from packtool.io import files


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    assert not files.alive(p.pid)
    return p.pid


@pytest.fixture
def live_pid():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield p.pid
    p.kill()
    p.wait()


def leftover(parent, prefix: str, pid: int, host: str | None = None):
    """A folder as a run of `pid` makes it, with a file inside (a half-written shard)."""
    folder = parent / f"{prefix}{pid}-{host or files.host_tag()}-k3x9_q2a"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "train-00000-of-00002.parquet").write_bytes(b"PAR1 half written")
    return folder


def test_export_removes_what_a_dead_export_left_and_says_so(tmp_path):
    real_pack(tmp_path / "pack", make_docs(20), 32)
    pid = dead_pid()
    left = leftover(tmp_path, ".nemo.packtool-tmp-", pid)
    report = tmp_path / "report.json"
    cmd = ["export", str(tmp_path / "pack"), "--to", "nemo", "--out", str(tmp_path / "nemo")]
    res = CliRunner().invoke(app, [*cmd, "--json", str(report)])
    assert res.exit_code == 0, res.output
    assert not left.exists()
    line = f"removed {left}, a leftover temporary folder of a run that died (pid {pid})"
    warnings = json.loads(report.read_text())["warnings"]
    assert [(w["code"], w["message"]) for w in warnings] == [("leftover", line)]
    assert line in "".join(res.output.split("\n"))  # shown as a warning (wrapped to the terminal)
    report.unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nemo", "pack"]


def test_a_live_run_and_another_machine_are_left_alone(tmp_path, live_pid):
    live = leftover(tmp_path, ".nemo.packtool-tmp-", live_pid)
    elsewhere = leftover(tmp_path, ".nemo.packtool-tmp-", dead_pid(), host="0badc0de")
    unnamed = tmp_path / ".nemo.packtool-tmp-abc123"  # an older packtool's: no pid to ask
    unnamed.mkdir()
    assert files.host_tag() != "0badc0de"
    assert files.remove_dead(tmp_path) == []
    assert live.exists() and elsewhere.exists() and unnamed.exists()


def test_every_kind_of_folder_of_a_dead_run_goes(tmp_path):
    (tmp_path / "out").mkdir()
    pid = dead_pid()
    left = [
        leftover(tmp_path, ".out.packtool-tmp-", pid),
        leftover(tmp_path, ".out.packtool-old-", pid),  # out is there: the swap was done
        leftover(tmp_path, ".packtool-ray-parts-", pid),
    ]
    said = files.remove_dead(tmp_path)
    assert not any(p.exists() for p in left)
    assert sorted(said) == sorted(
        f"removed {p}, a leftover {what} of a run that died (pid {pid})"
        for p, what in zip(
            left, ["temporary folder", "replaced output", "Ray parts folder"], strict=True
        )
    )
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_the_only_copy_of_a_replaced_output_is_kept(tmp_path):
    """A run killed between its two renames: OUT is gone, its old contents are in the old folder."""
    pid = dead_pid()
    old = leftover(tmp_path, ".out.packtool-old-", pid)
    (old / "data").rename(old / "old")
    said = files.remove_dead(tmp_path)
    assert old.exists()
    assert said == [
        f"kept {old}: it holds {tmp_path / 'out'} as it was before a run that died (pid {pid}) "
        f"began replacing it; move {old / 'old'} back to {tmp_path / 'out'}"
    ]


def test_a_run_names_its_folders_so_that_they_can_be_found(tmp_path):
    folder = files.owned_folder(tmp_path, ".x.packtool-tmp-")
    assert folder.name.startswith(f".x.packtool-tmp-{__import__('os').getpid()}-")
    assert files.remove_dead(tmp_path) == [] and folder.exists()  # this run: alive
