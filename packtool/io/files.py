"""File helpers shared by readers, the shard writer, verify and the torch loader."""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

_TEMP_CACHE: Path | None = None  # set by use_temporary_cache() when the cache folder is unusable


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed (hashlib.file_digest)."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


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
