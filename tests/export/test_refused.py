"""Packs export refuses up front, in one line, before reading a row: a preference pack (NeMo's
packed SFT format has no pairs: a usage error, exit 2) and a pack whose manifest records no sha256
for a shard (the export promises every shard's sha256 checked)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.errors import UsageError
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
