"""Issue 23, second pass: --overflow drop or truncate losing more than 1% of the examples or tokens
is a warning with the fix, in pack's report and in profile's prediction."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli import app
from packtool.pack import apply_overflow, overflow_loss
from packtool.schema.manifest import OVERFLOW_LOSS

runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))


def loss(lengths, L, overflow):
    lengths = np.asarray(lengths, dtype=np.int64)
    src = np.arange(lengths.size, dtype=np.int64)
    return overflow_loss(lengths, apply_overflow(lengths, src, L, overflow), L, overflow)


def test_overflow_loss_thresholds():
    # 1 of 200 examples (0.5%, 0.5% of the tokens): not loud; 2 of 100: loud
    assert loss([100] * 199 + [101], 100, "drop") is None
    msg = loss([10] * 98 + [300, 900], 100, "drop")
    assert msg == (
        "--overflow drop drops 2 of 100 examples (2.0%) and 1,200 of 2,180 tokens (55.0%): longer "
        "than --len 100; use --overflow split|truncate to keep them, or --len 512 (fits 99% of the "
        "examples) / --len 1024 (fits the longest, 900 tokens)"
    )
    # one example of 1,000 but most of the tokens: loud (the token share alone)
    assert "1 of 1,000 examples (0.1%)" in loss([5] * 999 + [5000], 100, "drop")
    # empty examples are dropped but lose nothing
    assert loss([0] * 50 + [10] * 50, 100, "drop") is None
    # truncation: the tokens cut
    msg = loss([50] * 90 + [400] * 10, 100, "truncate")
    assert msg.startswith("--overflow truncate truncates 10 of 100 examples (10.0%) and 3,000 of")
    assert "use --overflow split to keep every token, or --len 512 (fits the longest" in msg
    assert loss([50] * 90 + [400] * 10, 100, "split") is None
    # p99 well below the longest: both lengths are offered
    msg = loss([10] * 80 + [200] * 19 + [5000], 100, "drop")
    assert "--len 256 (fits 99% of the examples) / --len 8192 (fits the longest" in msg


@pytest.fixture
def long_chats(tmp_path):
    """150 pre-tokenized examples, 95 of them longer than 256 tokens (most of the tokens)."""
    ids = [[1 + t % 50 for t in range(20 if i < 55 else 400)] for i in range(150)]
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": ids}), path)
    return path


def test_pack_warns_when_drop_loses_most_of_the_data(tmp_path, long_chats):
    r = runner.invoke(app, ["pack", str(long_chats), "--len", "256", "--out", str(tmp_path / "o")])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert (
        "warning: --overflow drop drops 95 of 150 examples (63.3%) and 38,000 of 39,100 tokens "
        "(97.2%): longer than --len 256; use --overflow split|truncate to keep them, or --len 512 "
        "(fits the longest, 400 tokens)"
    ) in text
    r = runner.invoke(
        app,
        ["pack", str(long_chats), "--len", "256", "--out", str(tmp_path / "o2"), "--json", "-"],
    )
    (w,) = [w for w in json.loads(r.stdout)["warnings"] if w["code"] == OVERFLOW_LOSS]
    assert w["count"] == 95 and w["items"][:2] == [55, 56]
    r = runner.invoke(
        app,
        ["pack", str(long_chats), "--len", "512", "--out", str(tmp_path / "o3"), "--json", "-"],
    )
    assert not [w for w in json.loads(r.stdout)["warnings"] if w["code"] == OVERFLOW_LOSS]


def test_profile_predicts_the_same_warning(long_chats):
    r = runner.invoke(app, ["profile", str(long_chats), "--len", "256", "--json", "-"])
    assert r.exit_code == 0, r.output
    notes = json.loads(r.stdout)["notes"]
    assert "pack --overflow drop drops 95 of 150 examples (63.3%)" in " ".join(notes)
