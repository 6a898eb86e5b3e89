"""Where the tests find the repository and the read-only `../shared` folder (real SFT files in
`data/`, other model families' tokenizers in `tokenizers/`, both described in their SOURCES.md).

Tests that need `../shared` use `needs_shared(...)`: they skip, with the path in the reason, on a
checkout without it (CI has it; a clone elsewhere may not)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SHARED = Path(
    os.environ.get("PACKTOOL_SHARED", ROOT.parent / "shared")
)  # override: run as if absent
SHARED_DATA = SHARED / "data"
SHARED_TOKENIZERS = SHARED / "tokenizers"


def needs_shared(*parts: str):
    """A skip marker for tests that read `../shared/<parts>`."""
    path = SHARED.joinpath(*parts)
    return pytest.mark.skipif(
        not path.exists(), reason=f"{path} is absent (the shared folder is not checked out)"
    )
