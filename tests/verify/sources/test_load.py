"""The sources read again (packtool/verify/sources/load.py): found where the manifest says (or
where DATA says they moved), their sha256, the tokenizer's files hash and the chat template's hash
against the manifest, and the file:line that names a record in messages."""

from __future__ import annotations

import shutil

import pytest
from sources_pack import (  # noqa: E402
    L,
    cli,
    edit_manifest,
    failed,
    manifest,
    verify,
)

from packtool.config import ReadConfig
from packtool.verify.sources import load as vs


def test_changed_source_file_fails_its_sha256(built, pack, tmp_path):
    data = tmp_path / "moved" / "chats.jsonl"
    data.parent.mkdir()
    lines = built[0].read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"content": "', '"content": "x', 1)
    data.write_text("".join(lines))
    code, checks = verify(pack, "--sources", data)
    assert code == 1
    msg = checks[vs.FILES]["message"]
    assert (
        msg.startswith(f"{data}: sha256 ")
        and "the manifest records" in msg
        and "the source changed after packing" in msg
    )
    assert (
        checks[vs.TOKENS]["status"] == "skip"
        and checks[vs.TOKENS]["message"] == f"not run: {vs.FILES} failed"
    )


def test_data_moved_needs_and_takes_the_new_path(built, pack, tmp_path):
    moved = tmp_path / "elsewhere" / "chats.jsonl"
    moved.parent.mkdir()
    shutil.copy(built[0], moved)
    gone = "/nonexistent/machine-a/chats.jsonl"

    def elsewhere(m):
        m["options"]["input"] = gone
        m["sources"][0]["path"] = gone

    edit_manifest(pack, elsewhere)
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.FILES]["message"].startswith(f"cannot read the sources at {gone}: ")
    assert "pass it: packtool verify PACK --sources DATA" in checks[vs.FILES]["message"]

    code, checks = verify(pack, "--sources", moved)
    assert code == 0, [c["message"] for c in failed(checks).values()]
    assert checks[vs.FILES]["message"] == f"1 source file(s) at {moved}: sha256 match the manifest"


def test_relative_source_path_is_found_beside_the_pack(built, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(built[0], work / "chats.jsonl")
    monkeypatch.chdir(work)
    assert cli("pack", "chats.jsonl", "--len", L, "--out", "rel").exit_code == 0
    assert manifest(work / "rel")["sources"][0]["path"] == "chats.jsonl"
    monkeypatch.chdir(
        tmp_path
    )  # verify from somewhere else: the path is relative to where pack ran
    code, checks = verify(work / "rel", "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    assert checks[vs.FILES]["evidence"]["data"] == str(work / "chats.jsonl")


def test_relative_source_path_in_two_places_takes_the_recorded_one(built, tmp_path, monkeypatch):
    """A relative source path that exists both here and beside the pack: the copy with the
    recorded sha256 is read, whichever place it is in, and the message names its absolute path."""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(built[0], work / "chats.jsonl")
    monkeypatch.chdir(work)
    assert cli("pack", "chats.jsonl", "--len", L, "--out", "rel").exit_code == 0
    other = tmp_path / "other"
    other.mkdir()
    (other / "chats.jsonl").write_text(built[0].read_text().splitlines(keepends=True)[0])
    monkeypatch.chdir(other)  # an unrelated chats.jsonl here: the one beside the pack is read
    code, checks = verify(work / "rel", "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    beside = work / "chats.jsonl"
    assert checks[vs.FILES]["message"] == f"1 source file(s) at {beside}: sha256 match the manifest"
    # the recorded file here, an unrelated one beside the pack: the recorded one is read
    shutil.copy(beside, other / "chats.jsonl")
    beside.write_text(built[0].read_text().splitlines(keepends=True)[1])
    code, checks = verify(work / "rel", "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    here = other / "chats.jsonl"
    assert checks[vs.FILES]["message"] == f"1 source file(s) at {here}: sha256 match the manifest"
    # neither has the recorded sha256: the one beside the pack is read, and named in full
    here.write_text(built[0].read_text().splitlines(keepends=True)[2])
    code, checks = verify(work / "rel", "--sources")
    assert code == 1 and checks[vs.FILES]["message"].startswith(f"{beside}: sha256 ")


def test_no_recorded_source_asks_for_the_data(tmp_path):
    with pytest.raises(vs.Stop) as e:
        vs.recorded_data({"options": {}, "sources": []}, str(tmp_path))
    assert e.value.check.name == vs.FILES and e.value.check.message.endswith(
        "pass the data: packtool verify PACK --sources DATA"
    )


def test_provenance_names_the_line_of_a_record(built):
    where = vs.Provenance(str(built[0]), ReadConfig())
    assert where(0) == f"{built[0]}:1" and where(12) == f"{built[0]}:13"
    assert where(10_000) == "record 10000"  # beyond the input: named by its index


def test_changed_template_hash_is_named(pack):
    edit_manifest(pack, lambda m: m["tokenizer"].update(chat_template_hash="0" * 16))
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.TEMPLATE]["message"]
    assert (
        msg.startswith(
            "chat template 'chatml-train' (resolved from the recorded no --chat-template"
        )
        and f"the manifest records {'0' * 16}" in msg
    )


def test_changed_tokenizer_hash_is_named(pack):
    edit_manifest(pack, lambda m: m["tokenizer"].update(files_hash="f" * 16))
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.TOKENIZER]["message"].startswith("the built-in tokenizer: files hash ")
    assert "the tokenizer's files changed since packing" in checks[vs.TOKENIZER]["message"]
