"""File helpers shared by readers, the shard writer, verify and the torch loader."""

from __future__ import annotations

import atexit
import errno
import hashlib
import mmap
import os
import shutil
import tempfile
from pathlib import Path

_TEMP_CACHE: Path | None = None  # set by use_temporary_cache() when the cache folder is unusable


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed (hashlib.file_digest)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class HashedSink:
    """A new file written once, front to back, by pyarrow (a ParquetWriter's sink): its sha256 is
    taken from the bytes as they pass, and they go to the disk with O_DIRECT, so the file is never
    read back for its checksum and takes no page-cache pages.

        write(b) ──▶ sha256.update(b)
                 └─▶ block A [CHUNK bytes, page aligned] ──full──▶ os.write(fd), O_DIRECT, in
                     block B  ◀── filled meanwhile              this sink's own thread
        close()  ──▶ the last, partial block: written without O_DIRECT (fcntl clears it)

    Why: on this project's VMs a page the kernel has not handed out lately costs ~6 s of system CPU
    a GiB to fill (anonymous memory and page cache alike; benchmarks/README.md, "Pre-tokenized
    input: 1M rows"), and shards are not read again by the pack. A direct write waits for the
    disk, so a full block is written by a thread while the caller (pyarrow's encoder) fills the
    other. Where O_DIRECT is refused (tmpfs, some network or FUSE file systems: EINVAL at open or
    at a write), the writes are plain ones.
    """

    CHUNK = 8 << 20

    def __init__(self, path: str | Path):
        from concurrent.futures import ThreadPoolExecutor

        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
        direct = getattr(os, "O_DIRECT", 0)
        try:
            self._fd = os.open(path, flags | direct, 0o666)
        except OSError as e:
            if not direct or e.errno != errno.EINVAL:
                raise
            self._fd = os.open(path, flags, 0o666)
            direct = 0
        self._direct = bool(direct)
        # two blocks, page aligned as O_DIRECT needs: one filled, one being written
        self._blocks = [memoryview(mmap.mmap(-1, self.CHUNK)) for _ in range(2)]
        self._view = self._blocks[0]
        self._fill = 0  # bytes in the block being filled
        self._written = 0  # bytes before it
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="packtool-sink")
        self._pending = None  # the write of the other block
        self.sha256 = hashlib.sha256()
        self.closed = False

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._written + self._fill

    def flush(self) -> None:  # the blocks are written when full and at close
        pass

    def write(self, data) -> int:
        src = memoryview(data).cast("B")
        n = src.nbytes
        self.sha256.update(src)
        at = 0
        while at < n:
            take = min(n - at, self.CHUNK - self._fill)
            self._view[self._fill : self._fill + take] = src[at : at + take]
            self._fill += take
            at += take
            if self._fill == self.CHUNK:
                self._wait()
                self._pending = self._io.submit(self._put, self._view)
                self._written += self.CHUNK
                self._fill = 0
                self._view = self._blocks[self._blocks[0] is self._view]
        return n

    def _wait(self) -> None:
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()  # raises the write's error

    def _put(self, part) -> None:
        """Write `part` (a full block, or the head of one at close) at the file's end."""
        done = 0
        while done < part.nbytes:
            try:
                done += os.write(self._fd, part[done:])
            except OSError as e:  # O_DIRECT refused here, or a short write left us unaligned
                if not self._direct or e.errno != errno.EINVAL:
                    raise
                self._buffered()

    def _buffered(self) -> None:
        import fcntl  # (reached only where os.O_DIRECT exists)

        fcntl.fcntl(self._fd, fcntl.F_SETFL, fcntl.fcntl(self._fd, fcntl.F_GETFL) & ~os.O_DIRECT)
        self._direct = False

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self._wait()
            if self._fill:
                if self._direct:
                    self._buffered()
                self._put(self._view[: self._fill])
        finally:
            self._io.shutdown(wait=True)
            os.close(self._fd)
            self._view = self._blocks = None  # unmapped when the last view (a traceback's) goes


def cache_root() -> Path:
    """packtool's cache: $PACKTOOL_CACHE, else $XDG_CACHE_HOME/packtool, else ~/.cache/packtool
    (or this run's temporary folder, after `use_temporary_cache`)."""
    if _TEMP_CACHE is not None:
        return _TEMP_CACHE
    root = os.environ.get("PACKTOOL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "packtool"
    )
    return Path(root)


def use_temporary_cache() -> Path:
    """Point `cache_root()` at a new temporary folder for the rest of this process; it is removed
    at exit (nothing is cached for later runs)."""
    global _TEMP_CACHE
    _TEMP_CACHE = Path(tempfile.mkdtemp(prefix="packtool-cache-"))
    atexit.register(shutil.rmtree, _TEMP_CACHE, ignore_errors=True)
    return _TEMP_CACHE


def unwritable(folder: Path) -> str | None:
    """None when `folder` (created if missing) accepts a new entry, else why not ("Permission
    denied", "Read-only file system", ...). Tries it: access(2) misses ACLs and some mounts."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".packtool-probe-", dir=folder))
    except OSError as e:
        return e.strerror or str(e)
    return None


def umask() -> int:
    """The process umask, read without changing it where /proc allows (os.umask sets it: racy
    with threads that create files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
