"""Bin-packing kernels against a brute-force oracle, compiled and as plain Python (NUMBA_DISABLE_JIT)."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from paths import ROOT

from packtool.plan import (
    PackPlan,
    bitset_clear,
    bitset_new,
    bitset_next,
    bitset_set,
    decreasing_order,
    lower_bound_rows,
    plan_packs,
)


def oracle(lengths, pack_len, strategy, order, max_docs, seed):
    """Brute force, O(n * rows), written from the tie-break rules in plan.py's docstring."""
    n = len(lengths)
    if order == "sorted":
        seq = sorted(range(n), key=lambda i: (-int(lengths[i]), i))
    else:
        seq = [int(i) for i in np.random.default_rng(seed).permutation(n)]
    caps, docs, stamps = [], [], []
    for t, d in enumerate(seq):
        x = int(lengths[d])
        fits = [
            r
            for r in range(len(caps))
            if caps[r] >= x and (max_docs == 0 or len(docs[r]) < max_docs)
        ]
        if not fits:
            caps.append(pack_len)
            docs.append([])
            stamps.append(t)
            r = len(caps) - 1
        elif strategy == "ffd":
            r = min(fits)
        else:
            r = min(fits, key=lambda r: (caps[r], -stamps[r]))
        caps[r] -= x
        docs[r].append(d)
        stamps[r] = t
    offsets = np.cumsum([0] + [len(d) for d in docs])
    order_ = [d for row in docs for d in row]
    return offsets, order_


def length_cases(rng, pack_len):
    n = int(rng.integers(0, 150))
    yield rng.integers(1, pack_len + 1, n)
    yield np.full(n, pack_len)
    yield np.ones(n, dtype=np.int64)
    yield np.minimum(rng.integers(1, max(2, pack_len // 3) + 1, n), pack_len)
    yield np.clip(np.round(rng.lognormal(np.log(max(1, pack_len / 5)), 0.9, n)), 1, pack_len)


def check_grid(pack_lens=(1, 2, 7, 64, 100), seeds=range(3)) -> int:
    checked = 0
    for pack_len, seed in itertools.product(pack_lens, seeds):
        rng = np.random.default_rng(1000 * pack_len + seed)
        for lengths in length_cases(rng, pack_len):
            lengths = lengths.astype(np.int64)
            for strategy, order, max_docs in itertools.product(
                ("bfd", "ffd"), ("sorted", "random"), (0, 1, 2, 3)
            ):
                plan = plan_packs(lengths, pack_len, strategy, order, max_docs, seed)
                offsets, doc_order = oracle(lengths, pack_len, strategy, order, max_docs, seed)
                ctx = f"L={pack_len} {strategy} {order} max_docs={max_docs} seed={seed} lengths={lengths.tolist()}"
                assert plan.row_offsets.tolist() == list(offsets), ctx
                assert plan.doc_order.tolist() == doc_order, ctx
                checked += 1
    return checked


def test_matches_oracle_over_grid():
    assert check_grid() > 500


def test_plain_python_matches_oracle():
    """The same grid with NUMBA_DISABLE_JIT=1: the kernels run as plain Python, line by line."""
    code = (
        "import sys; sys.path.insert(0, {tests!r}); sys.path.insert(0, {root!r})\n"
        "import numba; assert numba.config.DISABLE_JIT\n"
        "import test_plan\n"
        "print('checked', test_plan.check_grid(pack_lens=(1, 7, 64), seeds=range(1)))\n"
    ).format(tests=str(ROOT / "tests"), root=str(ROOT))
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "checked" in out.stdout


@pytest.mark.parametrize("strategy", ["bfd", "ffd"])
@pytest.mark.parametrize("order", ["sorted", "random"])
@pytest.mark.parametrize("max_docs", [0, 4])
def test_plan_invariants_at_scale(strategy, order, max_docs):
    rng = np.random.default_rng(7)
    pack_len = 4096
    lengths = np.clip(np.round(rng.lognormal(np.log(450), 0.9, 50_000)), 1, pack_len).astype(
        np.int32
    )
    plan = plan_packs(lengths, pack_len, strategy, order, max_docs, seed=3)
    assert isinstance(plan, PackPlan) and plan.pack_len == pack_len
    assert plan.row_offsets.dtype == np.int64 and plan.doc_order.dtype == np.int64
    assert plan.row_offsets[0] == 0 and plan.row_offsets[-1] == lengths.size
    assert np.all(np.diff(plan.row_offsets) >= 1)
    assert np.array_equal(np.sort(plan.doc_order), np.arange(lengths.size))
    used = np.add.reduceat(lengths.astype(np.int64)[plan.doc_order], plan.row_offsets[:-1])
    assert used.dtype == np.int64 and used.shape == (plan.num_rows,)
    assert used.max() <= pack_len and used.sum() == lengths.sum()
    if max_docs:
        assert plan.docs_per_row().max() <= max_docs
    lb = lower_bound_rows(int(lengths.sum()), pack_len)
    assert plan.num_rows >= lb
    if order == "sorted" and not max_docs:
        assert plan.num_rows <= 1.0002 * lb  # the quality goal
    else:
        assert plan.num_rows <= 1.02 * lb or max_docs


def test_sorted_rows_long_first_and_random_rows_not_sorted():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 1000, 5000)
    first = lambda p: lengths[p.doc_order[p.row_offsets[:-1]]]  # noqa: E731
    assert np.all(np.diff(first(plan_packs(lengths, 1024))) <= 0)
    firsts = first(plan_packs(lengths, 1024, order="random", seed=1))
    assert np.any(np.diff(firsts) > 0)
    a = plan_packs(lengths, 1024, order="random", seed=1)
    b = plan_packs(lengths, 1024, order="random", seed=1)
    c = plan_packs(lengths, 1024, order="random", seed=2)
    assert np.array_equal(a.doc_order, b.doc_order) and not np.array_equal(a.doc_order, c.doc_order)


def test_decreasing_order_is_stable():
    lengths = np.array([3, 5, 3, 1, 5, 3], dtype=np.int64)
    seq, sizes = decreasing_order(lengths, 5)
    assert seq.tolist() == [1, 4, 0, 2, 5, 3]
    assert sizes.tolist() == [5, 5, 3, 3, 3, 1]


def test_docstring_example_and_empty():
    plan = plan_packs(np.array([5, 3, 7, 2, 4]), 8)
    assert plan.row_offsets.tolist() == [0, 1, 3, 5]
    assert plan.doc_order.tolist() == [2, 0, 1, 4, 3]
    assert np.add.reduceat(np.array([5, 3, 7, 2, 4])[plan.doc_order], [0, 1, 3]).tolist() == [
        7,
        8,
        6,
    ]
    empty = plan_packs(np.zeros(0, dtype=np.int32), 8)
    assert empty.num_rows == 0 and empty.doc_order.size == 0 and empty.row_offsets.tolist() == [0]


@pytest.mark.parametrize("size", [1, 63, 64, 65, 4097, 300_000])
def test_bitset_against_a_set(size):
    rng = np.random.default_rng(size)
    bits, offs = bitset_new(size)
    present: set[int] = set()
    for _ in range(400):
        i = int(rng.integers(0, size))
        if rng.random() < 0.6:
            bitset_set(bits, offs, i)
            present.add(i)
        else:
            bitset_clear(bits, offs, i)
            present.discard(i)
        q = int(rng.integers(0, size))
        above = [v for v in present if v >= q]
        assert bitset_next(bits, offs, q) == (min(above) if above else -1)


@pytest.mark.parametrize(
    "lengths, pack_len, kw, match",
    [
        ([1, 0, 2], 4, {}, r"document 1 has length 0, outside 1\.\.4"),
        (
            [1, 9, 2],
            4,
            {},
            r"document 1 has length 9, outside 1\.\.4 \(1 such\); apply the overflow",
        ),
        ([-1], 4, {}, "outside"),
        ([1.5], 4, {}, "must be integers"),
        ([[1, 2]], 4, {}, "must be 1-D"),
        ([1], 0, {}, "pack_len 0 must be >= 1"),
        ([1], 4, {"strategy": "nf"}, "strategy 'nf' is not one of bfd|ffd"),
        ([1], 4, {"order": "up"}, "order 'up' is not one of sorted|random"),
        ([1], 4, {"max_docs": -1}, "max_docs -1 must be >= 0"),
    ],
)
def test_bad_inputs(lengths, pack_len, kw, match):
    with pytest.raises(ValueError, match=match):
        plan_packs(np.array(lengths), pack_len, **kw)
