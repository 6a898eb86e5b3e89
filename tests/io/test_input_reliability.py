"""Reading input reliably (the reliability issue's READING items): globs and folders through
symlink loops end at once and read each real file once; UTF-16/32 JSON (Lines) decode to the same
records as UTF-8; dangling and looping data-file links are named, never dropped silently; a record
over the size limit is refused with file:line, size, limit and fix, without being held in memory.
Every input is built here, in tmp_path."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from packtool.cli import app
from packtool.config import ReadConfig
from packtool.errors import PacktoolError, UsageError
from packtool.io import files
from packtool.io.readers import file_parts, iter_records, part_batches
from packtool.io.sources import locate

runner = CliRunner()
PACKTOOL = str(Path(sys.executable).with_name("packtool"))
ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"héllo 世界 🎉 {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ]
    }
    for i in range(50)
]
PRETOK = [
    {"input_ids": [1 + i % 7] * (2 + i % 5), "labels": [1 + i % 7] * (2 + i % 5)} for i in range(50)
]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PACKTOOL_DEBUG", raising=False)
    monkeypatch.delenv("PACKTOOL_MAX_RECORD_MIB", raising=False)


def jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def pack(*args):
    return runner.invoke(app, ["pack", *map(str, args)])


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


def loopdir(root: Path) -> Path:
    """a.jsonl (25 pre-tokenized records), sub/b.jsonl (25), self -> ., sub/up -> .."""
    d = root / "loopdir"
    write(d / "a.jsonl", jsonl(PRETOK[:25]))
    write(d / "sub" / "b.jsonl", jsonl(PRETOK[25:]))
    os.symlink(".", d / "self")
    os.symlink("..", d / "sub" / "up")
    return d


LOOPS = "symlink to a folder already read"


# --------------------------------------------------------------------------- 1. symlink loops


def test_glob_through_symlink_loops_reads_each_file_once(tmp_path):
    d = loopdir(tmp_path)
    for source in (f"{d}/**/*.jsonl", str(d), f"{d}/**"):
        got = locate(source)
        assert got.files == (f"{d}/a.jsonl", f"{d}/sub/b.jsonl"), source
        assert got.not_read == ((f"{d}/self", LOOPS), (f"{d}/sub/up", LOOPS)), source
    # a pattern without ** reaches a.jsonl through self only: read once, under that name
    got = locate(f"{d}/*/*.jsonl")
    assert got.files == (f"{d}/self/a.jsonl", f"{d}/sub/b.jsonl") and got.not_read == ()
    assert len(list(iter_records(f"{d}/**/*.jsonl", ReadConfig()))) == 50


def test_folder_and_glob_follow_a_link_into_a_new_folder_once(tmp_path):
    d = tmp_path / "data"
    write(d / "real" / "a.jsonl", jsonl(ROWS[:2]))
    write(tmp_path / "elsewhere" / "b.jsonl", jsonl(ROWS[2:3]))
    os.symlink(tmp_path / "elsewhere", d / "extra")  # a folder outside: read, under the link
    os.symlink("real", d / "again")  # the real folder once more: not read twice
    os.symlink("real/a.jsonl", d / "copy.jsonl")  # a file once more: not read twice
    for source in (str(d), f"{d}/**/*.jsonl"):
        got = locate(source)
        assert got.files == (f"{d}/extra/b.jsonl", f"{d}/real/a.jsonl"), source
        assert got.not_read == (
            (f"{d}/again", LOOPS),
            (f"{d}/copy.jsonl", f"the same file as {d}/real/a.jsonl"),
        ), source


def test_pack_of_a_looping_glob_ends_and_says_what_it_skipped(tmp_path):
    """The hang: `pack 'loopdir/**/*.jsonl'` ran until killed. In a real process, with a timeout."""
    d = loopdir(tmp_path / "in")
    out = tmp_path / "o"
    r = subprocess.run(
        [PACKTOOL, "pack", f"{d}/**/*.jsonl", "--len", "4096", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert r.returncode == 0, r.stderr
    assert "examples: 50 read, 50 tokenized, 0 skipped" in r.stderr
    assert (
        f"warning: skipped 2 input path(s) of {d}/**/*.jsonl: {d}/self, {d}/sub/up ({LOOPS})"
        in r.stdout + r.stderr
    )
    m = manifest(out)
    assert m["counts"]["examples_read"] == 50
    assert [s["path"] for s in m["sources"]] == [f"{d}/a.jsonl", f"{d}/sub/b.jsonl"]


def test_mixture_input_through_a_looping_glob(tmp_path):
    d = loopdir(tmp_path / "in")
    a = write(tmp_path / "in" / "a.jsonl", jsonl(PRETOK[:5]))
    out = tmp_path / "o"
    r = pack(a, f"{d}/**/*.jsonl::weight=2", "--len", 4096, "--out", out, "--json", "-")
    assert r.exit_code == 0, r.output
    m = manifest(out)
    assert [i["counts"]["read"] for i in m["inputs"]] == [5, 50]
    said = [w["message"] for w in json.loads(r.stdout)["warnings"]]
    assert (
        f"input 2 ({d}/**/*.jsonl): skipped 2 input path(s) of {d}/**/*.jsonl: {d}/self, "
        f"{d}/sub/up ({LOOPS})"
    ) in said


# --------------------------------------------------------------------------- 2. UTF-16 / UTF-32

TWO = ROWS[:2]
ENCODINGS = {
    "utf-8": b"",
    "utf-8-bom": b"\xef\xbb\xbf",
    "utf-16-le-bom": b"\xff\xfe",
    "utf-16-be-bom": b"\xfe\xff",
    "utf-32-le-bom": b"\xff\xfe\x00\x00",
    "utf-32-be-bom": b"\x00\x00\xfe\xff",
    "utf-16-le": b"",  # no BOM: the NULs around '{' say which
    "utf-32-be": b"",
}


def encoded(text: str, name: str) -> bytes:
    codec = name.removesuffix("-bom")
    return ENCODINGS[name] + text.replace("\n", "\r\n" if "16" in name else "\n").encode(codec)


@pytest.mark.parametrize("name", ENCODINGS)
@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "json", "json-lines-in-json"])
def test_every_utf_reads_the_same_records(tmp_path, name, kind):
    text = json.dumps(TWO, ensure_ascii=False) if kind == "json" else jsonl(TWO)
    data = encoded("\n" + text + "\n\n", name)  # blank lines around: not records
    ext = {"jsonl.gz": "jsonl.gz", "json-lines-in-json": "json"}.get(kind, kind)
    path = tmp_path / f"x.{ext}"
    write(path, gzip.compress(data) if ext.endswith(".gz") else data)
    got = list(iter_records(str(path), ReadConfig()))
    assert [(r.record, r.error) for r in got] == [(row, None) for row in TWO]
    if kind.startswith("jsonl"):
        assert [r.line for r in got] == [2, 3]


def test_utf16_and_utf32_pack_exactly_as_utf8(tmp_path):
    """The lost record: UTF-16LE with a BOM read as '3 read, 1 tokenized, 2 skipped'."""
    shards = {}
    for name in ("utf-8", "utf-8-bom", "utf-16-le-bom", "utf-16-be-bom", "utf-32-le-bom"):
        path = write(tmp_path / "in" / f"{name}.jsonl", encoded(jsonl(TWO), name))
        out = tmp_path / name
        r = pack(path, "--len", 4096, "--out", out, "--on-error", "skip")
        assert r.exit_code == 0, r.output
        m = manifest(out)
        assert (m["counts"]["examples_read"], m["counts"]["tokenized"]) == (2, 2), name
        assert m["skipped"] == [], name
        shards[name] = [s["sha256"] for s in m["shards"]]
    assert len({tuple(v) for v in shards.values()}) == 1, shards


def test_a_bad_utf16_line_is_one_bad_record(tmp_path):
    good = encoded(jsonl(TWO), "utf-16-le-bom")
    lone = '{"text": "x'.encode("utf-16-le") + b"\x00\xd8" + '"}\n'.encode("utf-16-le")
    path = write(tmp_path / "u16.jsonl", good + lone + b"{")  # a lone surrogate; an odd last byte
    got = list(iter_records(str(path), ReadConfig()))
    assert [r.record for r in got] == [*TWO, None, None]
    assert [r.error for r in got[2:]] == [
        "not valid UTF-16-LE: illegal UTF-16 surrogate (byte 23)",
        "not valid UTF-16-LE: truncated data (byte 1)",
    ]
    r = pack(path, "--len", 4096, "--out", tmp_path / "o")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: {path}:3: not valid UTF-16-LE: illegal UTF-16 surrogate (byte 23); fix the "
        "record, or pass --on-error skip to count and list bad records"
    )
    r = pack(path, "--len", 4096, "--out", tmp_path / "o", "--on-error", "skip")
    assert r.exit_code == 0, r.output
    counts = manifest(tmp_path / "o")["counts"]
    assert (counts["examples_read"], counts["tokenized"], counts["skipped"]) == (4, 2, 2)


def test_a_json_file_that_is_not_valid_utf16_is_refused_in_one_line(tmp_path):
    path = write(tmp_path / "x.json", b"\xff\xfe" + '[{"text": "a"}]'.encode("utf-16-le") + b"]")
    with pytest.raises(
        PacktoolError,
        match=r"x.json: not valid UTF-16-LE: truncated data \(byte 33\); fix the file or save it "
        "as UTF-8$",
    ):
        list(iter_records(str(path), ReadConfig()))


def test_ray_parts_of_a_utf16_file_are_the_whole_file(tmp_path):
    path = write(tmp_path / "u16.jsonl", encoded(jsonl(ROWS), "utf-16-le-bom"))
    assert file_parts(str(path), part_bytes=100) == [None]
    plain = write(tmp_path / "u8.jsonl", encoded(jsonl(ROWS), "utf-8-bom"))
    parts = file_parts(str(plain), part_bytes=1000)
    assert len(parts) > 1
    got = [rec for p in parts for b in part_batches(str(plain), ReadConfig(), p) for rec in b.raw]
    assert [json.loads(x) for x in got] == ROWS


# --------------------------------------------------------------------------- 3. broken links


def test_broken_and_looping_data_links_in_a_folder_are_named(tmp_path):
    d = tmp_path / "f"
    write(d / "a.jsonl", jsonl(PRETOK))
    os.symlink("missing.jsonl", d / "gone.jsonl")
    os.symlink("loop2.jsonl", d / "loop1.jsonl")
    os.symlink("loop1.jsonl", d / "loop2.jsonl")
    os.symlink("missing.txt", d / "notes.txt")  # not a data file's name: not an input
    expected = (
        (f"{d}/gone.jsonl", "broken symlink: missing.jsonl does not exist"),
        (f"{d}/loop1.jsonl", "symlink loop"),
        (f"{d}/loop2.jsonl", "symlink loop"),
    )
    assert locate(str(d)).not_read == expected
    assert locate(f"{d}/*.jsonl").not_read == expected
    out = tmp_path / "o"
    r = pack(d, "--len", 4096, "--out", out, "--json", "-")
    assert r.exit_code == 0, r.output
    line = (
        f"skipped 3 input path(s) of {d}: {d}/gone.jsonl (broken symlink: missing.jsonl does not "
        f"exist); {d}/loop1.jsonl, {d}/loop2.jsonl (symlink loop)"
    )
    assert line in [w["message"] for w in json.loads(r.stdout)["warnings"]]
    assert manifest(out)["counts"]["examples_read"] == 50
    # and the manifest records them, as it records every source it read
    assert manifest(out)["not_read"] == [{"path": p, "why": why} for p, why in expected]
    again = pack(d, "--len", 4096, "--out", tmp_path / "o2")  # from the cache: the same record
    assert (
        again.exit_code == 0 and manifest(tmp_path / "o2")["not_read"] == manifest(out)["not_read"]
    )


def test_a_folder_of_broken_links_says_so(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    os.symlink("missing.jsonl", d / "gone.jsonl")
    with pytest.raises(
        PacktoolError,
        match=r"folder .*f' holds no data files \(not read: .*gone.jsonl \(broken symlink: "
        r"missing.jsonl does not exist\)\); expected",
    ):
        locate(str(d))


def test_a_link_broken_after_a_cached_run_is_still_named(tmp_path):
    d = tmp_path / "f"
    write(d / "a.jsonl", jsonl(PRETOK[:3]))
    assert pack(d, "--len", 4096, "--out", tmp_path / "o1").exit_code == 0
    os.symlink("missing.jsonl", d / "gone.jsonl")
    r = pack(d, "--len", 4096, "--out", tmp_path / "o2", "--json", "-")
    assert r.exit_code == 0, r.output
    said = [w["message"] for w in json.loads(r.stdout)["warnings"]]
    assert any(w.startswith(f"skipped 1 input path(s) of {d}: {d}/gone.jsonl") for w in said)


# --------------------------------------------------------------------------- 4. huge records


def big_file(tmp_path, mib: float) -> Path:
    pad = "x" * int(mib * (1 << 20))
    huge = {**ROWS[1], "pad": pad}
    return write(tmp_path / "big.jsonl", jsonl([ROWS[0], huge, ROWS[2]]))


def test_a_record_over_the_limit_is_refused_with_file_line_size_limit_and_fix(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("PACKTOOL_MAX_RECORD_MIB", "1")
    path = big_file(tmp_path, 3)
    size = len(path.read_bytes().splitlines(keepends=True)[1])
    r = pack(path, "--len", 4096, "--out", tmp_path / "o")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"error: {path}:2: record of {size:,} bytes is over the 1 MiB limit per record; raise it "
        "with PACKTOOL_MAX_RECORD_MIB=N; fix the record, or pass --on-error skip to count and list "
        "bad records"
    )
    out = tmp_path / "o"
    r = pack(path, "--len", 4096, "--out", out, "--on-error", "skip")
    assert r.exit_code == 0, r.output
    m = manifest(out)
    assert (m["counts"]["examples_read"], m["counts"]["tokenized"]) == (3, 2)
    assert [(s["line"], s["reason"]) for s in m["skipped"]] == [
        (2, f"record of {size:,} bytes is over the 1 MiB limit per record; raise it with "
         "PACKTOOL_MAX_RECORD_MIB=N")
    ]  # fmt: skip
    monkeypatch.setenv("PACKTOOL_MAX_RECORD_MIB", "4")
    assert [r.error for r in iter_records(str(path), ReadConfig())] == [None, None, None]


def test_a_record_over_the_limit_is_never_held_whole(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_MAX_RECORD_MIB", "1")
    path = big_file(tmp_path, 8)
    tracemalloc.start()
    try:
        got = [r.error for r in iter_records(str(path), ReadConfig())]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got[0] is None and got[2] is None and got[1].startswith("record of 8,")
    assert peak < 5 << 19, peak  # about twice the 1 MiB limit, never the line's 8 MiB


@pytest.mark.parametrize("name", ["utf-16-le-bom", "utf-32-be-bom"])
def test_the_limit_holds_for_utf16_and_utf32_and_compressed(tmp_path, monkeypatch, name):
    monkeypatch.setenv("PACKTOOL_MAX_RECORD_MIB", "1")
    data = encoded(big_file(tmp_path, 1).read_text(), name)
    for path in (
        write(tmp_path / "w.jsonl", data),
        write(tmp_path / "w.jsonl.gz", gzip.compress(data)),
    ):
        got = list(iter_records(str(path), ReadConfig()))
        assert [r.record for r in got] == [ROWS[0], None, ROWS[2]]
        assert got[1].line == 2 and "over the 1 MiB limit per record" in got[1].error


def test_a_bad_limit_is_a_usage_error(tmp_path, monkeypatch):
    path = write(tmp_path / "a.jsonl", jsonl(TWO))
    for bad in ("0", "lots"):
        monkeypatch.setenv("PACKTOOL_MAX_RECORD_MIB", bad)
        with pytest.raises(UsageError, match=f"PACKTOOL_MAX_RECORD_MIB='{bad}' is not a whole"):
            list(iter_records(str(path), ReadConfig()))
    monkeypatch.delenv("PACKTOOL_MAX_RECORD_MIB")
    assert files.max_record_bytes() == files.MAX_RECORD_MIB << 20 == 256 << 20
