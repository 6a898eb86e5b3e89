"""The tokenization cache: entries written once, checked on every load, memory-mapped.

    $PACKTOOL_CACHE/
        tok-<key>/                  one tokenized input (key: sources, tokenizer, template, options)
            data.arrow              Arrow IPC file, the tokenized table (packtool.data), written once;
                                its labels as a 1-bit loss_mask where they allow (data/labels.py)
            meta.json               {"format", "meta": {...}, "data": {"bytes", "rows", "xxh3_128"},
                                     "checksum"}
        tokenizers/<digest>.json    resolved TokenizerSpecs: a checksum line, then JSON (read_json),
        tokenizers/<digest>.tokenizer.json    ...their tokenizer JSON beside, as it is (read_bytes)
        tokenizers/cut-<xxh3>.bin   a tokenizer JSON's BPE tables for `inspect` (tokenization.cut)
        templates/<digest>.json     template verdicts, the same layout
        work-<pid>-<n>/             an entry being written; renamed to tok-<key> when complete

A cache folder that cannot be written (or is short of space) is not fatal: `check_usable` warns
once and the run keeps its entry in a temporary folder that is removed at exit.

Trust nothing on disk: `meta.json` carries the xxh3-128 of data.arrow (hashed while written) and
a checksum of its own content; `open_entry` re-hashes data.arrow and, when anything differs, warns
in one line, removes the entry and returns None. A run that dies leaves only a work folder (removed
by the next run once its process is gone); of two runs on one input, the first rename wins.

Memory: the table is memory-mapped (Python's mmap), so `MappedEntry.release()` drops the pages it
touched (MADV_DONTNEED) and a pack of any size keeps a bounded resident set.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import queue
import shutil
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packtool.data import labels
from packtool.io import files
from packtool.io.files import cache_root

DATA = "data.arrow"
META = "meta.json"
FORMAT = 4  # entry layout version; entries of another are recomputed
_CHUNK = 16 << 20


class CacheWarning(UserWarning):
    """A cache entry was damaged and is recomputed (the CLI prints these as one line)."""


def _xxh(data: bytes = b""):
    import xxhash

    return xxhash.xxh3_128(data)


def _checksum(obj: Any) -> str:
    return _xxh(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _say(message: str) -> None:
    warnings.warn(message, CacheWarning, stacklevel=3)


def check_usable(need_bytes: int = 0) -> None:
    """Before tokenizing: when the cache folder cannot be written or has less than `need_bytes`
    free, warn in one line and use a temporary folder for this run instead (nothing is cached)."""
    root = cache_root()
    why = files.unwritable(root)
    if why is None and need_bytes:
        free = shutil.disk_usage(root).free
        if free < need_bytes:
            why = f"{free >> 20} MiB free, below the ~{need_bytes >> 20} MiB this input may need"
    if why is None:
        return
    tmp = files.use_temporary_cache()
    _say(
        f"tokenization cache {root} is unusable ({why}): this run tokenizes into {tmp}, removed at exit, "
        "and caches nothing; set PACKTOOL_CACHE to a writable folder with space"
    )


# -- small JSON entries (resolved tokenizers, template verdicts) ----------------------------------
def tokenizer_path(digest: str) -> Path:
    return cache_root() / "tokenizers" / f"{digest}.json"


_JSON_MAGIC = b"packtool-json 1 "  # then the xxh3-128 hex of the body, a newline, the JSON body


def read_json(path: Path) -> Any | None:
    """The stored object, or None when absent (_JSON_MAGIC's layout); a damaged file is removed
    with a warning."""
    import orjson

    body = read_bytes(path)
    if body is None:
        return None
    try:
        return orjson.loads(body)
    except ValueError:
        _say(f"cache file {path} is damaged (not JSON); recomputing it")
        path.unlink(missing_ok=True)
        return None


def read_bytes(path: Path) -> bytes | None:
    """The stored bytes (write_bytes), or None when absent; a damaged file is removed with a warning."""
    try:
        raw = path.read_bytes()
        head, _, body = raw.partition(b"\n")
        if not head.startswith(_JSON_MAGIC):  # an older packtool's layout: not damage, just stale
            path.unlink(missing_ok=True)
            return None
        if head[len(_JSON_MAGIC) :].decode() == _xxh(body).hexdigest():
            return body
        why = "checksum mismatch"
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        why = type(e).__name__
    _say(f"cache file {path} is damaged ({why}); recomputing it")
    path.unlink(missing_ok=True)
    return None


def write_json(path: Path, obj: Any) -> None:
    """Atomically (temp file + rename); a cache that cannot be written is skipped, not fatal."""
    import orjson

    write_bytes(path, orjson.dumps(obj))


def write_bytes(path: Path, body: bytes) -> None:
    """As write_json, for bytes stored as they are."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(_JSON_MAGIC + _xxh(body).hexdigest().encode() + b"\n" + body)
        os.replace(tmp, path)
    except OSError as e:
        _say(f"cannot write cache file {path} ({e.strerror or e}); continuing without it")


# -- tokenized entries ----------------------------------------------------------------------------
def entry_path(key: str) -> Path:
    return cache_root() / f"tok-{key}"


def has_entries() -> bool:
    """Whether the cache holds any tokenized entry (none: every key misses, without computing it)."""
    root = cache_root()
    return root.is_dir() and next(root.glob("tok-*"), None) is not None


@dataclass
class MappedEntry:
    """A verified entry: the table memory-mapped from data.arrow, and its metadata."""

    path: Path
    table: Any  # pyarrow.Table, zero-copy over `_map`
    meta: dict[str, Any]
    _map: mmap.mmap
    base_address: int  # where data.arrow starts in memory: buffer address - base = file offset

    @property
    def mapped_file(self) -> tuple[str, int, int]:
        return str(self.path / DATA), self.base_address, len(self._map)

    def release(self) -> None:
        """Drop the pages this process touched (they stay in the page cache)."""
        if hasattr(mmap, "MADV_DONTNEED"):
            self._map.madvise(mmap.MADV_DONTNEED)


def _hash_file(path: Path) -> tuple[int, str]:
    h = _xxh()
    buf = bytearray(_CHUNK)
    view = memoryview(buf)
    size = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return size, h.hexdigest()


def _map_table(path: Path):
    import pyarrow as pa

    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            raise ValueError("empty data file")
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    buf = pa.py_buffer(mm)
    reader = pa.ipc.open_file(pa.BufferReader(buf))
    return reader.read_all(), mm, buf.address


def open_entry(path: Path, verify: bool = True) -> MappedEntry | None:
    """The entry at `path` if it is complete and intact, else None (damaged ones are removed).
    `verify=False` skips re-hashing data.arrow (for the entry this process has just written)."""
    if not path.exists():
        return None
    why = None
    try:
        envelope = json.loads((path / META).read_bytes())
        if envelope.get("format") != FORMAT:
            why = "written by another packtool version"
        elif envelope.get("checksum") != _checksum([envelope.get("meta"), envelope.get("data")]):
            why = "its metadata checksum does not match"
        else:
            data = envelope["data"]
            size, digest = _hash_file(path / DATA) if verify else (data["bytes"], data["xxh3_128"])
            if size != data["bytes"] or digest != data["xxh3_128"]:
                why = (
                    f"data.arrow differs from its checksum ({size} bytes, {data['bytes']} written)"
                )
            else:
                table, mm, base = _map_table(path / DATA)
                if table.num_rows != data["rows"]:
                    why = f"data.arrow holds {table.num_rows} rows, {data['rows']} written"
                else:
                    return MappedEntry(path, table, envelope["meta"], mm, base)
    except FileNotFoundError as e:
        why = f"{Path(e.filename).name if e.filename else 'a file'} is missing"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        why = f"unreadable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}".rstrip(
            ": "
        )
    except Exception as e:  # pyarrow.ArrowInvalid and friends: a damaged Arrow file
        why = f"unreadable Arrow data: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
    _say(f"tokenization cache entry {path} is damaged ({why}); removing it and tokenizing again")
    shutil.rmtree(path, ignore_errors=True)
    return None


class _HashingFile(io.RawIOBase):
    """A write-only file that hashes every byte on its way to disk (no second read)."""

    def __init__(self, path: Path):
        self._f = open(path, "wb")
        self.hash = _xxh()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b) -> int:
        n = self._f.write(b)
        self.hash.update(memoryview(b)[:n])
        self.size += n
        return n

    def close(self) -> None:
        if not self._f.closed:  # no fsync: a torn entry fails its checksum and is recomputed
            self._f.close()
        super().close()


def remove_stale_work() -> None:
    """Work folders (`work-<pid>-<n>`) of runs that are gone (killed, crashed)."""
    root = cache_root()
    if not root.is_dir():
        return
    for p in root.glob("work-*"):
        try:
            pid = int(p.name.split("-")[-2])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(p, ignore_errors=True)
        except PermissionError:
            pass  # another user's live process


class EntryWriter:
    """Streams record batches into a new entry's data.arrow; `commit` makes it visible at once.

    The batches are written by a thread of their own (started at the first batch, so a worker pool
    forked before it sees no thread), while the caller reads and checks the next ones:

        caller   write(b0) write(b1) write(b2) ... commit(meta)
                     │ queue (at most QUEUE_BATCHES waiting: memory stays bounded)
        thread       └─ IPC write_batch → _HashingFile → write(2) ... ┘ joined, then meta.json

    Each batch goes to disk with a loss_mask in place of its labels (packtool.data.labels: 1 bit a
    token instead of 4 bytes) while every label is its id or -100; the first batch where one is not
    turns the entry back into labels: the batches written so far are rewritten, once.

    An error in the thread (a full disk) is raised by the next `write` or by `commit`.
    """

    _count = 0
    QUEUE_BATCHES = 2

    def __init__(self, schema):
        """`schema`: the batches'; the key comes with `commit` (the sources may still be hashing)."""
        EntryWriter._count += 1
        self.work = cache_root() / f"work-{os.getpid()}-{EntryWriter._count}"
        shutil.rmtree(self.work, ignore_errors=True)
        self.work.mkdir(parents=True)
        self.schema = schema
        self.masked = True  # the batches written so far hold loss_mask, not labels
        self._open(labels.mask_schema(schema))
        self.rows = 0
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._aborted = False

    def _open(self, schema) -> None:
        import pyarrow as pa

        self._file = _HashingFile(self.work / DATA)
        self._sink = pa.PythonFile(self._file, mode="w")
        self._writer = pa.ipc.new_file(self._sink, schema)

    def _close(self) -> None:
        self._writer.close()
        self._sink.close()
        self._file.close()

    def _write(self, batch) -> None:
        """In the thread: the batch as a loss mask while every batch so far could be one; the first
        that cannot turns the entry into labels (the batches written so far are rewritten)."""
        if self.masked:
            masked = labels.masked_batch(batch)
            if masked is not None:
                self._writer.write_batch(masked)
                return
            self._unmask()
        self._writer.write_batch(batch)

    def _unmask(self) -> None:
        """Rewrite data.arrow's loss_mask batches as labels batches (rare: some label was neither
        its id nor -100), one batch at a time through a memory map of the masked file."""
        self._close()
        masked = self.work / f"masked-{DATA}"
        os.replace(self.work / DATA, masked)
        self._open(self.schema)
        self.masked = False
        import pyarrow as pa

        table, _, _ = _map_table(masked)  # the map closes with the last batch read from it
        for b in table.to_batches():
            self._writer.write_batch(labels.with_labels(pa.Table.from_batches([b])).to_batches()[0])
        del table, b
        masked.unlink()

    def write(self, batch) -> None:
        if self._error is not None:
            raise self._error
        if not batch.num_rows:
            return
        if self._thread is None:
            self._queue = queue.Queue(maxsize=self.QUEUE_BATCHES)
            self._thread = threading.Thread(target=self._drain, name="cache-entry", daemon=True)
            self._thread.start()
        self._queue.put(batch)
        self.rows += batch.num_rows

    def _drain(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._error is None and not self._aborted:  # else take them: put never blocks
                try:
                    self._write(batch)
                except BaseException as e:  # raised in the caller's thread
                    self._error = e

    def _join(self) -> BaseException | None:
        """Wait until every batch queued is written (or skipped after an error); the thread's error."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        return self._error

    def commit(self, key: str, meta: dict[str, Any], replace: bool = False) -> Path:
        """Close data.arrow, write meta.json, rename into place as tok-<key> (over an existing entry
        when `replace`, as --no-cache asks). Returns the entry's path."""
        self.final = entry_path(key)
        if (error := self._join()) is not None:
            raise error
        self._close()
        data = {
            "bytes": self._file.size,
            "xxh3_128": self._file.hash.hexdigest(),
            "rows": self.rows,
        }
        envelope = {
            "format": FORMAT,
            "meta": meta,
            "data": data,
            "checksum": _checksum([meta, data]),
        }
        (self.work / META).write_text(json.dumps(envelope, default=str))
        if replace:
            shutil.rmtree(self.final, ignore_errors=True)
        try:
            os.replace(self.work, self.final)
        except OSError:  # another run committed the same entry first: keep theirs if it is intact
            if open_entry(self.final) is None:
                os.replace(self.work, self.final)
            else:
                self.abort()
        return self.final

    def abort(self) -> None:
        self._aborted = True  # the thread skips what is still queued
        self._join()
        try:
            self._writer.close()
        except Exception:
            pass
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> EntryWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
