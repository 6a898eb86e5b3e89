"""profile on preference pairs predicts the pack (as for SFT): rows, documents, pairs packed,
truncated and dropped, tokens out and cut; the strategies are pair batching, labelled so."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "pack"))
from test_pair_pack import pair_data  # noqa: E402

from packtool import api  # noqa: E402
from packtool.config import ProfileConfig  # noqa: E402
from packtool.pack import PackConfig, pack_tokenized  # noqa: E402
from packtool.report import profile as report  # noqa: E402


@pytest.mark.parametrize("overflow", ["drop", "truncate"])
def test_the_profile_predicts_the_pair_pack(tmp_path, overflow):
    data = pair_data(n=200, long=(5, 50, 150))
    r = api.profile(data, ProfileConfig(pack_len=128, overflow=overflow))
    pack_tokenized(data, PackConfig(pack_len=128, overflow=overflow), tmp_path / "p")
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    p = r.pack
    assert (p["rows"], p["documents"], p["tokens_out"], p["tokens_cut"]) == (
        m["counts"]["rows"], m["counts"]["documents"], m["tokens"]["out"], m["tokens"]["cut"],
    )  # fmt: skip
    assert (p["examples_packed"], p["examples_truncated"], p["examples_dropped"]) == (
        m["counts"]["packed"], m["counts"]["truncated"], m["counts"]["dropped"],
    )  # fmt: skip
    assert p["loss_tokens_cut"] == m["tokens"]["loss_cut"]
    assert r.counts["examples"] == 200 and r.source["task"] == "preference"
    j = report.to_json(r)
    assert j["strategies"]["random_padded"]["label"] == "random pair batches, padded (TRL)"
    packed, padded = r.strategies["packed_bfd_varlen"], r.strategies["random_padded"]
    assert packed.slots / packed.tokens < padded.slots / padded.tokens


def test_the_advice_never_splits_a_pair():
    data = pair_data(n=200, long=(5, 50, 150))
    r = api.profile(data, ProfileConfig(pack_len=128))
    from packtool.stats import advice

    rec = advice.recommend(r)
    assert rec.overflow in ("drop", "truncate")
    assert "--overflow split" not in rec.command
