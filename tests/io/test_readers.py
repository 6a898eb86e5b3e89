"""Readers: every input kind, deterministic order, malformed lines with file and line, limits,
source hashing, and hub ids that are read from the cache only (and fail fast when not cached)."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from packtool.config import ReadConfig
from packtool.errors import PacktoolError, UsageError
from packtool.io.readers import RawRecord, iter_records
from packtool.io.sources import resolve_sources

CFG = ReadConfig()
ROWS = [
    {"messages": [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"a{i}"}]}
    for i in range(5)
]


def jsonl_bytes(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def read(source, cfg: ReadConfig = CFG) -> list[RawRecord]:
    return list(iter_records(str(source), cfg))


def records(source, cfg: ReadConfig = CFG) -> list[dict]:
    out = read(source, cfg)
    assert all(r.error is None for r in out)
    return [r.record for r in out]


def write_parquet(path: Path, rows) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=2)
    return path


# --------------------------------------------------------------------------- jsonl


def test_jsonl_streams_with_index_and_line(tmp_path):
    p = write(
        tmp_path / "d.jsonl", b"\n" + jsonl_bytes(ROWS[:2]) + b"   \n" + jsonl_bytes(ROWS[2:3])
    )
    got = read(p)
    assert [(r.index, r.line) for r in got] == [(0, 2), (1, 3), (2, 5)]
    assert [r.record for r in got] == ROWS[:3] and all(r.file == str(p) for r in got)
    assert got[0].where == f"{p}:2"


def test_jsonl_malformed_and_non_object_lines(tmp_path):
    p = write(
        tmp_path / "bad.jsonl",
        jsonl_bytes(ROWS[:1])
        + b'{"messages": [1 2]}\n'
        + b"[1, 2]\n"
        + b"\xff\xfe{}\n"
        + jsonl_bytes(ROWS[1:2]),
    )
    got = read(p)
    assert [r.index for r in got] == [0, 1, 2, 3, 4]
    bad = got[1]
    assert bad.record is None and bad.line == 2 and bad.file == str(p)
    assert bad.error == "malformed JSON: Expecting ',' delimiter (col 17)"
    assert got[2].error == "record is a JSON array, expected an object"
    assert got[3].error.startswith("not valid UTF-8")
    assert got[4].record == ROWS[1] and got[4].line == 5


def test_jsonl_with_bom(tmp_path):
    p = write(tmp_path / "bom.jsonl", b"\xef\xbb\xbf" + jsonl_bytes(ROWS[:2]))
    assert records(p) == ROWS[:2]


@pytest.mark.parametrize("ext", [".gz", ".zst", ".bz2", ".xz"])
def test_compressed_jsonl_and_json(tmp_path, ext):
    import zstandard

    compress = {
        ".gz": gzip.compress,
        ".zst": zstandard.ZstdCompressor().compress,
        ".bz2": bz2.compress,
        ".xz": lzma.compress,
    }[ext]
    assert records(write(tmp_path / f"d.jsonl{ext}", compress(jsonl_bytes(ROWS)))) == ROWS
    assert records(write(tmp_path / f"d.json{ext}", compress(json.dumps(ROWS).encode()))) == ROWS


def test_corrupt_compressed_file(tmp_path):
    p = write(tmp_path / "d.jsonl.gz", gzip.compress(jsonl_bytes(ROWS))[:-12])
    with pytest.raises(PacktoolError, match=r"cannot read .*d\.jsonl\.gz"):
        read(p)
    p = write(tmp_path / "e.jsonl.zst", b"not zstd at all")
    with pytest.raises(PacktoolError, match=r"cannot read .*e\.jsonl\.zst"):
        read(p)


def test_empty_files_give_no_records(tmp_path):
    assert read(write(tmp_path / "e.jsonl", b"")) == []
    assert read(write(tmp_path / "e.json", b"  \n")) == []
    assert read(write(tmp_path / "l.json", b"[]")) == []


# --------------------------------------------------------------------------- json


def test_json_list_single_object_and_wrapper(tmp_path):
    assert records(write(tmp_path / "list.json", json.dumps(ROWS, indent=2))) == ROWS
    one = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
    got = read(write(tmp_path / "one.json", json.dumps(one, indent=2)))
    assert [r.record for r in got] == [one] and got[0].line is None
    assert records(write(tmp_path / "wrap.json", json.dumps({"data": ROWS}))) == ROWS
    # a single key that a format reads is one record, not a wrapper
    assert records(write(tmp_path / "msg.json", json.dumps({"messages": ROWS[0]["messages"]}))) == [
        ROWS[0]
    ]
    # ... and so is a key mapped with --column
    cfg = ReadConfig(columns=(("messages", "data"),))
    assert records(tmp_path / "wrap.json", cfg) == [{"data": ROWS}]


def test_json_non_object_items_and_bad_files(tmp_path):
    got = read(write(tmp_path / "mixed.json", json.dumps([ROWS[0], "oops", None])))
    assert got[0].record == ROWS[0]
    assert [r.error for r in got[1:]] == [
        "record is a JSON string, expected an object",
        "record is a JSON null, expected an object",
    ]
    with pytest.raises(PacktoolError, match=r"broken\.json: malformed JSON at line 2 col 1"):
        read(write(tmp_path / "broken.json", '[{"a": 1},\n'))
    with pytest.raises(
        PacktoolError, match="holds a JSON number; expected a list of records or one record"
    ):
        read(write(tmp_path / "num.json", "3"))


def test_json_that_is_really_jsonl(tmp_path):
    got = read(write(tmp_path / "lines.json", jsonl_bytes(ROWS[:3])))
    assert [r.record for r in got] == ROWS[:3] and [r.line for r in got] == [1, 2, 3]


# --------------------------------------------------------------------------- parquet, folders, globs


def test_parquet_nested_rows(tmp_path):
    p = write_parquet(tmp_path / "d.parquet", ROWS)
    got = read(p)
    assert [r.record for r in got] == ROWS and [r.index for r in got] == list(range(5))
    assert all(r.line is None and r.file == str(p) for r in got)


def test_folder_sorted_recursive_mixed_hidden_skipped(tmp_path):
    d = tmp_path / "ds"
    write(d / "b.jsonl", jsonl_bytes(ROWS[2:3]))
    write(d / "a.json", json.dumps(ROWS[:2]))
    write_parquet(d / "sub" / "c.parquet", ROWS[3:])
    write(d / ".hidden" / "x.jsonl", jsonl_bytes(ROWS))
    write(d / "README.md", "# not data")
    got = read(d)
    assert [r.record for r in got] == ROWS
    assert [os.path.relpath(r.file, d) for r in got] == [
        "a.json",
        "a.json",
        "b.jsonl",
        "sub/c.parquet",
        "sub/c.parquet",
    ]
    assert [s.path for s in resolve_sources(str(d))] == [
        str(d / "a.json"),
        str(d / "b.jsonl"),
        str(d / "sub" / "c.parquet"),
    ]


def test_folder_positions_count_within_each_file(tmp_path):
    from packtool.io.readers import iter_batches
    from packtool.io.sources import locate

    d = tmp_path / "pos"
    write(d / "a.json", json.dumps(ROWS[:2]))
    write(d / "b.jsonl", b"\n" + jsonl_bytes(ROWS[2:3]))
    write_parquet(d / "c.parquet", ROWS[3:])
    got = read(d)
    assert [r.index for r in got] == [0, 1, 2, 3, 4]  # source_index: across files
    assert [r.position for r in got] == [0, 1, 0, 0, 1]  # within each file
    assert [r.where.replace(str(d) + os.sep, "") for r in got] == [
        "a.json record 0",
        "a.json record 1",
        "b.jsonl:2",
        "c.parquet record 0",
        "c.parquet record 1",
    ]
    batches = list(iter_batches(locate(str(d)), CFG, 1))
    assert [(b.start, b.offset) for b in batches] == [
        (0, 0),
        (1, 1),
        (2, 0),
        (3, 0),
    ]  # parquet: one batch
    assert batches[3].where(1) == f"{d / 'c.parquet'} record 1" and batches[3].position(1) == 1
    head = batches[1].head(1)
    assert (head.start, head.offset, head.fmt) == (1, 1, None)
    limited = read(d, ReadConfig(limit=4))
    assert [(r.index, r.position) for r in limited] == [(0, 0), (1, 1), (2, 0), (3, 0)]


def test_folder_split_files(tmp_path):
    d = tmp_path / "hubstyle"
    write_parquet(d / "data" / "train-00000-of-00002.parquet", ROWS[:2])
    write_parquet(d / "data" / "train-00001-of-00002.parquet", ROWS[2:4])
    write_parquet(d / "data" / "test-00000-of-00001.parquet", ROWS[4:])
    assert records(d) == ROWS[:4]
    assert records(d, ReadConfig(split="test")) == ROWS[4:]
    with pytest.raises(
        PacktoolError,
        match="split 'validation' not found in folder .*splits test, train; use --split NAME",
    ):
        read(d, ReadConfig(split="validation"))
    e = tmp_path / "dirs"
    write(e / "train" / "x.jsonl", jsonl_bytes(ROWS[:1]))
    write(e / "dev" / "x.jsonl", jsonl_bytes(ROWS[1:2]))
    assert records(e, ReadConfig(split="validation")) == ROWS[1:2]


def test_folder_without_data(tmp_path):
    write(tmp_path / "empty" / "notes.txt", "x")
    with pytest.raises(PacktoolError, match="folder .*empty' holds no data files; expected .jsonl"):
        read(tmp_path / "empty")


def test_glob(tmp_path):
    write(tmp_path / "g" / "part-2.jsonl", jsonl_bytes(ROWS[2:]))
    write(tmp_path / "g" / "part-1.jsonl", jsonl_bytes(ROWS[:2]))
    write(tmp_path / "g" / "other.txt", "x")
    assert records(str(tmp_path / "g" / "part-*.jsonl")) == ROWS
    assert records(str(tmp_path / "**" / "*.jsonl")) == ROWS
    with pytest.raises(
        PacktoolError, match=r"no data files match .*\*\.txt' \(1 files of other types\)"
    ):
        read(str(tmp_path / "g" / "*.txt"))


# --------------------------------------------------------------------------- save_to_disk


def test_save_to_disk_dataset_and_dataset_dict(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "single"))
    got = read(tmp_path / "single")
    assert [r.record for r in got] == ROWS and got[0].file == str(tmp_path / "single")

    dd = datasets.DatasetDict({"train": ds.select(range(3)), "test": ds.select(range(3, 5))})
    dd.save_to_disk(str(tmp_path / "dict"))
    assert records(tmp_path / "dict") == ROWS[:3]
    got = read(tmp_path / "dict", ReadConfig(split="test"))
    assert [r.record for r in got] == ROWS[3:] and got[0].file == str(tmp_path / "dict" / "test")
    with pytest.raises(
        PacktoolError,
        match="split 'validation' is not in .*dict'; it has train, test; use --split NAME",
    ):
        read(tmp_path / "dict", ReadConfig(split="validation"))
    sources = resolve_sources(str(tmp_path / "dict"), "test")
    assert len(sources) == 1 and sources[0].path.endswith(".arrow") and "test" in sources[0].path


# --------------------------------------------------------------------------- hub ids


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Point datasets and huggingface_hub at empty caches under tmp_path."""
    import datasets
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf" / "datasets")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    return tmp_path / "hf"


def test_cached_hub_dataset(hf_cache, tmp_path):
    """A dataset that `load_dataset` prepared earlier: the layout datasets' cache builder reads."""
    import datasets

    prepared = hf_cache / "datasets" / "someone___tiny_chat" / "default" / "0.0.0" / "0123abcd"
    prepared.mkdir(parents=True)
    ds = datasets.Dataset.from_list(ROWS)
    ds.save_to_disk(str(tmp_path / "tmpds"))
    shutil.copy(next((tmp_path / "tmpds").glob("*.arrow")), prepared / "tiny_chat-train.arrow")
    split = datasets.SplitInfo("train", num_examples=len(ROWS), dataset_name="tiny_chat")
    datasets.DatasetInfo(
        config_name="default",
        dataset_name="tiny_chat",
        features=ds.features,
        splits=datasets.SplitDict({"train": split}),
    ).write_to_directory(str(prepared))

    got = read("someone/tiny_chat")
    assert [r.record for r in got] == ROWS and got[0].file == "someone/tiny_chat"
    assert [s.path for s in resolve_sources("someone/tiny_chat")] == [
        str(prepared / "tiny_chat-train.arrow")
    ]
    with pytest.raises(
        PacktoolError,
        match="split 'test' is not in cached hub dataset 'someone/tiny_chat': .*use --split NAME",
    ):
        read("someone/tiny_chat", ReadConfig(split="test"))


def test_hub_snapshot_in_hub_cache(hf_cache):
    """Raw files downloaded with `hf download --repo-type dataset`: read like a folder."""
    root = hf_cache / "hub" / "datasets--someone--raw_chat"
    snap = root / "snapshots" / "c0ffee"
    write_parquet(snap / "data" / "train-00000-of-00001.parquet", ROWS[:3])
    write_parquet(snap / "data" / "test-00000-of-00001.parquet", ROWS[3:])
    write(root / "refs" / "main", "c0ffee")
    assert records("someone/raw_chat") == ROWS[:3]
    assert records("someone/raw_chat", ReadConfig(split="test")) == ROWS[3:]


def test_uncached_hub_id_fails_fast_in_process(hf_cache):
    t0 = time.perf_counter()
    with pytest.raises(
        PacktoolError,
        match="'nobody/no_such_set' is not a local file or folder, and hub dataset .* is not in the local cache",
    ):
        read("nobody/no_such_set")
    assert time.perf_counter() - t0 < 2


def test_uncached_hub_id_fails_fast_fresh_process(tmp_path):
    """A fresh interpreter with an empty HF_HOME and no offline flag set: no network wait."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_"))}
    env["HF_HOME"] = str(tmp_path / "hf")
    code = (
        "from packtool.config import ReadConfig\n"
        "from packtool.io.readers import iter_records\n"
        "list(iter_records('fake-owner/fake-dataset-xyz', ReadConfig()))\n"
    )
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert time.perf_counter() - t0 < 30
    assert proc.returncode != 0
    assert "PacktoolError" in proc.stderr and "is not in the local cache" in proc.stderr
    assert str(tmp_path / "hf") in proc.stderr


# --------------------------------------------------------------------------- errors, limit, sources


def test_missing_path_and_unsupported_extension(tmp_path):
    with pytest.raises(PacktoolError, match="does not exist"):
        iter_records(str(tmp_path / "gone.jsonl"), CFG)  # raised at the call, not on first next()
    with pytest.raises(
        PacktoolError, match=r"'.*nope\.jsonl' does not exist; expected \.jsonl, \.ndjson, \.json"
    ):
        read(tmp_path / "nope.jsonl")
    with pytest.raises(
        PacktoolError, match=r"has an unsupported extension; expected \.jsonl, .*\.parquet"
    ):
        read(write(tmp_path / "d.csv", "a,b\n"))
    with pytest.raises(PacktoolError, match="unsupported extension"):
        read(write(tmp_path / "d.parquet.gz", b"x"))
    with pytest.raises(PacktoolError, match="not a readable Parquet file"):
        read(write(tmp_path / "fake.parquet", b"not parquet"))


def test_limit_counts_records_across_files_malformed_included(tmp_path):
    d = tmp_path / "lim"
    write(d / "1.jsonl", jsonl_bytes(ROWS[:2]) + b"{bad\n")
    write(d / "2.jsonl", jsonl_bytes(ROWS[2:]))
    got = read(d, ReadConfig(limit=4))
    assert [r.index for r in got] == [0, 1, 2, 3]
    assert got[2].error is not None and got[3].record == ROWS[2] and got[3].file.endswith("2.jsonl")
    assert len(read(d, ReadConfig(limit=100))) == 6
    with pytest.raises(UsageError, match="--limit 0 must be >= 1"):
        read(d, ReadConfig(limit=0))


def test_resolve_sources_hashes_and_sizes(tmp_path):
    d = tmp_path / "src"
    big = jsonl_bytes(ROWS * 30000)  # > 1 MiB: several hash chunks
    write(d / "b.jsonl", big)
    write(d / "a.jsonl.gz", gzip.compress(jsonl_bytes(ROWS)))
    got = resolve_sources(str(d))
    assert [Path(s.path).name for s in got] == ["a.jsonl.gz", "b.jsonl"]
    assert got[1].size == len(big) and got[1].sha256 == hashlib.sha256(big).hexdigest()
    assert resolve_sources(str(d)) == got  # deterministic
    single = resolve_sources(str(d / "b.jsonl"))
    assert single == [got[1]]
