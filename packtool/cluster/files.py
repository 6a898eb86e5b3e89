"""The per-file work of the Ray engine, one Ray task per file: what the local pipeline learns
from a file before it tokenizes it, and the fast path's probe of a file's head.

    file_infos(paths, read)   [{path, size, sha256, parts, kind, hit, hit_error, looks,
                                first_len} | {path, error: [class, message]}]   reading order
    start_probes(probes, ...)() [(examples, None | where the fast path first differed)]

A task's PacktoolError comes back as data, and the driver raises the first in reading order, so
the error reported does not depend on which task failed first.
"""

from __future__ import annotations

import os

from packtool.config import ReadConfig
from packtool.errors import PacktoolError, UsageError


def file_info(path: str, read: ReadConfig, part_bytes: int) -> dict:
    from packtool.io import readers
    from packtool.io.files import sha256_file
    from packtool.tokenization.pipeline import file_decision

    try:
        info = file_decision(readers.part_batches(path, read, None), read)
        info.update(
            path=path,
            size=os.path.getsize(path),
            sha256=sha256_file(path),
            parts=readers.file_parts(path, part_bytes),
        )
        return info
    except PacktoolError as e:
        return {"path": path, "error": [type(e).__name__, str(e)]}


def file_infos(paths: list[str], read: ReadConfig, part_bytes: int) -> list[dict]:
    """file_info of every file, one task each, in the order of `paths`; the first error raised."""
    import ray

    task = ray.remote(num_cpus=1)(file_info)
    infos = ray.get([task.remote(p, read, part_bytes) for p in paths])
    for info in infos:
        raise_error(info)
    return infos


def raise_error(info: dict) -> None:
    if "error" in info:
        kind, message = info["error"]
        raise (UsageError if kind == "UsageError" else PacktoolError)(message)


def probe(path: str, read: ReadConfig, fmt: str, n: int, fast, reference) -> str | None:
    """The fast step and the reference step on the first `n` records of the file's first batch:
    None when they agree, else where they first differ (tokenization.pipeline.compare_probe)."""
    from packtool.io import readers
    from packtool.tokenization.pipeline import compare_probe

    first = next(iter(readers.part_batches(path, read, None)))
    first.fmt = fmt
    head = first.head(n)
    return compare_probe(fast(head), reference(head), head)


def start_probes(probes: list[tuple[str, str, int]], read: ReadConfig, fast, reference):
    """Start each (file, format, examples) probe as a task; the returned function waits for
    them: [(examples, where)] in order. (Started before the parts are encoded, they overlap.)"""
    import ray

    task = ray.remote(num_cpus=1)(probe)
    fast_ref, reference_ref = ray.put(fast), ray.put(reference)
    refs = [task.remote(f, read, fmt, n, fast_ref, reference_ref) for f, fmt, n in probes]

    def results() -> list[tuple[int, str | None]]:
        wheres = ray.get(refs)
        return [(n, where) for (_, _, n), where in zip(probes, wheres, strict=True)]

    return results
