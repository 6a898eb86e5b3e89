"""`packtool pack` as a library: TokenizedData + PackConfig → a pack folder (see run.py's drawing).

    overflow.py   --overflow: examples → pieces (pure numpy; profile predicts pack with it)
    gather.py     locating each piece's tokens in the Arrow buffers (or the cache file, by pread)
    write.py      rows → Parquet shards, writer threads (or processes), bytes independent of timing
    run.py        pack_tokenized: plan, write, manifest, conservation, warnings

The planner is packtool.plan, the numba kernels packtool.kernels, the file layout packtool.io.shards.
"""

from packtool.config import PackConfig
from packtool.pack.overflow import apply_overflow, overflow_loss

_RUN = ("PackResult", "pack_tokenized", "pad_id_of")


def __getattr__(name: str):
    """run.py's names, imported at first use: it imports the numba kernels (~0.4 s), which a run
    that is still tokenizing (pack.warm, overflow) should not wait for."""
    if name in _RUN:
        from packtool.pack import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PackConfig",
    "PackResult",
    "apply_overflow",
    "overflow_loss",
    "pack_tokenized",
    "pad_id_of",
]
