"""Shards written by forked processes (pack.write.write_in_processes): every file byte-identical
to one process's, errors and Ctrl-C as in-process (the same error, no output folder left)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError
from packtool.io import shards
from packtool.pack import PackConfig, pack_tokenized
from packtool.pack import write as pack_write
from packtool.verify import selftest as st


def _data(n=300):
    docs = st.make_documents(n, seed=5, min_len=2, max_len=90)
    return TokenizedData.from_lists(
        [d[0].tolist() for d in docs],
        [d[1].tolist() for d in docs],
        tokenizer={"name": "synthetic", "pad_id": 0},
        format="synthetic",
    )


def _bytes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def always(monkeypatch):
    """Processes for any pack, however small, on any machine (the thresholds are for speed, not
    correctness)."""
    monkeypatch.setattr(pack_write, "PROCESS_MIN_TOKENS", 0)
    monkeypatch.setattr(pack_write, "usable_cores", lambda: 64)


@pytest.mark.parametrize(
    "kw",
    [{}, {"pad_to_multiple": 8}, {"fixed_docs": True, "max_docs": 4}, {"shuffle": False}],
)
def test_processes_write_the_bytes_of_one_process(tmp_path, always, kw):
    data, cfg = _data(), PackConfig(pack_len=128, shard_rows=9, **kw)
    one = pack_tokenized(data, cfg, tmp_path / "one")
    seen = []
    three = pack_tokenized(
        data, cfg, tmp_path / "three", procs=3, progress=lambda r, t: seen.append((r, t))
    )
    assert len(one.manifest["shards"]) > 3
    assert _bytes(tmp_path / "one") == _bytes(tmp_path / "three")
    assert one.manifest == three.manifest
    assert seen[-1] == (three.manifest["counts"]["rows"],) * 2


def test_small_packs_stay_in_this_process(monkeypatch):
    monkeypatch.setattr(pack_write, "usable_cores", lambda: 64)
    assert pack_write.processes(4, 10, pack_write.PROCESS_MIN_TOKENS - 1) == 1
    monkeypatch.setattr(pack_write, "PROCESS_MIN_TOKENS", 0)
    assert pack_write.processes(4, 10, 1) == 4
    assert pack_write.processes(4, 2, 1) == 2
    assert pack_write.processes(1, 10, 1) == 1


@pytest.mark.parametrize("cores, want", [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_one_writing_process_per_two_cores(monkeypatch, cores, want):
    """One process keeps 2 cores busy: on 2 cores a second one made the pack slower (0.79x)."""
    monkeypatch.setattr(pack_write, "PROCESS_MIN_TOKENS", 0)
    monkeypatch.setattr(pack_write, "usable_cores", lambda: cores)
    assert pack_write.processes(16, 100, 1) == want


def test_the_cli_passes_num_proc_to_the_writers(tmp_path, monkeypatch):
    """`packtool pack --num-proc N` lets the shard writers use N processes (the same bytes)."""
    from packtool.pack import run as pack_run

    seen = []
    real = pack_run.processes
    monkeypatch.setattr(pack_run, "processes", lambda p, *a: seen.append(p) or real(p, *a))
    src = tmp_path / "d.jsonl"
    src.write_text("\n".join(f'{{"input_ids": [{i}, 2, 3]}}' for i in range(1, 40)) + "\n")
    from typer.testing import CliRunner

    from packtool.cli import app

    for n in (1, 3):
        args = ["pack", str(src), "--len", "16", "--out", str(tmp_path / f"o{n}"), "--no-cache"]
        r = CliRunner().invoke(app, [*args, "--num-proc", str(n)])
        assert r.exit_code == 0, r.output
    assert seen == [1, 3]
    assert _bytes(tmp_path / "o1") == _bytes(tmp_path / "o3")


def test_a_writer_process_error_is_the_error_of_one_process(tmp_path, always, monkeypatch):
    real = shards.ShardWriter.write

    def full(self, table):
        if "00003-of" in self.relpath:
            raise OSError(28, "No space left on device")
        real(self, table)

    monkeypatch.setattr(shards.ShardWriter, "write", full)
    cfg = PackConfig(pack_len=128, shard_rows=9)
    errors = []
    for procs, name in ((1, "one"), (3, "three")):
        with pytest.raises(PacktoolError) as e:  # a full disk: one line naming the shard
            pack_tokenized(_data(), cfg, tmp_path / name, procs=procs)
        said = str(e.value).replace(name, "OUT")
        errors.append(re.sub(r"\(\d+ MiB free in ", "(N MiB free in ", said))
    assert errors[0] == errors[1]
    assert "/OUT: no space left on device while writing it" in errors[0]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_processes_write_leaves_no_folder(tmp_path, always):
    def interrupt(rows, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        pack_tokenized(
            _data(), PackConfig(pack_len=128, shard_rows=9), tmp_path / "o", interrupt, procs=3
        )
    assert list(tmp_path.iterdir()) == []


def test_a_writer_process_that_dies_is_one_error(tmp_path, always, monkeypatch):
    import os

    def killed(self, table):
        os._exit(9)

    monkeypatch.setattr(shards.ShardWriter, "write", killed)
    with pytest.raises(PacktoolError, match="a shard writer process died"):
        pack_tokenized(_data(), PackConfig(pack_len=128, shard_rows=9), tmp_path / "o", procs=2)
    assert list(tmp_path.iterdir()) == []


CTRL_C = """
import faulthandler, os, sys, time
faulthandler.enable()  # a crash while Ctrl-C unwinds says where (it once died of SIGSEGV, silent)
from packtool.io import shards
from packtool.pack import PackConfig, pack_tokenized, write
sys.path.insert(0, sys.argv[2])
from test_write_processes import _data

write.PROCESS_MIN_TOKENS = 0
write.usable_cores = lambda: 64  # writer processes on any machine (2 cores gave one: threads)
real = shards.ShardWriter.write

def slow(self, table):
    os.write(1, b"writing\\n")  # one write a line: the writer processes print at once
    time.sleep(0.5)
    real(self, table)

shards.ShardWriter.write = slow
pack_tokenized(_data(), PackConfig(pack_len=128, shard_rows=9), sys.argv[1], procs=2)
"""


def test_a_real_ctrl_c_reaches_every_process_and_leaves_no_folder(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "packs" / "o"
    out.parent.mkdir()
    child = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, str(out), str(Path(__file__).parent)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the terminal's Ctrl-C reaches them all
        # as at a terminal: pytest started in the background (`cmd &`) passes SIGINT on ignored
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # two writer processes print at once, so their lines may interleave: wait for the first word
    assert child.stdout.readline().startswith("writing")
    os.killpg(child.pid, signal.SIGINT)
    _, err = child.communicate(timeout=60)
    assert "KeyboardInterrupt" in err and child.returncode != 0, (child.returncode, err)
    assert list(out.parent.iterdir()) == []
