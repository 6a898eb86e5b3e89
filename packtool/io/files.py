"""File helpers shared by readers, the shard writer, verify and the torch loader; the text side of
reading JSON (Lines): which UTF a file is in, and its lines as bounded UTF-8 records.

    text_codec(first 4 bytes)   ("utf-16-le", 2): a BOM names the UTF and byte order; without one,
                                the NULs around JSON's first (ASCII) character do (RFC 8259)
    record_lines(f, codec, limit)   (bytes in the file, the line as UTF-8, why refused) per line; a
                                line over `limit` bytes is read through, never held: refused with
                                its size (max_record_bytes: PACKTOOL_MAX_RECORD_MIB, default 256)

The temporary folders a run makes beside what it writes (owned_folder), named by their owner, and
the removal of those whose owner died (kill -9, a crash, a machine lost) by the next run that
writes there (remove_dead):

    .OUT.packtool-tmp-<pid>-<host>-XXXXXXXX     a pack or an export being written (io.shards)
    .OUT.packtool-old-<pid>-<host>-XXXXXXXX     the OUT it replaces, for the moment of the swap
    .packtool-ray-parts-<pid>-<host>-XXXXXXXX   a Ray run's encoded parts (cluster.session)

A folder is taken for dead only when it was made on this machine (<host>: its name, hashed) and no
process has its <pid>; another machine's run on shared storage, a live run and a folder named
otherwise are never touched. An `old` folder whose OUT is missing holds the only copy of the OUT
that a run was replacing when it died: it is kept, and said, never removed.
"""

from __future__ import annotations

import atexit
import bz2
import errno
import gzip
import hashlib
import io
import lzma
import mmap
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from packtool.errors import PacktoolError, UsageError

_TEMP_CACHE: Path | None = None  # set by use_temporary_cache() when the cache folder is unusable

MAX_RECORD_MIB = 256  # the largest JSON Lines record read, unless PACKTOOL_MAX_RECORD_MIB says
_BOMS = (  # utf-32-le before utf-16-le: its BOM starts with theirs
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_SKIP_CHUNK = 1 << 16  # a line over the limit is read through in pieces of this size
_WIDE_CHUNK = 1 << 20  # UTF-16/32 text is read in pieces of this size


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

    (Page-cache pages cost system CPU on VMs that back memory at first touch.) Where O_DIRECT is
    refused (tmpfs, some network or FUSE file systems: EINVAL at open or at a write), the writes
    are plain ones.
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
    """The process umask, read without changing it where /proc allows (os.umask sets it)."""
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


def open_data(path: str) -> BinaryIO:
    """A data file's bytes, decompressed by its extension (.gz .zst .bz2 .xz)."""
    low = path.lower()
    if low.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")))  # type: ignore[arg-type]
    opener = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}.get(os.path.splitext(low)[1])
    return (opener or open)(path, "rb")  # type: ignore[return-value]


def text_codec(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) of a JSON text that starts with `head` (its first 4 bytes or fewer)."""
    for bom, codec in _BOMS:
        if head.startswith(bom):
            return codec, len(bom)
    if len(head) >= 4 and not (head[0] and head[1]):  # as json.detect_encoding
        if not head[0]:
            return ("utf-16-be" if head[1] else "utf-32-be"), 0
        return ("utf-16-le" if head[2] or head[3] else "utf-32-le"), 0
    if len(head) >= 2 and not (head[0] and head[1]):
        return ("utf-16-be" if not head[0] else "utf-16-le"), 0
    return "utf-8", 0


def max_record_bytes() -> int:
    """The largest JSON Lines record read: PACKTOOL_MAX_RECORD_MIB MiB, else MAX_RECORD_MIB."""
    raw = os.environ.get("PACKTOOL_MAX_RECORD_MIB")
    if raw is None:
        return MAX_RECORD_MIB << 20
    try:
        mib = int(raw)
    except ValueError:
        mib = 0
    if mib < 1:
        raise UsageError(f"PACKTOOL_MAX_RECORD_MIB={raw!r} is not a whole number of MiB >= 1")
    return mib << 20


def as_utf8(path: str, data: bytes) -> bytes:
    """A whole JSON file's bytes as UTF-8, without a BOM (UTF-16/32 decoded)."""
    codec, bom = text_codec(data[:4])
    if codec == "utf-8":
        return data[bom:] if bom else data
    try:
        return data[bom:].decode(codec).encode("utf-8")
    except UnicodeDecodeError as e:
        raise PacktoolError(
            f"{path}: not valid {codec.upper()}: {e.reason} (byte {e.start + bom + 1}); "
            "fix the file or save it as UTF-8"
        ) from None


def too_long(size: int, limit: int) -> str:
    """Why a record of `size` bytes is refused (a record's reason: file and line come first)."""
    return (
        f"record of {size:,} bytes is over the {limit >> 20} MiB limit per record; "
        "raise it with PACKTOOL_MAX_RECORD_MIB=N"
    )


def record_lines(f, codec: str, limit: int) -> Iterator[tuple[int, bytes, str | None]]:
    """(bytes in the file, line as UTF-8 bytes, why refused) of each line of `f` (binary, past any
    BOM), '\n' included; a refused line comes as b"" with its reason. Lines are split on the
    codec's own '\n' (UTF-16/32: at whole code units), so no fragment is ever a line."""
    if codec == "utf-8":
        while text := f.readline(limit + 1):
            if len(text) > limit and not text.endswith(b"\n"):
                size, text = len(text), b""  # (not held while the rest is read)
                size += _rest_of_line(f)
                yield size, b"", too_long(size, limit)
            else:
                yield len(text), text, None
        return
    yield from _wide_lines(f, codec, limit)


def _rest_of_line(f) -> int:
    """Read to the end of the current line without holding it: the bytes read."""
    n = 0
    while piece := f.readline(_SKIP_CHUNK):
        n += len(piece)
        if piece.endswith(b"\n"):
            break
    return n


def _wide_lines(f, codec: str, limit: int) -> Iterator[tuple[int, bytes, str | None]]:
    """record_lines for UTF-16/32: each line decoded on its own, so a bad one is one bad record."""
    nl = "\n".encode(codec)
    unit = len(nl)
    buf = bytearray()  # starts at a code unit boundary
    over = -1  # bytes so far of a line over the limit, being read through (-1: none)
    while True:
        chunk = f.read(_WIDE_CHUNK)
        buf += chunk
        start = 0
        while (end := _line_end(buf, nl, start)) >= 0:
            if over >= 0:
                size, over = over + end - start, -1
                yield size, b"", too_long(size, limit)
            else:
                yield end - start, *_decoded(buf[start:end], codec)
            start = end
        del buf[:start]
        if over >= 0 or len(buf) > limit:
            whole = len(buf) - len(buf) % unit if chunk else len(buf)
            over = max(over, 0) + whole
            del buf[:whole]
        if not chunk:
            if over >= 0:
                yield over, b"", too_long(over, limit)
            elif buf:
                yield len(buf), *_decoded(buf, codec)
            return


def _line_end(buf: bytearray, nl: bytes, start: int) -> int:
    """The end of the line that starts at `start` (after its newline, at a code unit), or -1."""
    at = buf.find(nl, start)
    while at >= 0 and (at - start) % len(nl):
        at = buf.find(nl, at + 1)
    return at + len(nl) if at >= 0 else -1


def _decoded(line: bytearray, codec: str) -> tuple[bytes, str | None]:
    try:
        return line.decode(codec).encode("utf-8"), None
    except UnicodeDecodeError as e:
        return b"", f"not valid {codec.upper()}: {e.reason} (byte {e.start + 1})"


_NAME = re.compile(
    r"\.(?:(?P<out>.+)\.)?packtool-(?P<kind>tmp|old|ray-parts)-(?P<pid>\d+)-(?P<host>[0-9a-f]{8})-"
    r"[A-Za-z0-9_]+"
)
WHAT = {"tmp": "temporary folder", "old": "replaced output", "ray-parts": "Ray parts folder"}


def host_tag() -> str:
    """8 hex digits naming this machine (its host name, hashed: any name gives a plain tag)."""
    return hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]


def owned_folder(parent: str | Path | None, prefix: str) -> Path:
    """A new folder `prefix<pid>-<host>-XXXXXXXX` in `parent` (None: the system's temporary
    folder); `prefix` ends in one of the kinds above and a dash (".OUT.packtool-tmp-")."""
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-{host_tag()}-", dir=parent))


def alive(pid: int) -> bool:
    """Whether a process has this pid on this machine (another user's counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # not a pid at all
        return False
    return True


def remove_dead(parent: str | Path | None) -> list[str]:
    """Remove the folders of runs that died from `parent` (None: the system's temporary folder);
    one line for each folder removed or kept (module docstring)."""
    parent = Path(parent if parent is not None else tempfile.gettempdir())
    try:
        names = [e.name for e in os.scandir(parent) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []
    here, said = host_tag(), []
    for name in sorted(names):
        m = _NAME.fullmatch(name)
        if m is None or m["host"] != here or alive(int(m["pid"])):
            continue
        path, pid, kind = parent / name, int(m["pid"]), m["kind"]
        if kind == "old" and m["out"] and not (parent / m["out"]).exists():
            said.append(
                f"kept {path}: it holds {parent / m['out']} as it was before a run that died "
                f"(pid {pid}) began replacing it; move {path / 'old'} back to {parent / m['out']}"
            )
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            said.append(f"removed {path}, a leftover {WHAT[kind]} of a run that died (pid {pid})")
    return said
