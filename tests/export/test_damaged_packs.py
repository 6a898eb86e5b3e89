"""export refuses a pack whose rows or manifest disagree with themselves, even when every shard's
sha256 in manifest.json was re-signed to match the damage: the checks verify's integrity layer
makes on the segment structure (seq_lengths, document_id, position_ids), the per-row counts, the
labels and the manifest's totals. One line naming the shard, the row and what is wrong, the fix,
exit 1, nothing written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from packs import make_docs, real_pack
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.verify import selftest as st
from packtool.verify.integrity import check_integrity

IGNORE = schema.IGNORE_INDEX


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    pack = tmp_path_factory.mktemp("clean") / "pack"
    real_pack(pack, make_docs(60, seed=3), 32, shuffle=False, shard_rows=4)
    return pack


def _first_multi_doc(table) -> int:
    return next(i for i, s in enumerate(table.column("seq_lengths").to_pylist()) if len(s) >= 2)


def seq_off_by_one(table, m):
    r = _first_multi_doc(table)
    seq = table.column("seq_lengths").to_pylist()
    seq[r][0] += 1
    seq[r][1] -= 1
    return r, "document_id", st.replace_columns(table, seq_lengths=seq)


def document_id_changed(table, m):
    r = _first_multi_doc(table)
    doc = st.token_column(table, "document_id")
    doc[r, 1] = 1
    return r, "document_id", st.replace_columns(table, document_id=doc)


def positions_not_restarting(table, m):
    r = _first_multi_doc(table)
    a, b = table.column("seq_lengths").to_pylist()[r][:2]
    pos = st.token_column(table, "position_ids")
    pos[r, a : a + b] = np.arange(a, a + b)
    return r, "position_id", st.replace_columns(table, position_ids=pos)


def num_loss_tokens_wrong(table, m):
    n = table.column("num_loss_tokens").to_numpy().copy()
    n[1] += 1
    return 1, "num_loss_tokens", st.replace_columns(table, num_loss_tokens=n)


def label_flip_consistent(table, m):
    """A prompt token turned into a trained label, with the row's num_loss_tokens and the manifest's
    tokens.loss_out moved to match: only conservation (loss_in) still tells."""
    ids, lab = st.token_column(table, "input_ids"), st.token_column(table, "labels")
    pos = st.token_column(table, "position_ids")
    doc = st.token_column(table, "document_id")
    r, j = map(int, np.argwhere((lab == IGNORE) & (pos > 0) & (doc >= 0))[0])
    lab[r, j] = ids[r, j]
    n = table.column("num_loss_tokens").to_numpy().copy()
    n[r] += 1
    m["tokens"]["loss_out"] += 1
    return None, "loss tokens in", st.replace_columns(table, labels=lab, num_loss_tokens=n)


def id_outside_vocab(table, m):
    """An id past the recorded vocabulary (make_docs' ids are below 64)."""
    m["tokenizer"]["vocab_size"] = 64
    ids = st.token_column(table, "input_ids")
    ids[1, 2] = 64
    return (
        1,
        "input_id 64 is outside the tokenizer's vocabulary (0..63)",
        st.replace_columns(table, input_ids=ids),
    )


def id_negative(table, m):
    ids = st.token_column(table, "input_ids")
    ids[2, -1] = -5  # the pad tail's last slot (or a document's last token)
    return 2, "input_id -5 is negative", st.replace_columns(table, input_ids=ids)


DAMAGES = [
    seq_off_by_one,
    document_id_changed,
    positions_not_restarting,
    num_loss_tokens_wrong,
    label_flip_consistent,
    id_outside_vocab,
    id_negative,
]


def _damaged_copy(clean: Path, tmp_path: Path, damage) -> tuple[Path, str, int | None, str]:
    """A copy of `clean` with its second shard damaged and every sha256 re-signed."""
    pack = tmp_path / "pack"
    (pack / schema.DATA_DIR).mkdir(parents=True)
    m = json.loads((clean / schema.MANIFEST).read_text())
    for s in m["shards"]:
        (pack / s["file"]).write_bytes((clean / s["file"]).read_bytes())
    shard = m["shards"][1]["file"]
    row, what, table = damage(pq.read_table(pack / shard), m)
    pq.write_table(table, pack / shard)
    m["shards"][1]["sha256"] = hashlib.sha256((pack / shard).read_bytes()).hexdigest()
    (pack / schema.MANIFEST).write_text(json.dumps(m, indent=1))
    return pack, shard, row, what


def test_the_clean_pack_exports(clean, tmp_path):
    res = CliRunner().invoke(
        app, ["export", str(clean), "--to", "nemo", "--out", str(tmp_path / "o")]
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "training_32.npy").is_file()


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__)
def test_a_damaged_pack_with_resigned_checksums_is_refused(clean, tmp_path, damage):
    pack, shard, row, what = _damaged_copy(clean, tmp_path, damage)
    checks, _ = check_integrity(str(pack))
    assert not all(c.passed or c.skipped for c in checks)  # verify rejects it too
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["export", str(pack), "--to", "nemo", "--out", str(out)])
    assert res.exit_code == 1, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    where = f"{shard} row {row}" if row is not None else schema.MANIFEST
    assert where in lines[0] and what in lines[0], lines[0]
    assert f"packtool verify {pack}" in lines[0]
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pack"]  # no temporary folder either
