"""The pack every `--sources` test starts from: 40 sample chats at --len 512, --overflow split
(sources_pack.build_pack, built once per session), and a private copy of it to damage."""

from __future__ import annotations

import pytest
from sources_pack import build_pack, copy_pack


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_pack(tmp_path_factory)


@pytest.fixture
def pack(built, tmp_path):
    return copy_pack(built[1], tmp_path)
