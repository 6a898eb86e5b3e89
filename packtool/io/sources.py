"""Where the records of DATA are: a file, a folder or glob of files, a datasets.save_to_disk
folder, or a hub dataset in the local cache (never the network). `locate` finds it (a missing
path, split or uncached hub id raises here), `resolve_sources` lists its files with size and
sha256 (the manifest's `sources`).

    source                              Located
    x.jsonl, x.ndjson, x.json (+ .gz .zst .bz2 .xz), x.parquet      files (the path)
    a folder, or a glob                 files: each data file, sorted (names starting "." skipped)
    a datasets.save_to_disk folder      dataset (the split's Dataset of a DatasetDict)
    a hub dataset id (owner/name)       dataset (the `datasets` cache), else files of a raw
                                        snapshot (`hf download --repo-type dataset ID`)

A folder whose data files name two or more splits (train/test/validation by file or folder name,
e.g. data/train-0000.parquet, test.jsonl) is read for `split` only; otherwise every data file is.

Folders and `**` follow symlinks, but never into a folder already visited, and each real file is read
once (by its (st_dev, st_ino)), so a link loop (`self -> .`, `sub/up -> ..`) ends at once. What was
found and not read is `Located.not_read`, (path, why), for the run's warning:

    in/self               symlink to a folder already read
    in/gone.jsonl         broken symlink (no gone-target.jsonl)
    in/copy.jsonl         the same file as in/a.jsonl
"""

from __future__ import annotations

import errno
import fnmatch
import glob
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packtool.data.tokenized import SourceFile
from packtool.errors import PacktoolError
from packtool.io.files import sha256_file

_KINDS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".parquet": "parquet"}
COMPRESSED = (".gz", ".zst", ".bz2", ".xz")
_SUPPORTED_TEXT = (
    ".jsonl, .ndjson, .json (each also .gz/.zst/.bz2/.xz), .parquet, a folder or glob of those, "
    "a datasets.save_to_disk folder, or a cached hub dataset id"
)

# File/folder names that tag a split; aliases as in `datasets`.
_SPLIT_NAMES = {
    "train": "train", "training": "train",
    "validation": "validation", "valid": "validation", "val": "validation", "dev": "validation",
    "test": "test", "testing": "test", "eval": "test", "evaluation": "test",
}  # fmt: skip
_SPLIT_RE = re.compile(r"^(" + "|".join(_SPLIT_NAMES) + r")(?:[-_.].*)?$", re.IGNORECASE)
_HUB_ID_RE = re.compile(r"[A-Za-z0-9][\w.\-]*(?:/[A-Za-z0-9][\w.\-]*)?")


@dataclass(frozen=True)
class Located:
    kind: str  # "files" | "dataset"
    files: tuple[str, ...] = ()  # kind == "files"
    dataset: Any = None  # kind == "dataset": a datasets.Dataset
    label: str = ""  # RawRecord.file for a dataset
    not_read: tuple[tuple[str, str], ...] = ()  # (path, why) found but not read (module docstring)

    @property
    def paths(self) -> list[str]:
        """The files behind it, sorted: the data files, or the dataset's Arrow cache files."""
        if self.kind == "files":
            return sorted(self.files)
        return sorted(f["filename"] for f in self.dataset.cache_files)


def data_kind(name: str) -> str | None:
    """'jsonl' | 'json' | 'parquet' | None, from the file name."""
    low = name.lower()
    plain = next((low[: -len(z)] for z in COMPRESSED if low.endswith(z)), low)
    kind = next((k for ext, k in _KINDS.items() if plain.endswith(ext)), None)
    if kind == "parquet" and plain != low:
        return None  # parquet compresses inside; x.parquet.gz is not read
    return kind


def _split_of(rel: Path) -> str | None:
    for part in rel.parts[:-1]:
        if part.lower() in _SPLIT_NAMES:
            return _SPLIT_NAMES[part.lower()]
    m = _SPLIT_RE.match(rel.name)
    return _SPLIT_NAMES[m.group(1).lower()] if m else None


def _folder_files(folder: Path, label: str, split: str) -> Located:
    root = str(folder)
    found, not_read = _walk_glob(os.path.join(glob.escape(root), "**", "*"))
    rels = sorted(Path(os.path.relpath(p, root)) for p in found if data_kind(p))
    if not rels:
        raise PacktoolError(
            f"folder {label!r} holds no data files{_not_read_text(not_read)}; "
            f"expected {_SUPPORTED_TEXT}"
        )
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
    files = tuple(os.path.join(label, str(rel)) for rel in rels)
    return Located("files", files, not_read=not_read)


def _not_read_text(not_read) -> str:
    return (
        f" (not read: {', '.join(f'{p} ({why})' for p, why in not_read[:5])})" if not_read else ""
    )


# --------------------------------------------------------------------------- globs and folders


def _walk_glob(pattern: str) -> tuple[list[str], tuple[tuple[str, str], ...]]:
    """The files `pattern` matches (glob's rules: `**` any folders, names starting "." only where
    the pattern says so), each real file once, sorted; and (path, why) of what was found and not
    read: symlinks into folders already visited, broken or looping data-file links, the same file
    under a second name, folders that cannot be listed."""
    parts = pattern.split(os.sep)
    fixed = next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    base = os.sep.join(parts[:fixed]) or (os.sep if pattern.startswith(os.sep) else "")
    not_read: list[tuple[str, str]] = []
    paths = [base]
    for k, part in enumerate(parts[fixed:], fixed + 1):
        last = k == len(parts)
        step: list[str] = []
        for p in paths:
            if part == "**":
                folders = _tree(p, not_read)
                step += folders
                if last:
                    step += [q for f in folders for q in _names(f, "*", not_read)]
            elif glob.has_magic(part):
                step += _names(p, part, not_read)
            elif os.path.lexists(os.path.join(p, part)):
                step.append(os.path.join(p, part))
        paths = step if last else [p for p in step if os.path.isdir(p)]
    files = _real_files(sorted(set(paths)), not_read)
    return files, tuple(dict.fromkeys(not_read))


def _names(folder: str, part: str, not_read: list) -> list[str]:
    """The entries of `folder` whose name matches `part` (hidden ones only for a "." pattern)."""
    try:
        names = sorted(os.listdir(folder or os.curdir))
    except OSError as e:
        not_read.append((folder, f"cannot list it: {e.strerror}"))
        return []
    hidden = part.startswith(".")
    return [
        os.path.join(folder, n)
        for n in names
        if (hidden or not n.startswith(".")) and fnmatch.fnmatch(n, part)
    ]


def _tree(root: str, not_read: list) -> list[str]:
    """`root` and every folder below it (hidden ones left out), as `**` sees them: symlinks to
    folders are followed, but only into a folder not visited yet, and only after every folder
    reached without a symlink (so a real folder keeps its own name)."""
    try:
        visited = {_identity(os.stat(root or os.curdir))}
    except OSError:
        return []
    out: list[str] = []
    todo, links = [root], []
    while todo or links:
        if not todo:
            link = links.pop(0)
            try:
                key = _identity(os.stat(link))
            except OSError:
                continue
            if key in visited:
                not_read.append((link, "symlink to a folder already read"))
            else:
                visited.add(key)
                todo.append(link)
            continue
        folder = todo.pop()
        out.append(folder)
        try:
            with os.scandir(folder or os.curdir) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError as e:
            not_read.append((folder, f"cannot list it: {e.strerror}"))
            continue
        for e in entries:
            path = os.path.join(folder, e.name)
            if e.name.startswith("."):
                continue
            try:
                if e.is_dir(follow_symlinks=False):
                    key = _identity(e.stat(follow_symlinks=False))
                    if key not in visited:  # (a folder mounted inside itself)
                        visited.add(key)
                        todo.append(path)
                elif e.is_symlink() and e.is_dir():
                    links.append(path)
            except OSError:  # a link loop: a data file's name is reported by _real_files
                continue
    return sorted(out)


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _real_files(paths: list[str], not_read: list) -> list[str]:
    """The regular files among `paths`, each real file once: where two paths are one file, the one
    reached without a symlink (else the first) is kept and the other listed as not read. Data-file
    names that are broken or looping symlinks are listed as not read."""
    first: dict[tuple[int, int], list[str]] = {}
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            if data_kind(p):
                not_read.append((p, _broken(p, e)))
            continue
        if os.path.isfile(p):
            first.setdefault(_identity(st), []).append(p)
    out = []
    for same in first.values():
        real = (p for p in same if os.path.realpath(p) == os.path.abspath(p))
        keep = same[0] if len(same) == 1 else next(real, same[0])
        out.append(keep)
        not_read += [(p, f"the same file as {keep}") for p in same if p != keep]
    return sorted(out)


def _broken(path: str, e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "symlink loop"
    if e.errno == errno.ENOENT and os.path.islink(path):
        return f"broken symlink: {os.readlink(path)} does not exist"
    return f"cannot read it: {e.strerror}"


def locate(source: str, split: str = "train") -> Located:
    """Find what `source` names (a missing path, split or uncached hub id raises here)."""
    path = Path(source).expanduser()
    if path.is_file():
        if data_kind(path.name) is None:
            raise PacktoolError(
                f"{source!r} has an unsupported extension; expected {_SUPPORTED_TEXT}"
            )
        return Located("files", (source,))
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (
            (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
        ):  # a datasets.save_to_disk folder
            return _load_from_disk(path, source, split)
        return _folder_files(path, source, split)
    if glob.has_magic(source):
        matches, not_read = _walk_glob(os.path.expanduser(source))
        files = tuple(p for p in matches if data_kind(p))
        if not files:
            found = f" ({len(matches)} files of other types)" if matches else ""
            raise PacktoolError(
                f"no data files match {source!r}{found}{_not_read_text(not_read)}; "
                f"expected {_SUPPORTED_TEXT}"
            )
        return Located("files", files, not_read=not_read)
    if _HUB_ID_RE.fullmatch(source) and data_kind(source) is None:
        return _load_hub(source, split)
    raise PacktoolError(f"{source!r} does not exist; expected {_SUPPORTED_TEXT}")


def _load_from_disk(path: Path, label: str, split: str) -> Located:
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
        return Located("dataset", dataset=ds[split], label=os.path.join(label, split))
    return Located("dataset", dataset=ds, label=label)


@contextmanager
def _offline() -> Iterator[None]:
    """Offline mode for datasets and huggingface_hub (their module constants, which they read
    HF_HUB_OFFLINE into at import) while we look in the cache, then restored."""
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


def _load_hub(repo_id: str, split: str) -> Located:
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
        return Located("dataset", dataset=ds, label=repo_id)
    snap = _hub_snapshot(repo_id)
    if snap is not None:
        return _folder_files(snap, str(snap), split)
    import huggingface_hub.constants as hub_constants

    raise PacktoolError(
        f"{repo_id!r} is not a local file or folder, and hub dataset {repo_id!r} is not in the local "
        f"cache (looked in {datasets.config.HF_DATASETS_CACHE} and {hub_constants.HF_HUB_CACHE}); "
        "packtool reads hub datasets from the cache only: download it first "
        f"(hf download --repo-type dataset {repo_id}) or pass a local path"
    )


def resolve_sources(source: str, split: str = "train") -> list[SourceFile]:
    """The files behind `source` (Located.paths) with size and sha256: the manifest's `sources`."""
    return [
        SourceFile(path=p, size=os.path.getsize(p), sha256=sha256_file(p))
        for p in locate(source, split).paths
    ]
