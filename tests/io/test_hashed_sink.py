"""files.HashedSink (a shard's sink: sha256 as written, O_DIRECT blocks): the file's bytes and
checksum are those of a plain write, through block boundaries, a refused O_DIRECT and the tail;
a shard written through it is the file pyarrow writes to a path."""

from __future__ import annotations

import errno
import hashlib
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from packtool import schema
from packtool.io import files, shards


def pieces(seed=0):
    """Writes of awkward sizes: empty, 1 byte, around the block size, several blocks."""
    rng = np.random.default_rng(seed)
    sizes = [0, 1, 4095, 4096, 4097, 8191, 3 * 8192 + 5, 7, 20000]
    return [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in sizes]


def write_all(path, data, chunk, monkeypatch):
    monkeypatch.setattr(files.HashedSink, "CHUNK", chunk)
    sink = files.HashedSink(path)
    for i, b in enumerate(data):
        assert sink.write(b if i % 2 else memoryview(b)) == len(b)
    size = sink.tell()
    sink.close()
    sink.close()  # twice: a no-op
    return sink, size


@pytest.mark.parametrize("chunk", [8192, 1 << 20])
def test_bytes_and_checksum_are_a_plain_writes(tmp_path, monkeypatch, chunk):
    data = pieces()
    sink, size = write_all(tmp_path / "f", data, chunk, monkeypatch)
    whole = b"".join(data)
    assert (tmp_path / "f").read_bytes() == whole and size == len(whole)
    assert sink.sha256.hexdigest() == hashlib.sha256(whole).hexdigest()
    assert sink.sha256.hexdigest() == files.sha256_file(tmp_path / "f")


def test_o_direct_refused_at_open(tmp_path, monkeypatch):
    real = os.open

    def no_direct(path, flags, *a):
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(path, flags, *a)

    monkeypatch.setattr(os, "open", no_direct)
    data = pieces(1)
    sink, _ = write_all(tmp_path / "f", data, 8192, monkeypatch)
    assert not sink._direct
    assert (tmp_path / "f").read_bytes() == b"".join(data)


def test_o_direct_refused_at_a_write(tmp_path, monkeypatch):
    real = os.write
    refused = []

    def refuse_once(fd, b):
        if not refused:
            refused.append(len(b))
            raise OSError(errno.EINVAL, "Invalid argument")
        return real(fd, b)

    monkeypatch.setattr(os, "write", refuse_once)
    data = pieces(2)
    sink, _ = write_all(tmp_path / "f", data, 8192, monkeypatch)
    assert refused and not sink._direct
    assert (tmp_path / "f").read_bytes() == b"".join(data)


def test_other_errors_are_raised(tmp_path, monkeypatch):
    def full(fd, b):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.HashedSink, "CHUNK", 8192)
    sink = files.HashedSink(tmp_path / "f")
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left"):  # the first block's, at the second's
        sink.write(b"x" * 20000)
    with pytest.raises(OSError, match="No space left"):
        sink.close()
    assert sink.closed


def test_a_shard_is_the_file_pyarrow_writes_to_a_path(tmp_path):
    rng = np.random.default_rng(0)
    L, k = 256, 40
    ids = rng.integers(0, 150000, (k, L), dtype=np.int32)
    labels = np.where(rng.random((k, L)) < 0.5, ids, -100).astype(np.int32)
    pos = np.tile(np.arange(L, dtype=np.int32), (k, 1))
    doc = np.zeros((k, L), np.int32)
    table = shards.rows_table(
        ids, labels, pos, doc, np.arange(k + 1), np.full(k, L), np.arange(k), np.full(k, L),
        (labels != -100).sum(1),
    )  # fmt: skip
    w = shards.ShardWriter(tmp_path / "a", 0, 1, L)
    for _ in range(3):
        w.write(table)
    entry = w.close()
    ref = tmp_path / "ref.parquet"
    pw = pq.ParquetWriter(str(ref), schema.arrow_schema(L, False), **shards.writer_options())
    for _ in range(3):
        pw.write_table(table, row_group_size=k)
    pw.close()
    assert w.path.read_bytes() == ref.read_bytes()
    assert entry["bytes"] == ref.stat().st_size and entry["rows"] == 3 * k
    assert entry["sha256"] == files.sha256_file(ref)
