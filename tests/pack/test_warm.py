"""pack.warm (pack/__init__.py): a toy pack with the run's options, leaving nothing behind."""

from __future__ import annotations

import tempfile

import pytest

from packtool.config import PackConfig
from packtool.pack import warm


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"strategy": "ffd", "order": "random", "shuffle": True},
        {"pad_to_multiple": 8, "max_docs": 4, "fixed_docs": True},
        {"overflow": "truncate"},
    ],
)
def test_warm_packs_a_toy_with_the_runs_options_and_leaves_nothing(options, tmp_path, monkeypatch):
    # a temp folder of its own: a concurrent test's pack would add to the shared one meanwhile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    warm(PackConfig(pack_len=64, **options))  # raises if the toy pack fails
    assert list(tmp_path.iterdir()) == []
