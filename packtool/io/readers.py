"""Readers: turn a source string into a stream of raw records, one RawRecord each.

    source                              read with                       RawRecord.file / .line
    x.jsonl, x.ndjson (+ .gz .zst .bz2 .xz)   line by line, json.loads  the path / 1-based line
    x.json (+ .gz .zst .bz2 .xz)        whole file, json.loads          the path / None
    x.parquet                           pyarrow, 1024-row batches       the path / None
    a folder, or a glob                 each data file above, sorted    the file / as above
    a datasets.save_to_disk folder      datasets.load_from_disk         the folder (the split
                                                                        folder of a DatasetDict)
    a hub dataset id (owner/name)       the local cache only            the id (or cached file)

Records are yielded exactly as stored: no column mapping, no format work (packtool.formats does
that). A line or element that cannot be parsed is yielded too, with `record=None` and `error` set,
so the caller can stop on it or skip and count it (`--on-error`). `index` counts every record read
across all files, malformed ones included; it is the record's `source_index`.

`cfg.limit` is applied here: at most `limit` records are read, malformed ones included, so a
limited run reads a prefix of the input whatever happens downstream.

A `.json` file holds a list of records or one record. One exception, because it is unambiguous: an
object with a single key whose value is a list of objects, where the key is not a field any format
reads (messages, conversations, text, ...) nor a column mapped with --column, is a wrapper, and its
list holds the records: {"data": [{...}, {...}]}. A `.json` file that is really JSON Lines (its
first line is a whole JSON object) is read as JSON Lines.

A folder is searched recursively (names starting with "." skipped). When its data files name two
or more splits (train/test/validation by file or folder name, e.g. data/train-0000.parquet,
test.jsonl), only the files of `cfg.split` are read; otherwise every data file is read.

Hub ids are read from the local cache only, never the network: the cache is checked first and
loaded with offline mode forced on, so a dataset that is not cached fails at once. First the
`datasets` cache that `load_dataset` fills, then a raw snapshot (`hf download --repo-type dataset
ID`) read like a folder. Memory: jsonl streams one line at a time; parquet one batch; Arrow
datasets are memory-mapped; a .json file is held whole.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import json
import lzma
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from packtool.config import ReadConfig
from packtool.data import SourceFile
from packtool.errors import PacktoolError, UsageError
from packtool.io.files import sha256_file

_JSONL = (".jsonl", ".ndjson")
_JSON = (".json",)
_PARQUET = (".parquet",)
_COMPRESSED = (".gz", ".zst", ".bz2", ".xz")
SUPPORTED = (".jsonl", ".ndjson", ".json", ".parquet")  # jsonl/json also compressed: + _COMPRESSED
_SUPPORTED_TEXT = (
    ".jsonl, .ndjson, .json (each also .gz/.zst/.bz2/.xz), .parquet, a folder or glob of those, "
    "a datasets.save_to_disk folder, or a cached hub dataset id"
)
_BATCH = 1024  # rows per Arrow batch converted to Python at once

# File/folder names that tag a split; aliases as in `datasets`.
_SPLIT_NAMES = {
    "train": "train", "training": "train",
    "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
    "test": "test", "testing": "test", "eval": "test", "evaluation": "test",
}  # fmt: skip
_SPLIT_RE = re.compile(r"^(" + "|".join(_SPLIT_NAMES) + r")(?:[-_.].*)?$", re.IGNORECASE)
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]*(?:/[A-Za-z0-9][\w.\-]*)?")


@dataclass(frozen=True)
class RawRecord:
    index: int  # 0-based position among all records read, across files, malformed ones included
    file: str  # path (or hub id) it came from
    line: int | None  # 1-based line for jsonl, None otherwise
    record: dict | None  # the parsed record, None when it could not be parsed
    error: str | None  # why not parsed, e.g. "malformed JSON: Expecting ',' delimiter (col 17)"

    @property
    def where(self) -> str:
        """'data.jsonl:12' or 'data.parquet record 3', for messages."""
        return (
            f"{self.file}:{self.line}"
            if self.line is not None
            else f"{self.file} record {self.index}"
        )


# --------------------------------------------------------------------------- locating sources


@dataclass(frozen=True)
class _Located:
    kind: str  # "files" | "dataset"
    files: tuple[str, ...] = ()  # kind == "files"
    dataset: Any = None  # kind == "dataset": a datasets.Dataset
    label: str = ""  # RawRecord.file for a dataset


def _data_kind(name: str) -> str | None:
    """'jsonl' | 'json' | 'parquet' | None, from the file name."""
    low = name.lower()
    for ext in _COMPRESSED:
        if low.endswith(ext):
            low = low[: -len(ext)]
            if low.endswith(_PARQUET):
                return None  # parquet compresses inside; x.parquet.gz is not read
            break
    if low.endswith(_JSONL):
        return "jsonl"
    if low.endswith(_JSON):
        return "json"
    if low.endswith(_PARQUET):
        return "parquet"
    return None


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def _split_of(rel: Path) -> str | None:
    for part in rel.parts[:-1]:
        if part.lower() in _SPLIT_NAMES:
            return _SPLIT_NAMES[part.lower()]
    m = _SPLIT_RE.match(rel.name)
    return _SPLIT_NAMES[m.group(1).lower()] if m else None


def _folder_files(folder: Path, label: str, split: str) -> tuple[str, ...]:
    rels = sorted(
        p.relative_to(folder)
        for p in folder.rglob("*")
        if p.is_file()
        and _data_kind(p.name)
        and not any(part.startswith(".") for part in p.relative_to(folder).parts)
    )
    if not rels:
        raise PacktoolError(f"folder {label!r} holds no data files; expected {_SUPPORTED_TEXT}")
    splits = {rel: _split_of(rel) for rel in rels}
    named = sorted({s for s in splits.values() if s})
    if len(named) >= 2:
        want = _SPLIT_NAMES.get(split.lower(), split)
        rels = [rel for rel in rels if splits[rel] == want]
        if not rels:
            raise PacktoolError(
                f"split {split!r} not found in folder {label!r}; its files name the splits "
                f"{', '.join(named)}; use --split NAME"
            )
    return tuple(os.path.join(label, str(rel)) for rel in rels)


def _locate(source: str, split: str) -> _Located:
    path = Path(source).expanduser()
    if path.is_file():
        if _data_kind(path.name) is None:
            raise PacktoolError(
                f"{source!r} has an unsupported extension; expected {_SUPPORTED_TEXT}"
            )
        return _Located("files", (source,))
    if path.is_dir():
        if _is_saved_dataset(path):
            return _load_from_disk(path, source, split)
        return _Located("files", _folder_files(path, source, split))
    if glob.has_magic(source):
        matches = sorted(
            p for p in glob.glob(os.path.expanduser(source), recursive=True) if os.path.isfile(p)
        )
        files = tuple(p for p in matches if _data_kind(p))
        if not files:
            found = f" ({len(matches)} files of other types)" if matches else ""
            raise PacktoolError(
                f"no data files match {source!r}{found}; expected {_SUPPORTED_TEXT}"
            )
        return _Located("files", files)
    if _HUB_ID_RE.fullmatch(source) and _data_kind(source) is None:
        return _load_hub(source, split)
    raise PacktoolError(f"{source!r} does not exist; expected {_SUPPORTED_TEXT}")


def _load_from_disk(path: Path, label: str, split: str) -> _Located:
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as e:  # a damaged folder: say which and why
        raise PacktoolError(f"cannot load save_to_disk folder {label!r}: {e}") from None
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise PacktoolError(
                f"split {split!r} is not in {label!r}; it has {', '.join(ds)}; use --split NAME"
            )
        return _Located("dataset", dataset=ds[split], label=os.path.join(label, split))
    return _Located("dataset", dataset=ds, label=label)


@contextmanager
def _offline() -> Iterator[None]:
    """Offline mode for datasets and huggingface_hub while we look in the cache: a dataset that is
    not cached fails at once instead of waiting on the network. Both libraries read the flag from
    these module constants (set from HF_HUB_OFFLINE at import), so we set them, then restore."""
    import datasets
    import huggingface_hub.constants as hub_constants

    saved = datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE
    verbosity = datasets.logging.get_verbosity()
    datasets.config.HF_HUB_OFFLINE = hub_constants.HF_HUB_OFFLINE = True
    datasets.logging.set_verbosity_error()  # no "Using the latest cached version" chatter
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub_constants.HF_HUB_OFFLINE = saved
        datasets.logging.set_verbosity(verbosity)


def _hub_snapshot(repo_id: str) -> Path | None:
    import huggingface_hub.constants as hub_constants

    root = Path(hub_constants.HF_HUB_CACHE) / ("datasets--" + repo_id.replace("/", "--"))
    snapshots = root / "snapshots"
    if not snapshots.is_dir():
        return None
    ref = root / "refs" / "main"
    if ref.is_file():
        snap = snapshots / ref.read_text().strip()
        if snap.is_dir():
            return snap
    dirs = sorted((p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    return dirs[-1] if dirs else None


def _load_hub(repo_id: str, split: str) -> _Located:
    import datasets
    from datasets.naming import camelcase_to_snakecase

    parts = repo_id.split("/")
    parts[-1] = camelcase_to_snakecase(parts[-1])
    prepared = Path(datasets.config.HF_DATASETS_CACHE) / "___".join(parts)
    if any(p.is_dir() for p in prepared.glob("*/*/*")):
        with _offline():
            try:
                ds = datasets.load_dataset(repo_id, split=split)
            except Exception as e:  # one line: datasets' messages span several
                why = " ".join(str(e).split()).rstrip(".")
                if isinstance(e, ValueError) and "split" in why.lower():
                    raise PacktoolError(
                        f"split {split!r} is not in cached hub dataset {repo_id!r}: {why}; "
                        "use --split NAME"
                    ) from None
                raise PacktoolError(f"cannot load cached hub dataset {repo_id!r}: {why}") from None
        return _Located("dataset", dataset=ds, label=repo_id)
    snap = _hub_snapshot(repo_id)
    if snap is not None:
        return _Located("files", _folder_files(snap, str(snap), split))
    import huggingface_hub.constants as hub_constants

    raise PacktoolError(
        f"{repo_id!r} is not a local file or folder, and hub dataset {repo_id!r} is not in the local "
        f"cache (looked in {datasets.config.HF_DATASETS_CACHE} and {hub_constants.HF_HUB_CACHE}); "
        "packtool reads hub datasets from the cache only: download it first "
        f"(hf download --repo-type dataset {repo_id}) or pass a local path"
    )


# --------------------------------------------------------------------------- public API


def resolve_sources(source: str, split: str = "train") -> list[SourceFile]:
    """The concrete files behind `source`, sorted by path, with size and sha256. For a
    save_to_disk folder or a prepared hub dataset: the Arrow files of the split."""
    located = _locate(source, split)
    if located.kind == "files":
        paths = list(located.files)
    else:
        paths = [f["filename"] for f in located.dataset.cache_files]
    return [SourceFile(path=p, size=os.path.getsize(p), sha256=sha256_file(p)) for p in sorted(paths)]


def iter_records(source: str, cfg: ReadConfig) -> Iterator[RawRecord]:
    """Every record behind `source`, in a deterministic order, at most `cfg.limit` of them.
    The source is located now (a missing path or split raises here); records are read lazily."""
    if cfg.limit is not None and cfg.limit < 1:
        raise UsageError(f"--limit {cfg.limit} must be >= 1")
    return _records(_locate(source, cfg.split), cfg)


def _records(located: _Located, cfg: ReadConfig) -> Iterator[RawRecord]:
    if located.kind == "files":
        streams = ((f, _iter_file(f, cfg)) for f in located.files)
    else:
        streams = iter([(located.label, _iter_dataset(located.dataset))])
    index = 0
    for file, rows in streams:
        for line, record, error in rows:
            yield RawRecord(index, file, line, record, error)
            index += 1
            if index == cfg.limit:  # stop before reading one more record (or opening a file)
                return




# --------------------------------------------------------------------------- per-file readers

_Row = tuple[int | None, dict | None, str | None]  # (line, record, error)


def _iter_file(path: str, cfg: ReadConfig) -> Iterator[_Row]:
    kind = _data_kind(path)
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError)
    if path.lower().endswith(".zst"):
        import zstandard

        errors += (zstandard.ZstdError,)
    try:
        if kind == "parquet":
            yield from _iter_parquet(path)
        elif kind == "json":
            yield from _iter_json(path, cfg)
        else:
            yield from _iter_jsonl(path)
    except errors as e:  # unreadable, truncated or corrupt (compressed) data
        raise PacktoolError(f"cannot read {path!r}: {e}") from None


def _open(path: str) -> BinaryIO:
    low = path.lower()
    if low.endswith(".gz"):
        return gzip.open(path, "rb")  # type: ignore[return-value]
    if low.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb")))  # type: ignore[arg-type]
    if low.endswith(".bz2"):
        return bz2.open(path, "rb")  # type: ignore[return-value]
    if low.endswith(".xz"):
        return lzma.open(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _parse_line(raw: bytes, lineno: int | None) -> _Row:
    try:
        obj = json.loads(raw)  # bytes: UTF-8 (a BOM is accepted)
    except json.JSONDecodeError as e:
        return lineno, None, f"malformed JSON: {e.msg} (col {e.colno})"
    except UnicodeDecodeError as e:
        return lineno, None, f"not valid UTF-8: {e.reason} (byte {e.start + 1})"
    if not isinstance(obj, dict):
        return lineno, None, f"record is a JSON {_json_type(obj)}, expected an object"
    return lineno, obj, None


def _json_type(obj: Any) -> str:
    return {list: "array", str: "string", type(None): "null", bool: "boolean"}.get(
        type(obj), "number"
    )


def _iter_jsonl(path: str) -> Iterator[_Row]:
    with _open(path) as f:
        for lineno, raw in enumerate(f, 1):
            if raw.strip():
                yield _parse_line(raw, lineno)


def _iter_json(path: str, cfg: ReadConfig) -> Iterator[_Row]:
    with _open(path) as f:
        data = f.read()
    if not data.strip():
        return
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as e:
        first = data.lstrip().split(b"\n", 1)[0]
        if e.msg == "Extra data" and _parse_line(first, None)[1] is not None:
            yield from _iter_jsonl(path)  # JSON Lines saved as .json
            return
        raise PacktoolError(
            f"{path}: malformed JSON at line {e.lineno} col {e.colno}: {e.msg}"
        ) from None
    except UnicodeDecodeError as e:
        raise PacktoolError(f"{path}: not valid UTF-8: {e.reason}") from None
    if isinstance(obj, dict):
        obj = _unwrap(obj, cfg)
    if isinstance(obj, dict):
        yield None, obj, None
        return
    if not isinstance(obj, list):
        raise PacktoolError(
            f"{path}: holds a JSON {_json_type(obj)}; expected a list of records or one record"
        )
    for item in obj:
        if isinstance(item, dict):
            yield None, item, None
        else:
            yield None, None, f"record is a JSON {_json_type(item)}, expected an object"


def _unwrap(obj: dict, cfg: ReadConfig) -> dict | list:
    """{"data": [{...}, ...]} -> the list; any other object is one record (see module docstring)."""
    from packtool.formats import RECORD_FIELDS

    if len(obj) != 1:
        return obj
    ((key, value),) = obj.items()
    if key in RECORD_FIELDS or key in {theirs for _, theirs in cfg.columns}:
        return obj
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    return obj


def _iter_parquet(path: str) -> Iterator[_Row]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise PacktoolError(f"{path!r} is not a readable Parquet file: {e}") from None
    for batch in pf.iter_batches(batch_size=_BATCH):
        for row in batch.to_pylist():
            yield None, row, None


def _iter_dataset(ds: Any) -> Iterator[_Row]:
    for table in ds.with_format("arrow").iter(batch_size=_BATCH):
        for row in table.to_pylist():
            yield None, row, None
