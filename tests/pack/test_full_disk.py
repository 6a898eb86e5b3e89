"""A disk that fills while `pack` or `export` writes: one line naming the file that was being
written (as it would have been named in --out), the folder and its free space, that nothing was
written and an earlier --out is unchanged, and the fix; exit 1; no temporary folder left behind.

The disk is simulated: the function that writes the bytes raises OSError(ENOSPC) as write(2)
does, with no file name (pyarrow's sinks and Python's file objects give none)."""

from __future__ import annotations

import errno
import hashlib
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from packs import make_docs, real_pack
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.export import nemo
from packtool.io import files


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PACKTOOL_DEBUG", raising=False)
    monkeypatch.setenv("PACKTOOL_MIN_FREE_MIB", "0")  # the early free-space check passes


@pytest.fixture
def pretok(tmp_path) -> Path:
    ids = [[(7 * i + t) % 100 + 1 for t in range(1 + i % 14)] for i in range(40)]
    path = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), path)
    return path


def _full(*a, **k):
    raise OSError(errno.ENOSPC, "No space left on device")


def _tree(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _one_error(res) -> str:
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error: ")]
    assert len(lines) == 1 and "Traceback" not in res.output, res.output
    return lines[0]


def _pack(pretok, out, *more):
    cmd = ["pack", str(pretok), "--len", "16", "--out", str(out), "--shard-rows", "4", *more]
    return CliRunner().invoke(app, cmd)


@pytest.mark.parametrize("force", [False, True], ids=["new-out", "force"])
def test_pack_on_a_full_disk_names_the_shard_and_keeps_the_old_pack(
    tmp_path, pretok, monkeypatch, force
):
    out = tmp_path / "out"
    if force:
        assert _pack(pretok, out).exit_code == 0
        before = _tree(out)
    monkeypatch.setattr(files.HashedSink, "write", _full)
    line = _one_error(_pack(pretok, out, *(["--force"] if force else [])))
    shard = f"{out / schema.DATA_DIR}/train-00000-of-0000"
    assert line.startswith(f"error: {shard}"), line
    assert ".parquet: no space left on device while writing it (" in line
    assert f" MiB free in {tmp_path}); nothing was written" in line
    assert line.endswith(" — free space there, or choose another --out")
    if force:
        assert f"{out} is unchanged" in line
        assert _tree(out) == before  # the earlier pack, byte for byte
    else:
        assert f"{out} was not created" in line and not out.exists()
    assert not [p.name for p in tmp_path.iterdir() if "packtool-" in p.name]


def test_pack_when_the_manifest_does_not_fit(tmp_path, pretok, monkeypatch):
    write_text = Path.write_text

    def full_for_the_manifest(self, *a, **k):
        if self.name == schema.MANIFEST:
            _full()
        return write_text(self, *a, **k)

    monkeypatch.setattr(Path, "write_text", full_for_the_manifest)
    line = _one_error(_pack(pretok, tmp_path / "out"))
    assert line.startswith(f"error: {tmp_path / 'out' / schema.MANIFEST}: no space left"), line


@pytest.mark.parametrize("force", [False, True], ids=["new-out", "force"])
def test_export_on_a_full_disk_names_the_npy_and_keeps_the_old_export(tmp_path, monkeypatch, force):
    real_pack(tmp_path / "pack", make_docs(20), 32)
    out = tmp_path / "nemo"
    cmd = ["export", str(tmp_path / "pack"), "--to", "nemo", "--out", str(out)]
    if force:
        assert CliRunner().invoke(app, cmd).exit_code == 0
        before = _tree(out)
        cmd.append("--force")

    def full_after_opening(path, arr):
        with open(path, "wb") as f:
            f.write(b"\x93NUMPY")
            _full()

    monkeypatch.setattr(nemo, "save_object_npy", full_after_opening)
    line = _one_error(CliRunner().invoke(app, cmd))
    assert line.startswith(f"error: {out / 'training_32.npy'}: no space left on device"), line
    assert "free space there, or choose another --out" in line
    if force:
        assert _tree(out) == before
        assert json.loads((out / "export.json").read_text())["packtool_export"] == "nemo"
    else:
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [*(["nemo"] * force), "pack"]


def test_a_quota_is_named_as_such(tmp_path, pretok, monkeypatch):
    def quota(*a, **k):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(files.HashedSink, "write", quota)
    line = _one_error(_pack(pretok, tmp_path / "out"))
    assert "disk quota exceeded while writing it" in line
    assert "free space under your quota there" in line
