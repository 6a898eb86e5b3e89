"""`packtool verify` through the CLI: exit codes (0 pass, 1 a check failed, 2 usage), messages,
--json, --self-test, and packs of the shared data files (slow)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT, SHARED_DATA
from typer.testing import CliRunner

from packtool.cli import app
from packtool.verify import selftest as st

SHARED = SHARED_DATA
runner = CliRunner()
L = 160


def run(*args):
    return runner.invoke(app, ["verify", *map(str, args)])


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    out = tmp_path_factory.mktemp("v") / "good"
    st.write_documents(
        str(out), st.make_documents(50, seed=3, min_len=4, max_len=70), L, shard_rows=10
    )
    return out


@pytest.fixture
def broken(good, tmp_path):
    dst = tmp_path / "broken"
    st._break_positions(str(good), str(dst))
    return dst


def test_import_cli_does_not_import_torch_or_transformers():
    code = (
        "import sys, packtool.cli; heavy = [m for m in ('torch', 'transformers') if m in sys.modules]; "
        "sys.exit(1 if heavy else 0)"
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
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
    assert len(iso) == 5 and all(c["status"] == "pass" for c in iso)
    ev = iso[0]["evidence"]
    assert ev["rows_tested"] == 1 and ev["dtype"] == "float32" and "cu_seqlens" in ev["kernel"]
    assert doc["kernels"] and doc["kernels"][0].startswith("reference:")
    assert doc["kernels"][0].endswith("; models llama, gpt2")


def test_broken_pack_exits_1_naming_the_row(broken):
    r = run(broken, "--rows", "0")
    assert r.exit_code == 1
    assert "verify failed" in r.stderr
    assert re.search(
        r"^FAIL position_ids: data/train-00000-of-\d+\.parquet row 0 position \d+ \(document 1\): "
        r"position_id \d+, expected 0",
        r.stderr,
        re.M,
    ), r.stderr


def test_broken_positions_fail_isolation_too(broken):
    """Positions counting on in row 0: sdpa sees one sequence (documents leak) and GPT-2's
    absolute positions move; the isolation layer fails as well as integrity."""
    r = run(broken, "--rows", "40", "--backend", "sdpa", "--json", "-")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    failed = set(doc["failed"])
    assert "position_ids" in failed
    assert "isolation gpt2/sdpa logits" in failed and "isolation llama/sdpa logits" in failed


def _exited(r) -> bool:
    """The command ended through its exit code, not an exception escaping (CliRunner would also
    report exit code 1 for a traceback)."""
    return r.exception is None or isinstance(r.exception, SystemExit)


@pytest.mark.parametrize("damage", ["garbage shard", "pack_len string"])
def test_damaged_pack_is_a_failed_check_not_a_traceback(good, tmp_path, damage):
    pack = tmp_path / "p"
    shutil.copytree(good, pack)
    if damage == "garbage shard":
        shard = sorted((pack / "data").iterdir())[0]
        shard.write_bytes(np.random.default_rng(0).bytes(5000))
        line = rf"^FAIL schema: data/{shard.name}: not a readable Parquet file \(ArrowInvalid: .*$"
    else:
        m = json.loads((pack / "manifest.json").read_text())
        m["pack_len"] = str(m["pack_len"])
        (pack / "manifest.json").write_text(json.dumps(m))
        line = rf"^FAIL manifest: pack_len '{L}' is not a positive integer$"
    r = run(pack, "--rows", "0")
    assert r.exit_code == 1 and _exited(r), r.exception
    assert re.search(line, r.stderr, re.M), r.stderr
    assert "Traceback" not in r.output


NO_TORCH = "import sys; sys.modules['torch'] = None; from packtool.cli import main; main()"


def _without_torch(*args):
    """`packtool ...` in a fresh interpreter where `import torch` fails as if not installed."""
    root = ROOT
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH, *map(str, args)],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(root)},
    )


def test_without_torch_isolation_is_a_usage_error_and_rows_0_works(good):
    r = _without_torch("verify", good)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [
        "error: isolation needs PyTorch: pip install 'packtool[torch]', or run "
        "integrity only with --rows 0"
    ]
    r = _without_torch("verify", good, "--rows", "0")
    assert r.returncode == 0, r.stderr
    assert "verify passed" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture
def one_token_pack(tmp_path):
    """One document of one token: no row holds two documents and none can be built from it."""
    out = tmp_path / "tiny"
    st.write_documents(str(out), [(np.array([7], np.int32), np.array([-100], np.int32))], L)
    return out


def test_isolation_not_run_claims_no_kernel(one_token_pack, tmp_path):
    report = tmp_path / "verify.json"
    r = run(one_token_pack, "--backend", "reference", "--json", report)
    assert r.exit_code == 1 and _exited(r)
    doc = json.loads(report.read_text())
    by_name = {c["name"]: c for c in doc["checks"]}
    assert doc["failed"] == ["isolation"]
    assert by_name["isolation"]["message"].startswith("not run: every valid row holds one document")
    assert doc["kernels"] == []
    assert not re.search(r"^kernel  reference", r.stderr, re.M), r.stderr
    assert by_name["FlashAttention kernel"]["status"] == "skip"


def test_flash_kernel_not_claimed_when_isolation_did_not_run(one_token_pack, monkeypatch):
    """As on a CUDA machine where the varlen kernel resolves: nothing ran, so nothing is claimed."""
    from packtool.verify import backends as bk
    from packtool.verify.run import VerifyConfig, verify

    gpu = [
        bk.Backend("torch-varlen", bk.TORCH_VARLEN, "varlen_attn", "cuda", "bfloat16", True, False),
        bk.make("reference", "cuda"),
    ]
    monkeypatch.setattr(bk, "resolve", lambda backend, device: gpu)
    res = verify(VerifyConfig(path=str(one_token_pack)))
    flash = next(c for c in res.checks if c.name == "FlashAttention kernel")
    assert res.kernels == []
    assert flash.skipped and not flash.passed
    assert flash.message.startswith(
        "FlashAttention kernel not exercised (isolation did not run it)"
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((), "give the pack folder"),
        (("--backend", "magic"), "--backend 'magic' is not one of"),
        (("--device", "tpu"), "--device 'tpu' is not one of"),
        (("--rows", "-1"), "--rows -1 must be >= 0"),
        (
            ("--backend", "flash-attn", "--device", "cpu"),
            "--backend flash-attn needs a CUDA device",
        ),
        (
            ("--backend", "torch-varlen", "--device", "cpu"),
            "--backend torch-varlen needs a CUDA device",
        ),
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


def test_not_a_folder_is_a_usage_error(tmp_path):
    r = run(tmp_path / "nope")  # a wrong target is bad usage (2), not a failed check (1)
    assert r.exit_code == 2 and "no such folder" in r.stderr


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
    st.write_documents(str(out), docs, L, max_docs=1)
    r = run(out, "--rows", "1", "--backend", "reference", "--json", "-")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    ev = next(
        c["evidence"] for c in doc["checks"] if c["name"] == "isolation llama/reference logits"
    )
    assert ev["rows_from"].startswith("synthetic")


def test_real_pack_command_then_verify(tmp_path):
    """packtool pack (pre-tokenized input) && packtool verify: the CI gate end to end."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 500, size=int(n)).tolist() for n in rng.integers(2, 60, size=60)]
    labels = [[-100] * (len(x) // 3) + x[len(x) // 3 :] for x in ids]
    src = tmp_path / "pretok.parquet"
    pq.write_table(pa.table({"input_ids": ids, "labels": labels}), src)
    out = tmp_path / "out"
    r = runner.invoke(
        app, ["pack", str(src), "--len", "128", "--out", str(out), "--overflow", "split"]
    )
    assert r.exit_code == 0, r.stderr
    r = run(out, "--rows", "2", "--backend", "reference")
    assert r.exit_code == 0, r.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", sorted(p.name for p in SHARED.glob("*.json*")) if SHARED.is_dir() else []
)
def test_shared_data_packs_verify(name, tmp_path):
    out = tmp_path / "out"
    r = runner.invoke(app, ["pack", str(SHARED / name), "--len", "4096", "--out", str(out)])
    assert r.exit_code == 0, r.stderr
    r = run(out)
    assert r.exit_code == 0, r.stderr


def test_output_short_on_pass_full_with_v_last_line_with_q(good):
    short = run(good, "--rows", "0")
    assert short.exit_code == 0
    lines = short.stderr.strip().splitlines()
    assert lines[0].startswith("checks passed: integrity ") and lines[-1].startswith(
        "verify passed"
    )
    assert len(lines) <= 8 and "PASS" not in short.stderr
    full = run(good, "--rows", "0", "-v")
    assert full.exit_code == 0 and full.stderr.count("PASS") >= 10
    quiet = run(good, "--rows", "0", "-q")
    assert quiet.exit_code == 0 and quiet.stderr.strip().splitlines() == [lines[-1]]


def test_a_failure_shows_the_table_and_q_keeps_each_failure(good, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(good, bad)  # `good` is shared by the module's tests
    m = json.loads((bad / "manifest.json").read_text())
    m["pack_len"] = "x"
    (bad / "manifest.json").write_text(json.dumps(m))
    good = bad
    r = run(good, "--rows", "0")
    assert r.exit_code == 1 and "PASS" in r.stderr and "FAIL manifest" in r.stderr
    q = run(good, "--rows", "0", "-q")
    assert (
        q.exit_code == 1
        and "FAIL manifest" in q.stderr
        and q.stderr.strip().splitlines()[-1].startswith("verify failed")
    )
