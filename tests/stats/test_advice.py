"""packtool.stats.choice and .advice: what each policy takes per --len, the --len / --overflow
rules, and the recommendation over grids of synthetic length distributions (never a negative saving)."""

from __future__ import annotations

import json
import math
import re
import shlex

import numpy as np
import pytest

from packtool.profiler import ProfileConfig, profile_lengths, profile_lens
from packtool.stats import advice, choice
from packtool.stats.synthetic import synthetic_lengths

NEGATIVE = re.compile(r"(^|[\s(])-\d")  # "-3", "(-0.5": a negative number in prose


def totals(lengths, loss=None) -> choice.Totals:
    lengths = np.asarray(lengths)
    return choice.Totals(
        examples=int(lengths.size),
        tokens=int(lengths.sum()),
        loss_tokens=None if loss is None else int(np.sum(loss)),
        longest=int(lengths.max()),
    )


def choose(lengths, given, loss=None, points=None) -> advice.LenChoice:
    lengths = np.asarray(lengths)
    cuts = choice.cuts_by_len(lengths, loss, choice.candidate_lens(int(lengths.max()), given))
    return advice.choose_len(cuts, totals(lengths, loss), given, points)


# ---------------------------------------------------------------------------------------------
# candidate_lens, cuts_by_len


def test_candidate_lens():
    assert choice.candidate_lens(11_540, [4096]) == [4096, 8192, 16384]
    assert choice.candidate_lens(100, [4096]) == [4096, 8192]  # one power above, even when all fit
    assert choice.candidate_lens(5000, [1000]) == [1000, 1024, 2048, 4096, 8192]
    assert choice.candidate_lens(3000, [512, 4096]) == [512, 1024, 2048, 4096]
    big = choice.candidate_lens(10**12, [4096])
    assert big[-1] == choice.MAX_POW2 and all(
        b == 2 * a for a, b in zip(big[:-1], big[1:], strict=True)
    )


def test_cuts_by_hand():
    #   lengths [3, 9, 5, 4], loss [1, 6, 2, 0]; at L 4: over 9 and 5
    c = choice.cuts_by_len(np.array([3, 9, 5, 4]), np.array([1, 6, 2, 0]), [4, 8, 16])
    assert c[4] == {
        "len": 4,
        "examples_over": 2,
        "tokens_over": 14,
        "tokens_truncated": 5 + 1,
        "loss_tokens_over": 8,
        "split_parts": 3 + 2,
    }
    assert (c[8]["examples_over"], c[8]["tokens_over"], c[8]["split_parts"]) == (1, 9, 2)
    assert c[16]["examples_over"] == 0 and c[16]["split_parts"] == 0
    assert choice.cuts_by_len(np.array([3]), None, [2])[2]["loss_tokens_over"] is None


@pytest.mark.parametrize("case", range(25))
def test_cuts_against_brute_force(case):
    rng = np.random.default_rng(case)
    n = rng.integers(1, 500)
    lengths = rng.integers(1, rng.choice([50, 3000, 20_000]), n).astype(np.int32)
    loss = (rng.random(n) * lengths).astype(np.int32) if case % 3 else None
    lens = sorted({int(x) for x in rng.integers(1, 25_000, rng.integers(1, 8))})
    cuts = choice.cuts_by_len(lengths, loss, lens)
    assert sorted(cuts) == lens
    for L, c in cuts.items():
        over = [i for i, x in enumerate(lengths.tolist()) if x > L]
        assert c["examples_over"] == len(over)
        assert c["tokens_over"] == sum(int(lengths[i]) for i in over)
        assert c["tokens_truncated"] == sum(int(lengths[i]) - L for i in over)
        assert c["split_parts"] == sum(math.ceil(int(lengths[i]) / L) for i in over)
        assert c["loss_tokens_over"] == (None if loss is None else sum(int(loss[i]) for i in over))


# ---------------------------------------------------------------------------------------------
# choose_len: each rule by hand


BULK = np.full(1000, 500)  # 500,000 tokens


def test_everything_fits_keeps_len_and_drop():
    c = choose(BULK, [4096])
    assert (c.pack_len, c.overflow, c.rule) == (4096, "drop", "fits")
    assert "every example fits (longest 500)" in c.len_reason
    assert "does not matter" in c.overflow_reason


def test_a_small_tail_is_dropped():
    c = choose(np.concatenate([BULK, [5000]]), [4096])  # 1 % of tokens: allowed
    assert (c.pack_len, c.overflow, c.rule) == (4096, "drop", "drop")
    assert "1 example (0.10%) is longer, holding 0.99% of tokens" in c.len_reason
    assert (
        "drop (pack's default)" in c.overflow_reason
        and "truncate would cut the ends of 1 example (904" in c.overflow_reason
    )


def test_a_few_heavy_outliers_are_split_and_len_stays():
    lengths = np.concatenate([BULK, [11_540]])  # 0.1 % of examples, 2.3 % of tokens
    c = choose(lengths, [4096])
    assert (c.pack_len, c.overflow, c.rule) == (4096, "split", "outliers")
    assert "--len 16,384 would keep it whole" in c.len_reason
    assert (
        "split keeps every token as 3 documents" in c.overflow_reason
        and "dropping it" in c.overflow_reason
    )


def test_loss_tokens_count_against_the_budget_too():
    lengths = np.concatenate([BULK, [5000]])  # 0.99 % of tokens, but all the loss of the set
    loss = np.concatenate([np.full(1000, 1), [900]])
    assert choose(lengths, [4096]).overflow == "drop"
    c = choose(lengths, [4096], loss=loss)
    assert c.overflow == "split" and "of loss tokens" in c.len_reason


def test_a_broad_tail_raises_len_to_the_smallest_power_of_two():
    lengths = np.concatenate([BULK, np.full(100, 6000)])  # 9 % of examples over 4096
    c = choose(lengths, [4096])
    assert (c.pack_len, c.overflow, c.rule) == (8192, "drop", "raise")
    assert (
        "the smallest power of two that keeps all but 1% of tokens (every example fits)"
        in c.len_reason
    )
    assert "at --len 4,096 100 examples (9.1%) are longer" in c.len_reason


def test_no_raise_beyond_four_times():
    lengths = np.concatenate([BULK, np.full(100, 20_000)])  # would need 32768 = 8 × 4096
    c = choose(lengths, [4096])
    assert (c.pack_len, c.overflow, c.rule) == (4096, "split", "split")
    assert "needs --len 32,768, more than 4× --len" in c.len_reason


def test_a_sweep_picks_the_shortest_len_within_budget():
    lengths = np.concatenate([BULK, np.full(30, 3000)])
    c = choose(lengths, [1024, 2048, 4096, 8192])
    assert (c.pack_len, c.overflow, c.rule) == (4096, "drop", "sweep-ok")
    assert c.len_reason.startswith("the shortest swept --len that every example fits in")


def test_a_sweep_prefers_a_len_that_packs_better():
    from packtool.stats.sweep import SweepPoint

    def point(L, rel):
        return SweepPoint(
            {"len": L, "overflow": "drop", "rows": 10, "fill": 1 / rel},
            {"packed_bfd_varlen": {"relative_flops": rel}},
        )

    points = {1024: point(1024, 1.10), 2048: point(2048, 1.015), 4096: point(4096, 1.00)}
    c = choose(BULK, [1024, 2048, 4096], points=points)
    assert c.pack_len == 2048  # within 2 % of the best (1.00); 1024 is not
    assert (
        "within 2% of the best swept --len, 1.015×" in c.len_reason
        and "(--len 1,024: 1.100×)" in c.len_reason
    )


def test_a_sweep_without_a_good_len_splits():
    lengths = np.concatenate([BULK, [50_000]])  # one outlier, 9 % of tokens
    c = choose(lengths, [1024, 2048])
    assert (c.pack_len, c.overflow, c.rule) == (1024, "split", "sweep-outliers")
    heavy = np.concatenate([BULK, np.full(100, 50_000)])
    c = choose(heavy, [1024, 2048])
    assert (c.pack_len, c.overflow, c.rule) == (2048, "split", "sweep-split")


# ---------------------------------------------------------------------------------------------
# choose_len over a grid of distributions: the rules' promises


SPECS = [
    "lognormal:median=450,sigma=0.9,n=3000,seed={s}",
    "lognormal:median=1500,sigma=0.6,n=2000,seed={s}",
    "lognormal:median=300,n=3000,seed={s}+constant:value=9000,n={k}",
    "normal:mean=3000,std=800,n=1500,seed={s}",
    "uniform:min=16,max=6000,n=2000,seed={s}",
    "constant:value=700,n=500+constant:value=30000,n={k}",
]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("L0", [512, 1024, 2048, 4096, 5000, 8192])
def test_choose_len_keeps_its_promises(spec, L0):
    for s, k in ((0, 1), (1, 20)):
        lengths = synthetic_lengths(spec.format(s=s, k=k))
        loss = (lengths * 0.4).astype(np.int64)
        t = totals(lengths, loss)
        cuts = choice.cuts_by_len(lengths, loss, choice.candidate_lens(int(lengths.max()), [L0]))
        c = advice.choose_len(cuts, t, [L0])
        cut = cuts[c.pack_len]

        def lost(x, t=t):
            return x["tokens_over"] / t.tokens, x["loss_tokens_over"] / t.loss_tokens

        assert c.overflow in ("drop", "split")
        assert c.pack_len == L0 or (
            c.pack_len & (c.pack_len - 1) == 0 and L0 < c.pack_len <= 4 * L0
        )
        if c.overflow == "drop":
            assert max(lost(cut)) <= choice.MAX_LOST_SHARE
        else:
            assert cut["examples_over"] > 0 and max(lost(cut)) > choice.MAX_LOST_SHARE
        if c.rule == "raise":  # the smallest power of two above --len that is within budget
            between = [L for L in cuts if L0 < L < c.pack_len and L & (L - 1) == 0]
            assert all(max(lost(cuts[L])) > choice.MAX_LOST_SHARE for L in [L0, *between])
        if c.rule == "fits":
            assert cut["examples_over"] == 0
        assert not NEGATIVE.search(c.len_reason + c.overflow_reason)


# ---------------------------------------------------------------------------------------------
# wording: never a negative saving


def test_versus_is_never_negative():
    assert advice.versus(1.0, 2.31, "X") == "2.31× fewer training FLOPs than X"
    assert advice.versus(1.0, 1.002, "X") == "about the same training FLOPs as X"
    assert advice.versus(1.2, 1.0, "X") == "1.20× more training FLOPs than X"
    assert advice.versus(0.0, 1.0, "X") == "about the same training FLOPs as X"
    assert advice.hours_versus(1.0, 13.3, "X") == "saves 12.3 GPU-hours against X"
    assert advice.hours_versus(2.0, 0.5, "X") == "costs 1.5 GPU-hours more than X"
    for a, b in ((1, 3), (3, 1), (0.0683, 0.01), (5, 5)):
        assert not NEGATIVE.search(advice.versus(a, b, "X") + advice.hours_versus(a, b, "X"))


def test_pack_command_quotes_and_names_only_non_default_overflow():
    assert (
        advice.pack_command("data.jsonl", 4096, "drop")
        == "packtool pack data.jsonl --len 4096 --out packed/"
    )
    cmd = advice.pack_command("my data/$x.json", 2048, "split", ["--tokenizer", "org/tok name"])
    assert cmd == (
        "packtool pack 'my data/$x.json' --len 2048 --overflow split --tokenizer 'org/tok name' "
        "--out packed/"
    )
    assert shlex.split(cmd)[2] == "my data/$x.json"
    assert advice.pack_command(None, 1024, "drop").startswith("packtool pack DATA --len 1024")


# ---------------------------------------------------------------------------------------------
# recommend over a grid of profiles


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize(
    "L0, overflow", [(1024, "drop"), (4096, "drop"), (4096, "truncate"), (2048, "split")]
)
def test_recommendation_over_a_grid(spec, L0, overflow):
    lengths = synthetic_lengths(spec.format(s=3, k=5))
    cfg = ProfileConfig(pack_len=L0, overflow=overflow)
    r = profile_lengths(lengths, cfg, source={"kind": "synthetic", "spec": spec})
    rec = advice.recommend(r)
    # the command
    words = shlex.split(rec.command)
    assert words[:3] == ["packtool", "pack", "DATA"] and words[-2:] == ["--out", advice.OUT]
    assert words[words.index("--len") + 1] == str(rec.pack_len)
    assert ("--overflow" in words) == (rec.overflow != "drop")
    # what it cuts agrees with the lengths
    over = lengths > rec.pack_len
    if rec.overflow == "drop":
        assert rec.cut["tokens"] == int(lengths[over].sum()) and rec.cut["examples_dropped"] == int(
            over.sum()
        )
    else:
        assert rec.cut["tokens"] == 0 and rec.cut["examples_split"] == int(over.sum())
    for key in ("tokens", "tokens_share", "examples_dropped", "examples_split", "split_parts"):
        assert rec.cut[key] >= 0
    # its rows are what a profile at its (--len, --overflow) predicts for pack
    again = profile_lengths(lengths, ProfileConfig(pack_len=rec.pack_len, overflow=rec.overflow))
    assert rec.rows == again.pack["rows"]
    # and the FLOP figures are its own
    assert rec.evidence_len == rec.pack_len
    assert rec.relative_flops["packed_bfd_varlen"] == pytest.approx(
        again.costs["packed_bfd_varlen"]["relative_flops"]
    )
    # the strategy is the cheaper of packing and length-grouped batches
    f = {n: again.costs[n]["flops"] for n in again.costs}
    assert rec.strategy == (
        "length_grouped" if f["length_grouped"] < f["packed_bfd_varlen"] else "packed_bfd_varlen"
    )
    assert rec.length_grouped_nearly_as_good == (
        f["length_grouped"] <= f["packed_bfd_varlen"] * (1 + choice.NEARLY)
    )
    text = " ".join(t for _, t in rec.lines()) + " " + rec.summary()
    assert not NEGATIVE.search(text), text
    assert all(v > 0 for v in rec.relative_flops.values())
    json.dumps(rec.to_json())


def test_recommendation_with_gpu_hours_never_negative():
    from packtool.stats import flops

    cfg = ProfileConfig(
        pack_len=4096, model=flops.model_from_params(7e9, 32, 4096), gpu=flops.gpu_spec("h100")
    )
    for spec in (
        "constant:value=3,n=3",
        SPECS[0].format(s=0, k=0),
    ):  # packing can cost more than padding
        r = profile_lengths(synthetic_lengths(spec), cfg)
        rec = advice.recommend(r)
        assert rec.gpu is not None and rec.gpu["hours"] >= 0
        assert not NEGATIVE.search(rec.gpu["vs_random_padded"] + rec.gpu["vs_pad_to_len"])
        assert not NEGATIVE.search(" ".join(t for _, t in rec.lines()))


def test_length_grouped_wins_when_rows_cannot_be_filled():
    r = profile_lengths(
        np.array([1905]), ProfileConfig(pack_len=4096)
    )  # one example: a row 47 % full
    rec = advice.recommend(r)
    assert rec.strategy == "length_grouped" and "packing costs more here" in rec.strategy_reason
    assert any("47% full" in h and "--len 1024-8192" in h for h in rec.hints)
    assert dict(rec.lines())["to pack"] == rec.command


def test_recommendation_uses_the_sweep():
    lengths = synthetic_lengths("lognormal:median=1500,sigma=0.6,n=2000,seed=1")
    r = profile_lens(lengths, ProfileConfig(), [1024, 2048, 4096, 8192, 16384])
    rec = advice.recommend(r)
    assert rec.pack_len == r.config.pack_len  # the full profile is at the pick
    assert rec.rule.startswith("sweep-") and rec.rows == r.pack["rows"]
    assert not rec.hints or all(
        "profile DATA --len" not in h or "compares" not in h for h in rec.hints
    )
