"""The per-file work of the Ray engine, one Ray task per file: what the local pipeline learns
from a file before it tokenizes it, and the fast path's probe of a file's head.

    file_infos(paths, read)   [FileInfo(path, size, sha256, parts, decision)]   reading order
                              decision: tokenization.decide.decide_file's, without its batches
    start_probes(probes, ...)() [(examples, None | where the fast path first differed)]

A task's PacktoolError comes back as data, and the driver raises the first in reading order, so
the error reported does not depend on which task failed first.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

from packtool.config import ReadConfig
from packtool.errors import PacktoolError, UsageError
from packtool.tokenization.decide import FileDecision, decide_file


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int = 0
    sha256: str = ""
    parts: list[Any] = dataclasses.field(default_factory=list)
    decision: FileDecision | None = None
    error: tuple[str, str] | None = None  # (class, message) of the PacktoolError it raised


def file_info(path: str, read: ReadConfig, part_bytes: int) -> FileInfo:
    from packtool.io import readers
    from packtool.io.files import sha256_file

    try:
        decision = decide_file(path, readers.part_batches(path, read, None), read)
        return FileInfo(
            path,
            os.path.getsize(path),
            sha256_file(path),
            readers.file_parts(path, part_bytes),
            dataclasses.replace(decision, first=()),  # its batches stay here
        )
    except PacktoolError as e:
        return FileInfo(path, error=(type(e).__name__, str(e)))


def file_infos(paths: list[str], read: ReadConfig, part_bytes: int) -> list[FileInfo]:
    """file_info of every file, one task each, in the order of `paths`; the first error raised."""
    import ray

    task = ray.remote(num_cpus=1)(file_info)
    infos = ray.get([task.remote(p, read, part_bytes) for p in paths])
    for info in infos:
        if info.error is not None:
            kind, message = info.error
            raise (UsageError if kind == "UsageError" else PacktoolError)(message)
    return infos


def probe(path: str, read: ReadConfig, fmt: str, n: int, setup: list, reference: list):
    """The fast step (the encode tasks' setup[0], tokenize.encode_part: a worker builds its
    tokenizer once for both) and the reference step on the first `n` records of the file's first
    batch: None when they agree, else where they first differ (tokenization.fast_check.compare)."""
    from packtool.cluster.session import fetch_once
    from packtool.io import readers
    from packtool.tokenization.fast_check import compare

    fast, reference = fetch_once(setup)[0], fetch_once(reference)
    first = next(iter(readers.part_batches(path, read, None)))
    first.fmt = fmt
    head = first.head(n)
    return compare(fast(head), reference(head), head)


def start_probes(probes: list[tuple[str, str, int]], read: ReadConfig, setup: list, reference):
    """Start each (file, format, examples) probe as a task; the returned function waits for
    them: [(examples, where)] in order. (Started before the parts are encoded, they overlap.)"""
    import ray

    task = ray.remote(num_cpus=1)(probe)
    reference_ref = [ray.put(reference)]
    refs = [task.remote(f, read, fmt, n, setup, reference_ref) for f, fmt, n in probes]

    def results() -> list[tuple[int, str | None]]:
        wheres = ray.get(refs)
        return [(n, where) for (_, _, n), where in zip(probes, wheres, strict=True)]

    return results
