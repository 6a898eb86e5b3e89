"""CLI: light imports, one-line errors with the right exit codes, inspect and sample."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from packtool.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args))


def test_cli_import_is_light():
    code = (
        "import sys, packtool.cli; heavy = [m for m in ('torch', 'transformers', 'datasets', 'matplotlib') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_pack_run_imports_numba_only_when_it_packs():
    """Until the tokenizer resolves and its fast backend starts building, a `pack` run imports no
    numba (~0.4 s): the pack stage's warm-up imports it while the run waits (pack.warm)."""
    code = (
        "import sys, packtool.commands.pack, packtool.report.pack, packtool.pack, "
        "packtool.pack.overflow; print('numba' in sys.modules); "
        "from packtool.pack import PackResult, pack_tokenized; print('numba' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


def test_core_imports_only_numpy_and_numba():
    """docs/ARCHITECTURE.md, "Module map": kernels, packing and stats never import typer, rich,
    transformers, pyarrow, torch or matplotlib."""
    code = (
        "import sys, packtool.plan, packtool.pack.gather, packtool.stats; "
        "print([m for m in ('typer', 'rich', 'transformers', 'pyarrow', 'torch', 'matplotlib', 'datasets') "
        "if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_version():
    import packtool

    res = run("--version")
    assert res.exit_code == 0 and res.output.strip() == f"packtool {packtool.__version__}"


def test_help_lists_commands():
    res = run("--help")
    assert res.exit_code == 0
    for name in ("inspect", "sample"):
        assert name in res.output


def test_sample_then_inspect_json(tmp_path):
    path = tmp_path / "s.jsonl"
    assert run("sample", str(path), "--n", "5").exit_code == 0
    res = run("inspect", str(path), "--index", "2", "--json", "-")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["format"] == "messages" and data["index"] == 2
    assert data["tokens"] == len(data["input_ids"]) and 0 < data["loss_tokens"] < data["tokens"]
    assert sum(r["tokens"] for r in data["runs"]) == data["tokens"]
    assert any(r["loss"] and r["text"].endswith("<|im_end|>") for r in data["runs"])


def test_inspect_human_output(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(
        json.dumps(
            {
                "conversations": [
                    {"from": "human", "value": "Hi"},
                    {"from": "gpt", "value": "Hello there"},
                ]
            }
        )
        + "\n"
    )
    res = run("inspect", str(path))
    assert res.exit_code == 0
    assert "sharegpt" in res.output and "loss tokens" in res.output and "Hello there" in res.output
    # not a terminal (a pipe, a CI log): the trained tokens are marked without colour
    assert "[[Hello there<|im_end|>]]" in res.output and "[[trained]] no loss" in res.output


@pytest.mark.parametrize(
    ("args", "code", "pattern"),
    [
        (["inspect", "{tmp}/missing.jsonl"], 1, "missing.jsonl"),
        (["inspect", "{good}", "--train-on", "everything"], 2, "--train-on 'everything'"),
        (["inspect", "{good}", "--index", "9"], 2, "past the end"),
        (["inspect", "{good}", "--column", "oops"], 2, "NAME=NAME"),
        (["inspect", "{good}", "--chat-template", "nope"], 2, "neither a file nor one of auto"),
        (["inspect", "{bad}"], 1, r"bad\.jsonl:1"),
        (["sample", "{tmp}/x.jsonl", "--n", "0"], 2, "--n 0"),
    ],
)
def test_errors_are_one_line(tmp_path, args, code, pattern):
    import re

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}]}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    args = [a.format(tmp=tmp_path, good=good, bad=bad) for a in args]
    res = run(*args)
    assert res.exit_code == code, res.output
    assert "Traceback" not in res.output
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and re.search(pattern, err[0]), err


def test_debug_shows_traceback(tmp_path):
    env = {**os.environ, "PACKTOOL_DEBUG": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "packtool", "inspect", str(tmp_path / "none.jsonl")],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode != 0 and "Traceback" in out.stderr


EXIT_PROBE = """
import atexit, os, sys, threading, time
from packtool import cli

class Teardown:  # freed only when the interpreter tears down its modules
    def __del__(self):
        os.write(1, b"torn down\\n")

KEEP = Teardown()
done = []
threading.Thread(target=lambda: (time.sleep(0.3), done.append(1))).start()  # not a daemon
atexit.register(lambda: print("atexit", len(done)))
sys.stdout.write("unflushed ")
sys.argv = ["packtool", *sys.argv[1:]]
cli.main()
"""


@pytest.mark.parametrize(
    "args, code",
    [(["--version"], 0), (["pack"], 2), (["pack", "nope.jsonl", "--len", "64", "--out", "o"], 1)],
)
def test_main_exits_without_teardown_but_as_the_interpreter_would(tmp_path, args, code):
    """main() ends the process after the command without the interpreter's teardown (0.7 s after
    a chat run), yet joins threads, runs atexit handlers and flushes output first, and keeps the
    exit status."""
    r = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, *args], capture_output=True, text=True, cwd=tmp_path
    )
    assert r.returncode == code, r.stderr
    assert r.stdout.startswith("unflushed ")
    assert r.stdout.rstrip().endswith("atexit 1")  # the thread finished before the handlers ran
    assert "torn down" not in r.stdout


def test_main_collects_the_young_generation_less_often():
    """A command's object graphs (transformers' and numba's imports, a tokenizer JSON) live until
    it ends: main() runs the cyclic collector every cli.GC_YOUNG allocations, not every 700."""
    probe = (
        "import gc\nfrom packtool import cli\n"
        "cli.app = lambda: print('threshold', *gc.get_threshold())\ncli.main()\n"
    )
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    from packtool import cli

    assert r.stdout.split() == ["threshold", str(cli.GC_YOUNG), "10", "10"]
