"""A schema v1 pack written by an earlier packtool (tests/fixtures/v1_pack, commit 75a41c8) stays a
pack: verify's integrity layer passes on it and the trainer-side dataset reads its rows."""

from __future__ import annotations

import shutil

import pytest
from paths import TESTS

V1 = TESTS / "fixtures" / "v1_pack"


def test_verify_passes_on_a_pack_written_before(tmp_path):
    from packtool.config import VerifyConfig
    from packtool.verify.run import verify

    pack = tmp_path / "v1"
    shutil.copytree(V1, pack)
    result = verify(VerifyConfig(path=str(pack), rows=0))
    assert result.passed, [(c.name, c.message) for c in result.failed]
    assert any(c.name == "conservation" and c.passed for c in result.checks)


def test_the_trainer_side_reads_a_pack_written_before(tmp_path):
    pytest.importorskip("torch")
    from packtool import schema
    from packtool.torch import PackedDataset

    ds = PackedDataset(V1, cache_dir=tmp_path / "cache")
    assert len(ds) == 5
    for i in range(len(ds)):
        row = ds[i]
        lens = row["seq_lengths"].tolist()
        assert row["position_ids"].tolist() == schema.position_ids(lens, ds.pack_len).tolist()
        assert row["document_id"].tolist() == schema.document_ids(lens, ds.pack_len).tolist()
