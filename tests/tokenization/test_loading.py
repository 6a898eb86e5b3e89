"""Resolving a tokenizer: the spec AutoTokenizer gives, cached so that a warm start needs no transformers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from paths import SHARED_TOKENIZERS

from packtool.tokenization.loading import TokenizerSpec, builtin_tokenizer_dir, load_tokenizer

FOLDERS = [None, SHARED_TOKENIZERS / "gptoss", SHARED_TOKENIZERS / "llama3"]


@pytest.mark.parametrize("folder", FOLDERS, ids=["builtin", "gptoss", "llama3"])
def test_a_folder_resolves_to_the_spec_autotokenizer_gives(folder):
    from transformers import AutoTokenizer

    if folder is not None and not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    loaded = load_tokenizer(None if folder is None else str(folder))
    auto = AutoTokenizer.from_pretrained(str(folder or builtin_tokenizer_dir()))
    assert TokenizerSpec.from_loaded(loaded) == TokenizerSpec.from_tokenizer(
        auto, loaded.name, loaded.folder, loaded.files_hash, loaded.builtin
    )


@pytest.mark.parametrize(
    "config", ["{not json", '{"model_max_length": 8}', '{"tokenizer_class": "NoSuch"}']
)
def test_a_folder_that_names_no_known_class_goes_through_autotokenizer(
    tmp_path, monkeypatch, config
):
    import shutil

    import transformers

    for f in builtin_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, tmp_path / f.name)
    (tmp_path / "tokenizer_config.json").write_text(config)
    asked = []
    monkeypatch.setattr(
        transformers.AutoTokenizer, "from_pretrained", classmethod(lambda cls, p: asked.append(p))
    )
    load_tokenizer(str(tmp_path))
    assert asked == [str(tmp_path)]


def test_a_warm_start_imports_neither_transformers_nor_torch(tmp_path):
    """The first run per tokenizer resolves it through AutoTokenizer (and imports torch); the
    spec is cached, so the next process reads it without either."""
    code = (
        "import sys; from packtool.tokenization.loading import load_spec; load_spec(None); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    env = {"PACKTOOL_CACHE": str(tmp_path), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    run = [sys.executable, "-c", code]
    cold = subprocess.run(run, capture_output=True, text=True, env=env, check=True)
    assert "transformers" in cold.stdout, cold.stderr
    warm = subprocess.run(run, capture_output=True, text=True, env=env, check=True)
    assert warm.stdout.strip().splitlines()[-1] == "[]", warm.stderr


def test_a_cached_hub_tokenizer_resolves_as_its_snapshot_folder(tmp_path):
    """A hub id whose snapshot is in the Hugging Face cache resolves like that folder, offline."""
    import shutil

    snapshot = tmp_path / "hub" / "models--someone--tiny" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for f in builtin_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copy(f, snapshot / f.name)
    (tmp_path / "hub" / "models--someone--tiny" / "refs").mkdir()
    (tmp_path / "hub" / "models--someone--tiny" / "refs" / "main").write_text("abc123")
    code = (
        "import json; from packtool.tokenization.loading import load_spec; "
        "hub = load_spec('someone/tiny', cache=False); "
        f"folder = load_spec({str(snapshot)!r}, cache=False); "
        "print(json.dumps([hub.name, hub.backend_json == folder.backend_json, "
        "hub.files_hash == folder.files_hash, hub.cls]))"
    )
    env = {
        "PACKTOOL_CACHE": str(tmp_path / "pc"),
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "HF_HUB_OFFLINE": "1",
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    import json

    name, same_backend, same_files, cls = json.loads(out.stdout.strip().splitlines()[-1])
    assert (name, same_backend, same_files) == ("someone/tiny", True, True), out.stderr
    assert cls == TokenizerSpec.from_loaded(load_tokenizer(None)).cls


@pytest.mark.parametrize("folder", FOLDERS, ids=["builtin", "gptoss", "llama3"])
def test_the_specs_json_reads_back_as_the_tokenizer_transformers_built(folder):
    """compact_merges respells the merges only: `tokenizers` reads the spec's JSON into the very
    tokenizer transformers built (its own serialization, byte for byte)."""
    from tokenizers import Tokenizer

    if folder is not None and not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    loaded = load_tokenizer(None if folder is None else str(folder))
    spec = TokenizerSpec.from_loaded(loaded)
    original = loaded.tokenizer.backend_tokenizer.to_str()
    assert Tokenizer.from_str(spec.backend_json).to_str() == original
    if '"merges":[[' in original:
        assert '"merges":[[' not in spec.backend_json  # respelled, so it reads faster


def test_merges_with_a_space_keep_their_pair_spelling():
    from packtool.tokenization.loading import compact_merges

    d = {"model": {"type": "BPE", "vocab": {}, "merges": [["a b", "c"], ["d", "e"]]}}
    assert compact_merges(d) is None
    assert compact_merges({"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}) is None
    pairs = {"model": {"type": "BPE", "vocab": {}, "merges": [["a", "c"], ["d", "e"]]}}
    assert compact_merges(pairs)["model"]["merges"] == ["a c", "d e"]
    assert pairs["model"]["merges"] == [["a", "c"], ["d", "e"]]  # left unchanged


def test_library_versions_are_the_installed_ones():
    from importlib.metadata import PackageNotFoundError, version

    from packtool.tokenization.loading import library_versions

    for pkg, got in library_versions().items():
        try:
            want = version(pkg)
        except PackageNotFoundError:
            want = "absent"
        assert got == want, pkg


def test_a_cached_spec_keeps_its_tokenizer_json_beside_and_reads_back_equal(tmp_path, monkeypatch):
    from packtool.tokenization import cache
    from packtool.tokenization.loading import load_spec

    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path))
    spec = load_spec(None)
    small = list((tmp_path / "tokenizers").glob("*[0-9a-f].json"))
    beside = list((tmp_path / "tokenizers").glob("*.tokenizer.json"))
    assert len(small) == 1 and len(beside) == 1
    assert "backend_json" not in cache.read_json(small[0])
    assert cache.read_bytes(beside[0]) == spec.backend_json.encode()
    assert load_spec(None) == spec
    beside[0].write_bytes(beside[0].read_bytes()[:-5])  # damaged: resolved again, the same
    with pytest.warns(cache.CacheWarning, match="damaged"):
        assert load_spec(None) == spec


def test_a_truncated_tokenizer_file_is_one_line_error_not_a_traceback(tmp_path, monkeypatch):
    import shutil

    from packtool.errors import PacktoolError
    from packtool.tokenization.loading import load_spec

    folder = tmp_path / "tok"
    shutil.copytree(builtin_tokenizer_dir(), folder)
    text = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(text[:5000])
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PacktoolError, match=f"cannot load a tokenizer from {folder}: "):
        load_spec(str(folder))
