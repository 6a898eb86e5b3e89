"""`packtool pack` through the CLI: exit codes, messages, --json, and real files (slow)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from invariants import check_pack  # noqa: E402
from paths import SHARED_DATA
from typer.testing import CliRunner

from packtool.cli import app  # noqa: E402

SHARED = SHARED_DATA
runner = CliRunner()


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


@pytest.fixture
def pretok(tmp_path) -> Path:
    """Pre-tokenized input: 40 examples of 1..14 tokens, one of 30 (too long for --len 16)."""
    ids = [[(7 * i + t) % 100 + 1 for t in range(1 + i % 14)] for i in range(40)]
    ids[17] = list(range(1, 31))
    labels = [[-100] * (len(x) // 2) + x[len(x) // 2 :] for x in ids]
    path = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), path)
    return path


def run(*args):
    return runner.invoke(app, ["pack", *map(str, args)])


def test_pack_writes_a_valid_pack_and_json(tmp_path, pretok):
    out = tmp_path / "out"
    r = run(
        pretok, "--len", 16, "--out", out, "--overflow", "split", "--json", "-", "--shard-rows", 5
    )
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    assert report["schema"] == "packtool.pack/v1" and report["out"] == str(out)
    m = check_pack(out)
    assert report["manifest"] == m
    assert (
        m["counts"]["split"] == 1
        and m["split"][0]["source_index"] == 17
        and m["split"][0]["parts"] == 2
    )
    assert m["counts"]["tokenized"] == 40 and m["tokens"]["in"] == m["tokens"]["out"]
    assert len(m["shards"]) == -(-m["counts"]["rows"] // 5)


def test_summary_on_stderr_and_json_file(tmp_path, pretok):
    r = run(
        pretok,
        "--len",
        16,
        "--out",
        tmp_path / "o",
        "--json",
        tmp_path / "r.json",
        "--strategy",
        "ffd",
        "--order",
        "random",
        "--max-docs",
        3,
        "--seed",
        4,
        "--no-shuffle",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert "lower bound" in r.stderr and "dropped 1 example(s): 17" in r.stderr
    m = json.loads((tmp_path / "r.json").read_text())["manifest"]
    assert (m["strategy"], m["order"], m["max_docs"], m["seed"], m["shuffle"]) == (
        "ffd",
        "random",
        3,
        4,
        False,
    )
    assert m["dropped"] == [{"source_index": 17, "length": 30, "reason": "longer than --len 16"}]
    check_pack(tmp_path / "o")


def test_truncate_is_loud(tmp_path, pretok):
    r = run(pretok, "--len", 16, "--out", tmp_path / "o", "--overflow", "truncate")
    assert r.exit_code == 0, r.output
    assert "warning: truncated 1 example(s) to 16 tokens, cutting 14 tokens: 17" in r.stderr
    assert check_pack(tmp_path / "o")["truncated"] == [
        {"source_index": 17, "length": 30, "cut": 14}
    ]


@pytest.mark.parametrize(
    "args, code, match",
    [
        (["--len", "1"], 2, "--len 1 is too small"),
        (["--len", "16", "--strategy", "nfd"], 2, "--strategy 'nfd' is not one of bfd|ffd"),
        (["--len", "16", "--order", "up"], 2, "--order 'up' is not one of sorted|random"),
        (
            ["--len", "16", "--overflow", "wrap"],
            2,
            "--overflow 'wrap' is not one of drop|truncate|split|error",
        ),
        (["--len", "16", "--max-docs", "-1"], 2, "--max-docs -1 must be >= 0"),
        (
            ["--len", "20", "--pad-to-multiple", "8"],
            2,
            "--len 20 is not a multiple of --pad-to-multiple 8; use --len 16 or --len 24",
        ),
        (["--len", "16", "--fixed-docs"], 2, "--fixed-docs needs --max-docs K > 0"),
        (["--len", "16", "--train-on", "none"], 2, "--train-on 'none' is not one of"),
        (
            ["--len", "16", "--overflow", "error"],
            1,
            "example 17 has 30 tokens > --len 16; use --overflow truncate|split or raise --len",
        ),
    ],
)
def test_errors_and_exit_codes(tmp_path, pretok, args, code, match):
    r = run(pretok, "--out", tmp_path / "o", *args)
    assert r.exit_code == code, r.output
    assert match in r.stderr
    assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_missing_len_is_a_usage_error(tmp_path, pretok):
    r = run(pretok, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--len" in r.output


def test_existing_out_needs_force(tmp_path, pretok):
    out = tmp_path / "o"
    assert run(pretok, "--len", 16, "--out", out).exit_code == 0
    r = run(pretok, "--len", 32, "--out", out)
    assert r.exit_code == 2 and "already exists; use --force" in r.stderr
    r = run(pretok, "--len", 32, "--out", out, "--force")
    assert r.exit_code == 0, r.output
    assert check_pack(out)["pack_len"] == 32


def test_empty_dataset_is_a_clear_error(tmp_path):
    path = tmp_path / "empty.parquet"
    pq.write_table(
        pa.table(
            {
                "input_ids": pa.array([], pa.list_(pa.int32())),
                "labels": pa.array([], pa.list_(pa.int32())),
            }
        ),
        path,
    )
    r = run(path, "--len", 16, "--out", tmp_path / "o")
    assert r.exit_code in (1, 2), r.output
    assert "error: " in r.stderr and (
        "no usable examples" in r.stderr or "nothing to pack" in r.stderr
    )
    assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", sorted(p.name for p in SHARED.glob("*.json*")) if SHARED.is_dir() else []
)
@pytest.mark.parametrize("overflow", ["drop", "split"])
def test_real_files(tmp_path, name, overflow):
    from packtool import api
    from packtool.config import TokenizeConfig

    out = tmp_path / "o"
    r = run(
        SHARED / name,
        "--len",
        2048 if overflow == "drop" else 1024,
        "--out",
        out,
        "--overflow",
        overflow,
    )
    assert r.exit_code == 0, r.output
    data = api.load_tokenized(str(SHARED / name), TokenizeConfig(), progress=False)
    m = check_pack(out, source=data)
    assert m["counts"]["rows"] >= 1


def test_padded_fixed_docs_pack_through_the_cli(tmp_path, pretok):
    """--pad-to-multiple 4 --fixed-docs --max-docs 3: the rows keep every invariant, the manifest
    records the layout, the report shows it, and `verify` passes."""
    out = tmp_path / "out"
    args = ("--len", 16, "--out", out, "--overflow", "split", "--pad-to-multiple", 4)
    r = run(pretok, *args, "--fixed-docs", "--max-docs", 3)
    assert r.exit_code == 0, r.output
    assert "layout" in r.stderr and "documents padded to multiples of 4" in r.stderr
    m = check_pack(out)
    assert m["pad_to_multiple"] == 4 and m["fixed_docs"] is True and m["tokens"]["doc_pad"] > 0
    table = pq.read_table(out / m["shards"][0]["file"])
    assert {len(s) for s in table.column("seq_lengths").to_pylist()} == {3}
    v = runner.invoke(app, ["verify", str(out), "--rows", "0"])
    assert v.exit_code == 0, v.output


def test_a_pack_built_from_python_records_the_options_of_the_cli(tmp_path, pretok):
    """manifest["options"] is written by the library (api.load_tokenized), not by the CLI: the same
    input packed from Python records the same options, one input and a mixture alike."""
    from packtool import api
    from packtool.config import InputSpec, PackConfig, TokenizeConfig

    mixture = f"{pretok}::weight=2"
    for name, args, data in (
        ("one", [pretok], str(pretok)),
        (
            "mix",
            [pretok, mixture],
            [InputSpec(str(pretok), str(pretok)), InputSpec(mixture, str(pretok), weight=2)],
        ),
    ):
        r = run(*args, "--len", 16, "--overflow", "split", "--out", tmp_path / f"cli-{name}")
        assert r.exit_code == 0, r.output
        cfg = TokenizeConfig()
        td = api.load_tokenized(data, cfg, progress=False)
        api.pack(td, PackConfig(pack_len=16, overflow="split"), str(tmp_path / f"py-{name}"))
        cli_m, py_m = (
            json.loads((tmp_path / f"{k}-{name}" / "manifest.json").read_text())
            for k in ("cli", "py")
        )
        assert py_m["options"] == cli_m["options"]
        assert py_m["options"]["input"] == (
            str(pretok) if name == "one" else [str(pretok), mixture]
        )
