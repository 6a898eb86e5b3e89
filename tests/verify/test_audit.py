"""The pack's files against the contract: the manifest, the shard list, sha256 and rows, each
shard's Arrow schema. A damaged file or manifest is a failed check naming it, never a crash."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from sources_pack import edit_manifest

from packtool import schema
from packtool.verify import audit, scan
from packtool.verify import selftest as st

L = 128


def test_rows_missing_versus_manifest(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    n = table.num_rows
    st.write_shard(str(pack), rel, table.slice(0, n - 3), fix_manifest=False)
    failed = failed_of(pack)
    assert (
        f"{rel} has {n - 3} rows, the manifest says {n}: rows {n - 3}..{n - 1} are missing"
        in failed[scan.SHARDS].message
    )
    assert "counts.rows" in failed[scan.COUNTS].message


def test_shard_bytes_altered(pack, failed_of):
    rel, _ = st.read_shard(str(pack), 1)
    path = os.path.join(pack, rel)
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0xFF
    open(path, "wb").write(bytes(data))
    failed = failed_of(pack)
    assert f"{rel} sha256 is" in failed[scan.SHARDS].message
    assert "changed after packing" in failed[scan.SHARDS].message


def test_attention_mask_column_added(pack, failed_of):
    import pyarrow as pa

    rel, table = st.read_shard(str(pack), 0)
    ones = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(table.num_rows * L, np.int32)), L)
    st.write_shard(str(pack), rel, table.append_column("attention_mask", ones))
    failed = failed_of(pack)
    assert set(failed) == {scan.NO_MASK}
    assert (
        f"{rel} has an attention_mask column (rows 0..{table.num_rows - 1})"
        in failed[scan.NO_MASK].message
    )


def test_missing_and_extra_shards(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    os.remove(os.path.join(pack, rel))
    extra = f"{schema.DATA_DIR}/train-00099-of-00099.parquet"
    st.write_shard(str(pack), extra, table, fix_manifest=False)
    msg = failed_of(pack)[scan.SHARDS].message
    assert f"{rel} is listed in the manifest ({table.num_rows} rows) but missing on disk" in msg
    assert (
        f"{extra} is on disk but not in the manifest (rows 0..{table.num_rows - 1} unaccounted)"
        in msg
    )


def test_missing_manifest(pack, failed_of):
    os.remove(os.path.join(pack, schema.MANIFEST))
    failed = failed_of(pack)
    assert "manifest.json is missing" in failed["manifest"].message


def test_wrong_pack_len_in_manifest(pack, failed_of):
    edit_manifest(pack, lambda m: m.update({"pack_len": L * 2}))
    assert "fixed_size_list" in failed_of(pack)[scan.SCHEMA].message


def test_schema_problems_are_the_contracts_without_the_forbidden_column(pack):
    """shard_schema reports schema.shard_schema_problems, less the attention_mask column (its own
    check), and says whether the rows can be scanned."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rel, table = st.read_shard(str(pack), 0)
    ones = pa.FixedSizeListArray.from_arrays(pa.array(np.ones(table.num_rows * L, np.int32)), L)
    bad = table.append_column("attention_mask", ones).append_column(
        "weights", pa.array(np.ones(table.num_rows))
    )
    st.write_shard(str(pack), rel, bad)
    problem, mask, scannable = audit.shard_schema(pq.ParquetFile(os.path.join(pack, rel)), rel, L)
    assert problem == "unexpected columns ['weights']" and mask.startswith(
        f"{rel} has an attention_mask column"
    )
    assert scannable
    problem, mask, scannable = audit.shard_schema(
        pq.ParquetFile(os.path.join(pack, rel)), rel, 2 * L
    )
    assert "column input_ids is fixed_size_list" in problem and not scannable


@pytest.mark.parametrize("value", ["128", 128.0, True, 0])
def test_manifest_pack_len_must_be_a_positive_int(pack, value, checks_of):
    """A string (or float, bool) pack_len fails the manifest check; it never reaches the schema
    builder (TypeError before), and the rows are still scanned with the shards' own pack_len."""
    edit_manifest(pack, lambda m: m.update({"pack_len": value}))
    by_name, summary = checks_of(pack)
    assert not by_name["manifest"].passed
    assert f"pack_len {value!r} is not a positive integer" in by_name["manifest"].message
    assert summary["pack_len"] == L and by_name[scan.POS].passed


def _garble(pack, index: int) -> str:
    """Replace the index-th shard by random bytes (not Parquet at all); returns its relative path."""
    rel, _ = st.read_shard(str(pack), index)
    with open(os.path.join(pack, rel), "wb") as f:
        f.write(np.random.default_rng(index).bytes(5000))
    return rel


def test_garbage_shard_is_a_failed_check_not_a_crash(pack, failed_of):
    rel = _garble(pack, 1)
    failed = failed_of(pack)
    assert re.search(
        rf"{rel}: not a readable Parquet file \(ArrowInvalid: ", failed[scan.SCHEMA].message
    )
    assert f"{rel} could not be read: the manifest's" in failed[scan.SHARDS].message
    assert f"{rel} sha256 is" in failed[scan.SHARDS].message


def test_garbage_first_shard_and_no_pack_len_in_manifest(pack, checks_of):
    """pack_len then comes from the first shard that opens (ArrowInvalid escaped before)."""
    rel = _garble(pack, 0)
    edit_manifest(pack, lambda m: m.pop("pack_len"))
    by_name, summary = checks_of(pack)
    assert "pack_len None is not a positive integer" in by_name["manifest"].message
    assert f"{rel}: not a readable Parquet file" in by_name[scan.SCHEMA].message
    assert summary["pack_len"] == L and summary["rows"] > 0  # the readable shard was scanned


@pytest.mark.parametrize(
    ("edit", "check", "match"),
    [
        (lambda m: m.update(pad_id="0"), "manifest", r"pad_id '0' is not an integer"),
        (lambda m: m.update(counts=[1]), scan.CONSERVE, r"counts\.examples_read, .* not recorded"),
        (lambda m: m["tokens"].update({"in": "5"}), scan.CONSERVE, r"wrong type \(TypeError: "),
        (
            lambda m: m.update(split=[{"source_index": "a", "parts": 2}]),
            scan.SRC,
            r"wrong type \(ValueError: ",
        ),
        (
            lambda m: m["shards"][0].update(rows="12"),
            scan.SHARDS,
            r"has 12 rows, the manifest says '12'",
        ),
    ],
    ids=["pad_id", "counts", "tokens.in", "split", "shard rows"],
)
def test_manifest_value_of_wrong_type_fails_its_check(pack, edit, check, match, failed_of):
    edit_manifest(pack, edit)
    failed = failed_of(pack)
    assert check in failed, sorted(failed)
    assert re.search(match, failed[check].message), failed[check].message
    assert scan.PAD not in failed  # a string pad id is not compared with the int token ids


def test_an_api_caller_can_give_the_pack_folder_with_a_tilde(pack, monkeypatch):
    """verify(VerifyConfig(path="~/...")) reads the pack under the home folder (a shell expands a
    typed ~; a Python caller's string is expanded here), and names what the caller gave."""
    from packtool.config import VerifyConfig
    from packtool.errors import UsageError
    from packtool.verify.run import verify

    monkeypatch.setenv("HOME", str(pack.parent))
    with pytest.raises(UsageError, match=r"^~/nope: no such folder"):
        verify(VerifyConfig(path="~/nope", rows=0))
    result = verify(VerifyConfig(path=f"~/{pack.name}", rows=0))
    assert result.checks and all(c.passed or c.skipped for c in result.checks)
    assert result.checks[0].evidence["path"].startswith(str(pack))
