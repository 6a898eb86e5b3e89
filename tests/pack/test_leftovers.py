"""A pack run removes the temporary folder a pack killed with kill -9 left beside --out (same
mechanism as export: io.files; tests/export/test_leftovers.py has the cases), and says so."""

from __future__ import annotations

import subprocess
import sys

from packs import make_docs, real_pack

from packtool.io import files


def test_pack_removes_a_dead_packs_temporary_folder(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    left = tmp_path / f".out.packtool-tmp-{p.pid}-{files.host_tag()}-z9y8x7w6"
    (left / "data").mkdir(parents=True)
    (left / "data" / "train-00000-of-00004.parquet").write_bytes(b"PAR1")
    result = real_pack(tmp_path / "out", make_docs(20), 32)
    assert not left.exists()
    assert [(w.code, w.message) for w in result.warnings] == [
        (
            "leftover",
            f"removed {left}, a leftover temporary folder of a run that died (pid {p.pid})",
        )
    ]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out"]
