"""Fixtures of the packtool.torch tests: a small schema-v1 pack (written by `packs.write_pack`, a
small independent writer, so these tests do not depend on the real packer), a private Arrow cache,
and the cu_seqlens a batch of rows must get."""

from __future__ import annotations

import pytest
from packs import make_docs, write_pack


@pytest.fixture
def pack(tmp_path):
    docs = make_docs(60, seed=1, max_len=24)
    rows = write_pack(tmp_path / "pack", docs, 32, rows_per_shard=7)
    return tmp_path / "pack", docs, rows


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "arrow-cache"


def _expected_cu(rows, pack_len):
    cu = [0]
    for b, r in enumerate(rows):
        at = b * pack_len
        for n in r["seq_lengths"]:
            at += n
            cu.append(at)
        if r["num_tokens"] < pack_len:
            cu.append((b + 1) * pack_len)
    return cu


@pytest.fixture
def expected_cu():
    """cu_seqlens over rows laid end to end, written out by hand: each document, then the pad tail."""
    return _expected_cu
