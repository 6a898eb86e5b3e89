"""The output object: --json PATH|-, human output on stderr, and progress (bars on a terminal, one
line per stage otherwise, none under --json -), as the library reports it through packtool.progress."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool import progress
from packtool.cli import app
from packtool.commands.output import Output

runner = CliRunner()  # its stderr is not a terminal


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def chat(tmp_path):
    """A chat JSONL of 40 short conversations (tokenized in well under a second)."""
    path = tmp_path / "chat.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": "hi " * (1 + i % 7)},
                {"role": "assistant", "content": "yes " * (1 + i % 11)},
            ]
        }
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def pretok(tmp_path):
    ids = [[(7 * i + t) % 100 + 1 for t in range(1 + i % 14)] for i in range(40)]
    path = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), path)
    return path


def _stage_lines(stderr: str) -> list[str]:
    return [
        line
        for line in stderr.splitlines()
        if line.startswith(("tokenizing", "reading", "writing", "profiling"))
    ]


def test_not_a_terminal_one_plain_line_per_stage(tmp_path, chat):
    r = runner.invoke(
        app, ["pack", str(chat), "--len", "64", "--out", str(tmp_path / "o"), "--no-cache"]
    )
    assert r.exit_code == 0, r.output
    lines = _stage_lines(r.stderr)
    assert [line.split(":")[0] for line in lines] == ["tokenizing", "writing"], r.stderr
    assert lines[0].startswith("tokenizing: 40 examples, ") and " in " in lines[0]
    assert lines[1].startswith("writing: ") and " rows in " in lines[1]
    assert (
        "\r" not in r.stderr and "\x1b[" not in r.stderr and "━" not in r.stderr
    )  # no bars, no escapes


def test_profile_says_each_stage_once(pretok):
    r = runner.invoke(app, ["profile", str(pretok), "--len", "16"])
    assert r.exit_code == 0, r.output
    assert [line.split(":")[0] for line in _stage_lines(r.stderr)] == ["reading", "profiling"], (
        r.stderr
    )
    assert r.stdout == ""
    r = runner.invoke(app, ["profile", "--synthetic", "constant:value=5,n=30", "--len", "8"])
    assert _stage_lines(r.stderr) and _stage_lines(r.stderr)[0].startswith(
        "profiling: 30 examples in "
    )


def test_pretokenized_input_is_a_reading_stage(tmp_path, pretok):
    r = runner.invoke(app, ["pack", str(pretok), "--len", "16", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    assert [line.split(":")[0] for line in _stage_lines(r.stderr)] == ["reading", "writing"]


@pytest.mark.parametrize("command", ["pack", "profile", "verify"])
def test_json_to_stdout_draws_no_progress(tmp_path, pretok, command):
    pack = tmp_path / "p"
    if command == "verify":
        assert (
            runner.invoke(app, ["pack", str(pretok), "--len", "16", "--out", str(pack)]).exit_code
            == 0
        )
    args = {
        "pack": ["pack", str(pretok), "--len", "16", "--out", str(pack), "--no-cache", "--force"],
        "profile": ["profile", str(pretok), "--len", "16", "--no-cache"],
        "verify": ["verify", str(pack), "--rows", "0", "--sources"],
    }[command]
    r = runner.invoke(app, [*args, "--json", "-"])
    assert r.exit_code == 0, r.output
    json.loads(r.stdout)  # stdout holds the JSON alone
    assert r.stderr == ""  # no progress, no human report
    if command != "verify":  # the same run without --json - reports its stages
        r = runner.invoke(app, args)
        assert _stage_lines(r.stderr), r.stderr


def test_json_file_keeps_the_human_output_and_progress(tmp_path, pretok):
    report = tmp_path / "sub" / "pack.json"
    r = runner.invoke(
        app,
        ["pack", str(pretok), "--len", "16", "--out", str(tmp_path / "o"), "--json", str(report)],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(report.read_text())["schema"] == "packtool.pack/v1"
    assert r.stdout == "" and "packed → " in r.stderr and _stage_lines(r.stderr)


def test_worker_processes_are_named_once(tmp_path, chat):
    r = runner.invoke(
        app,
        [
            "pack",
            str(chat),
            "--len",
            "64",
            "--out",
            str(tmp_path / "o"),
            "--no-cache",
            "--num-proc",
            "2",
        ],
    )
    assert r.exit_code == 0, r.output
    line = _stage_lines(r.stderr)[0]
    assert line.startswith("tokenizing (2 processes): 40 examples") and line.count("2") >= 1
    assert "num_proc" not in r.stderr and line.count("processes") == 1


def test_verify_quiet_has_only_the_result_line(tmp_path, pretok):
    out = tmp_path / "o"
    assert (
        runner.invoke(app, ["pack", str(pretok), "--len", "16", "--out", str(out)]).exit_code == 0
    )
    r = runner.invoke(app, ["verify", str(out), "--rows", "0", "--sources", "-q"])
    assert r.exit_code == 0, r.output
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("verify passed")


# ----------------------------------------------------------------------------------- the objects


def test_output_writes_json_where_asked(tmp_path, capsys):
    Output(str(tmp_path / "a" / "r.json")).report({"x": 1}, lambda console: console.print("human"))
    assert json.loads((tmp_path / "a" / "r.json").read_text()) == {"x": 1}
    out, err = capsys.readouterr()
    assert out == "" and "human" in err
    Output("-").report(lambda: {"y": 2}, lambda console: pytest.fail("rendered under --json -"))
    out, err = capsys.readouterr()
    assert json.loads(out) == {"y": 2} and err == ""
    Output(None).report(
        lambda: pytest.fail("JSON made without --json"), lambda console: console.print("only")
    )
    out, err = capsys.readouterr()
    assert out == "" and "only" in err


def test_silent_output_reports_nothing(capsys):
    for out in (Output("-"), Output(None, quiet=True)):
        with out.stage("tokenizing") as stage:
            stage.advance(10, 100)
            stage.update(5, 10)
            stage.step("x")
    assert capsys.readouterr() == ("", "")


def test_terminal_draws_a_bar_then_one_line():
    from rich.console import Console

    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with progress.Terminal(console, tty=True).stage("tokenizing", detail="2 processes") as stage:
        stage.advance(count=3456, tokens=1_200_000)
    text = buf.getvalue()
    assert "━" in text or "\x1b[" in text  # drawn live
    assert (
        text.rstrip().splitlines()[-1].endswith(")")
        and "tokenizing (2 processes): 3,456 examples, 1.2M tokens in " in text
    )


def test_terminal_without_a_tty_writes_one_line(capsys):
    with progress.Terminal(tty=False).stage("writing", unit="rows") as stage:
        stage.update(5, 10)
        stage.update(10, 10)
    assert capsys.readouterr().err.startswith("writing: 10 rows in ")
    with (
        pytest.raises(RuntimeError),
        progress.Terminal(tty=False).stage("writing", unit="rows") as stage,
    ):
        stage.update(5, 10)
        raise RuntimeError
    assert capsys.readouterr().err == ""  # a failed stage says nothing: the error says it


def test_reporter_of_what_the_library_was_given():
    assert (
        progress.reporter(False) is progress.SILENT and progress.reporter(None) is progress.SILENT
    )
    assert isinstance(progress.reporter(True), progress.Terminal)
    out = Output("x.json")
    assert progress.reporter(out) is out and isinstance(out, progress.Reporter)


def test_commands_and_api_stay_light():
    code = (
        "import sys, packtool.cli, packtool.api, packtool.commands.output, packtool.commands.options; "
        "bad = [m for m in ('numpy', 'pyarrow', 'rich', 'torch', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
