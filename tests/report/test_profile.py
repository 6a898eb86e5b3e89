"""packtool.report.profile: JSON layout, terminal formatting and rendering, best strategy and headline."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest
from rich.console import Console

from packtool.profiler import ProfileConfig, profile_lengths
from packtool.report import profile as report
from packtool.stats.strategies import OVERFLOW_NOTES, STRATEGY_LABELS


@pytest.fixture(scope="module")
def by_hand():
    """lengths [1, 2, 3, 4], --len 4, batch size 2: pad to --len computes 16 slots, padding-free 10."""
    return profile_lengths(
        np.array([1, 2, 3, 4]), ProfileConfig(pack_len=4, batch_size=2, group_window=2)
    )


def rendered(r, width: int = 200) -> str:
    buf = io.StringIO()
    report.render(r, Console(file=buf, width=width, force_terminal=False))
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# JSON


def test_json_strategies_have_every_key_in_label_order(by_hand):
    d = report.to_json(by_hand)
    assert d["schema"] == report.SCHEMA
    assert list(d["strategies"]) == list(STRATEGY_LABELS)
    for name, s in d["strategies"].items():
        assert list(s) == list(report.STRATEGY_KEYS), name
        assert s["label"] == STRATEGY_LABELS[name]
        assert s["pad_slots"] == s["slots"] - s["tokens"]
        assert s["gpu_hours"] is None  # no --gpu
    assert d["strategies"]["pad_to_len"]["docs_per_row"] is None
    assert d["strategies"]["packed_bfd_varlen"]["docs_per_row"] == pytest.approx(
        4 / 3
    )  # [4] [3 1] [2]
    assert (d["strategies"]["pad_to_len"]["slots"], d["strategies"]["padding_free"]["slots"]) == (
        16,
        10,
    )
    assert d["flops"]["relative_to"] == "padding_free" and d["flops"]["gpu"] is None


# ---------------------------------------------------------------------------------------------
# terminal formatting


def test_bar_resolution():
    assert report.bar(0, 10, 5) == "" and report.bar(3, 0, 5) == ""
    assert report.bar(10, 10, 5) == "█████"
    assert report.bar(5, 10, 5) == "██▌"  # 20 eighths
    assert report.bar(0.001, 10, 5) == "▏"  # a non-zero value shows


def test_histogram_lines_mark_percentiles_and_len(by_hand):
    rows = report.histogram_lines(by_hand, width=8)
    assert len(rows) == len(by_hand.histogram.counts)
    assert sum(int(cnt.replace(",", "")) for _, _, cnt, _ in rows) == 4
    marks = " ".join(m for *_, m in rows)
    for label in ("p50", "p90", "p99", "--len 4"):
        assert label in marks


def test_render_by_hand(by_hand):
    out = rendered(by_hand)
    assert "every example fits in --len 4" in out
    assert report.headline(by_hand) in out
    assert (
        "◀ --len 4" in out and "beyond the longest example" not in out
    )  # --len in the last bin [4, 5)
    wide = profile_lengths(
        np.array([1, 2, 3, 4]), ProfileConfig(pack_len=8, batch_size=2, group_window=2)
    )
    assert "--len 8 is beyond the longest example (4)" in rendered(wide)


def test_render_names_truncation():
    r = profile_lengths(
        np.array([1, 2, 3, 9, 6]),
        ProfileConfig(pack_len=4, batch_size=2, group_window=2, overflow="truncate"),
    )
    out = rendered(r)
    assert "2 examples (40.00%) exceed --len 4" in out and "cut 7 tokens" in out
    assert "beyond the longest example" not in out


# ---------------------------------------------------------------------------------------------
# decisions


def fake(flops: dict[str, float]):
    return SimpleNamespace(
        costs={n: {"flops": f} for n, f in flops.items()},
        strategies={n: SimpleNamespace(label=STRATEGY_LABELS.get(n, n)) for n in flops},
    )


def test_best_strategy_is_the_cheapest_and_ties_go_to_the_simplest():
    assert (
        report.best_strategy(fake({"pad_to_len": 9, "random_padded": 4, "length_grouped": 2}))
        == "length_grouped"
    )
    tie = fake({"pad_to_len": 9, "packed_bfd_varlen": 1, "padding_free": 1, "packed_ffd_varlen": 1})
    assert report.best_strategy(tie) == "padding_free"
    assert (
        report.best_strategy(fake({"zz_new": 1, "pad_to_len": 1})) == "pad_to_len"
    )  # unknown ids last


def test_headline():
    h = report.headline(fake({"pad_to_len": 10, "random_padded": 4, "padding_free": 2}))
    assert h == (
        "padding-free (varlen): 5.0× fewer training FLOPs than pad to --len, "
        "2.0× fewer than random padded batches"
    )
    assert report.headline(fake({"pad_to_len": 10, "random_padded": 4})) == (
        "random batches, padded: 2.5× fewer training FLOPs than pad to --len"
    )


def test_headline_of_a_profile(by_hand):
    assert report.best_strategy(by_hand) == "padding_free"
    assert report.headline(by_hand).startswith("padding-free (varlen): ")


# ---------------------------------------------------------------------------------------------
# --overflow, the pack prediction, the sweep and the recommendation


def test_json_top_level_keys_pack_and_recommendation():
    import json

    r = profile_lengths(
        np.array([1, 2, 3, 9, 6]), ProfileConfig(pack_len=4, batch_size=2, group_window=2)
    )
    d = report.to_json(r)
    assert d["options"]["overflow"] == "drop" and d["options"]["lens"] is None
    assert list(d["pack"].items()) == list(r.pack.items())  # its keys in order: test_profiler
    assert d["pack"]["examples_dropped"] == 2
    assert d["truncation"]["policy"] == "drop" and d["truncation"]["tokens_cut"] == 15
    assert d["sweep"] is None
    rec = d["recommendation"]
    assert rec["command"].startswith("packtool pack DATA --len ") and rec["overflow"] in (
        "drop",
        "split",
    )
    assert {c["len"] for c in rec["candidates"]} >= {4}
    json.dumps(d)


def test_json_of_a_sweep():
    from packtool.profiler import profile_lens

    lengths = np.random.default_rng(0).integers(50, 3000, 400)
    r = profile_lens(lengths, ProfileConfig(), "1024-4096")
    d = report.to_json(r)
    assert (
        d["options"]["lens"] == [1024, 2048, 4096]
        and d["options"]["len"] == d["recommendation"]["pack_len"]
    )
    assert [p["len"] for p in d["sweep"]] == [1024, 2048, 4096]
    for p in d["sweep"]:
        assert set(p["strategies"]) == set(STRATEGY_LABELS)
        assert set(p["strategies"]["packed_bfd_varlen"]) == {
            "rows",
            "occupancy",
            "attention_waste",
            "relative_flops",
            "flops",
            "gpu_hours",
        }


@pytest.mark.parametrize(
    "overflow, says",
    [
        (
            "drop",
            "--overflow drop leaves them out, 15 tokens (71.43%). Every strategy below leaves them out.",
        ),
        (
            "truncate",
            "truncation would cut 7 tokens (33.33%). Every strategy below truncates them to --len.",
        ),
        ("split", "--overflow split makes them 5 documents of at most --len; nothing is cut."),
    ],
)
def test_render_says_what_overflow_does(overflow, says):
    r = profile_lengths(
        np.array([1, 2, 3, 9, 6]),
        ProfileConfig(pack_len=4, batch_size=2, group_window=2, overflow=overflow),
    )
    out = rendered(r, width=300)
    assert "2 examples (40.00%) exceed --len 4" in out and says in out
    assert (
        f"pack --len 4 --overflow {overflow} would write {r.pack['rows']} rows of {r.pack['documents']} documents"
        in out
    )
    assert OVERFLOW_NOTES[overflow] in out
    assert f"--overflow {overflow} · --batch-size 2" in out


def test_render_ends_with_the_recommendation_and_an_unwrapped_command():
    from packtool.stats import advice

    r = profile_lengths(
        np.concatenate([np.full(300, 400), [11_540]]),
        ProfileConfig(pack_len=4096),
        source={"data": "my data/glaive.json"},
    )
    rec = advice.recommend(r)
    out = rendered(r, width=80)
    assert "\nrecommendation\n" in out
    assert out.rstrip("\n").endswith(f"next: {rec.command}")
    assert (
        rec.command
        == "packtool pack 'my data/glaive.json' --len 4096 --overflow split --out packed/"
    )
    assert out.index("recommendation") > out.index("strategies ·")


def test_sweep_table_marks_the_pick():
    from packtool.profiler import profile_lens

    lengths = np.random.default_rng(1).integers(50, 3000, 400)
    r = profile_lens(lengths, ProfileConfig(), [512, 1024, 2048, 4096])
    out = rendered(r, width=200)
    assert "--len sweep · --overflow drop" in out
    table = out[out.index("--len sweep") : out.index("recommendation")]
    for L in ("512", "1,024", "2,048", "4,096"):
        assert f" {L} " in table
    assert (
        report.sweep_table(r).rows[[p.pack_len for p in r.sweep].index(r.config.pack_len)].style
        == "bold green"
    )


@pytest.mark.parametrize(
    "spec",
    [
        "constant:value=3,n=3",
        "lognormal:median=450,sigma=0.9,n=2000,seed=0",
        "lognormal:median=300,n=900+constant:value=9000,n=40",
    ],
)
def test_rendered_savings_are_never_negative(spec):
    import re

    from packtool.stats import flops
    from packtool.stats.synthetic import synthetic_lengths

    cfg = ProfileConfig(
        pack_len=2048, model=flops.model_from_params(7e9, 32, 4096), gpu=flops.gpu_spec("h100")
    )
    out = rendered(profile_lengths(synthetic_lengths(spec), cfg), width=200)
    block = out[out.index("\nrecommendation\n") :]
    assert not re.search(r"(^|[\s(])-\d", block), block
