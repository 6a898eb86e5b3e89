"""Folders and globs whose files differ in format: each file detected from its own records and
announced, record positions named within their own file, and the warning a skip run gives when it
drops more than a small share of the input."""

from __future__ import annotations

import json
import shutil

import pytest
from paths import SHARED_DATA, needs_shared
from typer.testing import CliRunner

from packtool.api import load_tokenized
from packtool.cli import app
from packtool.config import ReadConfig, TokenizeConfig
from packtool.data.tokenized import NO_FORMAT, FileFormat
from packtool.errors import PacktoolError
from packtool.report.tokenized import format_lines
from packtool.tokenization import source as source_mod

CHAT = [
    {
        "messages": [
            {"role": "user", "content": f"hi {i}"},
            {"role": "assistant", "content": f"yes {i}"},
        ]
    }
    for i in range(3)
]
ALPACA = [{"instruction": f"say {w}", "input": "", "output": w} for w in ("one", "two")]
SHAREGPT = {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]}


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))


def jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def cfg(**read):
    """One process and the reference backend: the cheapest start for inputs of a few records."""
    return TokenizeConfig(num_proc=1, tokenizer_backend="hf", read=ReadConfig(**read))


@pytest.fixture
def mixed(tmp_path):
    """chat.jsonl (3 messages records) + instructions.json (2 alpaca records)."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    jsonl(folder / "chat.jsonl", CHAT)
    (folder / "instructions.json").write_text(json.dumps(ALPACA))
    return folder


def test_each_file_in_its_own_format(mixed):
    td = load_tokenized(str(mixed), cfg(), progress=False)
    assert td.num_read == 5 and len(td) == 5 and not td.skipped
    assert td.format == "mixed: alpaca (instructions.json 2), messages (chat.jsonl 3)"
    assert "each file's format detected from its own records (2 files)" == td.format_reason
    chat, inst = str(mixed / "chat.jsonl"), str(mixed / "instructions.json")
    assert list(td.formats) == [chat, inst]
    assert td.formats[chat] == FileFormat("messages", "has 'messages' with role/content turns", 3)
    assert td.formats[inst].format == "alpaca" and td.formats[inst].records == 2
    assert format_lines(td) == [
        "chat.jsonl: messages, 3 records — has 'messages' with role/content turns",
        "instructions.json: alpaca, 2 records — has 'instruction' and 'output' (with 'input')",
    ]
    again = load_tokenized(
        str(mixed), cfg(), progress=False
    )  # the cache keeps the per-file formats
    assert again.cache_hit and again.formats == td.formats and again.format == td.format
    workers = load_tokenized(
        str(mixed), TokenizeConfig(num_proc=2, cache=False), progress=False
    )  # auto backend
    assert workers.dataset["input_ids"] == td.dataset["input_ids"] and not workers.skipped


def test_glob_and_single_format_folder_read_as_before(tmp_path, mixed):
    td = load_tokenized(str(mixed / "*.json*"), cfg(), progress=False)
    assert td.format.startswith("mixed: ") and len(td.formats) == 2 and not td.skipped
    same = tmp_path / "same"
    same.mkdir()
    jsonl(same / "a.jsonl", CHAT)
    jsonl(same / "b.jsonl", CHAT[:1])
    one = load_tokenized(str(same), cfg(), progress=False)
    assert (
        one.format == "messages" and one.format_reason == "has 'messages' with role/content turns"
    )
    assert [f.records for f in one.formats.values()] == [3, 1] and format_lines(one) == []


def test_forced_format_applies_to_every_file_and_the_warning_says_so(mixed):
    with pytest.raises(
        PacktoolError, match=r"instructions\.json record 0: messages record has no 'messages'"
    ):
        load_tokenized(str(mixed), cfg(format="messages"), progress=False)
    td = load_tokenized(str(mixed), cfg(format="messages", on_error="skip"), progress=False)
    assert td.format == "messages" and td.format_reason == "forced by --format messages"
    inst = str(mixed / "instructions.json")
    assert td.formats[inst].reason == "forced by --format messages; its first record looks alpaca"
    [w] = [w for w in td.warnings if w.startswith("skipped")]
    assert w.startswith(
        "skipped 2 bad record(s) of 5 read (40.0%), every record of instructions.json (2); "
    )
    assert (
        "2 × \"messages record has no 'messages'; it has keys 'instruction', 'input', 'output'\""
        in w
    )
    assert "first at instructions.json record 0" in w
    assert "--format messages applies to every file, but instructions.json looks alpaca" in w
    assert "--on-error error" in w and "\n" not in w


def test_positions_are_named_within_their_file(tmp_path):
    folder = tmp_path / "pos"
    folder.mkdir()
    jsonl(folder / "a.jsonl", [*CHAT, '{"messages": [', CHAT[0]])
    (folder / "b.json").write_text(
        json.dumps([*ALPACA, {"instruction": "x", "output": None}, ALPACA[0]])
    )
    with pytest.raises(PacktoolError, match=r"a\.jsonl:4: malformed JSON"):
        load_tokenized(str(folder), cfg(), progress=False)
    td = load_tokenized(str(folder), cfg(on_error="skip"), progress=False)
    a, b = td.skipped
    assert (a.source_index, a.line, a.record) == (3, 4, None) and a.where.endswith("a.jsonl:4")
    assert (b.source_index, b.line, b.record) == (7, None, 2)
    assert b.where == f"{folder / 'b.json'} record 2"
    assert b.to_json() == {
        "source_index": 7,
        "file": str(folder / "b.json"),
        "line": None,
        "reason": "alpaca record has 'output': null; give it a value or drop the record",
        "record": 2,
    }
    assert td.source_index.tolist() == [0, 1, 2, 4, 5, 6, 8]
    (folder / "a.jsonl").unlink()
    jsonl(folder / "a.jsonl", CHAT)  # now the first bad record is b.json's third
    with pytest.raises(PacktoolError, match=r"b\.json record 2: alpaca record has 'output': null"):
        load_tokenized(str(folder), cfg(), progress=False)


def test_single_file_skips_keep_their_entries(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps([ALPACA[0], {"instruction": "x"}, ALPACA[1]]))
    td = load_tokenized(str(path), cfg(on_error="skip"), progress=False)
    [s] = td.skipped
    assert s.record is None and s.where == f"{path} record 1"
    assert s.to_json() == {
        "source_index": 1,
        "file": str(path),
        "line": None,
        "reason": s.reason,
    }  # no "record" key: a single file's manifest is unchanged
    assert td.format == "alpaca" and list(td.formats) == [str(path)]


def test_a_small_share_is_listed_by_position(tmp_path):
    folder = tmp_path / "small"
    folder.mkdir()
    rows = [CHAT[i % 3] for i in range(150)]
    rows[40] = '{"messages": ['
    jsonl(folder / "big.jsonl", rows)
    jsonl(folder / "more.jsonl", CHAT)
    td = load_tokenized(str(folder), cfg(on_error="skip"), progress=False)
    assert [w for w in td.warnings if w.startswith("skipped")] == [
        "skipped 1 bad record(s): big.jsonl line 41"
    ]


def test_a_file_that_fits_no_format(tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    jsonl(folder / "chat.jsonl", CHAT)
    jsonl(folder / "qa.jsonl", [{"question": "q", "answer": "a"}] * 2)
    with pytest.raises(
        PacktoolError, match=r"qa\.jsonl:1: record fits no known format: it has keys 'question'"
    ):
        load_tokenized(str(folder), cfg(), progress=False)
    td = load_tokenized(str(folder), cfg(on_error="skip"), progress=False)
    assert td.format == "messages"  # the one format there is; the other file is listed on its own
    assert td.formats[str(folder / "qa.jsonl")] == FileFormat(
        NO_FORMAT, "no record fits a known format", 2
    )
    assert format_lines(td)[1] == "qa.jsonl: none, 2 records — no record fits a known format"
    [w] = [w for w in td.warnings if w.startswith("skipped")]
    assert "every record of qa.jsonl (2)" in w and "no record of qa.jsonl fits a known format" in w


def test_a_file_that_mixes_formats_within_itself(tmp_path):
    folder = tmp_path / "inner"
    folder.mkdir()
    jsonl(folder / "both.jsonl", [*CHAT, SHAREGPT, SHAREGPT])
    jsonl(folder / "more.jsonl", CHAT)
    td = load_tokenized(str(folder), cfg(on_error="skip"), progress=False)
    [w] = [w for w in td.warnings if w.startswith("skipped")]
    assert w.startswith("skipped 2 bad record(s) of 8 read (25.0%); ")
    assert (
        "both.jsonl was read as messages (its first record's format) but holds records of another format"
        in w
    )


def test_long_reasons_are_cut_between_words():
    words = source_mod._words
    assert words("short", 10) == "short"
    assert words("alpha beta gamma delta", 12) == "alpha beta …"
    text = "message 0 has unknown role 'wizard'; known: system, user, assistant, tool (ShareGPT tags: human, gpt)"
    cut = words(text, 60)
    assert cut.endswith(" …") and text.startswith(cut[:-2]) and text[len(cut) - 2] in " ,;:"


def test_preference_data_names_its_file(tmp_path):
    from packtool.errors import UsageError

    folder = tmp_path / "pref"
    folder.mkdir()
    jsonl(folder / "a.jsonl", CHAT)
    jsonl(folder / "b.jsonl", [{"prompt": "p", "chosen": "c", "rejected": "r"}])
    with pytest.raises(
        UsageError, match=r"b\.jsonl holds preference pairs but .*a\.jsonl does not"
    ):
        load_tokenized(str(folder), cfg(), progress=False)


def test_profile_and_pack_announce_each_file(tmp_path, mixed):
    runner = CliRunner()
    r = runner.invoke(app, ["profile", str(mixed), "--len", "64", "--tokenizer-backend", "hf"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "out"
    r = runner.invoke(
        app,
        ["pack", str(mixed), "--len", "64", "--out", str(out), "--tokenizer-backend", "hf"],
        terminal_width=200,
    )
    assert r.exit_code == 0, r.output
    assert "format: mixed: alpaca (instructions.json 2), messages (chat.jsonl 3)" in r.stderr
    assert "  instructions.json: alpaca, 2 records — has 'instruction' and 'output'" in r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "mixed: alpaca (instructions.json 2), messages (chat.jsonl 3)"
    assert manifest["counts"]["examples_read"] == 5 and manifest["counts"]["skipped"] == 0


@needs_shared("data")
def test_the_shared_data_folder_reads_whole(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    for f in SHARED_DATA.iterdir():
        if f.suffix in (".json", ".jsonl"):
            shutil.copy(f, folder / f.name)
    td = load_tokenized(str(folder), TokenizeConfig(), progress=False)
    assert not td.skipped and td.num_read == len(td) == sum(f.records for f in td.formats.values())
    got = {p.rsplit("/", 1)[-1]: f.format for p, f in td.formats.items()}
    assert got["identity.json"] == "alpaca" and got["v1_sft_demo.jsonl"] == "messages"
    assert (
        got["glaive_toolcall_en_demo.json"] == "sharegpt"
        and got["dummy_conversation.json"] == "sharegpt"
    )
    assert td.format.startswith("mixed: alpaca (identity.json 91), messages (")
    r = CliRunner().invoke(
        app, ["pack", str(folder), "--len", "4096", "--out", str(tmp_path / "out")]
    )
    assert r.exit_code == 0, r.output
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["counts"]["skipped"] == 0 and manifest["counts"]["examples_read"] == td.num_read


def test_warnings_name_each_index_within_its_own_file(tmp_path):
    """The no-loss warning of a folder quotes each source index with its file and record there."""
    folder = tmp_path / "warn"
    folder.mkdir()
    jsonl(folder / "a.jsonl", CHAT)
    no_reply = {"messages": [{"role": "user", "content": "only a question"}]}
    (folder / "b.json").write_text(json.dumps([CHAT[0], no_reply]))
    td = load_tokenized(str(folder), cfg(), progress=False)
    (w,) = [w for w in td.warnings if "no loss token" in w]
    assert "source indices 4 (b.json record 1)" in w, w


def test_detection_passes_over_records_that_fit_no_format(tmp_path):
    """A file whose first records fit no format (or do not parse) takes the format of its first
    record that fits; the others are refused with their own reason and position."""
    path = jsonl(tmp_path / "odd.jsonl", ['{"question": "q"', {"question": "q"}, *ALPACA])
    td = load_tokenized(str(path), cfg(on_error="skip"), progress=False)
    assert td.format == "alpaca" and len(td) == 2
    assert [(s.line, s.source_index) for s in td.skipped] == [(1, 0), (2, 1)]
