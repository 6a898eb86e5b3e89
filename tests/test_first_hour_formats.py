"""Issue 23, second pass: what a first hour with real-world data shapes hit in reading and formats.

KTO data under an explicit --format, --column mappings that match nothing, Firefly / MOSS
`conversation` pairs. Each test builds its files here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from packtool.cli import app
from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import FormatError
from packtool.formats.detect import ColumnCheck, detect_format, sft_refusal
from packtool.formats.normalize import normalize
from packtool.io.readers import iter_batches
from packtool.io.sources import locate

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def chat(i: int, **extra) -> dict:
    return {
        "messages": [
            {"role": "user", "content": f"question {i}"},
            {"role": "assistant", "content": f"answer {i}"},
        ],
        **extra,
    }


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


# --------------------------------------------------------------------------- 1: KTO + --format


def test_kto_under_forced_format_refuses_label_false_records():
    kto_bad, kto_good = chat(1, label=False), chat(2, label=True)
    forced = ReadConfig(format="messages")
    with pytest.raises(FormatError, match=r"KTO data with label false: --format messages would"):
        normalize(kto_bad, "messages", forced)
    assert normalize(kto_good, "messages", forced)["messages"][1]["content"] == "answer 2"
    # detection (no --format) says what --format reads them, and how to skip the bad ones
    with pytest.raises(UsageError, match=r"KTO data .*--format messages --on-error skip"):
        detect_format(kto_good, ReadConfig())
    # one rule: the refusal detection raises is the one the forced path uses
    assert sft_refusal(kto_good, None) is not None and sft_refusal(kto_good, "messages") is None


def test_preference_under_forced_chat_format_is_refused():
    rec = {**chat(0), "chosen": "a", "rejected": "b"}
    with pytest.raises(
        FormatError, match=r"preference data .*--format messages would ignore 'chosen'"
    ):
        normalize(rec, "messages", ReadConfig(format="messages"))
    assert normalize(rec, "chosen-sft", ReadConfig(format="chosen-sft"))["kind"] == "chat"
    assert normalize(rec, "preference", ReadConfig(format="preference"))["kind"] == "pair"


def test_pack_kto_with_format_messages(tmp_path):
    data = write_jsonl(tmp_path / "kto.jsonl", [chat(i, label=i % 2 == 0) for i in range(10)])
    r = cli("pack", data, "--format", "messages", "--len", 64, "--out", tmp_path / "o1")
    assert r.exit_code == 1
    assert "kto.jsonl:2: record is KTO data with label false" in r.output
    assert not (tmp_path / "o1").exists()
    r = cli(
        "pack", data, "--format", "messages", "--on-error", "skip", "--len", 64, "--json", "-",
        "--out", tmp_path / "o2",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["manifest"]
    assert m["counts"]["tokenized"] == 5 and m["counts"]["skipped"] == 5
    assert all("label false" in s["reason"] for s in m["skipped"])


# --------------------------------------------------------------------------- 5: --column


def test_column_mapping_that_matches_nothing_is_a_usage_error(tmp_path):
    data = write_jsonl(tmp_path / "chat.jsonl", [chat(i) for i in range(5)])
    cfg = ReadConfig(columns=(("messages", "dialog"),))
    with pytest.raises(
        UsageError,
        match=r"--column messages=dialog: no column 'dialog' in any of the 5 records of .*chat.jsonl "
        r"\(columns seen: 'messages'\); the form is --column FIELD=COLUMN .*drop this --column",
    ):
        list(iter_batches(locate(str(data)), cfg))
    r = cli("inspect", data, "--column", "messages=dialog")
    assert r.exit_code == 2 and "no column 'dialog'" in r.output
    assert "(column 'dialog')" not in r.output


def test_column_mapping_written_backwards_says_the_form(tmp_path):
    with pytest.raises(
        UsageError,
        match=r"'dialog' is not one of our names .*the form is --column FIELD=COLUMN .*"
        r"--column messages=dialog",
    ):
        ColumnCheck(ReadConfig(columns=(("dialog", "messages"),)))
    data = write_jsonl(tmp_path / "sg.jsonl", [{"conversations": chat(0)["messages"]}])
    with pytest.raises(UsageError, match=r"if it is written backwards, use --column messages=conv"):
        list(iter_batches(locate(str(data)), ReadConfig(columns=(("conversations", "messages"),))))


def test_column_mapping_matching_in_a_later_record_or_a_turn_passes(tmp_path):
    recs = [chat(i) for i in range(3)] + [{"dialog": [{"speaker": "user", "content": "x"}]}]
    data = write_jsonl(tmp_path / "mixed.jsonl", recs)
    cfg = ReadConfig(columns=(("messages", "dialog"), ("role", "speaker")))
    assert sum(len(b) for b in iter_batches(locate(str(data)), cfg)) == 4
    # parquet: top-level and nested field names from the schema
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.table({"dialog": [[{"speaker": "user", "text": "x"}]]}), tmp_path / "d.parquet"
    )
    ok = ReadConfig(columns=(("messages", "dialog"), ("role", "speaker"), ("content", "text")))
    assert sum(len(b) for b in iter_batches(locate(str(tmp_path / "d.parquet")), ok)) == 1
    bad = ReadConfig(columns=(("content", "utterance"),))
    with pytest.raises(UsageError, match=r"no key of a turn 'utterance'.*columns seen: 'dialog'"):
        list(iter_batches(locate(str(tmp_path / "d.parquet")), bad))


def test_inspect_names_a_mapped_column_only_when_it_is_there(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [{"dialog": chat(0)["messages"]}])
    cfg = ReadConfig(columns=(("messages", "dialog"),))
    assert detect_format({"dialog": []}, cfg)[1] == "has 'messages' (column 'dialog')"
    assert detect_format({"messages": []}, cfg)[1] == "has 'messages'"
    r = cli("inspect", data, "--column", "messages=dialog", "--json", "-")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["format_reason"].startswith("has 'messages' (column 'dialog')")


# --------------------------------------------------------------------------- 15: Firefly / MOSS


FIREFLY = {
    "conversation_id": 7,
    "category": "Brainstorming",
    "conversation": [
        {"human": "hi", "assistant": "hello"},
        {"human": "more?", "assistant": "sure"},
    ],
    "dataset": "moss",
}


def test_firefly_detected_and_normalized():
    fmt, why = detect_format(FIREFLY, ReadConfig())
    assert (fmt, why) == ("firefly", "has 'conversation' of human/assistant pairs")
    ex = normalize(FIREFLY, fmt, ReadConfig())
    assert [(m["role"], m["content"]) for m in ex["messages"]] == [
        ("user", "hi"), ("assistant", "hello"), ("user", "more?"), ("assistant", "sure"),
    ]  # fmt: skip
    moss = {**FIREFLY, "system": "You are MOSS"}
    ex = normalize(moss, "firefly", ReadConfig(format="firefly"))
    assert ex["messages"][0] == {**ex["messages"][0], "role": "system", "content": "You are MOSS"}
    for bad, match in (
        ({"conversation": []}, "empty conversation"),
        ({"conversation": "hi"}, "'conversation' is a str"),
        ({"conversation": [{"human": "q"}]}, r"item 0 has no 'assistant'.*keys 'human'"),
        ({"conversation": [{"human": 1, "assistant": "a"}]}, r"item 0 has a int as 'human'"),
    ):
        with pytest.raises(FormatError, match=match):
            normalize(bad, "firefly", ReadConfig())


def test_pack_firefly_trains_the_assistant_turns(tmp_path):
    data = write_jsonl(tmp_path / "ff.jsonl", [FIREFLY, {**FIREFLY, "system": "You are MOSS"}])
    r = cli("inspect", data, "--json", "-")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    trained = "".join(run["text"] for run in out["runs"] if run["loss"])
    assert out["format"] == "firefly" and "hello" in trained and "sure" in trained
    assert "hi" not in trained and "more?" not in trained
    r = cli("pack", data, "--len", 128, "--out", tmp_path / "out", "--json", "-")
    assert r.exit_code == 0, r.output
    m = json.loads(r.stdout)["manifest"]
    assert m["counts"]["packed"] == 2 and m["format"] == "firefly"


# --------------------------------------------------------------------------- 11: messages


def test_skip_reasons_are_grouped_by_cause():
    from packtool.schema.manifest import group_reasons

    def unknown(i, role):
        return f"message {i} has unknown role '{role}'; known: user; map it with --role {role}=OURS"

    reasons = [unknown(1, "bot")] * 3 + [unknown(4, "bot"), unknown(2, "agent")] + ["no turn"] * 2
    groups = group_reasons(reasons)
    assert [(g.cause, g.count, g.variants) for g in groups] == [
        (
            "message N has unknown role '…'; known: user; map it with --role …=OURS",
            5,
            (("'bot'", 4), ("'agent'", 1)),
        ),
        ("no turn", 2, ()),
    ]
    assert groups[0].text(1) == groups[0].cause + " ('bot' 4, … 1 more)"
    assert group_reasons([unknown(1, "bot")])[0].cause == unknown(1, "bot")  # one: unchanged


def test_pack_skip_warning_and_profile_group_unknown_roles(tmp_path):
    recs = [chat(i) for i in range(10)]
    for i, role in ((1, "bot"), (3, "bot"), (5, "bot"), (7, "agent"), (9, "model")):
        recs[i]["messages"][1]["role"] = role
    data = write_jsonl(tmp_path / "roles.jsonl", recs)
    r = cli("pack", data, "--on-error", "skip", "--len", 64, "--out", tmp_path / "o")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert (
        "top reasons: 5 × \"message N has unknown role '…'; known: system, user, assistant, tool "
        "(ShareGPT tags: human, gpt …\" ('bot' 3, 'agent' 1, 'model' 1)"
    ) in text
    r = cli("profile", data, "--on-error", "skip", "--len", 64, "--json", "-")
    assert r.exit_code == 0, r.output
    (reason,) = json.loads(r.stdout)["counts"]["skipped_reasons"].items()
    assert reason[1] == 5 and reason[0].endswith("=OURS ('bot' 3, 'agent' 1, 'model' 1)")


def test_inspect_format_error_names_file_record_and_mapping(tmp_path):
    data = write_jsonl(tmp_path / "alp.jsonl", [{"instruction": "q", "input": "", "output": "a"}])
    r = cli("inspect", data, "--column", "output=instruction")
    assert r.exit_code == 1
    assert (
        "alp.jsonl:1: record fits no known format: it has keys 'input', 'output' (after --column "
        "output=instruction; as stored: 'instruction', 'input', 'output')"
    ) in " ".join(r.output.split())


def test_prompt_completion_strings_say_no_template_is_applied(tmp_path):
    data = write_jsonl(tmp_path / "yi.jsonl", [{"prompt": "q", "completion": "a"}])
    for args in (("inspect", data), ("pack", data, "--len", 64, "--out", tmp_path / "o")):
        r = cli(*args)
        assert r.exit_code == 0, r.output
        text = " ".join(r.output.split())
        assert (
            "as strings: no chat template, each record is tokenized as prompt + completion" in text
        )
        assert "chat template:" not in text
