"""commands/common.py: several DATA arguments, each with `::key=value,...` options (mixtures)."""

from __future__ import annotations

import pytest

from packtool.commands.common import INPUT_KEYS, parse_inputs
from packtool.config import InputSpec, ReadConfig
from packtool.errors import UsageError


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
