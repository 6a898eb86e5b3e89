"""packtool.profiler: profile honours --overflow with pack's own accounting (pack.overflow.apply_overflow,
plan.plan_packs with pack's arguments), predicts pack's manifest on every file of ../shared/data,
and sweeps --len with the same per-length computation."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from paths import SHARED_DATA, needs_shared

from packtool import api
from packtool.config import PackConfig, TokenizeConfig
from packtool.data.tokenized import SkippedRecord, TokenizedData
from packtool.errors import PacktoolError, UsageError
from packtool.pack.overflow import apply_overflow
from packtool.plan import plan_packs
from packtool.profiler import ProfileConfig, profile_lengths, profile_lens
from packtool.stats import advice

# the keys of a pack prediction, in order (ProfileResult.pack, JSON "pack", SweepPoint.pack)
PACK_KEYS = [
    "len",
    "overflow",
    "strategy",
    "order",
    "max_docs",
    "seed",
    "pad_to_multiple",
    "examples",
    "examples_packed",
    "examples_dropped",
    "examples_dropped_empty",
    "examples_truncated",
    "examples_split",
    "split_parts",
    "documents",
    "rows",
    "lower_bound_rows",
    "tokens_in",
    "tokens_out",
    "tokens_cut",
    "tokens_cut_share",
    "loss_tokens_in",
    "loss_tokens_cut",
    "loss_tokens_cut_share",
    "pad_slots",
    "doc_pad",
    "doc_pad_share",
    "fill",
]
BY_HAND = np.array([3, 9, 0, 5, 2])  # --len 4: 9 and 5 are over, one example is empty


def cfg(pack_len=4, overflow="drop", **kw) -> ProfileConfig:
    return ProfileConfig(pack_len=pack_len, batch_size=2, group_window=2, overflow=overflow, **kw)


# ---------------------------------------------------------------------------------------------
# --overflow by hand


def test_drop_leaves_over_length_and_empty_examples_out():
    r = profile_lengths(BY_HAND, cfg(overflow="drop"))
    p = r.pack
    assert list(p) == PACK_KEYS
    assert (p["documents"], p["examples_dropped"], p["examples_dropped_empty"]) == (
        2,
        3,
        1,
    )  # [3] [2]
    assert (p["tokens_in"], p["tokens_out"], p["tokens_cut"]) == (19, 5, 14)
    assert p["rows"] == 2 and p["examples_packed"] == 2
    assert r.strategies["padding_free"].tokens == 5 and r.strategies["pad_to_len"].rows == 2
    t = r.truncation
    assert (t["policy"], t["examples_over"], t["tokens_cut"], t["examples_dropped"]) == (
        "drop",
        2,
        14,
        3,
    )
    assert t["loss_tokens_cut"] is None  # bare lengths: loss unknown


def test_truncate_cuts_to_len():
    r = profile_lengths(BY_HAND, cfg(overflow="truncate"))
    p = r.pack
    assert (p["documents"], p["examples_truncated"], p["examples_dropped"], p["tokens_cut"]) == (
        4,
        2,
        1,
        5 + 1,
    )
    assert r.strategies["padding_free"].tokens == 3 + 4 + 4 + 2
    assert r.truncation["tokens_cut"] == 6


def test_split_makes_parts_documents():
    r = profile_lengths(BY_HAND, cfg(overflow="split"))
    p = r.pack
    assert (p["documents"], p["examples_split"], p["split_parts"], p["tokens_cut"]) == (
        1 + 3 + 2 + 1,
        2,
        5,
        0,
    )
    assert r.strategies["padding_free"].rows == 7  # 3 | 4 4 1 | 4 1 | 2
    assert r.truncation["tokens_cut"] == 0 and r.truncation["loss_tokens_cut"] == 0


def test_error_names_the_example_as_pack_does():
    src = np.array([10, 11, 12, 13, 14])
    with pytest.raises(PacktoolError) as ours:
        profile_lengths(BY_HAND, cfg(overflow="error"), source_index=src)
    with pytest.raises(PacktoolError) as packs:
        apply_overflow(BY_HAND.astype(np.int64), src, 4, "error")
    assert str(ours.value) == str(packs.value)
    assert "example 11 has 9 tokens > --len 4" in str(ours.value)
    assert (
        profile_lengths(np.array([1, 4]), cfg(overflow="error")).pack["documents"] == 2
    )  # nothing over


def test_nothing_to_pack_is_bad_input_as_in_pack():
    with pytest.raises(
        PacktoolError, match=r"nothing to pack: all 2 examples would be dropped \(shortest 5 tokens"
    ):
        profile_lengths(np.array([5, 7]), cfg(overflow="drop"))
    assert profile_lengths(np.array([5, 7]), cfg(overflow="split")).pack["rows"] == 3


def test_bad_lengths_are_usage_errors():
    with pytest.raises(UsageError, match="length #2 is -1"):
        profile_lengths(np.array([3, -1]), cfg())
    with pytest.raises(UsageError, match="1-D"):
        profile_lengths(np.ones((2, 2), dtype=int), cfg())


@pytest.mark.parametrize("case", range(30))
def test_packed_rows_are_plan_packs_with_packs_arguments(case):
    """The row count of packed BFD is plan_packs(pieces.length, L, bfd, sorted, 0, 0), as pack/run.py."""
    rng = np.random.default_rng(case)
    L = int(rng.choice([8, 64, 300, 1024]))
    lengths = rng.integers(0, 3 * L, int(rng.integers(5, 400)))
    for overflow in ("drop", "truncate", "split"):
        pieces = apply_overflow(lengths.astype(np.int64), np.arange(lengths.size), L, overflow)
        if pieces.length.size == 0:
            continue
        d = PackConfig(pack_len=max(L, 2), overflow=overflow)
        want = plan_packs(pieces.length, L, d.strategy, d.order, d.max_docs, d.seed).num_rows
        r = profile_lengths(lengths, ProfileConfig(pack_len=L, overflow=overflow, seed=int(case)))
        assert (
            r.pack["rows"]
            == r.strategies["packed_bfd_varlen"].rows
            == r.strategies["packed_bfd_dense"].rows
            == want
        )
        assert r.pack["documents"] == pieces.length.size and r.pack["tokens_out"] == int(
            pieces.length.sum()
        )
        assert r.strategies["padding_free"].tokens == int(pieces.length.sum())


# ---------------------------------------------------------------------------------------------
# profile == pack on TokenizedData


def tokenized_by_hand() -> TokenizedData:
    #   example 0: 6 tokens, 4 with loss, 2 of them past --len 4;  example 1: no loss;  example 2: 3 tokens;
    #   example 3: 9 tokens, loss on 7 (split into 4 + 4 + 1)
    return TokenizedData.from_lists(
        [[1, 2, 3, 4, 5, 6], [1, 2], [7, 8, 9], list(range(1, 10))],
        [[-100, -100, 3, 4, 5, 6], [-100, -100], [-100, 8, 9], [-100, -100] + list(range(3, 10))],
        source_index=[0, 2, 3, 4],
        num_read=5,
        skipped=[SkippedRecord(1, "f.jsonl", 2, "no assistant turn")],
    )


def manifest_view(m: dict) -> dict:
    c, t = m["counts"], m["tokens"]
    return {
        "rows": c["rows"],
        "documents": c["documents"],
        "examples_packed": c["packed"],
        "examples_dropped": c["dropped"],
        "examples_truncated": c["truncated"],
        "examples_split": c["split"],
        "split_parts": c["split_parts"],
        "tokens_in": t["in"],
        "tokens_out": t["out"],
        "tokens_cut": t["cut"],
        "loss_tokens_in": t["loss_in"],
        "loss_tokens_cut": t["loss_cut"],
        "pad_slots": t["pad"],
        "doc_pad": t.get("doc_pad", 0),
        "lower_bound_rows": m["lower_bound_rows"],
    }


def predicted(r) -> dict:
    return {
        k: r.pack[k]
        for k in manifest_view(
            {
                "counts": {
                    k: 0
                    for k in (
                        "rows",
                        "documents",
                        "packed",
                        "dropped",
                        "truncated",
                        "split",
                        "split_parts",
                    )
                },
                "tokens": {k: 0 for k in ("in", "out", "cut", "loss_in", "loss_cut", "pad")},
                "lower_bound_rows": 0,
            }
        )
    }


def packed_manifest(td, pack_len: int, overflow: str, out, multiple: int = 1) -> dict | str:
    from packtool.api import pack

    cfg = PackConfig(pack_len=pack_len, overflow=overflow, pad_to_multiple=multiple)
    try:
        return pack(td, cfg, str(out)).manifest
    except PacktoolError as e:
        return f"error: {e}"


def profiled(td, pack_len: int, overflow: str, multiple: int = 1) -> dict | str:
    cfg = ProfileConfig(pack_len=pack_len, overflow=overflow, pad_to_multiple=multiple)
    try:
        return predicted(api.profile(td, cfg))
    except PacktoolError as e:
        return f"error: {e}"


@pytest.mark.parametrize("overflow", ["drop", "truncate", "split"])
def test_profile_predicts_padded_packs_by_hand(overflow, tmp_path):
    """--pad-to-multiple 2 at --len 4: the documents' padding is predicted as pack writes it."""
    td = tokenized_by_hand()
    m = packed_manifest(td, 4, overflow, tmp_path / "out", multiple=2)
    assert profiled(td, 4, overflow, 2) == manifest_view(m)
    assert m["tokens"]["doc_pad"] > 0 and m["pad_to_multiple"] == 2
    r = api.profile(td, ProfileConfig(pack_len=4, overflow=overflow, pad_to_multiple=2))
    assert r.pack["doc_pad"] == m["tokens"]["doc_pad"] and r.pack["pad_to_multiple"] == 2
    assert r.pack["doc_pad_share"] == pytest.approx(
        m["tokens"]["doc_pad"] / (4 * m["counts"]["rows"])
    )


def test_profile_refuses_a_len_that_is_no_multiple():
    with pytest.raises(
        UsageError,
        match="--len 100 is not a multiple of --pad-to-multiple 8; use --len 96 or --len 104",
    ):
        ProfileConfig(pack_len=100, pad_to_multiple=8)


def test_one_len_is_checked_before_the_lengths_are_read():
    """As the CLI, which builds its config from the --len: the --len's error, not the input's."""
    cfg = ProfileConfig(pad_to_multiple=8)
    with pytest.raises(UsageError, match="--len 4095 is not a multiple of --pad-to-multiple 8"):
        profile_lens(np.array([-1, 5]), cfg, [4095])
    with pytest.raises(UsageError, match="length #1 is -1"):
        profile_lens(np.array([-1, 5]), cfg, [4096])


@pytest.mark.parametrize("overflow", ["drop", "truncate", "split"])
def test_profile_predicts_the_manifest_by_hand(overflow, tmp_path):
    td = tokenized_by_hand()
    m = packed_manifest(td, 4, overflow, tmp_path / "out")
    assert profiled(td, 4, overflow) == manifest_view(m)
    r = api.profile(td, ProfileConfig(pack_len=4, overflow=overflow))
    want_loss_cut = {"drop": 4 + 7, "truncate": 2 + 5, "split": 0}[overflow]
    assert r.truncation["loss_tokens_cut"] == r.pack["loss_tokens_cut"] == want_loss_cut


def test_error_policy_matches_pack(tmp_path):
    td = tokenized_by_hand()
    ours, packs = profiled(td, 4, "error"), packed_manifest(td, 4, "error", tmp_path / "out")
    assert ours == packs and "example 0 has 6 tokens > --len 4" in ours


SHARED_FILES = sorted(p.name for p in SHARED_DATA.glob("*.json*")) if SHARED_DATA.exists() else []


@needs_shared("data")
@pytest.mark.parametrize("name", SHARED_FILES or ["(none)"])
def test_profile_predicts_pack_on_shared_data(name, tmp_path):
    """Every real file, --len 1024 and 4096, every policy, documents unpadded and padded to
    multiples of 8 (--pad-to-multiple 8): profile's prediction is pack's manifest (or both stop
    with the same kind of error: every example dropped)."""
    from packtool.api import load_tokenized

    td = load_tokenized(str(SHARED_DATA / name), TokenizeConfig(), progress=False)
    for pack_len, overflow, n in itertools.product(
        (1024, 4096), ("drop", "truncate", "split"), (1, 8)
    ):
        ours = profiled(td, pack_len, overflow, n)
        packs = packed_manifest(td, pack_len, overflow, tmp_path / f"{pack_len}-{overflow}-{n}", n)
        if isinstance(packs, str):
            assert (
                isinstance(ours, str) and "nothing to pack" in ours and "nothing to pack" in packs
            ), (ours, packs)
        else:
            assert ours == manifest_view(packs), (name, pack_len, overflow, n)


@needs_shared("data", "glaive_toolcall_en_demo.json")
def test_the_glaive_issue(tmp_path):
    """The user's report: profile said 40 rows and 7,444 tokens cut (truncation); pack (drop) made
    39 rows and dropped one 11,540-token example with 5,730 loss tokens."""
    from packtool.api import load_tokenized

    td = load_tokenized(
        str(SHARED_DATA / "glaive_toolcall_en_demo.json"), TokenizeConfig(), progress=False
    )
    r = api.profile(
        td, ProfileConfig(pack_len=4096), source={"data": "glaive_toolcall_en_demo.json"}
    )
    p = r.pack
    assert (p["rows"], p["examples_dropped"], p["tokens_cut"], p["loss_tokens_cut"]) == (
        39,
        1,
        11_540,
        5_730,
    )
    t = api.profile(td, ProfileConfig(pack_len=4096, overflow="truncate")).pack
    assert (t["rows"], t["tokens_cut"]) == (40, 7_444)
    rec = advice.recommend(r)
    assert (rec.pack_len, rec.overflow) == (4096, "split")
    assert (
        rec.command
        == "packtool pack glaive_toolcall_en_demo.json --len 4096 --overflow split --out packed/"
    )
    assert (
        rec.rows
        == api.profile(td, ProfileConfig(pack_len=4096, overflow="split")).pack["rows"]
        == 42
    )


# ---------------------------------------------------------------------------------------------
# sweeps


LOGNORMAL = "lognormal:median=900,sigma=0.8,n=3000,seed=5"


def sweep(data_or_lengths, cfg, lens):
    """The points of a sweep over several --len values."""
    return profile_lens(data_or_lengths, cfg, lens).sweep


def test_sweep_points_equal_full_profiles():
    from packtool.stats.synthetic import synthetic_lengths

    lengths = synthetic_lengths(LOGNORMAL)
    base = ProfileConfig(overflow="drop", batch_size=4, group_window=64)
    points = sweep(lengths, base, "1024-8192")
    assert [p.pack_len for p in points] == [1024, 2048, 4096, 8192]
    for p in points:
        full = profile_lengths(lengths, dataclasses.replace(base, pack_len=p.pack_len))
        assert p.pack == full.pack
        for name, s in full.strategies.items():
            assert p.strategies[name]["rows"] == s.rows
            assert p.strategies[name]["relative_flops"] == full.costs[name]["relative_flops"]
    assert sweep(lengths, base, [4096, 1024]) == [points[0], points[2]]


def test_sweep_on_tokenized_data_and_an_empty_len():
    td = tokenized_by_hand()
    points = sweep(td, ProfileConfig(overflow="drop"), [1, 4, 16])
    assert [p.rows for p in points][1:] == [
        api.profile(td, ProfileConfig(pack_len=L)).pack["rows"] for L in (4, 16)
    ]
    assert (
        points[0].rows == 0 and points[0].fill is None and points[0].strategies == {}
    )  # every example dropped
    assert points[0].pack["tokens_cut"] == 20 and points[0].pack["examples_dropped"] == 4
    assert points[0].pack["loss_tokens_cut_share"] == 1.0  # every loss token with them
    bare = sweep(np.array([5, 7]), ProfileConfig(overflow="drop"), [4, 8])
    assert bare[0].rows == 0 and bare[0].pack == {
        **bare[0].pack,
        "loss_tokens_in": None,
        "loss_tokens_cut": None,
        "loss_tokens_cut_share": None,  # bare lengths: unknown, as at every other --len
    }
    assert bare[1].pack["loss_tokens_cut_share"] is None
    with pytest.raises(UsageError, match="--len 0 must be in"):
        sweep(td, ProfileConfig(), [0, 4])
    with pytest.raises(UsageError, match="--len '1-'"):
        sweep(td, ProfileConfig(), "1-")


def test_profile_lens_one_value_is_a_plain_profile():
    from packtool.stats.synthetic import synthetic_lengths

    lengths = synthetic_lengths(LOGNORMAL)
    a = profile_lens(lengths, ProfileConfig(), "2048")
    b = profile_lengths(lengths, ProfileConfig(pack_len=2048))
    assert a.sweep is None and a.pack == b.pack and a.config == b.config


def test_profile_lens_profiles_the_advised_len_and_keeps_the_sweep():
    from packtool.stats.synthetic import synthetic_lengths

    lengths = synthetic_lengths(LOGNORMAL)
    r = profile_lens(
        lengths, ProfileConfig(), "512-8192", source={"kind": "synthetic", "spec": LOGNORMAL}
    )
    assert [p.pack_len for p in r.sweep] == [512, 1024, 2048, 4096, 8192]
    rec = advice.recommend(r)
    assert r.config.pack_len == rec.pack_len
    full = profile_lengths(lengths, ProfileConfig(pack_len=rec.pack_len))
    assert r.pack == full.pack and r.costs == full.costs
    assert r.source == {"kind": "synthetic", "spec": LOGNORMAL} and "sweep" in r.timings


def test_advice_point_when_the_advice_differs():
    lengths = np.concatenate(
        [np.full(500, 300), [20_000]]
    )  # one heavy outlier: split at --len 1024
    r = profile_lengths(lengths, ProfileConfig(pack_len=1024))
    assert r.advice_point is not None and (r.advice_point.pack_len, r.advice_point.overflow) == (
        1024,
        "split",
    )
    split = profile_lengths(lengths, ProfileConfig(pack_len=1024, overflow="split"))
    assert r.advice_point.pack == split.pack and split.advice_point is None
    rec = advice.recommend(r)
    assert rec.rows == split.pack["rows"] and rec.evidence_overflow == "split"
    assert not any("FLOP figures" in h for h in rec.hints)
    bare = profile_lengths(
        lengths, ProfileConfig(pack_len=1024), advise=False
    )  # no second simulation
    assert bare.advice_point is None and "advice" not in bare.timings
    rec = advice.recommend(bare)
    assert (rec.pack_len, rec.overflow, rec.rows, rec.evidence_overflow) == (
        1024,
        "split",
        None,
        "drop",
    )
    assert (
        "the FLOP figures are at the profiled --overflow drop; "
        "`packtool profile DATA --len 1024 --overflow split` shows them for split"
    ) in rec.hints
    assert profile_lengths(np.full(10, 30), ProfileConfig(pack_len=64)).advice_point is None


def test_the_advice_keeps_to_lengths_the_layout_allows():
    """--pad-to-multiple 96: a raised --len must be one pack takes with it (powers of two are not)."""
    lengths = np.random.default_rng(0).integers(1000, 3000, 2000)
    plain = advice.recommend(profile_lengths(lengths, ProfileConfig(pack_len=1536)))
    padded = advice.recommend(
        profile_lengths(lengths, ProfileConfig(pack_len=1536, pad_to_multiple=96))
    )
    assert plain.pack_len > 1536 and plain.pack_len % 96  # raised to a power of two
    assert padded.pack_len % 96 == 0 and "--pad-to-multiple 96" in padded.command
