"""Packs of every file in `../shared/data` are byte-identical to the packs an earlier release wrote.

Structure changes (issue 24) must not change a byte of what `packtool pack` writes. `golden_shared.json`
holds, for each shared file and each option set of the Ray engine's tests (`ray_packs.OPTION_SETS`), the sha256
of every shard and of the manifest (with `packtool_version` removed and the input's folder written
as `DATA`, so a checkout anywhere gives the same digest), written by the commit named in the file.
The Ray engine's tests compare its packs with the local engine's, so both are pinned.

Shards name the pyarrow that wrote them: with another pyarrow the shard digests are skipped and only
the manifest is compared (its shard entries without their sha256 and byte size).

To write the file again after a change that is *meant* to change packs (say why in the commit):
`python tests/pack/test_golden_shared.py` (reads ../shared/data, writes golden_shared.json).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from paths import SHARED_DATA, needs_shared  # noqa: E402
from ray_packs import OPTION_SETS, cli  # noqa: E402

GOLDEN = Path(__file__).with_name("golden_shared.json")
FILES = sorted(p.name for p in SHARED_DATA.glob("*.json*")) if SHARED_DATA.is_dir() else []
FAST = {("v1_sft_demo.jsonl", "split-padded"), ("glaive_toolcall_en_demo.json", "truncate-fixed")}


def digests(data: Path, out: Path, options: list[str], with_shards: bool = True) -> dict:
    """{"manifest": sha256, "shards": [sha256, ...]} of `packtool pack data --out out options`."""
    r = cli("pack", data, "--out", out, "--no-cache", *options)
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.pop("packtool_version")
    shards = [s.pop("sha256") for s in manifest["shards"]]
    for s in manifest["shards"]:
        s.pop("bytes")
    text = json.dumps(manifest, sort_keys=True).replace(str(data.parent), "DATA")
    body = {"manifest": hashlib.sha256(text.encode()).hexdigest()}
    if with_shards:
        body["shards"] = shards
    return body


def cases():
    for name in FILES:
        for option in sorted(OPTION_SETS):
            slow = (name, option) not in FAST
            yield pytest.param(name, option, marks=[pytest.mark.slow] if slow else [])


@needs_shared("data")
@pytest.mark.parametrize(("name", "option"), list(cases()))
def test_a_shared_file_packs_to_the_bytes_of_the_earlier_release(tmp_path, name, option):
    golden = json.loads(GOLDEN.read_text())
    expected = golden["packs"][f"{name} {option}"]
    same_pyarrow = pyarrow.__version__ == golden["pyarrow"]
    got = digests(SHARED_DATA / name, tmp_path / "out", OPTION_SETS[option], same_pyarrow)
    if not same_pyarrow:
        expected = {"manifest": expected["manifest"]}
    assert got == expected, f"{name} with {' '.join(OPTION_SETS[option])}"


def test_every_shared_file_and_option_set_has_a_golden_pack():
    if not FILES:
        pytest.skip(f"{SHARED_DATA} is absent")
    golden = json.loads(GOLDEN.read_text())["packs"]
    assert sorted(golden) == sorted(f"{n} {o}" for n in FILES for o in OPTION_SETS)


def main() -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    packs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in FILES:
            for option in sorted(OPTION_SETS):
                out = Path(tmp) / f"{name}-{option}"
                packs[f"{name} {option}"] = digests(SHARED_DATA / name, out, OPTION_SETS[option])
    body = {"commit": commit, "pyarrow": pyarrow.__version__, "packs": packs}
    GOLDEN.write_text(json.dumps(body, indent=1) + "\n")
    print(f"wrote {GOLDEN}: {len(packs)} packs at {commit}")


if __name__ == "__main__":
    main()
