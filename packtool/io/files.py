"""File helpers shared by readers, the shard writer, verify and the torch loader."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

CHUNK = 8 << 20


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, streamed in 8 MiB blocks."""
    h = hashlib.sha256()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb") as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


def cache_root() -> Path:
    """packtool's cache: $PACKTOOL_CACHE, else $XDG_CACHE_HOME/packtool, else ~/.cache/packtool."""
    root = os.environ.get("PACKTOOL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "packtool"
    )
    return Path(root)
