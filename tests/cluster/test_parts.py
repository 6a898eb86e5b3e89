"""The Ray engine's part files (packtool.cluster.parts), without Ray: what a tokenizing task writes
is what a shard writer's FileGather reads back, piece by piece, and the cut tails' loss."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from packtool.cluster import parts
from packtool.data.tokenized import token_schema
from packtool.errors import PacktoolError
from packtool.pack.gather import int32_at
from packtool.schema import IGNORE_INDEX


def _batch(ids: list[list[int]], labels: list[list[int]], lengths=None):
    n = [len(x) for x in ids] if lengths is None else lengths
    return pa.RecordBatch.from_arrays(
        [
            pa.array(ids, pa.list_(pa.int32())),
            pa.array(labels, pa.list_(pa.int32())),
            pa.array(n, pa.int32()),
            pa.array([0] * len(ids), pa.int32()),
            pa.array(range(len(ids)), pa.int64()),
        ],
        schema=token_schema(),
    )


def test_pieces_read_back_from_two_parts(tmp_path):
    rng = np.random.default_rng(0)
    docs = {}  # (part, example) -> (ids, labels)
    for k in (0, 1):
        with parts.PartWriter(tmp_path, k) as w:
            count = 0
            for b in range(3):  # three batches, the second sliced (its offsets start above 0)
                ids = [rng.integers(0, 1000, int(n)).tolist() for n in rng.integers(1, 40, 5)]
                labs = [[IGNORE_INDEX if v % 3 else v for v in x] for x in ids]
                skip = 1 if b == 1 else 0
                w.add(_batch(ids, labs).slice(skip))
                for x, y in list(zip(ids, labs, strict=True))[skip:]:
                    docs[(k, count)] = (x, y)
                    count += 1
    keys = list(docs)
    lengths = {k: np.array([len(docs[key][0]) for key in keys if key[0] == k]) for k in (0, 1)}
    first = {k: parts.offsets(lengths[k]) for k in (0, 1)}
    # pieces: (part, example, start, length), from part 1 only (the writer opens the parts it reads)
    want = [(1, 3, 2, 5), (1, 0, 0, len(docs[(1, 0)][0])), (1, 7, 1, 1)]
    want = [(k, e, s, min(n, len(docs[(k, e)][0]) - s)) for k, e, s, n in want]
    used = np.array([1])
    names = parts.open_parts(str(tmp_path), used)
    chunk = np.zeros(len(want), np.int64)
    base = np.array([first[k][e] + s for k, e, s, _ in want], np.int64)
    piece_len = np.array([n for *_, n in want], np.int64)
    _, gather = parts.part_gather(names, chunk, base, np.arange(len(want)), 0, int(piece_len.sum()))
    try:
        _, n, ids_at, lab_at = gather.stage(np.arange(len(want)), piece_len)
        for q, (k, e, s, m) in enumerate(want):
            got_ids = int32_at(ids_at[q], n[q]).tolist()
            got_lab = int32_at(lab_at[q], n[q]).tolist()
            assert got_ids == docs[(k, e)][0][s : s + m]
            assert got_lab == docs[(k, e)][1][s : s + m]
    finally:
        gather.close()
    # the loss in a truncated example's tail: labels [L, length) that are not IGNORE_INDEX
    e = int(np.argmax(lengths[1]))
    L = 1
    tail = docs[(1, e)][1][L:]
    got = parts.cut_tail_loss(names[1:], np.zeros(1, np.int64), first[1][[e]], lengths[1][[e]], L)
    assert got == sum(v != IGNORE_INDEX for v in tail)


def test_a_batch_whose_lists_disagree_with_its_lengths_is_refused(tmp_path):
    with parts.PartWriter(tmp_path, 0) as w, pytest.raises(PacktoolError, match="inconsistent"):
        w.add(_batch([[1, 2, 3]], [[1, 2, 3]], lengths=[2]))


def test_a_part_or_folder_missing_on_this_node_is_one_clean_error(tmp_path):
    with pytest.raises(PacktoolError, match="storage every node mounts"):
        parts.open_parts(str(tmp_path), np.array([4]))
    with pytest.raises(PacktoolError, match="storage every node mounts"):
        parts.PartWriter(tmp_path / "elsewhere", 0)
