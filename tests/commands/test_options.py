"""The options of the commands: the tokenization bundle declared once, --help shows flags as
flags and usage lines name DATA/PACK/OUT, and the commands reach the library through packtool.api."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from packtool.cli import app
from packtool.commands import options
from packtool.config import TokenizeConfig
from packtool.errors import UsageError

COMMANDS = Path(options.__file__).parent
runner = CliRunner()


def _command(name: str):
    return typer.main.get_command(app).commands[name]


def _options(name: str) -> dict[str, tuple]:
    """{parameter name: (flags, help, default)} of a command's options."""
    return {
        p.name: (tuple(p.opts), p.help, p.default)
        for p in _command(name).params
        if p.param_type_name == "option"
    }


def test_tokenize_bundle_is_the_same_in_inspect_profile_and_pack():
    bundle = set(options.TOKENIZE_OPTION_NAMES)
    whole = set(options.WHOLE_INPUT_OPTION_NAMES)
    assert whole == {"on_error", "num_proc", "no_cache", "limit", "engine", "ray_address"}
    assert whole < bundle and len(bundle) == 18
    pack, profile, inspect = _options("pack"), _options("profile"), _options("inspect")
    assert bundle <= set(pack) and bundle <= set(profile)
    assert (
        set(inspect) & bundle == bundle - whole
    )  # one record: no workers, cache, limit or skipping
    for name in bundle:
        assert pack[name] == profile[name], name  # the same flags, help and default
        if name not in whole:
            assert inspect[name] == pack[name], name
    assert not ({"tokenizer", "train_on", "num_proc"} & set(_options("verify")))


def test_each_tokenize_option_is_written_once_in_the_commands():
    declarations = []  # the flags named by each typer.Option(...) / _option(...) call of the commands
    for path in sorted(COMMANDS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(
                node.func, "attr", getattr(node.func, "id", None)
            ) in (
                "Option",
                "_option",
            ):
                declarations.append(
                    [
                        a.value
                        for a in node.args
                        if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    ]
                )
    for flag in (
        "--tokenizer",
        "--chat-template",
        "--train-on",
        "--format",
        "--column",
        "--role",
        "--split",
        "--on-error",
        "--num-proc",
        "--no-cache",
        "--limit",
        "--tokenizer-backend",
        "--template-date",
        "--special-in-content",
        "--allow-download",
        "--json",
    ):
        declared = [d for d in declarations if flag in d]
        assert len(declared) == 1, (flag, declared)


def test_tokenize_args_build_a_validated_config(monkeypatch):
    monkeypatch.delenv("PACKTOOL_ALLOW_DOWNLOAD", raising=False)
    cfg = options.TokenizeArgs(
        train_on="last",
        column=["messages=dialog"],
        role=["bot=assistant"],
        num_proc=2,
        no_cache=True,
        limit=5,
    ).config()
    assert isinstance(cfg, TokenizeConfig)
    assert (cfg.train_on, cfg.num_proc, cfg.cache, cfg.read.limit) == ("last", 2, False, 5)
    assert cfg.read.columns == (("messages", "dialog"),) and cfg.read.roles == (
        ("bot", "assistant"),
    )
    assert options.TokenizeArgs().config(num_proc=1).num_proc == 1
    with pytest.raises(UsageError, match="--train-on 'bogus' is not one of assistant|last|all"):
        options.TokenizeArgs(train_on="bogus").config()
    with pytest.raises(UsageError, match="--column 'oops' is not NAME=NAME"):
        options.TokenizeArgs(column=["oops"]).config()
    assert "PACKTOOL_ALLOW_DOWNLOAD" not in __import__("os").environ
    options.TokenizeArgs(allow_download=True).config()
    assert __import__("os").environ["PACKTOOL_ALLOW_DOWNLOAD"] == "1"
    assert options.TokenizeArgs(fmt="text", limit=3).given("tokenizer", "fmt", "limit") == [
        "--format",
        "--limit",
    ]


@pytest.mark.parametrize("name", ["", "inspect", "profile", "pack", "verify", "sample"])
def test_help_shows_flags_as_flags(name):
    res = runner.invoke(app, [*([name] if name else []), "-h"], terminal_width=160)
    assert res.exit_code == 0, res.output
    assert "<bool>" not in res.output
    assert "--help" in res.output and "-h" in res.output
    long = runner.invoke(app, [*([name] if name else []), "--help"], terminal_width=160)
    assert long.output == res.output


def test_help_flags_have_no_value_placeholder():
    res = runner.invoke(app, ["pack", "-h"], terminal_width=200)
    for flag in ("--force", "--no-cache", "--no-shuffle", "--allow-download"):
        line = next(line for line in res.output.splitlines() if f" {flag} " in line)
        assert not re.search(rf"{flag}\s+<", line), line
    assert re.search(r"--len\s+<int>", res.output)  # options that take a value still say which


@pytest.mark.parametrize(
    "name, usage",
    [
        ("inspect", "Usage: packtool inspect [OPTIONS] DATA"),
        ("profile", "Usage: packtool profile [OPTIONS] [DATA]..."),  # several: a mixture
        ("pack", "Usage: packtool pack [OPTIONS] DATA..."),
        ("verify", "Usage: packtool verify [OPTIONS] [PACK] [DATA]"),
        ("sample", "Usage: packtool sample [OPTIONS] OUT"),
    ],
)
def test_usage_lines_name_the_arguments(name, usage):
    res = runner.invoke(app, [name, "-h"], terminal_width=160)
    line = next(line for line in res.output.splitlines() if "Usage:" in line)
    assert line.strip() == usage


def test_root_usage_keeps_the_command():
    res = runner.invoke(app, ["-h"], terminal_width=160)
    assert "Usage: packtool [OPTIONS] COMMAND [ARGS]..." in res.output


def test_num_proc_help_says_what_it_does():
    help_ = _options("pack")["num_proc"][1]
    assert "used as given" in help_ and "under 4 MiB" in help_ and "Pre-tokenized" in help_


ALLOWED = (
    "packtool.api",
    "packtool.config",
    "packtool.errors",
    "packtool.progress",
    "packtool.commands",
    "packtool.report",
)


@pytest.mark.parametrize("path", sorted(COMMANDS.glob("*.py")), ids=lambda p: p.name)
def test_commands_reach_the_library_only_through_api(path):
    """packtool.report renders (the presentation layer); everything else goes through packtool.api."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("packtool"):
            names = (
                [node.module]
                if node.module != "packtool"
                else [f"packtool.{a.name}" for a in node.names]
            )
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name.startswith("packtool")]
        else:
            continue
        for name in names:
            assert name.startswith(ALLOWED), f"{path.name}:{node.lineno} imports {name}"


def test_pack_args_read_back_as_the_same_options_of_pack():
    """The recommended `packtool pack` line (profile's advice) parses as the options it came from:
    a switch is a bare flag (`--strict-labels True` would read True as a second DATA)."""
    args = options.TokenizeArgs(strict_labels=True, on_error="skip", column=["messages=dialog"])
    words = args.pack_args()
    assert words == ["--column", "messages=dialog", "--on-error", "skip", "--strict-labels"]
    cmd = typer.main.get_command(app).commands["pack"]
    ctx = cmd.make_context("pack", ["d.jsonl", "--len", "4096", "--out", "o", *words])
    assert ctx.params["data"] == ["d.jsonl"]
    assert (ctx.params["strict_labels"], ctx.params["on_error"]) == (True, "skip")
