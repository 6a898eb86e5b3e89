"""Packs export refuses up front, in one line, before reading a row: a preference pack (NeMo's
packed SFT format has no pairs: a usage error, exit 2) and a pack whose manifest records no sha256
for a shard (the export promises every shard's sha256 checked)."""

from __future__ import annotations

import json

import pytest
from packs import make_docs, real_pack
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.errors import PacktoolError, UsageError
from packtool.export.nemo import export_nemo

PAIRS = [
    {"prompt": "What is 2 + 2?", "chosen": "4.", "rejected": "Five, I think."},
    {"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "A car."},
    {"prompt": "Say hi.", "chosen": "Hi!", "rejected": "No."},
]


def _cli(*args):
    return CliRunner().invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})


def test_a_preference_pack_is_refused_as_usage(tmp_path):
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in PAIRS))
    r = _cli("pack", data, "--len", "256", "--out", tmp_path / "p", "--no-cache")
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p" / schema.MANIFEST).read_text())["task"] == "preference"
    r = _cli("export", tmp_path / "p", "--to", "nemo", "--out", tmp_path / "x")
    text = " ".join(r.output.split())
    assert r.exit_code == 2, r.output
    assert "is a preference pack" in text and "NeMo's packed SFT format has no pairs" in text
    assert "--format chosen-sft" in text and "unexpected columns" not in text
    assert "Traceback" not in r.output and not (tmp_path / "x").exists()
    with pytest.raises(UsageError):
        export_nemo(str(tmp_path / "p"), str(tmp_path / "x"))


@pytest.mark.parametrize("how", ["absent", "empty"])
def test_a_shard_without_sha256_is_refused(tmp_path, how):
    real_pack(tmp_path / "pack", make_docs(30), 32, shard_rows=4)
    mpath = tmp_path / "pack" / schema.MANIFEST
    m = json.loads(mpath.read_text())
    shard = m["shards"][1]
    if how == "absent":
        del shard["sha256"]
    else:
        shard["sha256"] = ""
    mpath.write_text(json.dumps(m))
    with pytest.raises(PacktoolError) as e:
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))
    msg = str(e.value)
    assert f"the manifest records no sha256 for {shard['file']}; re-run packtool pack" in msg, msg
    assert "\n" not in msg and not (tmp_path / "o").exists()
