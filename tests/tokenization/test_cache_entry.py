"""The cache entry writer: batches written by its own thread, in order, and its errors raised to the caller."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from packtool.data.arrow import token_batch, token_schema
from packtool.tokenization import cache


def batches(n: int = 7):
    rng = np.random.default_rng(3)
    for b in range(n):
        lens = rng.integers(1, 50, 40)
        off = np.concatenate([[0], np.cumsum(lens)])
        ids = rng.integers(0, 1000, off[-1]).astype(np.int32)
        yield token_batch(ids, np.where(ids % 3 == 0, -100, ids), off, np.arange(40) + 40 * b)


def test_the_entry_holds_every_batch_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    sent = list(batches())
    with cache.EntryWriter("k", token_schema()) as w:
        for b in sent:
            w.write(b)
        path = w.commit({"x": 1})
    entry = cache.open_entry(path)
    assert entry is not None and entry.table.to_batches() == sent
    assert not list(tmp_path.glob("work-*"))


def test_a_write_error_in_the_thread_reaches_the_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))

    def no_space(self, b):
        raise full

    with pytest.raises(OSError, match="No space left"):
        with cache.EntryWriter("k", token_schema()) as w:
            monkeypatch.setattr(cache._HashingFile, "write", no_space)
            for b in batches(50):  # an error is raised by a later write, or by commit
                w.write(b)
            w.commit({})
    assert not list(tmp_path.glob("work-*")) and not cache.entry_path("k").exists()
