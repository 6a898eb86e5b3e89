"""`packtool profile`: JSON keys, PNG, exit codes, and the profiler on TokenizedData."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool import api
from packtool.cli import app
from packtool.data.tokenized import SkippedRecord, TokenizedData
from packtool.errors import PacktoolError
from packtool.profiler import ProfileConfig, profile_lengths
from packtool.report.profile import STRATEGY_KEYS, to_json
from packtool.stats.strategies import STRATEGY_LABELS

TOP_KEYS = [
    "schema",
    "packtool_version",
    "source",
    "options",
    "counts",
    "lengths",
    "loss_tokens_per_example",
    "truncation",
    "pack",
    "strategies",
    "flops",
    "histogram",
    "random_batch_waste",
    "sweep",
    "recommendation",
    "notes",
    "timings",
]
SPEC = "lognormal:median=300,sigma=0.8,n=3000,max=6000,seed=1"
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["profile", *args])


def test_json_to_stdout_has_stable_keys():
    res = run("--synthetic", SPEC, "--json", "-")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert list(d) == TOP_KEYS
    assert d["schema"] == "packtool.profile/v1"
    assert list(d["strategies"]) == list(STRATEGY_LABELS)
    for s in d["strategies"].values():
        assert list(s) == list(STRATEGY_KEYS)
        assert 0 < s["occupancy"] <= 1 and s["attention_waste"] >= 1
    assert d["counts"]["examples"] == 3000 and d["counts"]["loss_tokens"] is None
    assert set(d["lengths"]) == {
        "count",
        "sum",
        "min",
        "mean",
        "median",
        "p90",
        "p95",
        "p99",
        "max",
    }
    assert d["flops"]["formula"].startswith("FLOPs = 6*P*slots")
    assert d["flops"]["model"]["source"] == "reference" and d["flops"]["gpu"] is None
    assert d["strategies"]["padding_free"]["relative_flops"] == 1.0
    assert sum(d["histogram"]["counts"]) == 3000


def test_human_report_goes_to_stderr():
    res = run("--synthetic", SPEC, "--len", "1024", "--overflow", "truncate")
    assert res.exit_code == 0, res.stderr
    assert res.stdout == ""
    for text in (
        "length histogram",
        "◀ p50",
        "--len 1,024",
        "packed BFD varlen",
        "attn",
        "FLOPs = 6*P*slots",
        "truncation would cut",
    ):
        assert text in res.stderr, text


def test_default_profile_predicts_pack_and_recommends_a_command():
    res = run("--synthetic", SPEC, "--len", "1024")
    assert res.exit_code == 0, res.stderr
    assert "--overflow drop" in res.stderr and "recommendation" in res.stderr
    assert (
        res.stderr.rstrip().splitlines()[-1] == "next: packtool pack DATA --len 4096 --out packed/"
    )


def test_len_sweep_from_the_command_line():
    res = run("--synthetic", SPEC, "--len", "1024-4096", "--json", "-")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert [p["len"] for p in d["sweep"]] == [1024, 2048, 4096]
    assert d["recommendation"]["command"].startswith("packtool pack DATA --len ")
    bad = run("--synthetic", SPEC, "--len", "4096,x")
    assert bad.exit_code == 2 and "--len" in bad.stderr


def test_same_seed_same_numbers():
    a = json.loads(run("--synthetic", SPEC, "--json", "-").stdout)
    b = json.loads(run("--synthetic", SPEC, "--json", "-").stdout)
    a.pop("timings"), b.pop("timings")
    assert a == b


def test_plot_png(tmp_path):
    png = tmp_path / "sub" / "profile.png"
    res = run(
        "--synthetic",
        SPEC,
        "--plot",
        str(png),
        "--params",
        "7B",
        "--layers",
        "32",
        "--hidden",
        "4096",
        "--gpu",
        "h100",
    )
    assert res.exit_code == 0, res.stderr
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_lengths_file_by_hand(tmp_path):
    f = tmp_path / "lengths.txt"
    f.write_text("1\n2\n3\n4\n")
    out = tmp_path / "p.json"
    res = run(
        "--lengths",
        str(f),
        "--len",
        "4",
        "--batch-size",
        "2",
        "--group-window",
        "2",
        "--json",
        str(out),
    )
    assert res.exit_code == 0, res.stderr
    s = json.loads(out.read_text())["strategies"]
    assert (s["pad_to_len"]["slots"], s["pad_to_len"]["attention_work"]) == (16, 64)
    assert s["padding_free"]["slots"] == 10 and s["padding_free"]["attention_work"] == 30
    assert s["pad_to_len"]["attention_waste"] == pytest.approx(64 / 30)
    assert s["packed_bfd_dense"]["rows"] == 3  # [4] [3 1] [2]: capacity 4
    assert s["packed_bfd_dense"]["attention_work"] == 3 * 16


def test_gpu_hours_follow_the_formula(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 1000,
            }
        )
    )
    res = run(
        "--synthetic",
        SPEC,
        "--model",
        str(tmp_path),
        "--gpu",
        "a100",
        "--mfu",
        "0.5",
        "--json",
        "-",
    )
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    m = d["flops"]["model"]
    assert m["matmul_params"] == 2 * (4 * 64 * 64 + 3 * 64 * 128) + 1000 * 64
    for name, s in d["strategies"].items():
        flops = 6 * m["matmul_params"] * s["slots"] + 12 * 2 * 64 * s["attention_work"]
        assert s["flops"] == pytest.approx(flops), name
        assert s["gpu_hours"] == pytest.approx(flops / (312e12 * 0.5) / 3600)
    pad, best = d["strategies"]["pad_to_len"], d["strategies"]["packed_bfd_varlen"]
    assert best["saving_vs_pad_to_len"] == pytest.approx(1 - best["flops"] / pad["flops"])
    assert best["gpu_hours_saved_vs_pad_to_len"] == pytest.approx(
        pad["gpu_hours"] - best["gpu_hours"]
    )


@pytest.mark.parametrize(
    "args, match",
    [
        ([], "exactly one of DATA, --synthetic SPEC or --lengths FILE"),
        (["data.jsonl", "--synthetic", SPEC], "exactly one of"),
        (["--synthetic", "lognormal:mediam=3"], "no parameter 'mediam'"),
        (["--synthetic", SPEC, "--gpu", "h100"], "--gpu needs a model size"),
        (["--synthetic", SPEC, "--mfu", "0"], "--mfu 0.0 must be in"),
        (["--synthetic", SPEC, "--mfu", "1.5"], "--mfu 1.5 must be in"),
        (
            ["--synthetic", SPEC, "--group-window", "4"],
            "--group-window 4 is smaller than --batch-size 8",
        ),
        (["--synthetic", SPEC, "--len", "0"], "--len 0 must be in"),
        (["--synthetic", SPEC, "--batch-size", "0"], "--batch-size 0 must be >= 1"),
        (["--synthetic", SPEC, "--plot", "out.jpg"], "must end in .png"),
        (["--synthetic", SPEC, "--params", "7e9"], "--params needs --layers L and --hidden D"),
        (["--synthetic", SPEC, "--layers", "32"], "--layers/--hidden need --params"),
        (
            ["--synthetic", SPEC, "--params", "seven", "--layers", "2", "--hidden", "8"],
            "'seven' is not a number",
        ),
        (
            [
                "--synthetic",
                SPEC,
                "--params",
                "7e9",
                "--layers",
                "2",
                "--hidden",
                "8",
                "--gpu",
                "h1000",
            ],
            "not a known GPU",
        ),
        (
            ["--synthetic", SPEC, "--params", "1e400", "--layers", "32", "--hidden", "4096"],
            "--params inf must be a finite number > 0",  # was nan× and Infinity in the JSON
        ),
        (["--synthetic", SPEC, "--model", "nope/config.json"], "no such file"),
        (["--synthetic", SPEC, "--model", "c.json", "--params", "7e9"], "not both"),
        (["--synthetic", SPEC, "--tokenizer", "gpt2"], "--tokenizer only apply to DATA"),
        (["--lengths", "missing.txt"], "no such file"),
        (
            ["--synthetic", SPEC, "--len", "1000", "--pad-to-multiple", "64"],
            "--len 1000 is not a multiple of --pad-to-multiple 64; use --len 960 or --len 1024",
        ),
    ],
)
def test_usage_errors_exit_2(args, match):
    res = run(*args)
    assert res.exit_code == 2, (res.stdout, res.stderr)
    assert match in res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1


def test_bad_input_exit_1(tmp_path):
    bad = tmp_path / "l.txt"
    bad.write_text("12\nx\n")
    res = run("--lengths", str(bad))
    assert res.exit_code == 1 and "l.txt:2: 'x' is not an integer" in res.stderr
    cfg = tmp_path / "config.json"
    cfg.write_text('{"num_hidden_layers": 2}')
    res = run("--synthetic", SPEC, "--model", str(cfg))
    assert res.exit_code == 1 and "no hidden size" in res.stderr
    cfg.write_text("{not json")
    res = run("--synthetic", SPEC, "--model", str(cfg))
    assert res.exit_code == 1 and "is not JSON" in res.stderr


def test_loss_tokens_cut_over_sliced_chunks():
    """The per-chunk count equals a brute-force count on a sliced, multi-chunk table."""
    import numpy as np
    import pyarrow as pa

    from packtool.predict import loss_tokens_cut

    rng = np.random.default_rng(3)
    ids = [rng.integers(0, 50, rng.integers(1, 30)).tolist() for _ in range(60)]
    labels = [[t if rng.random() < 0.6 else -100 for t in row] for row in ids]
    full = TokenizedData.from_lists([[1]] * 5 + ids, [[1]] * 5 + labels).table.slice(5)
    table = pa.concat_tables([full.slice(0, 17), full.slice(17, 25), full.slice(42)])
    td = TokenizedData.from_table(table, num_read=60)
    for pack_len in (1, 8, 20):
        want = sum(sum(v != -100 for v in row[pack_len:]) for row in labels)
        assert loss_tokens_cut(td, pack_len) == want


def test_profile_tokenized_data_by_hand():
    #   example 0: 6 tokens, 4 with loss, 2 of them past --len 4;  example 1: no loss;  example 2: 3 tokens
    td = TokenizedData.from_lists(
        [[1, 2, 3, 4, 5, 6], [1, 2], [7, 8, 9]],
        [[-100, -100, 3, 4, 5, 6], [-100, -100], [-100, 8, 9]],
        num_read=4,
        skipped=[SkippedRecord(1, "f.jsonl", 2, "no assistant turn")],
        format="messages",
    )
    r = api.profile(
        td,
        ProfileConfig(pack_len=4, batch_size=2, group_window=2, overflow="truncate"),
        source={"data": "f.jsonl"},
    )
    c = r.counts
    assert (c["examples_read"], c["examples_skipped"], c["examples"], c["tokens"]) == (4, 1, 3, 11)
    assert c["skipped_reasons"] == {"no assistant turn": 1}
    assert (c["loss_tokens"], c["examples_without_loss"]) == (6, 1)
    assert c["loss_share"] == pytest.approx(6 / 11)
    t = r.truncation
    assert (t["examples_over"], t["tokens_cut"], t["loss_tokens_cut"]) == (1, 2, 2)
    assert r.loss_lengths["max"] == 4 and r.lengths["max"] == 6
    assert r.strategies["padding_free"].tokens == 4 + 2 + 3
    d = to_json(r)
    assert d["source"]["format"] == "messages" and d["source"]["data"] == "f.jsonl"
    json.dumps(d)  # serializable as is


def test_profile_lengths_leaves_out_empty_examples():
    r = profile_lengths(
        np.array([0, 3, 5]), ProfileConfig(pack_len=8, batch_size=2, group_window=2)
    )
    assert r.counts["examples_empty"] == 1 and r.counts["examples"] == 2
    assert any("no tokens" in n for n in r.notes)


def test_nothing_to_profile_is_bad_input():
    with pytest.raises(PacktoolError, match="none of the 2 examples read has a token"):
        profile_lengths(np.array([0, 0]), ProfileConfig())


def test_data_through_the_cli(tmp_path):
    f = tmp_path / "chat.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": "hi " * k},
                {"role": "assistant", "content": "yes " * k},
            ]
        }
        for k in (1, 5, 40)
    ]
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    res = run(str(f), "--num-proc", "1", "--len", "64", "--json", "-")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["counts"]["examples"] == 3 and d["counts"]["loss_tokens"] > 0
    assert d["truncation"]["examples_over"] == 1 and d["truncation"]["loss_tokens_cut"] > 0


def test_core_modules_stay_light():
    code = (
        "import sys, packtool.stats, packtool.stats.synthetic, packtool.profiler; "
        "bad = [m for m in ('rich', 'typer', 'matplotlib', 'torch', 'transformers') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_gpu_table_never_prints_a_negative_saving():
    from packtool.report.profile import _saved

    def saved(hours, share):
        cost = {"gpu_hours_saved_vs_random_padded": hours, "saving_vs_random_padded": share}
        return _saved(cost, "random_padded")

    assert saved(0.5, 0.25) == "30 min (25%)"
    assert saved(-0.0683, -49.9) == "4.1 min more" and "-" not in saved(-0.0683, -49.9)
    res = run(
        "--synthetic", SPEC, "--params", "7B", "--layers", "32", "--hidden", "4096", "--gpu", "h100"
    )
    assert res.exit_code == 0, res.stderr
    import re

    table = res.stderr[res.stderr.index("one epoch") : res.stderr.index("FLOPs = ")]
    assert not re.search(r"(^|[\s(])-\d", table), table  # no negative hours or shares


def test_pad_to_multiple_shows_its_cost_and_the_command_keeps_it():
    res = run("--synthetic", SPEC, "--len", "4096", "--pad-to-multiple", "64", "--json", "-")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    plain = json.loads(run("--synthetic", SPEC, "--len", "4096", "--json", "-").stdout)
    pk, base = d["pack"], plain["pack"]
    assert d["options"]["pad_to_multiple"] == 64 and pk["pad_to_multiple"] == 64
    assert base["doc_pad"] == 0 and pk["doc_pad"] > 0 and pk["tokens_out"] == base["tokens_out"]
    assert pk["pad_slots"] == pk["rows"] * 4096 - pk["tokens_out"] >= pk["doc_pad"]
    assert pk["doc_pad_share"] == pytest.approx(pk["doc_pad"] / (pk["rows"] * 4096))
    assert pk["rows"] >= base["rows"]
    assert "--pad-to-multiple 64" in d["recommendation"]["command"]
    human = run("--synthetic", SPEC, "--len", "4096", "--pad-to-multiple", "64")
    assert "cost of --pad-to-multiple 64" in human.stderr


def test_the_recommended_command_keeps_the_seed_of_a_fractional_weight(tmp_path):
    """profile --seed 5 of 'f::weight=0.5' predicted one seeded half; the command it recommended
    had no --seed, so pack drew another half."""
    import shlex

    from packtool.demo_data import write_sample

    f = write_sample(tmp_path / "s.jsonl", n=40, seed=3)
    res = run(f"{f}::weight=0.5", "--seed", "5", "--num-proc", "1", "--json", "-")
    assert res.exit_code == 0, res.stderr
    d = json.loads(res.stdout)
    words = shlex.split(d["recommendation"]["command"])
    assert words[words.index("--seed") + 1] == "5"
    out = tmp_path / "p"
    res = runner.invoke(app, [*words[1:-2], "--out", str(out), "--num-proc", "1"])
    assert res.exit_code == 0, res.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["tokens"]["in"] == d["counts"]["tokens"]
    assert m["counts"]["rows"] == d["recommendation"]["rows"]
