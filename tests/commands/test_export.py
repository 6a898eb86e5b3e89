"""`packtool export` through the CLI: a pack written by `packtool pack`, --json, --force, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli import app

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def pack(tmp_path) -> Path:
    """`packtool pack` of pre-tokenized input: 40 examples of 2..15 tokens, --len 16."""
    ids = [[(7 * i + t) % 100 + 1 for t in range(2 + i % 14)] for i in range(40)]
    labels = [[-100] * (len(x) // 2) + x[len(x) // 2 :] for x in ids]
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), tmp_path / "pretok.parquet")
    out = tmp_path / "pack"
    r = runner.invoke(
        app, ["pack", str(tmp_path / "pretok.parquet"), "--len", "16", "--out", str(out)]
    )
    assert r.exit_code == 0, r.output
    return out


def run(*args):
    return runner.invoke(app, ["export", *map(str, args)])


def test_export_writes_the_files_and_the_json_report(tmp_path, pack):
    out = tmp_path / "nemo"
    r = run(pack, "--to", "nemo", "--out", out, "--json", "-")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    m = json.loads((pack / "manifest.json").read_text())
    assert report["schema"] == "packtool.export/v1" and report["format"] == "nemo"
    assert report["files"] == {
        "data": str(out / "training_16.npy"),
        "metadata": str(out / "16_metadata.jsonl"),
        "record": str(out / "export.json"),
    }
    assert report["record"] == json.loads((out / "export.json").read_text())
    assert report["record"]["tokens"] == m["tokens"]["out"]
    assert report["record"]["loss_tokens"] == m["tokens"]["loss_out"]
    rows = np.load(out / "training_16.npy", allow_pickle=True)
    assert len(rows) == m["counts"]["rows"] == report["record"]["rows"]
    assert sum(len(x["input_ids"]) for x in rows) == m["tokens"]["out"]
    assert sum(int(x["loss_mask"].sum()) for x in rows) == m["tokens"]["loss_out"]
    meta = json.loads((out / "16_metadata.jsonl").read_text())
    assert meta == [report["record"]["metadata"]] and meta[0]["pack_size"] == 16


def test_human_output_says_how_to_point_the_trainer_at_the_files(tmp_path, pack):
    r = run(pack, "--to", "nemo", "-o", tmp_path / "nemo")
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "exported" in text and "tokens.loss_out" in text
    assert f"packed_train_data_path='{tmp_path / 'nemo' / 'training_16.npy'}'" in text
    assert f"packed_metadata_path='{tmp_path / 'nemo' / '16_metadata.jsonl'}'" in text


def test_force_and_exit_codes(tmp_path, pack):
    out = tmp_path / "nemo"
    assert run(pack, "--to", "nemo", "--out", out).exit_code == 0
    r = run(pack, "--to", "nemo", "--out", out)
    assert r.exit_code == 2 and "already exists; use --force" in r.output
    assert run(pack, "--to", "nemo", "--out", out, "--force").exit_code == 0
    r = run(pack, "--to", "nemo", "--out", pack, "--force")  # never over the pack itself
    assert r.exit_code == 2 and "not a packtool export" in r.output
    assert (pack / "manifest.json").is_file()


def test_bad_input_is_one_line(tmp_path, pack):
    r = run(tmp_path / "pretok.parquet", "--to", "nemo", "--out", tmp_path / "o")
    assert r.exit_code == 1
    assert r.output.startswith("error: ") and r.output.count("\n") == 1
    assert "is a file, not a pack folder; pack it first" in r.output
    r = run(pack, "--to", "axolotl", "--out", tmp_path / "o")
    assert r.exit_code == 2 and "choose nemo" in r.output
    r = run(pack, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--to" in r.output
    assert not (tmp_path / "o").exists()


def test_export_is_listed_in_help():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0 and "export" in r.output
    r = runner.invoke(app, ["export", "--help"])
    assert r.exit_code == 0 and "--to" in r.output and "--force" in r.output
