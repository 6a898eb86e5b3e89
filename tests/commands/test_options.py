"""The options of the commands: the tokenization bundle declared once, --help shows flags as
flags and usage lines name DATA/PACK/OUT, the commands reach the library through packtool.api; several
DATA arguments, each with `::key=value,...` options (mixtures)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from packtool.cli import app
from packtool.commands import options
from packtool.commands.options import INPUT_KEYS, parse_inputs
from packtool.config import InputSpec, ReadConfig, TokenizeConfig
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
    fields = dataclasses.fields(options.TokenizeArgs)
    bundle = {f.name for f in fields}
    whole = {f.name for f in fields if f.metadata["whole_input"]}
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


def test_one_data_without_options_is_read_as_always():
    assert parse_inputs(["data.jsonl"], ReadConfig()) is None
    assert parse_inputs(["folder/"], ReadConfig(format="alpaca")) is None


def test_a_single_data_with_options_is_a_mixture_of_one():
    (only,) = parse_inputs(["a.json::weight=2"], ReadConfig())
    assert only == InputSpec("a.json::weight=2", "a.json", ReadConfig(), 2.0)


def test_options_replace_the_global_values_per_input():
    base = ReadConfig(format="messages", limit=50, columns=(("messages", "conv"),))
    a, b, c, d = parse_inputs(
        [
            "chats.jsonl",
            "alpaca.json::format=alpaca",
            "tools/::weight=0.5,split=test",
            "x.parquet::column=messages=dialog,role=bot=assistant,role=human=user,weight=2,limit=7",
        ],
        base,
    )
    assert a == InputSpec("chats.jsonl", "chats.jsonl", base, 1.0)
    assert b.data == "alpaca.json" and b.read.format == "alpaca" and b.read.limit == 50
    assert b.read.columns == (("messages", "conv"),)  # not overridden: the global value
    assert (c.data, c.weight, c.read.split, c.read.format) == ("tools/", 0.5, "test", "messages")
    assert d.read.columns == (("messages", "dialog"),)  # the whole list replaced
    assert d.read.roles == (("bot", "assistant"), ("human", "user"))
    assert (d.weight, d.read.limit, d.read.format) == (2.0, 7, "messages")
    assert d.spec.startswith("x.parquet::column=")


@pytest.mark.parametrize(
    "spec, match",
    [
        (
            "a.json::colour=red",
            r"input 'a.json::colour=red': unknown key 'colour'; an input takes format=",
        ),
        (
            "a.json::train-on=all",
            r"train-on is a global option \(one tokenizer .*pass --train-on once",
        ),
        ("a.json::tokenizer=x", r"tokenizer is a global option.*--tokenizer"),
        ("a.json::chat_template=x", r"chat-template is a global option.*--chat-template"),
        (
            "a.json::weight=0",
            r"weight=0.0 must be a number > 0 and at most 1000 .*e.g. ::weight=0.5",
        ),
        ("a.json::weight=-1", r"weight=-1.0 must be a number > 0"),
        ("a.json::weight=inf", r"weight=inf must be a number > 0"),
        ("a.json::weight=1e9", r"weight=1000000000.0 must be a number > 0 and at most 1000"),
        ("a.json::weight=half", r"weight='half' is not a number; e.g. ::weight=0.5"),
        ("a.json::limit=0", r"limit=0 must be >= 1"),
        ("a.json::limit=2.5", r"limit='2.5' is not a number"),
        (
            "a.json::column=messages",
            r"column='messages' is not NAME=NAME; e.g. ::column=messages=dialog",
        ),
        ("a.json::role==assistant", r"role='=assistant' is not NAME=NAME"),
        ("a.json::format", r"format has no value; write format=VALUE"),
        ("a.json::weight=1,weight=2", r"weight is given twice"),
        ("::weight=1", r"nothing before '::'"),
    ],
)
def test_bad_options_are_one_line_usage_errors_naming_the_input(spec, match):
    with pytest.raises(UsageError, match=match) as e:
        parse_inputs(["ok.jsonl", spec], ReadConfig())
    assert "\n" not in str(e.value) and spec.split("::")[0] in str(e.value)


def test_every_key_is_documented_in_the_readme():
    from tests.paths import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Mixtures: several inputs", 1)[1].split("\n## ", 1)[0]
    for key in INPUT_KEYS:
        assert f"`{key}`" in section, key
