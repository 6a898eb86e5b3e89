"""How many files a Ray shard writer may open (cluster.parts.open_files_limit): no cluster needed.
10,000 small input files are 10,000 parts, 20,000 part files, plus the writer's own: the message
says those numbers, the real limit and the fixes, and never that 10,000 is over 20,000."""

from __future__ import annotations

import pytest

from packtool.cluster import parts
from packtool.errors import PacktoolError

INF = -1


@pytest.mark.parametrize(
    "n, soft, hard, top",
    [
        (100, 1024, 4096, 1024),  # fits already
        (2000, 1024, 4096, 2000 + parts.FD_HEADROOM),  # the soft limit is raised
        (2000, 1024, INF, 2000 + parts.FD_HEADROOM),
        (20000, INF, 100, INF),  # no soft limit at all
    ],
)
def test_the_soft_limit_is_raised_to_what_is_needed(n, soft, hard, top):
    assert parts.open_files_limit(n, soft, hard, INF) == (top, None)


def test_ten_thousand_parts_over_a_hard_limit_of_20000_say_why():
    top, line = parts.open_files_limit(20000, 1024, 20000, INF)
    assert top == 1024
    assert line.startswith(
        "a shard writer reads 10,000 parts of the encoded input, two files each (20,000), and "
        f"needs {parts.FD_HEADROOM} open files more for itself: {20000 + parts.FD_HEADROOM:,} open "
        "files, over this node's hard limit of 20,000 (ulimit -Hn)"
    ), line
    assert "merge its many small files into fewer large ones" in line
    assert line.endswith("or pack with --engine local")


def test_allow_files_raises_the_line(monkeypatch):
    resource = pytest.importorskip("resource")
    monkeypatch.setattr(resource, "getrlimit", lambda what: (1024, 20000))
    monkeypatch.setattr(resource, "setrlimit", lambda *a: pytest.fail("must not be raised"))
    with pytest.raises(PacktoolError, match=r"10,000 parts .* hard limit of 20,000"):
        parts._allow_files(20000)
