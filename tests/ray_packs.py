"""Helpers of the Ray engine's tests (tests/cluster): both engines on the same input, folders compared."""

from __future__ import annotations

import filecmp
from pathlib import Path

from typer.testing import CliRunner

from packtool.cli import app

runner = CliRunner()

# the option sets every shared file is packed with, by both engines (tests/cluster) and against the
# golden packs (tests/pack/test_golden_shared.py)
OPTION_SETS = {
    "default": ["--len", "2048", "--on-error", "skip", "--shard-rows", "4"],
    "split-padded": [
        "--len", "1024", "--overflow", "split", "--pad-to-multiple", "8", "--shard-rows", "3",
        "--on-error", "skip",
    ],
    "truncate-fixed": [
        "--len", "512", "--overflow", "truncate", "--max-docs", "3", "--fixed-docs", "--order",
        "random", "--seed", "3", "--on-error", "skip", "--shard-rows", "2", "--train-on", "last",
    ],
}  # fmt: skip


def cli(*args: str):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})


def pack_both(data, tmp: Path, *options: str, workers: int = 2) -> tuple[Path, Path]:
    """`packtool pack DATA OPTIONS` with each engine (no cache for the local one); both folders."""
    local, on_ray = tmp / "local", tmp / "ray"
    a = cli("pack", data, "--out", local, "--no-cache", *options)
    assert a.exit_code == 0, a.output
    b = cli("pack", data, "--out", on_ray, "--engine", "ray", "--num-proc", workers, *options)
    assert b.exit_code == 0, b.output
    assert_no_scratch(tmp)
    return local, on_ray


def assert_no_scratch(folder: Path) -> None:
    """The Ray engine left none of its part files (a folder beside the pack) behind."""
    assert not list(folder.glob(".packtool-ray-parts-*"))


def assert_same_folders(a: Path, b: Path) -> None:
    """The same files with the same bytes (the manifest and every shard)."""
    names_a = sorted(p.relative_to(a).as_posix() for p in a.rglob("*") if p.is_file())
    names_b = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file())
    assert names_a == names_b
    assert len(names_a) >= 2
    for name in names_a:
        assert filecmp.cmp(a / name, b / name, shallow=False), f"{name} differs"
