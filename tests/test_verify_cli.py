"""`packtool verify` through the CLI: exit codes (0 pass, 1 a check failed, 2 usage), messages,
--json, --self-test, and packs of the shared data files (slow)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from packtool.cli import app
from packtool.verify import selftest as st

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
runner = CliRunner()
L = 160


def run(*args):
    return runner.invoke(app, ["verify", *map(str, args)])


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "good"
    docs = st.make_documents(50, seed=3, min_len=4, max_len=70)
    st.write_pack(str(out), st.pack_documents(docs, L), L, shard_rows=10)
    return out


@pytest.fixture
def broken(good, tmp_path):
    dst = tmp_path / "broken"
    st._break_positions(str(good), str(dst))
    return dst


def test_import_cli_does_not_import_torch_or_transformers():
    code = ("import sys, packtool.cli; heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
            "sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert r.returncode == 0, r.stderr


def test_integrity_only_passes_with_json_on_stdout(good):
    r = run(good, "--rows", "0", "--json", "-")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "packtool.verify/v1" and doc["passed"] and doc["failed"] == []
    statuses = {c["name"]: c["status"] for c in doc["checks"]}
    assert statuses["position_ids"] == "pass" and statuses["isolation"] == "skip"


def test_default_run_passes_and_says_which_kernel_ran(good, tmp_path):
    report = tmp_path / "r" / "verify.json"
    r = run(good, "--rows", "1", "--backend", "reference", "--json", report)
    assert r.exit_code == 0, r.stderr
    assert "verify passed" in r.stderr
    assert "FlashAttention kernel not exercised (no CUDA)" in r.stderr
    doc = json.loads(report.read_text())
    iso = [c for c in doc["checks"] if c["name"].startswith("isolation gpt2/reference")]
    assert len(iso) == 4 and all(c["status"] == "pass" for c in iso)
    ev = iso[0]["evidence"]
    assert ev["rows_tested"] == 1 and ev["dtype"] == "float32" and "cu_seqlens" in ev["kernel"]
    assert doc["kernels"] and doc["kernels"][0].startswith("reference:")


def test_broken_pack_exits_1_naming_the_row(broken):
    r = run(broken, "--rows", "0")
    assert r.exit_code == 1
    assert "verify failed" in r.stderr
    assert re.search(r"^FAIL position_ids: data/train-00000-of-\d+\.parquet row 0 position \d+ \(document 1\): "
                     r"position_id \d+, expected 0", r.stderr, re.M), r.stderr


def test_broken_positions_fail_isolation_too(broken):
    """Positions counting on in row 0: sdpa sees one sequence (documents leak) and GPT-2's
    absolute positions move; the isolation layer fails as well as integrity."""
    r = run(broken, "--rows", "40", "--backend", "sdpa", "--json", "-")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    failed = set(doc["failed"])
    assert "position_ids" in failed
    assert "isolation gpt2/sdpa logits" in failed and "isolation llama/sdpa logits" in failed


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((), "give the pack folder"),
        (("--backend", "magic"), "--backend 'magic' is not one of"),
        (("--device", "tpu"), "--device 'tpu' is not one of"),
        (("--rows", "-1"), "--rows -1 must be >= 0"),
        (("--backend", "flash-attn", "--device", "cpu"), "--backend flash-attn needs a CUDA device"),
        (("--backend", "torch-varlen", "--device", "cpu"), "--backend torch-varlen needs a CUDA device"),
    ],
)
def test_usage_errors_exit_2(good, args, match):
    r = run(*(args if args == () else (good, *args)))
    assert r.exit_code == 2, r.stderr
    assert match in r.stderr


def test_flash_attn_without_cuda_is_never_a_silent_pass(good):
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    r = run(good, "--backend", "flash-attn")
    assert r.exit_code == 2 and "FlashAttention kernel cannot be exercised" in r.stderr


def test_self_test_with_folder_is_usage_error(good):
    r = run(good, "--self-test")
    assert r.exit_code == 2 and "--self-test builds its own pack" in r.stderr


def test_not_a_folder_exits_1(tmp_path):
    r = run(tmp_path / "nope")
    assert r.exit_code == 1 and "is not a folder" in r.stderr


def test_self_test_passes(tmp_path):
    r = run("--self-test", "--rows", "1", "--json", tmp_path / "st.json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads((tmp_path / "st.json").read_text())
    assert doc["self_test"] and doc["passed"]
    names = {c["name"]: c["status"] for c in doc["checks"]}
    assert names["self-test: broken copy caught"] == "pass"
    assert names["FlashAttention kernel"] == "skip"
    assert any(n.startswith("isolation gpt2/") for n in names)


def test_one_document_rows_use_synthetic_rows(tmp_path):
    docs = st.make_documents(3, seed=1, min_len=100, max_len=150)
    out = tmp_path / "single"
    st.write_pack(str(out), st.pack_documents(docs, L, max_docs=1), L)
    r = run(out, "--rows", "1", "--backend", "reference", "--json", "-")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    ev = next(c["evidence"] for c in doc["checks"] if c["name"] == "isolation llama/reference logits")
    assert ev["rows_from"].startswith("synthetic")


def test_real_pack_command_then_verify(tmp_path):
    """packtool pack (pre-tokenized input) && packtool verify: the CI gate end to end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 500, size=int(n)).tolist() for n in rng.integers(2, 60, size=60)]
    labels = [[-100] * (len(x) // 3) + x[len(x) // 3:] for x in ids]
    src = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), src)
    out = tmp_path / "out"
    r = runner.invoke(app, ["pack", str(src), "--len", "128", "--out", str(out), "--overflow", "split"])
    assert r.exit_code == 0, r.stderr
    r = run(out, "--rows", "2", "--backend", "reference")
    assert r.exit_code == 0, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.name for p in SHARED.glob("*.json*")) if SHARED.is_dir() else [])
def test_shared_data_packs_verify(name, tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["pack", str(SHARED / name), "--len", "4096", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    r = run(out)
    assert r.exit_code == 0, r.stderr
