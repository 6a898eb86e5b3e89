"""The encoded parts on disk: written once by the task that encodes a part, read by the shard
writers with pread (pack.gather.FileGather), never sent through Ray's object store.

    SCRATCH/                       Session.scratch(): a folder every worker reads and writes
        part-00000.ids             int32 (this machine's byte order): the part's input_ids,
        part-00000.labels          int32: its labels               example after example
        part-00001.ids ...
    example i of part k: tokens [offset[i], offset[i] + length[i]) of both files of part k,
    offset = the exclusive cumulative sum of the part's lengths, its examples in reading order
    (the driver computes it from the lengths the task returned: `offsets`)

A task holds one batch's tokens at a time, never its part's; a shard writer (cluster.write)
preads each piece into FileGather's staging buffers: its memory does not grow with the input.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError


def part_paths(folder: str | Path, k: int) -> tuple[str, str]:
    """The (input_ids, labels) files of part k."""
    return (f"{folder}/part-{k:05d}.ids", f"{folder}/part-{k:05d}.labels")


class PartWriter:
    """Appends encoded batches (token_schema RecordBatches) to part k's two files."""

    def __init__(self, folder: str | Path, k: int):
        self.k = k
        if not os.path.isdir(folder):
            raise PacktoolError(
                f"the Ray engine's part folder {folder} is not on this worker's filesystem: on "
                "several machines it must be on storage every node mounts (packtool pack keeps it "
                "beside --out; from Python set Session.scratch_parent)"
            )
        self.files = [open(p, "wb") for p in part_paths(folder, k)]  # noqa: SIM115 - closed in close()

    def add(self, batch) -> None:
        lengths = np.asarray(batch.column("length"), dtype=np.int64)
        for f, name in zip(self.files, ("input_ids", "labels"), strict=True):
            f.write(memoryview(_values(batch.column(name), name, lengths, self.k)))

    def close(self) -> None:
        for f in self.files:
            f.close()

    def __enter__(self) -> PartWriter:
        return self

    def __exit__(self, *exc) -> bool:
        self.close()
        return False


def _values(column, name: str, lengths: np.ndarray, k: int) -> np.ndarray:
    """A list<int32> column's tokens, checked as pack.gather.locate_rows checks a table's."""
    import pyarrow as pa

    if column.null_count or column.values.null_count:
        raise PacktoolError(f"part {k}: column {name!r} has null rows or ids")
    if column.type.value_type != pa.int32():
        column = column.cast(pa.list_(pa.int32()))
    offsets = np.asarray(column.offsets, dtype=np.int64)
    bad = np.flatnonzero(np.diff(offsets) != lengths)
    if bad.size:
        raise PacktoolError(
            f"part {k}, example {int(bad[0])}: {name} has {int(np.diff(offsets)[bad[0]])} entries "
            f"but its length is {int(lengths[bad[0]])}; the tokenized data is inconsistent"
        )
    return np.ascontiguousarray(column.flatten().to_numpy(zero_copy_only=False), dtype=np.int32)


def offsets(lengths: np.ndarray) -> np.ndarray:
    """int64: each example's first token in its part's files, for the lengths of one part."""
    out = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


def open_parts(folder: str, parts: np.ndarray) -> list[str]:
    """The files of `parts` (sorted part numbers) for FileGather: [ids files..., labels files...];
    a file that is not there is one clean error (a cluster of several machines needs the scratch
    folder on a filesystem they share)."""
    paths = [part_paths(folder, int(k)) for k in parts]
    names = [p[0] for p in paths] + [p[1] for p in paths]
    for name in names:
        if not os.path.exists(name):
            raise PacktoolError(
                f"the Ray engine's encoded part {name} is not on this worker's filesystem: on "
                "several machines it must be on storage every node mounts (packtool pack keeps it "
                "beside --out; from Python set Session.scratch_parent)"
            )
    _allow_files(len(names))
    return names


def part_gather(names: list[str], chunk, base, source, tails, capacity):
    """(Located, FileGather) of pieces in the opened part files (`open_parts`): piece p is the
    tokens from base[p] of part chunk[p] (index into the opened parts), in names[chunk[p]] and
    its labels file. Located holds no addresses: nothing is in memory until the FileGather
    preads it."""
    from packtool.pack.gather import FileGather, Located

    none = np.zeros(len(chunk), np.int64)
    loc = Located(None, None, none, none, source, tails)
    at = 4 * base
    return loc, FileGather(names, ((chunk, at), (len(names) // 2 + chunk, at)), capacity)


FD_HEADROOM = 256  # open files a writer needs besides the part files (its shard, Ray's sockets)


def open_files_limit(n: int, soft: int, hard: int, unlimited: int = -1) -> tuple[int, str | None]:
    """The soft limit of open files a shard writer needs to open `n` part files (the ids and
    labels file of every part it reads) beside FD_HEADROOM of its own, and None; or, when the
    hard limit (`unlimited`: no limit) is below that, (soft, the one line that says so)."""
    want = n + FD_HEADROOM
    if soft == unlimited or soft >= want:
        return soft, None
    if hard == unlimited or hard >= want:
        return want, None
    return soft, (
        f"a shard writer reads {n // 2:,} parts of the encoded input, two files each ({n:,}), and "
        f"needs {FD_HEADROOM} open files more for itself: {want:,} open files, over this node's "
        f"hard limit of {hard:,} (ulimit -Hn); the input is cut into at least one part per file, "
        "so merge its many small files into fewer large ones, raise the hard limit of open files "
        "on every node, or pack with --engine local"
    )


def _allow_files(n: int) -> None:
    """Raise this process's soft limit of open files to fit `n` more (a writer keeps two files of
    every part it reads open; a large run has thousands of parts) where the hard limit allows."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top, problem = open_files_limit(n, soft, hard, resource.RLIM_INFINITY)
    if problem is not None:
        raise PacktoolError(problem)
    if top != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def cut_tail_loss(label_files: list[str], chunk, base, length, L: int) -> int:
    """Loss tokens in the cut-off tails of truncated examples: labels [L, length) of each, read
    from its part's labels file (chunk: index into label_files; base: the example's first token)."""
    total = 0
    fds = {}
    try:
        for c, b, n in zip(chunk.tolist(), base.tolist(), length.tolist(), strict=True):
            if n <= L:
                continue
            if c not in fds:
                fds[c] = os.open(label_files[c], os.O_RDONLY)
            raw = os.pread(fds[c], 4 * (n - L), 4 * (b + L))
            if len(raw) != 4 * (n - L):
                raise PacktoolError(f"{label_files[c]} was cut short while packing; run again")
            total += int(np.count_nonzero(np.frombuffer(raw, np.int32) != schema.IGNORE_INDEX))
    finally:
        for fd in fds.values():
            os.close(fd)
    return total
