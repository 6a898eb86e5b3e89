"""The packs the integrity tests damage, and how they read the checks.

clean_pack   60 documents of 4..70 tokens packed into rows of L = 128 (12 rows a shard), built once
pack         a copy of it per test, to damage
checks_of(path) -> ({name: Check}, summary)      failed_of(path) -> {name: Check} failed
expect_failure(pack, check, regex)               `check` fails with a message matching `regex`
"""

from __future__ import annotations

import re
import shutil

import pytest

from packtool.verify import integrity as integ
from packtool.verify import selftest as st

L = 128


def _checks(path):
    checks, summary = integ.check_integrity(str(path))
    return {c.name: c for c in checks}, summary


def _failed(path) -> dict:
    by_name, _ = _checks(path)
    return {n: c for n, c in by_name.items() if not c.passed and not c.skipped}


def _expect(pack, check: str, match: str) -> None:
    """verify fails `check` with a message matching the regex `match` (re.search)."""
    failed = _failed(pack)
    assert check in failed, f"{check} passed; failed: {sorted(failed)}"
    assert re.search(match, failed[check].message), failed[check].message


@pytest.fixture(scope="session")
def clean_pack(tmp_path_factory):
    out = tmp_path_factory.mktemp("pack") / "clean"
    st.write_documents(
        str(out), st.make_documents(60, seed=5, min_len=4, max_len=70), L, shard_rows=12
    )
    return out


@pytest.fixture
def pack(clean_pack, tmp_path):
    dst = tmp_path / "pack"
    shutil.copytree(clean_pack, dst)
    return dst


@pytest.fixture
def checks_of():
    return _checks


@pytest.fixture
def failed_of():
    return _failed


@pytest.fixture
def expect_failure():
    return _expect
