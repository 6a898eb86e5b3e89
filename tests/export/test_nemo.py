"""packtool.export.nemo: packs written by the real writer, read back from the .npy and checked row by
row against the shards (tokens, per-token targets as NeMo's collate derives them, document
boundaries), totals against the manifest, the metadata, the padded / fixed-docs layouts on
hand-built shards, output safety and every error."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from packs import make_docs, real_pack
from paths import SHARED_DATA, needs_shared

from packtool import schema
from packtool.errors import PacktoolError, UsageError
from packtool.export import FORMATS, export_pack
from packtool.export.nemo import export_nemo, file_names
from packtool.export.publish import RECORD

IGNORE = schema.IGNORE_INDEX


# --------------------------------------------------------------------------------------------
# oracles: the pack's documents read with plain Python, and NeMo's collate rule written out


def pack_rows(pack: Path) -> list[dict]:
    """Every row of every shard (manifest order) as Python lists."""
    m = json.loads((pack / schema.MANIFEST).read_text())
    rows = []
    for s in m["shards"]:
        rows += pq.read_table(pack / s["file"]).to_pylist()
    return rows


def documents(row: dict) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) of each non-empty document of a row: real tokens only, pad slots left out."""
    real = row.get("seq_lengths_unpadded") or row["seq_lengths"]
    docs, at = [], 0
    for n, slots in zip(real, row["seq_lengths"], strict=True):
        if n:
            docs.append((row["input_ids"][at : at + n], row["labels"][at : at + n]))
        at += slots
    return docs


def nemo_collate(row: dict) -> dict:
    """What GPTSFTPackedDataset.collate_fn makes of one .npy row (Megatron-Bridge 067f987d,
    NeMo 8cfedd72): boundaries = seq_start_id + [len]; a document [s, e) gives tokens ids[s:e-1],
    labels ids[s+1:e], loss_mask[s:e-1], positions range(e-s-1)."""
    ids, mask = list(row["input_ids"]), list(row["loss_mask"])
    bounds = row["seq_start_id"] + [len(ids)]
    out = {"tokens": [], "labels": [], "loss_mask": [], "position_ids": [], "cu_seqlens": [0]}
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        out["tokens"] += ids[s : e - 1]
        out["labels"] += ids[s + 1 : e]
        out["loss_mask"] += [int(x) for x in mask[s : e - 1]]
        out["position_ids"] += list(range(e - s - 1))
        out["cu_seqlens"].append(out["cu_seqlens"][-1] + e - s - 1)
    return out


def packtool_targets(docs) -> dict:
    """The same from the pack's own unshifted labels: input j predicts token j+1 of its document,
    trained when labels[j+1] != -100."""
    out = {"tokens": [], "labels": [], "loss_mask": [], "position_ids": [], "cu_seqlens": [0]}
    for ids, labels in docs:
        n = len(ids)
        out["tokens"] += ids[:-1]
        out["labels"] += ids[1:]
        out["loss_mask"] += [int(x != IGNORE) for x in labels[1:]]
        out["position_ids"] += list(range(n - 1))
        out["cu_seqlens"].append(out["cu_seqlens"][-1] + n - 1)
    return out


class _Restricted(pickle.Unpickler):
    """Builtins and the numpy array machinery only: what Megatron-Bridge's safe_load_npy admits."""

    ALLOWED = {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED or (
            module == "builtins" and name in {"list", "dict", "int", "bool", "tuple"}
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not allowed")


def load_restricted(path: Path):
    with open(path, "rb") as f:
        major, _ = np.lib.format.read_magic(f)
        read_header = {
            1: np.lib.format.read_array_header_1_0,
            2: np.lib.format.read_array_header_2_0,
        }
        shape, _, dtype = read_header[major](f)
        assert dtype == np.dtype(object) and len(shape) == 1
        return _Restricted(f).load()


def check_export(pack: Path, out: Path) -> tuple[np.ndarray, dict, dict]:
    """Export `pack` into `out` (unless already there), then every .npy row against the pack and the
    totals against the manifest; returns (rows, metadata, record)."""
    if not out.exists():
        export_nemo(str(pack), str(out))
    m = json.loads((pack / schema.MANIFEST).read_text())
    names = file_names(m["pack_len"])
    assert sorted(p.name for p in out.iterdir()) == sorted([*names.values(), RECORD])
    arr = np.load(out / names["data"], allow_pickle=True)
    assert arr.dtype == object and arr.ndim == 1
    restricted = load_restricted(out / names["data"])
    assert len(restricted) == len(arr)
    expected = [d for d in (documents(r) for r in pack_rows(pack)) if d]
    assert len(arr) == len(expected)
    tokens = loss = 0
    for i, (row, docs) in enumerate(zip(arr, expected, strict=True)):
        assert set(row) == {"input_ids", "loss_mask", "seq_start_id"}
        assert type(row["seq_start_id"]) is list  # the reader appends to it: `+ [len(input_ids)]`
        assert all(type(x) is int for x in row["seq_start_id"])
        assert row["input_ids"].dtype == np.int32 and row["loss_mask"].dtype == bool
        assert len(row["loss_mask"]) == len(row["input_ids"])
        assert row["input_ids"].tolist() == [t for ids, _ in docs for t in ids], f"row {i}"
        starts = np.cumsum([0] + [len(ids) for ids, _ in docs])[:-1].tolist()
        assert row["seq_start_id"] == starts, f"row {i}"
        assert nemo_collate(row) == packtool_targets(docs), f"row {i}"
        ends = np.cumsum([len(ids) for ids, _ in docs]) - 1
        assert not row["loss_mask"][ends].any()  # a document's last token predicts nothing
        assert restricted[i]["input_ids"].tolist() == row["input_ids"].tolist()
        tokens += len(row["input_ids"])
        loss += int(row["loss_mask"].sum())
    assert tokens == m["tokens"]["out"] and loss == m["tokens"]["loss_out"]
    meta = json.loads((out / names["metadata"]).read_text())
    assert isinstance(meta, list) and len(meta) == 1
    meta = meta[0]
    lens = [[len(ids) - 1 for ids, _ in docs] for docs in expected]
    assert meta == {
        "dataset_max_seqlen": max(max(x) for x in lens),
        "max_samples_per_bin": max(len(x) for x in lens),
        "packing_factor": round(sum(map(len, lens)) / len(lens), 2),
        "packing_efficiency": round(sum(map(sum, lens)) / len(lens) / m["pack_len"] * 100, 2),
        "pack_size": m["pack_len"],
        "min_packed_seqlen": min(map(sum, lens)),
    }
    record = json.loads((out / RECORD).read_text())
    assert record["tokens"] == tokens and record["loss_tokens"] == loss
    assert record["rows"] == len(arr) and record["metadata"] == meta
    assert record["documents"] == sum(map(len, expected))
    return arr, meta, record


# --------------------------------------------------------------------------------------------
# round trips on packs written by the real writer


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"strategy": "ffd", "shuffle": False},
        {"max_docs": 2, "shard_rows": 3},
        {"order": "random", "seed": 3, "shard_rows": 1},
        {"overflow": "split"},
    ],
    ids=["bfd", "ffd-unshuffled", "max-docs-shards", "random-one-row-shards", "split"],
)
def test_round_trip_of_real_packs(tmp_path, options):
    docs = make_docs(60, seed=len(options), min_len=2, max_len=80, vocab=500)
    real_pack(tmp_path / "pack", docs, 64, **options)
    _, meta, record = check_export(tmp_path / "pack", tmp_path / "nemo")
    if "max_docs" in options:
        assert meta["max_samples_per_bin"] <= 2
    assert record["rows_without_documents"] == 0 and record["empty_documents_skipped"] == 0
    assert record["settings"]["packed_sequence_size"] == 64


def test_one_token_documents_keep_their_slot(tmp_path):
    """A 1-token document trains nothing but is still a document (a zero-length segment)."""
    ids = [np.array([5], np.int32), np.array([6, 7, 8], np.int32), np.array([9], np.int32)]
    docs = [(ids[0], np.array([IGNORE], np.int32)), (ids[1], np.array([IGNORE, 7, 8], np.int32))]
    docs.append((ids[2], np.array([IGNORE], np.int32)))
    real_pack(tmp_path / "pack", docs, 8, strategy="ffd", shuffle=False)
    arr, meta, _ = check_export(tmp_path / "pack", tmp_path / "nemo")
    assert len(arr) == 1 and sorted(np.diff(arr[0]["seq_start_id"] + [5]).tolist()) == [1, 1, 3]
    assert meta["min_packed_seqlen"] == 2 and meta["dataset_max_seqlen"] == 2


def test_built_in_tokenizer_pack_round_trip(tmp_path):
    from packtool import api

    api.write_sample(tmp_path / "s.jsonl", n=120, seed=1)
    data = api.load_tokenized(str(tmp_path / "s.jsonl"), api.TokenizeConfig(), progress=False)
    api.pack(data, api.PackConfig(pack_len=1024, overflow="split"), str(tmp_path / "pack"))
    check_export(tmp_path / "pack", tmp_path / "nemo")
    result = export_pack(str(tmp_path / "pack"), "nemo", str(tmp_path / "again"))
    eos = json.loads((tmp_path / "pack" / schema.MANIFEST).read_text())["tokenizer"]["eos_id"]
    # ChatML ends every turn with eos: NeMo 1.x's reader would cut these documents short
    assert [w.code for w in result.warnings] == ["nemo_repeated_eos"]
    assert f"id {eos}" in result.warnings[0].message


@needs_shared("data", "toy_chat_fine_tuning.jsonl")
def test_shared_data_round_trip(tmp_path):
    from packtool import api

    src = str(SHARED_DATA / "toy_chat_fine_tuning.jsonl")
    data = api.load_tokenized(src, api.TokenizeConfig(), progress=False)
    api.pack(data, api.PackConfig(pack_len=2048, overflow="truncate"), str(tmp_path / "pack"))
    check_export(tmp_path / "pack", tmp_path / "nemo")


def test_export_is_deterministic(tmp_path):
    real_pack(tmp_path / "pack", make_docs(40, seed=2), 32)
    export_nemo(str(tmp_path / "pack"), str(tmp_path / "a"))
    export_nemo(str(tmp_path / "pack"), str(tmp_path / "b"))
    for name in ("training_32.npy", "32_metadata.jsonl"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_progress_reaches_the_row_count(tmp_path):
    real_pack(tmp_path / "pack", make_docs(50, seed=4), 32, shard_rows=4)
    seen = []
    export_nemo(
        str(tmp_path / "pack"), str(tmp_path / "nemo"), progress=lambda d, t: seen.append((d, t))
    )
    rows = json.loads((tmp_path / "pack" / schema.MANIFEST).read_text())["counts"]["rows"]
    assert seen[-1] == (rows, rows) and [d for d, _ in seen] == sorted(d for d, _ in seen)


# --------------------------------------------------------------------------------------------
# layouts to come: documents padded to a multiple (seq_lengths_unpadded), fixed docs per row


def relayout(pack: Path, multiple: int, fixed: int, empty_row: bool = False) -> None:
    """Rewrite a real pack in place into the --pad-to-multiple / --fixed-docs layout (rows twice as
    long; each document padded with pad tokens of label -100 to a multiple of `multiple`; each
    row's lists padded to `fixed` entries with 0 / -1), manifest updated to match."""
    m = json.loads((pack / schema.MANIFEST).read_text())
    L, pad = 2 * m["pack_len"], m["pad_id"]
    rows = pack_rows(pack)
    if empty_row:
        rows.append({"seq_lengths": [], "source_index": [], "input_ids": [], "labels": []})
    out = []
    for r in rows:
        ids, lab, pos, doc = [], [], [], []
        real, slots = [], []
        at = 0
        for k, n in enumerate(r["seq_lengths"]):
            s = -(-n // multiple) * multiple
            ids += r["input_ids"][at : at + n] + [pad] * (s - n)
            lab += r["labels"][at : at + n] + [IGNORE] * (s - n)
            pos += list(range(s))
            doc += [k] * s
            real.append(n)
            slots.append(s)
            at += n
        tail = L - len(ids)
        assert tail >= 0
        k = max(fixed, len(real))
        src = r["source_index"] + [-1] * (k - len(real))
        real += [0] * (k - len(real))
        slots += [0] * (k - len(slots))
        out.append(
            {
                "input_ids": ids + [pad] * tail,
                "labels": lab + [IGNORE] * tail,
                "position_ids": pos + list(range(tail)),
                "document_id": doc + [schema.PAD_DOCUMENT_ID] * tail,
                "seq_lengths": slots,
                "source_index": src,
                "num_tokens": sum(real),
                "num_loss_tokens": sum(x != IGNORE for x in lab),
                **({"seq_lengths_unpadded": real} if multiple > 1 else {}),
            }
        )
    arrow = schema.arrow_schema(L, padded=multiple > 1)  # the column only when padded, as pack
    for s in m["shards"]:
        (pack / s["file"]).unlink()
    name = f"{schema.DATA_DIR}/{schema.shard_name(0, 1)}"
    pq.write_table(pa.Table.from_pylist(out, schema=arrow), pack / name, row_group_size=3)
    digest = hashlib.sha256((pack / name).read_bytes()).hexdigest()
    m["shards"] = [{"file": name, "rows": len(out), "sha256": digest}]
    m["pack_len"], m["pad_to_multiple"], m["fixed_docs"] = L, multiple, bool(fixed)
    m["counts"]["rows"] = len(out)
    m["tokens"]["pad"] = len(out) * L - m["tokens"]["out"]
    if multiple > 1:
        m["tokens"]["doc_pad"] = sum(sum(r["seq_lengths"]) - r["num_tokens"] for r in out)
    (pack / schema.MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize(
    "multiple, fixed", [(4, 0), (1, 6), (8, 6)], ids=["pad4", "fixed6", "both"]
)
def test_padded_and_fixed_docs_layouts_export_real_tokens_only(tmp_path, multiple, fixed):
    docs = make_docs(40, seed=5, min_len=2, max_len=30, vocab=300)
    real_pack(tmp_path / "pack", docs, 64, max_docs=6)
    before = [documents(r) for r in pack_rows(tmp_path / "pack")]
    relayout(tmp_path / "pack", multiple, fixed)
    after = [documents(r) for r in pack_rows(tmp_path / "pack")]
    assert after == before  # the hand-built layout holds the same documents
    arr, _, record = check_export(tmp_path / "pack", tmp_path / "nemo")
    assert len(arr) == len(before) and record["rows_without_documents"] == 0
    rows = pack_rows(tmp_path / "pack")
    assert record["pad_slots_dropped"] == sum(
        sum(r["seq_lengths"]) - sum(r.get("seq_lengths_unpadded") or r["seq_lengths"]) for r in rows
    )
    assert record["padded_documents"] is (multiple > 1)
    assert ("real tokens only" in record["padding"]) is (multiple > 1)
    assert record["empty_documents_skipped"] == sum(r["seq_lengths"].count(0) for r in rows)


def test_pad_slots_that_hold_tokens_are_refused(tmp_path):
    real_pack(tmp_path / "pack", make_docs(20, seed=6, min_len=3), 32)
    relayout(tmp_path / "pack", 4, 0)
    shard = next((tmp_path / "pack" / "data").iterdir())
    t = pq.read_table(shard)
    unp = t.column("seq_lengths_unpadded").to_pylist()
    r = next(i for i, u in enumerate(unp) if u[0] % 4)  # a row whose first document is padded
    ids = t.column("input_ids").to_pylist()
    ids[r][unp[r][0]] = 4242  # the first pad slot
    t = t.set_column(0, "input_ids", pa.array(ids, t.schema.field("input_ids").type))
    pq.write_table(t, shard)
    _resign(tmp_path / "pack")
    with pytest.raises(
        PacktoolError,
        match=rf"row {r} position {unp[r][0]} \(padding of document 0\): input_id 4242 != pad id",
    ):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "nemo"))
    assert not (tmp_path / "nemo").exists()


def test_a_row_without_documents_is_refused(tmp_path):
    """verify refuses a row that holds no document (the writer never makes one): so does export."""
    real_pack(tmp_path / "pack", make_docs(20, seed=6, min_len=3), 32, max_docs=6)
    relayout(tmp_path / "pack", 4, 6, empty_row=True)
    rows = len(pack_rows(tmp_path / "pack"))
    with pytest.raises(
        PacktoolError, match=rf"row {rows - 1}: seq_lengths declare 0 tokens in 0 documents"
    ):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "nemo"))
    assert not (tmp_path / "nemo").exists()


# --------------------------------------------------------------------------------------------
# output safety


def test_out_is_never_overwritten_without_force(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10), 32)
    (tmp_path / "nemo").mkdir()
    (tmp_path / "nemo" / "mine.txt").write_text("keep")
    with pytest.raises(UsageError, match="already exists; use --force"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "nemo"))
    with pytest.raises(UsageError, match="holds no export.json"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "nemo"), force=True)
    assert (tmp_path / "nemo" / "mine.txt").read_text() == "keep"


def test_force_replaces_an_earlier_export_only(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10), 32)
    real_pack(tmp_path / "pack2", make_docs(30, seed=9), 64)
    out = tmp_path / "nemo"
    export_nemo(str(tmp_path / "pack"), str(out))
    export_nemo(str(tmp_path / "pack2"), str(out), force=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "64_metadata.jsonl",
        RECORD,
        "training_64.npy",
    ]
    assert not [p for p in tmp_path.iterdir() if "packtool-" in p.name]  # no temporary folder left
    (out / "extra.bin").write_bytes(b"x")
    with pytest.raises(UsageError, match="holds extra.bin, which packtool export did not write"):
        export_nemo(str(tmp_path / "pack"), str(out), force=True)
    with pytest.raises(UsageError, match="not a packtool export"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "pack2"), force=True)  # a pack


def test_empty_out_folder_is_used_with_force(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10), 32)
    (tmp_path / "nemo").mkdir()
    export_nemo(str(tmp_path / "pack"), str(tmp_path / "nemo"), force=True)
    check_export(tmp_path / "pack", tmp_path / "nemo")


# --------------------------------------------------------------------------------------------
# bad input: one line naming the file and the fix, nothing written


def _manifest(pack: Path) -> dict:
    return json.loads((pack / schema.MANIFEST).read_text())


def _write_manifest(pack: Path, m: dict) -> None:
    (pack / schema.MANIFEST).write_text(json.dumps(m))


def test_not_a_pack(tmp_path):
    (tmp_path / "data.jsonl").write_text("{}\n")
    with pytest.raises(
        PacktoolError, match=r"data.jsonl is a file, not a pack folder; pack it first"
    ):
        export_nemo(str(tmp_path / "data.jsonl"), str(tmp_path / "o"))
    with pytest.raises(PacktoolError, match="no such folder"):
        export_nemo(str(tmp_path / "nope"), str(tmp_path / "o"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"name": "someone else"}')
    with pytest.raises(PacktoolError, match="is not a packtool pack: no manifest.json"):
        export_nemo(str(tmp_path / "other"), str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()


def test_a_manifest_without_a_key(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10), 32)
    m = _manifest(tmp_path / "pack")
    del m["tokens"]
    _write_manifest(tmp_path / "pack", m)
    with pytest.raises(PacktoolError, match="tokens is not recorded; write the pack again"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def test_a_missing_shard(tmp_path):
    real_pack(tmp_path / "pack", make_docs(30), 32, shard_rows=2)
    shard = _manifest(tmp_path / "pack")["shards"][1]["file"]
    (tmp_path / "pack" / shard).unlink()
    with pytest.raises(PacktoolError, match=f"{shard}: listed in manifest.json but missing"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def test_a_changed_shard_fails_its_checksum_and_writes_nothing(tmp_path):
    real_pack(tmp_path / "pack", make_docs(30), 32, shard_rows=4)
    m = _manifest(tmp_path / "pack")
    m["shards"][2]["sha256"] = "0" * 64
    _write_manifest(tmp_path / "pack", m)
    with pytest.raises(PacktoolError, match=rf"{m['shards'][2]['file']}: sha256 .* differs"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))
    assert not (tmp_path / "o").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["pack"]  # no temporary folder either


@pytest.mark.parametrize(
    "keys, what", [(("in", "out"), "tokens"), (("loss_in", "loss_out"), "loss tokens")]
)
def test_totals_that_disagree_with_the_manifest(tmp_path, keys, what):
    """The manifest's own arithmetic holds (in and out moved together), the rows disagree with it."""
    real_pack(tmp_path / "pack", make_docs(30), 32)
    m = _manifest(tmp_path / "pack")
    for key in keys:
        m["tokens"][key] += 1
    _write_manifest(tmp_path / "pack", m)
    with pytest.raises(PacktoolError, match=rf"the shards hold [\d,]+ {what}, manifest.json says"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


@pytest.mark.parametrize("key", ["out", "loss_out"])
def test_a_manifest_that_disagrees_with_itself(tmp_path, key):
    real_pack(tmp_path / "pack", make_docs(30), 32)
    m = _manifest(tmp_path / "pack")
    m["tokens"][key] += 1
    _write_manifest(tmp_path / "pack", m)
    with pytest.raises(PacktoolError, match=r"manifest.json: (loss )?tokens in \d+ != out"):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def _resign(pack: Path) -> None:
    """Every shard's sha256 in the manifest set to the shard as it is now."""
    m = _manifest(pack)
    for s in m["shards"]:
        s["sha256"] = hashlib.sha256((pack / s["file"]).read_bytes()).hexdigest()
    _write_manifest(pack, m)


def _rewrite_column(pack: Path, column: str, edit) -> None:
    m = _manifest(pack)
    shard = pack / m["shards"][0]["file"]
    t = pq.read_table(shard)
    values = t.column(column).to_pylist()
    edit(values)
    i = t.schema.get_field_index(column)
    t = t.set_column(i, column, pa.array(values, t.schema.field(i).type))
    pq.write_table(t, shard)
    m["shards"][0]["sha256"] = hashlib.sha256(shard.read_bytes()).hexdigest()
    _write_manifest(pack, m)


def test_labels_that_are_not_their_token_are_refused(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10, seed=1), 32, shuffle=False)
    rows = pack_rows(tmp_path / "pack")
    j = next(j for j, x in enumerate(rows[0]["labels"]) if x != IGNORE)

    def edit(labels):
        labels[0][j] = labels[0][j] + 1

    _rewrite_column(tmp_path / "pack", "labels", edit)
    with pytest.raises(
        PacktoolError, match=r"row 0 position \d+ \(document 0\): label \d+ != input_id"
    ):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def test_a_trained_first_token_is_refused(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10, seed=1), 32, shuffle=False)

    def edit(labels, ids=pack_rows(tmp_path / "pack")[0]["input_ids"]):
        labels[0][0] = ids[0]

    _rewrite_column(tmp_path / "pack", "labels", edit)
    with pytest.raises(
        PacktoolError,
        match=r"row 0 position 0 \(first token of document 0\): label \d+, must be -100",
    ):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def test_seq_lengths_past_the_row_are_refused(tmp_path):
    real_pack(tmp_path / "pack", make_docs(10, seed=1), 32, shuffle=False)

    def edit(seq):
        seq[0][0] += 40

    _rewrite_column(tmp_path / "pack", "seq_lengths", edit)
    with pytest.raises(
        PacktoolError,
        match=r"row 0: seq_lengths declare \d+ tokens in 2 documents .* <= pack_len 32",
    ):
        export_nemo(str(tmp_path / "pack"), str(tmp_path / "o"))


def test_unknown_format(tmp_path):
    assert FORMATS == ("nemo",)
    with pytest.raises(
        UsageError, match="--to 'torchtune' is not a format packtool exports; choose nemo"
    ):
        export_pack(str(tmp_path), "torchtune", str(tmp_path / "o"))
