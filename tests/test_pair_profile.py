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


def test_the_recommended_truncate_cuts_what_pack_cuts_drops_included(tmp_path):
    """--overflow truncate drops the pairs whose prompt leaves no trained token: the header, the
    profile's pack warning, pack's own warning and the recommendation all say pack's figures."""
    from packtool.stats import advice

    data = pair_data(n=40, long=(1, 5, 9, 13, 17, 21))
    r = api.profile(data, ProfileConfig(pack_len=32))  # drop: the advice picks truncate
    rec = advice.recommend(r)
    assert (rec.overflow, rec.pack_len) == ("truncate", 32)
    res = pack_tokenized(data, PackConfig(pack_len=32, overflow="truncate"), tmp_path / "p")
    m = json.loads((tmp_path / "p" / "manifest.json").read_text())
    counts, tokens = m["counts"], m["tokens"]
    assert counts["dropped"] > 0 and counts["truncated"] > 0  # both kinds of loss
    c = rec.cut
    assert (c["tokens"], c["examples_truncated"], c["examples_dropped"], c["loss_tokens"]) == (
        tokens["cut"], counts["truncated"], counts["dropped"], tokens["loss_cut"],
    )  # fmt: skip
    assert f"{tokens['cut']:,} tokens" in rec.overflow_reason
    assert f"drops {counts['dropped']} pairs" in rec.overflow_reason
    assert f"the {counts['dropped']} pairs it drops" in rec.cut_text()
    said = f"truncates {counts['truncated']} and drops {counts['dropped']} of 40 pairs"
    warned = [w.message for w in res.warnings if w.message.startswith("--overflow truncate")]
    assert len(warned) == 1 and said in warned[0] and f"{tokens['cut']:,} of" in warned[0]
    lost = [w for w in res.warnings if w.message == warned[0]][0]
    assert lost.count == counts["truncated"] + counts["dropped"]
    # the profile at --overflow truncate: its header and its pack warning say the same
    t = api.profile(data, ProfileConfig(pack_len=32, overflow="truncate"))
    assert any(said in n for n in t.notes)
    head = report.overflow_lines(t)[0]
    assert f"drops {counts['dropped']}" in head and f"{tokens['cut']:,} tokens" in head
    assert "truncates them to --len" not in head


@pytest.mark.parametrize(
    "pack_len, overflow, cause, fix",
    [
        (20, "truncate", "with a prompt too long", "raise --len: each side must keep"),
        (
            20,
            "drop",
            "with chosen + rejected longer than --len 20",
            "truncate keeps no pair either",
        ),
        (80, "drop", "with chosen + rejected longer", "use --overflow truncate"),
    ],
)
def test_nothing_to_pack_names_the_pair_cause_and_only_fixes_that_work(
    tmp_path, pack_len, overflow, cause, fix
):
    """Profile and pack said 'shortest N tokens > --len; use --overflow truncate|split': split is
    refused for pairs, and under truncate the cause is prompts leaving no trained token."""
    from packtool.errors import PacktoolError

    data = pair_data(n=6, long=tuple(range(6)))  # every pair 2 × (prompt + 90) > 80
    data.prompt_lengths = data.prompt_lengths * 0 + 12  # as if every prompt were 12 tokens
    for run in (
        lambda: api.profile(data, ProfileConfig(pack_len=pack_len, overflow=overflow)),
        lambda: pack_tokenized(
            data, PackConfig(pack_len=pack_len, overflow=overflow), tmp_path / "p"
        ),
    ):
        with pytest.raises(PacktoolError) as e:
            run()
        msg = str(e.value)
        assert msg.startswith("nothing to pack: all 6 pairs") and cause in msg and fix in msg
        assert "split" not in msg
