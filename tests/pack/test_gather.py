"""Reading the rows' tokens: by pread from the tokenization cache files (one, or one per input of a
mixture) or through memory; both give the same shards."""

from __future__ import annotations

import dataclasses

import pytest

from packtool.config import InputSpec, PackConfig, TokenizeConfig
from packtool.demo_data import write_sample
from packtool.pack.gather import file_gather, locate_rows
from packtool.pack.overflow import apply_overflow
from packtool.pack.run import pack_tokenized
from packtool.tokenization.mixture import load_mixture


@pytest.fixture
def mixture(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    for name, seed in (("a.jsonl", 1), ("b.jsonl", 2)):
        write_sample(str(tmp_path / name), n=60, seed=seed)
    specs = [InputSpec(n, str(tmp_path / n)) for n in ("a.jsonl", "b.jsonl")]
    cfg = TokenizeConfig(num_proc=1, tokenizer_backend="hf")
    load_mixture(specs, cfg, progress=False)  # fills the cache: the second load maps it
    return load_mixture(specs, cfg, progress=False)


def test_a_mixture_is_gathered_from_both_cache_files(mixture):
    assert mixture.cache_hit and len(mixture.mapped_files) == 2
    lengths, src = mixture.lengths.astype("int64"), mixture.source_index.astype("int64")
    loc = locate_rows(mixture.table, lengths, src, apply_overflow(lengths, src, 512, "split"))
    gather = file_gather(mixture, loc, 4096)
    assert gather is not None and len(gather.fds) == 2
    assert set(gather.ids_file.tolist()) == set(gather.lab_file.tolist()) == {0, 1}
    gather.close()


def test_pread_and_memory_give_the_same_shards(mixture, tmp_path):
    cfg = PackConfig(pack_len=512, overflow="split", shard_rows=7)
    by_file = pack_tokenized(mixture, cfg, tmp_path / "by_file").manifest
    in_memory = dataclasses.replace(mixture, mapped_files=[])
    by_memory = pack_tokenized(in_memory, cfg, tmp_path / "by_memory").manifest
    assert by_file["shards"] == by_memory["shards"] and len(by_file["shards"]) > 1


def test_writer_processes_read_the_cache_files_as_forked(mixture, tmp_path, monkeypatch):
    from packtool.pack import write

    monkeypatch.setattr(write, "PROCESS_MIN_TOKENS", 0)
    cfg = PackConfig(pack_len=512, overflow="split", shard_rows=7)
    one = pack_tokenized(mixture, cfg, tmp_path / "one").manifest
    two = pack_tokenized(mixture, cfg, tmp_path / "two", procs=2).manifest
    assert one == two and len(one["shards"]) > 2


def test_the_gather_kernels_take_only_arrays_and_integers(mixture, tmp_path):
    """No numba.typed container reaches a kernel: its methods compile in every fresh process (not
    cached by cache=True), while kernels of arrays and integers load from numba's disk cache."""
    from numba.core import types

    from packtool.pack import gather as kernels  # the row kernels live in pack/gather.py

    cfg = PackConfig(pack_len=512, overflow="truncate", shard_rows=7)
    pack_tokenized(mixture, cfg, tmp_path / "by_file")
    pack_tokenized(dataclasses.replace(mixture, mapped_files=[]), cfg, tmp_path / "by_memory")
    used = [kernels.layout_rows, kernels.copy_rows, kernels.pread_pieces, kernels.labels_from_bits]
    # (a cache entry's loss mask: the truncated tails' loss is counted in numpy, not by
    # count_not_equal)
    assert all(k.signatures for k in used)
    for kernel in used:
        for sig in kernel.signatures:
            assert all(isinstance(t, (types.Array, types.Integer)) for t in sig), (kernel, sig)


def test_a_cache_file_cut_short_while_packing_is_one_clear_error(mixture, tmp_path):
    import numpy as np

    from packtool.errors import PacktoolError
    from packtool.pack.gather import FileGather

    lengths, src = mixture.lengths.astype("int64"), mixture.source_index.astype("int64")
    pieces = apply_overflow(lengths, src, 512, "split")
    loc = locate_rows(mixture.table, lengths, src, pieces)
    gather = file_gather(mixture, loc, 4096)
    gather.close()
    short = []
    for i, (path, _, _) in enumerate(mixture.mapped_files):
        short.append(tmp_path / f"short{i}.arrow")
        short[-1].write_bytes(open(path, "rb").read(1000))
    where = ((gather.ids_file, gather.ids_offset), (gather.lab_file, gather.lab_offset))
    cut = FileGather([str(p) for p in short], where, 4096)
    pcs = np.arange(np.searchsorted(np.cumsum(pieces.length), 4096))
    with pytest.raises(PacktoolError, match="truncated while packing; run again"):
        cut.stage(pcs, pieces.length)
    cut.close()


def test_a_read_cut_short_once_is_read_again(mixture, monkeypatch):
    """A pread interrupted by a signal (EINTR: the kernel reports that piece short) is read again
    from that piece on: the staged tokens are those of an uninterrupted read."""
    import numpy as np

    from packtool.pack import gather as kernels  # the row kernels live in pack/gather.py

    lengths, src = mixture.lengths.astype("int64"), mixture.source_index.astype("int64")
    pieces = apply_overflow(lengths, src, 512, "split")
    loc = locate_rows(mixture.table, lengths, src, pieces)
    pcs = np.arange(np.searchsorted(np.cumsum(pieces.length), 4096))
    clean = file_gather(mixture, loc, 4096)
    _, n, ids_at, lab_at = clean.stage(pcs, pieces.length)
    want = [kernels.int32_at(a, k).copy() for a, k in zip(ids_at, n, strict=True)]
    want += [kernels.int32_at(a, k).copy() for a, k in zip(lab_at, n, strict=True)]
    clean.close()
    real, calls = kernels.pread_pieces, []

    def interrupted_at_3(fds, file_of, offset, nbytes, dest):
        calls.append(len(file_of))
        if len(calls) == 1:  # the first call reads pieces 0-2, then piece 3 is cut short
            real(fds, file_of[:3], offset[:3], nbytes[:3], dest[:3])
            return 3
        return real(fds, file_of, offset, nbytes, dest)

    monkeypatch.setattr(kernels, "pread_pieces", interrupted_at_3)
    gather = file_gather(mixture, loc, 4096)
    _, n, ids_at, lab_at = gather.stage(pcs, pieces.length)
    got = [kernels.int32_at(a, k).copy() for a, k in zip(ids_at, n, strict=True)]
    got += [kernels.int32_at(a, k).copy() for a, k in zip(lab_at, n, strict=True)]
    gather.close()
    assert calls[:2] == [len(pcs), len(pcs) - 3]
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_pread_pieces_compiled_and_as_plain_python(tmp_path):
    """kernels.pread_pieces reads the same bytes compiled (libc pread) and line by line (os.preadv),
    and both name the first piece read short."""
    import os

    import numpy as np

    from packtool.pack import gather as kernels  # the row kernels live in pack/gather.py

    path = tmp_path / "f.bin"
    path.write_bytes(np.arange(1000, dtype=np.int32).tobytes())
    fd = os.open(path, os.O_RDONLY)
    try:
        fds = np.array([fd], np.int64)
        offsets = np.array([400, 0, 3996, 40], np.int64)
        nbytes = np.array([8, 12, 4, 0], np.int64)
        for kernel in (kernels.pread_pieces, kernels.pread_pieces.py_func):
            out = np.zeros(8, np.int32)
            dest = out.ctypes.data + np.array([0, 8, 20, 24], np.int64)
            assert kernel(fds, np.zeros(4, np.int64), offsets, nbytes, dest) == -1
            assert out.tolist() == [100, 101, 0, 1, 2, 999, 0, 0]
            beyond = np.array([0, 4000], np.int64)  # the second piece starts at the end of the file
            assert kernel(fds, np.zeros(2, np.int64), beyond, np.array([4, 4]), dest[:2]) == 1
    finally:
        os.close(fd)
