"""The pack the `verify --sources` tests damage, and how they run and read `verify` (no tests here).

    build_pack(tmp_path_factory) -> (data, pack)   built once per session with the CLI:
        `packtool sample data/chats.jsonl --n 40 --seed 3`, then
        `packtool pack ... --len 512 --overflow split --shard-rows 4` (the built-in tokenizer)
    copy_pack(pack, tmp_path)                      a copy to damage
    verify(pack, *args) -> (exit code, {check name: check dict})     `verify PACK --rows 0 ... --json -`
    failed(checks), manifest(pack), edit_manifest(pack, fn), prompt_token(table),
    shard_with_split_free_rows(pack, split_sources)

Each test damages a copy, re-signs it (shard sha256 and rows, counts in the manifest) where it
must pass integrity, and checks what `verify --sources` says. The test files import it
as `sources_pack` (tests/ is on sys.path, by tests/conftest.py), like `packs`.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.verify import audit
from packtool.verify import selftest as st

runner = CliRunner()
L = 512
_built = None


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def verify(pack, *args):
    """(exit code, {check name: check dict}) of `packtool verify PACK --rows 0 ARGS --json -`."""
    r = cli("verify", pack, "--rows", 0, *args, "--json", "-")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    doc = json.loads(r.stdout)
    return r.exit_code, {c["name"]: c for c in doc["checks"]}


def failed(checks: dict) -> dict:
    return {n: c for n, c in checks.items() if c["status"] == "fail"}


def build_pack(tmp_path_factory):
    """(data file, pack folder): 40 sample chats packed at --len 512 with --overflow split, built
    once per session (every test file asks; the first builds it)."""
    global _built
    if _built is None or not _built[1].exists():
        root = tmp_path_factory.mktemp("sources")
        data = root / "data" / "chats.jsonl"
        data.parent.mkdir()
        r = cli("sample", data, "--n", 40, "--seed", 3)
        assert r.exit_code == 0, r.output
        pack = root / "pack"
        r = cli("pack", data, "--len", L, "--out", pack, "--overflow", "split", "--shard-rows", 4)
        assert r.exit_code == 0, r.output
        _built = data, pack
    return _built


def copy_pack(pack, tmp_path):
    dst = tmp_path / "pack"
    shutil.copytree(pack, dst)
    return dst


def manifest(pack) -> dict:
    return json.loads((Path(pack) / schema.MANIFEST).read_text())


def edit_manifest(pack, fn) -> None:
    """fn(manifest) edits PACK/manifest.json in place (any test that damages a manifest)."""
    m = manifest(pack)
    fn(m)
    (Path(pack) / schema.MANIFEST).write_text(json.dumps(m, indent=1))


def prompt_token(table, skip_first: bool = True):
    """(row, position, document, source_index) of a prompt token (label schema.IGNORE_INDEX) inside
    a document, not a document's first token."""
    lab = st.token_column(table, "labels")
    pos = st.token_column(table, "position_ids")
    doc = st.token_column(table, "document_id")
    r, p = np.argwhere((lab == schema.IGNORE_INDEX) & (doc >= 0) & (pos > 0))[0]
    k = int(doc[r, p])
    return int(r), int(p), k, int(table.column("source_index").to_pylist()[r][k])


def shard_with_split_free_rows(pack, split_sources):
    """(rel, table) of a shard whose first prompt token belongs to a record that was not split."""
    for i in range(len(audit.list_shards(str(pack)))):
        rel, table = st.read_shard(str(pack), i)
        if prompt_token(table)[3] not in split_sources:
            return rel, table
    raise AssertionError("every shard starts with a split record")
