"""The cache entry writer: batches written by its own thread, in order, and its errors raised to the caller."""

from __future__ import annotations

import errno

import numpy as np
import pytest

from packtool.data import labels
from packtool.data.tokenized import token_batch, token_schema
from packtool.tokenization import cache


def batches(n: int = 7):
    rng = np.random.default_rng(3)
    for b in range(n):
        lens = rng.integers(1, 50, 40)
        off = np.concatenate([[0], np.cumsum(lens)])
        ids = rng.integers(0, 1000, off[-1]).astype(np.int32)
        yield token_batch(ids, np.where(ids % 3 == 0, -100, ids), off, np.arange(40) + 40 * b)


def written(sent, meta):
    """The committed entry of these batches (under $PACKTOOL_CACHE)."""
    with cache.EntryWriter(token_schema()) as w:
        for b in sent:
            w.write(b)
        return w.commit("k", meta)


def test_the_entry_holds_every_batch_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    sent = list(batches())
    path = written(sent, {"x": 1})
    entry = cache.open_entry(path)
    assert entry is not None and labels.stored(entry.table) == "loss_mask"
    assert labels.with_labels(entry.table).to_batches() == sent  # the mask gives the labels back
    assert not list(tmp_path.glob("work-*"))


def test_the_mask_takes_a_bit_a_token(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    path = written(list(batches()), {})
    col = cache.open_entry(path).table.column("loss_mask")
    assert col.type.value_type.bit_width == 1
    ids = cache.open_entry(path).table.column("input_ids")
    for m, i in zip(col.chunks, ids.chunks, strict=True):
        assert m.values.buffers()[1].size == (len(i.values) + 7) // 8  # 32 x fewer bytes than ids'
        assert i.values.nbytes == 4 * len(i.values)


def test_a_label_neither_its_id_nor_ignored_keeps_the_labels(tmp_path, monkeypatch):
    """The batches before it were written as a mask: they are rewritten as labels, exactly."""
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    sent = list(batches())
    ids, lab = (labels.flat(sent[4].column(c))[1].copy() for c in ("input_ids", "labels"))
    lab[7] = ids[7] + 1  # a shifted label, say
    off = labels.flat(sent[4].column("input_ids"))[0]
    src = sent[4].column("source_index").to_numpy()
    sent[4] = token_batch(ids, lab, off, src)
    with cache.EntryWriter(token_schema()) as w:
        for b in sent:
            w.write(b)
        path = w.commit("k", {})
    entry = cache.open_entry(path)
    assert labels.stored(entry.table) == "labels" and entry.table.to_batches() == sent
    assert sorted(p.name for p in path.iterdir()) == ["data.arrow", "meta.json"]


def test_an_entry_of_the_labels_layout_is_recomputed_not_misread(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    with cache.EntryWriter(token_schema()) as w:
        w.write(next(batches()))
        path = w.commit("k", {})
    meta = path / "meta.json"
    meta.write_text(meta.read_text().replace(f'"format": {cache.FORMAT}', '"format": 2'))
    with pytest.warns(cache.CacheWarning, match="another packtool version"):
        assert cache.open_entry(path) is None
    assert not path.exists()


@pytest.mark.parametrize("where", ["file", "memory"])
def test_a_masked_entry_packs_the_same_shards_as_its_labels(tmp_path, monkeypatch, where):
    """pack reads the mask (pread, or labels built in memory): byte-identical shards."""
    import pyarrow as pa

    from packtool.config import PackConfig
    from packtool.data.tokenized import TokenizedData
    from packtool.pack.run import pack_tokenized

    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    sent = list(batches())
    with cache.EntryWriter(token_schema()) as w:
        for b in sent:
            w.write(b)
        path = w.commit("k", {})
    entry = cache.open_entry(path)
    masked = TokenizedData.from_table(entry.table, num_read=280)
    if where == "file":
        masked.mapped_files, masked.release_pages = [entry.mapped_file], entry.release
    plain = TokenizedData.from_table(pa.Table.from_batches(sent), num_read=280)
    for overflow in ("split", "truncate"):
        cfg = PackConfig(pack_len=32, overflow=overflow, shard_rows=5)
        a = pack_tokenized(masked, cfg, tmp_path / f"a-{overflow}").manifest
        b = pack_tokenized(plain, cfg, tmp_path / f"b-{overflow}").manifest
        assert a["shards"] == b["shards"] and a["tokens"] == b["tokens"]


def test_a_write_error_in_the_thread_reaches_the_caller(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    full = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x"))

    def no_space(self, b):
        raise full

    with pytest.raises(OSError, match="No space left"):
        with cache.EntryWriter(token_schema()) as w:
            monkeypatch.setattr(cache._HashingFile, "write", no_space)
            for b in batches(50):  # an error is raised by a later write, or by commit
                w.write(b)
            w.commit("k", {})
    assert not list(tmp_path.glob("work-*")) and not cache.entry_path("k").exists()
