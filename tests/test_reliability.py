"""Output safety, fail-fast checks, the one error boundary and Ctrl-C (issue 11).

Each test asserts the one-line message and the exit code; the Ctrl-C and broken-pipe tests run the
real `packtool` command in a subprocess.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool import api
from packtool.cli import app, os_error_line
from packtool.io import files

runner = CliRunner()
PACKTOOL = str(Path(sys.executable).with_name("packtool"))
as_root = pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PACKTOOL_DEBUG", raising=False)
    monkeypatch.delenv("PACKTOOL_MIN_FREE_MIB", raising=False)
    monkeypatch.setattr(files, "_TEMP_CACHE", None)  # a fallback cache of one test stays there


@pytest.fixture
def pretok(tmp_path) -> Path:
    """Pre-tokenized input: 40 examples of 1..14 tokens (packs in well under a second)."""
    ids = [[(7 * i + t) % 100 + 1 for t in range(1 + i % 14)] for i in range(40)]
    path = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), path)
    return path


def run(*args):
    return runner.invoke(app, ["pack", *map(str, args)])


def error_lines(r) -> list[str]:
    return [line for line in r.stderr.splitlines() if line.startswith("error: ")]


def no_tokenizing(monkeypatch):
    """Make any tokenizing fail the test: the checks under test must come first."""

    def fail(*a, **k):
        raise AssertionError("tokenized before the output was checked")

    monkeypatch.setattr(api, "load_tokenized", fail)


# ---------------------------------------------------------------------------------------------
# --force replaces only a packtool pack


def test_force_refuses_a_web_folder_with_a_manifest(tmp_path, pretok, monkeypatch):
    web = tmp_path / "web"
    web.mkdir()
    (web / "manifest.json").write_text(json.dumps({"name": "my app", "start_url": "/"}))
    (web / "index.html").write_text("<html>precious</html>")
    no_tokenizing(monkeypatch)
    r = run(pretok, "--len", 16, "--out", web, "--force")
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: refusing to replace {web}: its manifest.json is not packtool's (no "
        "schema_version and packtool_version); remove it yourself or choose another --out"
    ]
    assert (web / "index.html").read_text() == "<html>precious</html>"


def test_force_refuses_a_pack_with_foreign_files(tmp_path, pretok):
    out = tmp_path / "out"
    assert run(pretok, "--len", 16, "--out", out).exit_code == 0
    (out / "index.html").write_text("mine")
    (out / "data" / "notes.txt").write_text("mine too")
    r = run(pretok, "--len", 16, "--out", out, "--force")
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: refusing to replace {out}: it holds index.html (and 1 more), which packtool "
        "did not write; remove it yourself or choose another --out"
    ]
    (out / "index.html").unlink()
    r = run(pretok, "--len", 16, "--out", out, "--force")
    assert r.exit_code == 2 and "it holds data/notes.txt, which packtool did not write" in r.stderr
    assert (out / "data" / "notes.txt").read_text() == "mine too"


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_force_replaces_a_pack_and_modes_follow_the_umask(tmp_path, pretok, mask):
    out = tmp_path / "out"
    old = os.umask(mask)
    try:
        assert run(pretok, "--len", 16, "--out", out).exit_code == 0
        r = run(pretok, "--len", 32, "--out", out, "--force")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "manifest.json").read_text())["pack_len"] == 32
    dirs = [out, out / "data"]
    found = [p for p in out.rglob("*") if p.is_file()]
    assert {p.name for p in found} >= {"manifest.json", "train-00000-of-00001.parquet"}
    assert {oct(stat.S_IMODE(d.stat().st_mode)) for d in dirs} == {
        oct(0o777 & ~mask)
    }  # 755 under 022
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in found} == {oct(0o666 & ~mask)}  # 644
    assert sorted(p.name for p in tmp_path.iterdir() if "packtool" in p.name) == []


# ---------------------------------------------------------------------------------------------
# fail fast: --out's folder, its free space, the cache


@as_root
def test_read_only_parent_fails_before_tokenizing(tmp_path, pretok, monkeypatch):
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    no_tokenizing(monkeypatch)
    try:
        r = run(pretok, "--len", 16, "--out", parent / "out")
    finally:
        parent.chmod(0o755)
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: --out {parent / 'out'}: cannot write in {parent} (Permission denied); "
        "choose a writable --out"
    ]


def test_parent_that_cannot_be_created_fails_before_tokenizing(tmp_path, pretok, monkeypatch):
    (tmp_path / "afile").write_text("x")
    out = tmp_path / "afile" / "sub" / "out"
    no_tokenizing(monkeypatch)
    r = run(pretok, "--len", 16, "--out", out)
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: --out {out}: cannot write in {out.parent} (Not a directory); "
        "choose a writable --out"
    ]


def test_missing_parent_is_created(tmp_path, pretok):
    out = tmp_path / "new" / "deeper" / "out"
    r = run(pretok, "--len", 16, "--out", out)
    assert r.exit_code == 0, r.output
    assert (out / "manifest.json").is_file()


def test_full_disk_fails_before_tokenizing(tmp_path, pretok, monkeypatch):
    import shutil

    from packtool.io import shards

    real = shutil.disk_usage
    monkeypatch.setattr(shards.shutil, "disk_usage", lambda p: real(p)._replace(free=10 << 20))
    out = tmp_path / "out"
    with monkeypatch.context() as mp:
        no_tokenizing(mp)
        r = run(pretok, "--len", 16, "--out", out)
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: --out {out}: {tmp_path} has 10 MiB free, below the 64 MiB this pack may "
        "need (about the input's size, at least 64 MiB); free space, choose another --out, "
        "or set PACKTOOL_MIN_FREE_MIB (0 skips this check)"
    ]
    monkeypatch.setenv("PACKTOOL_MIN_FREE_MIB", "0")
    r = run(pretok, "--len", 16, "--out", out)
    assert r.exit_code == 0, r.output


def test_ray_asks_room_for_its_part_files_too(tmp_path, pretok, monkeypatch):
    """--engine ray keeps the tokens in part files beside the pack until the shards are written:
    it asks for ~3x the input's size there, where the local engine asks for ~1x (its tokens go to
    the cache, checked on its own). Checked before any cluster starts."""
    import shutil

    from packtool import api
    from packtool.io import shards

    real = shutil.disk_usage
    monkeypatch.setattr(shards.shutil, "disk_usage", lambda p: real(p)._replace(free=200 << 20))
    monkeypatch.setattr(api, "input_bytes", lambda source: 100 << 20)
    out = tmp_path / "out"
    with monkeypatch.context() as mp:
        no_tokenizing(mp)
        mp.setattr(api, "engine", lambda cfg: pytest.fail("a cluster was started"))
        r = run(pretok, "--len", 16, "--out", out, "--engine", "ray")
    assert r.exit_code == 2, r.output
    assert error_lines(r) == [
        f"error: --out {out}: {tmp_path} has 200 MiB free, below the 300 MiB this pack may "
        "need (about 3x the input's size: the pack and Ray's part files beside it, at least 64 "
        "MiB); free space, choose another --out, or set PACKTOOL_MIN_FREE_MIB (0 skips this check)"
    ]


def test_unusable_cache_warns_and_still_packs(tmp_path, pretok, monkeypatch):
    (tmp_path / "afile").write_text("x")
    bad = tmp_path / "afile" / "cache"  # cannot be created, even by root
    monkeypatch.setenv("PACKTOOL_CACHE", str(bad))
    out = tmp_path / "out"
    r = run(pretok, "--len", 16, "--out", out)
    assert r.exit_code == 0, r.output
    warned = [line for line in r.stderr.splitlines() if "tokenization cache" in line]
    assert len(warned) == 1 and warned[0].startswith(
        f"warning: tokenization cache {bad} is unusable (Not a directory): this run tokenizes into "
    )
    assert "caches nothing; set PACKTOOL_CACHE to a writable folder with space" in warned[0]
    assert (out / "manifest.json").is_file()


@as_root
def test_read_only_cache_warns_and_still_packs(tmp_path, pretok, monkeypatch):
    cache = tmp_path / "ro-cache"
    cache.mkdir()
    cache.chmod(0o555)
    monkeypatch.setenv("PACKTOOL_CACHE", str(cache))
    try:
        r = run(pretok, "--len", 16, "--out", tmp_path / "out")
    finally:
        cache.chmod(0o755)
    assert r.exit_code == 0, r.output
    assert f"warning: tokenization cache {cache} is unusable (Permission denied)" in r.stderr
    assert list(cache.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# the error boundary


@pytest.mark.parametrize(
    "err, line",
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/big/out/data/x.parquet"),
            "/big/out/data/x.parquet: No space left on device — free space, or choose another --out (or "
            "PACKTOOL_CACHE for the tokenization cache)",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/out"),
            "/ro/out: Read-only file system — choose a writable --out (or PACKTOOL_CACHE for the tokenization cache)",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/x"),
            "/x: Permission denied — choose a writable --out (or PACKTOOL_CACHE for the tokenization cache)",
        ),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/gone"),
            "/gone: No such file or directory — check the path",
        ),
        (
            OSError(
                "[Errno 28] No space left on device. Detail: [errno 28] No space left on device"
            ),  # pyarrow
            "No space left on device — free space, or choose another --out (or PACKTOOL_CACHE for the tokenization "
            "cache)",
        ),
    ],
)
def test_os_errors_become_one_line(tmp_path, pretok, monkeypatch, err, line):
    def boom(*a, **k):
        raise err

    monkeypatch.setattr(api, "pack", boom)
    assert os_error_line(err) == line
    r = run(pretok, "--len", 16, "--out", tmp_path / "out")
    assert r.exit_code == 1, r.output
    assert error_lines(r) == [f"error: {line}"] and "Traceback" not in r.output
    monkeypatch.setenv("PACKTOOL_DEBUG", "1")
    r = run(pretok, "--len", 16, "--out", tmp_path / "out2")
    assert r.exit_code != 0 and r.exception is err  # the traceback is kept for debugging


def test_broken_stdout_pipe_exits_quietly(tmp_path, pretok):
    p = subprocess.Popen(
        [
            PACKTOOL,
            "pack",
            str(pretok),
            "--len",
            "16",
            "--out",
            str(tmp_path / "out"),
            "--json",
            "-",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.close()  # like `| head` that has already exited
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 0, err
    assert err == ""


# ---------------------------------------------------------------------------------------------
# Ctrl-C while worker processes tokenize


def _children(pid: int) -> list[int]:
    out = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
        except OSError:
            continue
        if fields.get("PPid", "").strip() == str(pid):
            out.append(int(status.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")
def test_ctrl_c_while_tokenizing_exits_130_and_leaves_nothing(tmp_path):
    from packtool.demo_data import write_sample

    data = write_sample(tmp_path / "chat.jsonl", n=4000)  # 8 MB: ~2 s of tokenizing on 2 processes
    out = tmp_path / "out"
    cache = tmp_path / "cache"
    env = dict(os.environ, PACKTOOL_CACHE=str(cache), HF_HUB_OFFLINE="1")
    p = subprocess.Popen(
        [
            PACKTOOL,
            "pack",
            str(data),
            "--len",
            "4096",
            "--out",
            str(out),
            "--num-proc",
            "2",
            "--no-cache",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # pytest's own may be SIG_IGN
    deadline = time.monotonic() + 120
    while len(kids := _children(p.pid)) < 2 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the workers are forked when tokenizing starts
    assert len(kids) >= 2, p.communicate()[1].decode()
    time.sleep(0.3)
    os.killpg(p.pid, signal.SIGINT)  # as a terminal does: the whole process group
    _, err = p.communicate(timeout=60)
    err = err.decode()
    assert p.returncode == 130, err
    assert (
        err.splitlines()[-1] == "interrupted"
        and "Traceback" not in err
        and "KeyboardInterrupt" not in err
    )
    time.sleep(0.2)
    assert [k for k in kids if _alive(k)] == []
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if "packtool-tmp" in p.name] == []
    assert [p.name for p in cache.glob("work-*")] == []


def test_ctrl_c_in_any_stage_is_one_line_and_130(tmp_path, pretok, monkeypatch):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "pack", interrupted)
    r = run(pretok, "--len", 16, "--out", tmp_path / "out")
    assert (
        r.exit_code == 130
        and r.stderr.splitlines()[-1] == "interrupted"
        and "Traceback" not in r.stderr
    )
    assert not (tmp_path / "out").exists()


def test_a_swallowed_ctrl_c_still_exits_130(tmp_path, pretok, monkeypatch):
    from packtool import cli

    real = api.pack

    def swallowed(*a, **k):  # numba's compile callbacks drop a KeyboardInterrupt this way
        try:
            cli._on_sigint(signal.SIGINT, None)
        except KeyboardInterrupt:
            pass
        return real(*a, **k)

    monkeypatch.setattr(api, "pack", swallowed)
    r = run(pretok, "--len", 16, "--out", tmp_path / "out")
    assert r.exit_code == 130 and r.stderr.splitlines()[-1] == "interrupted"
    assert not (tmp_path / "out").exists(), "a finished-looking pack was published after Ctrl-C"
    assert not list(tmp_path.glob(".out.packtool-*")), "a temporary folder was left behind"


# --------------------------------------------------------------------------- tokenizers offline, messages


def cli(*args):
    return runner.invoke(app, [*map(str, args)])


CHAT_LINE = json.dumps(
    {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}
)


@pytest.mark.parametrize(
    "name, pattern",
    [
        (
            "someone/not-cached-model",
            r"not a local folder and not in the Hugging Face cache; pass a local folder, or "
            r"(add --allow-download|unset HF_HUB_OFFLINE)",
        ),
        ("a/b", r"--tokenizer a/b: not a local folder and not in the Hugging Face cache"),
        ("./missing-folder", r"--tokenizer ./missing-folder: no such folder"),
        ("{empty}", r"the folder holds none of tokenizer\.json"),
    ],
)
def test_tokenizer_names_fail_at_once_offline(tmp_path, monkeypatch, name, pattern):
    monkeypatch.delenv(
        "HF_HUB_OFFLINE", raising=False
    )  # even with the network allowed: no download by default
    monkeypatch.delenv("PACKTOOL_ALLOW_DOWNLOAD", raising=False)
    (tmp_path / "empty").mkdir()
    data = tmp_path / "c.jsonl"
    data.write_text(CHAT_LINE + "\n")
    t0 = time.perf_counter()
    res = cli("inspect", str(data), "--tokenizer", name.format(empty=tmp_path / "empty"))
    assert res.exit_code == 2 and "Traceback" not in res.output
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and re.search(pattern, err[0]), err
    assert time.perf_counter() - t0 < 30  # no network wait


@pytest.mark.parametrize(
    "record, pattern",
    [
        (
            {"messages": None},
            r"messages record has 'messages': null; give it a value or drop the record",
        ),
        (
            {"messages": [{"role": "", "content": "x"}]},
            r"unknown role ''.*fix the record \(--role cannot map",
        ),
    ],
)
def test_record_messages_say_what_is_wrong(tmp_path, record, pattern):
    data = tmp_path / "r.jsonl"
    data.write_text(json.dumps(record) + "\n")
    res = cli("inspect", str(data), "--format", "messages")
    assert res.exit_code == 1 and re.search(pattern, res.stderr), res.stderr
    assert "r.jsonl" in res.stderr and "--role =" not in res.stderr


@pytest.mark.parametrize(
    "template, pattern",
    [
        ("", r"chat template '.*empty\.jinja' cannot render a plain test conversation"),
        (
            '{{ raise_exception("boom") }}',
            r"chat template '.*bad\.jinja' cannot render a plain test conversation .*boom",
        ),
    ],
)
def test_template_failures_say_template(tmp_path, template, pattern):
    data = tmp_path / "c.jsonl"
    data.write_text(CHAT_LINE + "\n")
    name = "empty.jinja" if not template else "bad.jinja"
    (tmp_path / name).write_text(template)
    res = cli(
        "pack",
        str(data),
        "--len",
        "64",
        "--out",
        str(tmp_path / "out"),
        "--chat-template",
        str(tmp_path / name),
    )
    assert res.exit_code == 2 and re.search(pattern, res.stderr), res.stderr
    assert "fix the record" not in res.stderr and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- paths, -h, wrong targets


def test_tilde_and_variables_in_paths_are_expanded(tmp_path, pretok, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PACKS", str(tmp_path / "packs"))
    (tmp_path / "home").mkdir()
    r = cli("pack", pretok, "--len", 16, "--out", "~/x", "--json", "$PACKS/pack.json")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "home" / "x" / "manifest.json").is_file() and (
        tmp_path / "packs" / "pack.json"
    ).is_file()
    assert not Path("~").exists()


def test_short_help_flag():
    r = cli("pack", "-h")
    assert r.exit_code == 0 and "--len" in r.output and "DATA" in r.output


def test_verify_on_what_is_not_a_pack_is_a_usage_error(tmp_path):
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "c.jsonl").write_text(CHAT_LINE + "\n")
    for target, pattern in (
        (
            tmp_path / "raw",
            r"is not a pack \(no manifest\.json, no data/\): if it holds training "
            r"data, `packtool pack .* --len N --out OUT`",
        ),
        (tmp_path / "nope", r"no such folder"),
        (tmp_path / "raw" / "c.jsonl", r"is a file, not a pack folder"),
    ):
        r = cli("verify", target)
        assert r.exit_code == 2 and re.search(pattern, r.stderr), r.stderr


def test_profile_or_pack_on_a_pack_is_a_usage_error(tmp_path, pretok):
    r = cli("pack", pretok, "--len", 16, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    for args in (
        ("profile", tmp_path / "p"),
        ("pack", tmp_path / "p", "--len", 16, "--out", tmp_path / "q"),
    ):
        r = cli(*args)
        assert (
            r.exit_code == 2
            and "is a packtool pack, not training data: `packtool verify" in r.stderr
        ), r.stderr
        assert "it was packed from" in r.stderr


def test_inspect_on_a_pack_decodes_with_the_recorded_tokenizer(tmp_path):
    data = tmp_path / "c.jsonl"
    data.write_text(CHAT_LINE + "\n")
    r = cli("pack", data, "--len", 64, "--out", tmp_path / "p")
    assert r.exit_code == 0, r.output
    r = cli("inspect", tmp_path / "p")
    assert r.exit_code == 0, r.output
    assert (
        "Qwen/Qwen3 (built-in" in r.stderr
        and "<|im_start|>assistant" in r.stderr
        and "[[b<|im_end|>]]" in r.stderr
    )
