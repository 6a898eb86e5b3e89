"""The per-file work of the Ray engine, one call of Session.run per file (a Ray task, or the
driver's own while a local cluster starts): what the local pipeline learns from a file before it
tokenizes it, and the fast path's probe of a file's head.

    file_infos(session, paths, read, part_bytes)   [FileInfo(path, size, sha256, parts, decision)]
                              reading order; decision: tokenization.source.decide_file's, without
                              its batches
    probe(path, read, fmt, n, setup)    None | where the fast path first differed
                              (run with the encode tasks: cluster.tokenize._encode)

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
from packtool.tokenization.source import FileDecision, decide_file


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


def file_infos(session, paths: list[str], read: ReadConfig, part_bytes: int) -> list[FileInfo]:
    """file_info of every file, one task each, in the order of `paths`; the first error raised."""
    try:
        infos = session.run(file_info, [(p, read, part_bytes) for p in paths])
    except Exception as e:  # noqa: BLE001 - whatever failed in a worker: one clean error
        raise session.failure(e) from None
    for info in infos:
        if info.error is not None:
            kind, message = info.error
            raise (UsageError if kind == "UsageError" else PacktoolError)(message)
    return infos


def probe(path: str, read: ReadConfig, fmt: str, n: int, setup):
    """The fast step and the reference step (the encode tasks' Setup, tokenize.encode_part: one
    spec, so a worker builds its tokenizer once for the parts and the probes) on the first `n` records of
    the file's first batch: None when they agree, else where they first differ
    (tokenization.run_plan.compare). The reference first: in the driver, the fast backend is
    still building on its thread meanwhile (as the local engine's first probe)."""
    from packtool.cluster.session import fetch_once
    from packtool.io import readers
    from packtool.tokenization.run_plan import compare

    run = fetch_once(setup)
    fast, reference = run.step, run.reference
    first = next(iter(readers.part_batches(path, read, None)))
    first.fmt = fmt
    head = first.head(n)
    expected = reference(head)
    return compare(fast(head), expected, head)
