"""Write packed rows as schema-v1 Parquet shards plus manifest.json, atomically.

    .OUT.packtool-tmp-<pid>-<host>-XXXX/   built here first (beside OUT, same filesystem; one
                                         that a run which died left is removed: io.files)
        data/train-00000-of-00003.parquet   row groups of <= 16 MiB of token slots each
        ...
        manifest.json                  written last
    rename → OUT                        only after every shard and the manifest are on disk

Parquet settings (chosen per column on random ids): zstd level 1 and PLAIN encoding everywhere
(position_ids/document_id compress well with it, and it encodes faster than DELTA; BYTE_STREAM_SPLIT
needs pyarrow >= 17 to read), no dictionaries (token ids overflow them and fall back after wasting
the work), statistics on the scalar columns only.
A shard goes to its file through files.HashedSink (sha256 as written, O_DIRECT).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from packtool import schema
from packtool.data.labels import arrow_array
from packtool.errors import Interrupt, PacktoolError, UsageError
from packtool.io import files

SHARD_BYTES = 512 << 20  # raw token slots (4 int32 columns) of a shard without --shard-rows
# token slots per row group (256 rows at --len 4096): bounds the write buffers (a larger block
# costs first-touch memory, a smaller one more fixed cost per block)
ROW_GROUP_BYTES = 16 << 20


def rows_per_shard(pack_len: int, shard_rows: int) -> int:
    """--shard-rows, or for 0 the rows of about SHARD_BYTES of raw token slots."""
    return shard_rows or max(1, SHARD_BYTES // (16 * pack_len))


def row_group_rows(pack_len: int, shard_rows: int) -> int:
    return max(1, min(shard_rows, ROW_GROUP_BYTES // (16 * pack_len)))


def writer_options() -> dict[str, Any]:
    return {
        "compression": "zstd",
        "compression_level": 1,
        "use_dictionary": False,
        "write_statistics": list(schema.SCALAR_COLUMNS),
        "write_batch_size": 1 << 16,  # values per encoder batch (default 1024)
    }


def rows_table(
    input_ids,
    labels,
    position_ids,
    document_id,
    seq_offsets,
    seq_lengths,
    source_index,
    num_tokens,
    num_loss_tokens,
    unpadded=None,
    side=None,
):
    """Wrap [k, L] int32 arrays and CSR lists as a schema-v1 table without copying token data;
    `unpadded` (a pack with --pad-to-multiple N > 1): the seq_lengths_unpadded lists; `side` (a
    preference pack): each document's side, 0 chosen or 1 rejected."""
    import pyarrow as pa

    pack_len = input_ids.shape[1]

    def fixed(a):  # [k, L] int32: zero-copy
        return pa.FixedSizeListArray.from_arrays(arrow_array(a.reshape(-1)), pack_len)

    def listed(a, dtype=np.int32):
        return pa.ListArray.from_arrays(offsets, arrow_array(a.astype(dtype)))

    offsets = arrow_array(seq_offsets.astype(np.int32))
    arrays = [fixed(a) for a in (input_ids, labels, position_ids, document_id)]
    arrays += [listed(seq_lengths), listed(source_index, np.int64)]
    arrays += [arrow_array(a.astype(np.int32)) for a in (num_tokens, num_loss_tokens)]
    if unpadded is not None:
        arrays.append(listed(unpadded))
    if side is not None:
        arrays.append(listed(side, np.int8))
    return pa.Table.from_arrays(
        arrays, schema=schema.arrow_schema(pack_len, unpadded is not None, side is not None)
    )


class ShardWriter:
    """One shard file: append row groups, then `close()` → {file, rows, bytes, sha256}."""

    def __init__(
        self, root: Path, index: int, total: int, pack_len: int, padded=False, pairs=False
    ):
        import pyarrow.parquet as pq

        self.relpath = f"{schema.DATA_DIR}/{schema.shard_name(index, total)}"
        self.path = root / self.relpath
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.rows = 0
        with naming(self.path):
            self._sink = files.HashedSink(self.path)  # sha256 as written, O_DIRECT
            try:
                self._writer = pq.ParquetWriter(
                    self._sink, schema.arrow_schema(pack_len, padded, pairs), **writer_options()
                )
            except BaseException:
                self._sink.close()
                raise

    def write(self, table) -> None:
        with naming(self.path):
            self._writer.write_table(table, row_group_size=table.num_rows)
        self.rows += table.num_rows

    def close(self) -> dict[str, Any]:
        with naming(self.path):
            self._writer.close()
            self._sink.close()
        return {
            "file": self.relpath,
            "rows": self.rows,
            "bytes": self._sink.tell(),
            "sha256": self._sink.sha256.hexdigest(),
        }

    def abort(self) -> None:
        try:
            self._writer.close()
        except Exception:  # noqa: BLE001 - best effort; the temp folder is removed anyway
            pass
        finally:
            self._sink.close()


def _jsonable(v):
    if isinstance(v, np.integer | np.floating | np.ndarray):
        return v.tolist()  # Python ints and floats
    if isinstance(v, Path):
        return str(v)
    raise TypeError(f"not JSON serializable: {type(v).__name__}")


def manifest_text(manifest: dict) -> str:
    """Deterministic JSON: insertion order kept, no timestamps or timings (those stay out)."""
    return json.dumps(manifest, indent=2, ensure_ascii=False, default=_jsonable) + "\n"


def write_manifest(root: Path, manifest: dict) -> None:
    with naming(root / schema.MANIFEST):
        (root / schema.MANIFEST).write_text(manifest_text(manifest), encoding="utf-8")


def os_errno(e: OSError) -> int | None:
    """The errno of an OSError, also where only its text has it (pyarrow's IO errors)."""
    if e.errno is not None:
        return e.errno
    m = re.search(r"\[errno (\d+)\]", str(e), re.IGNORECASE)
    return int(m.group(1)) if m else None


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """An OSError raised inside that names no file (write(2), pyarrow's sinks) is raised again
    naming `path`, the file being written, so the error says which path filled or failed."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        code = os_errno(e)
        what = e.strerror or (os.strerror(code) if code else str(e).splitlines()[0])
        raise OSError(code, what, str(path)) from e


_SHARD_FILE = re.compile(r"train-\d{5}-of-\d{5}\.parquet")
MIN_FREE = 64 << 20  # refuse an --out with less free space than this, whatever the input


def _not_a_pack(out: Path) -> str | None:
    """None when the folder `out` may be replaced: empty, or exactly what packtool writes
    (manifest.json with our keys, data/ with shard files only); else why not, for the message."""
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return None
    manifest = out / schema.MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        return f"it is not empty and holds no {schema.MANIFEST} (not a packtool output)"
    try:
        m = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"its {schema.MANIFEST} is not packtool's (unreadable: {type(e).__name__})"
    if not schema.is_pack_manifest(m):
        return f"its {schema.MANIFEST} is not packtool's (no schema_version and packtool_version)"
    foreign = [n for n in names if n not in (schema.DATA_DIR, schema.MANIFEST)]
    data = out / schema.DATA_DIR
    if data.is_symlink() or (data.exists() and not data.is_dir()):
        foreign.insert(0, schema.DATA_DIR)
    elif data.is_dir():
        foreign += [
            f"{schema.DATA_DIR}/{p.name}"
            for p in sorted(data.iterdir())
            if not (_SHARD_FILE.fullmatch(p.name) and p.is_file() and not p.is_symlink())
        ]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        return f"it holds {foreign[0]}{more}, which packtool did not write"
    return None


def check_target(out: Path, force: bool) -> None:
    """Fail early (before tokenizing) when OUT exists and may not be replaced: --force replaces
    only an empty folder or a packtool pack."""
    if not out.exists() and not out.is_symlink():
        return
    if not force:
        raise UsageError(
            f"--out {out} already exists; use --force to replace it or choose another --out"
        )
    if not out.is_dir() or out.is_symlink():
        raise UsageError(
            f"--out {out} exists and is not a folder; remove it or choose another --out"
        )
    why = _not_a_pack(out)
    if why is not None:
        raise UsageError(
            f"refusing to replace {out}: {why}; remove it yourself or choose another --out"
        )


def check_space(out: Path, need_bytes: int = 0, estimate: str = "about the input's size") -> None:
    """Fail early (before tokenizing) when the folder that will hold OUT cannot be created or
    written, or has less free space than max(`need_bytes`, 64 MiB); `estimate` says what
    need_bytes counts. PACKTOOL_MIN_FREE_MIB=N replaces that estimate (0 skips the check)."""
    parent = out.absolute().parent
    why = files.unwritable(parent)
    if why is not None:
        raise UsageError(f"--out {out}: cannot write in {parent} ({why}); choose a writable --out")
    need = max(need_bytes, MIN_FREE)
    how = f"{estimate}, at least 64 MiB"
    override = os.environ.get("PACKTOOL_MIN_FREE_MIB")
    if override is not None:
        try:
            need, how = int(override) << 20, "PACKTOOL_MIN_FREE_MIB"
        except ValueError:
            raise UsageError(
                f"PACKTOOL_MIN_FREE_MIB={override!r} is not a whole number of MiB"
            ) from None
    free = shutil.disk_usage(parent).free
    if need and free < need:
        raise UsageError(
            f"--out {out}: {parent} has {free >> 20} MiB free, below the {need >> 20} MiB this pack "
            f"may need ({how}); free space, choose another --out, or set PACKTOOL_MIN_FREE_MIB "
            "(0 skips this check)"
        )


def _publish_modes(root: Path) -> None:
    """Give the finished pack the modes the umask allows (mkdtemp made the folder 0700)."""
    mask = files.umask()
    for folder, _, names in os.walk(root):
        os.chmod(folder, 0o777 & ~mask)
        for name in names:
            os.chmod(os.path.join(folder, name), 0o666 & ~mask)


@contextmanager
def atomic_output(
    out: Path, force: bool, check=None, said: list[str] | None = None
) -> Iterator[Path]:
    """Yield a temporary folder beside `out`; on success it becomes `out` (with umask modes), on
    any error it vanishes. `check(out, force)` raises unless `out` may be replaced (default
    check_target: absent, or a pack with --force); it runs before and again just before the swap.
    First the folders that runs which died left beside `out` are removed (io.files), one line
    each appended to `said`."""
    out = Path(out)
    check = check or check_target
    check(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    notes = files.remove_dead(out.parent)
    if said is not None:
        said += notes
    existed = out.exists()
    tmp = files.owned_folder(out.parent, f".{out.name}.packtool-tmp-")
    try:
        yield tmp
        Interrupt.check()  # a Ctrl-C that a library swallowed must not publish the pack
        _publish_modes(tmp)
        check(out, force)
        if out.exists():
            old = files.owned_folder(out.parent, f".{out.name}.packtool-old-")
            os.rename(out, old / "old")
            os.rename(tmp, out)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if os_errno(e) in (errno.ENOSPC, errno.EDQUOT):
            raise PacktoolError(_full_disk(e, out, tmp, existed)) from e
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _full_disk(e: OSError, out: Path, tmp: Path, existed: bool) -> str:
    """The one line for a disk (or quota) that filled while `out` was written in `tmp`: the file
    as it would have been named in `out`, the free space left, what is kept, the fix."""
    path = Path(e.filename) if e.filename else None
    if path is not None and path.is_relative_to(tmp):
        path = out / path.relative_to(tmp)
    quota = os_errno(e) == errno.EDQUOT
    what = "disk quota exceeded" if quota else "no space left on device"
    try:
        free = f"{shutil.disk_usage(out.parent).free >> 20} MiB free in {out.parent}"
    except OSError:
        free = f"in {out.parent}"
    kept = f"{out} is unchanged" if existed else f"{out} was not created"
    return (
        f"{path or out}: {what} while writing it ({free}); nothing was written, {kept} — "
        f"free space{' under your quota' if quota else ''} there, or choose another --out"
    )
