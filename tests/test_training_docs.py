"""Every command and snippet of README.md runs as written.

Every ```python block runs unchanged in a folder that holds what the snippets name:

    packed/            a pack written by packtool's own writer (tiny vocabulary, --len 64)
    pairs/             a preference pack of 12 pairs, written the same way
    Qwen/Qwen3-0.6B/   a tiny random Qwen3 model + tokenizer saved there, so that
                       from_pretrained("Qwen/Qwen3-0.6B") loads it offline instead of the hub model

Blocks that import TRL skip when TRL is not installed, blocks that build a Trainer skip without
accelerate. Every `packtool ...` line of every other block runs for real, in a fresh folder with
`data.jsonl` (a small `packtool sample` set), `pairs.jsonl` (20 preference pairs), `config.json`
(a model config), `lengths.npy` and, for
blocks that do not pack one themselves, a `packed/` folder.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import build_tiny_tokenizer  # noqa: E402
from packs import make_docs, real_pack  # noqa: E402
from paths import ROOT

README = ROOT / "README.md"
SECTION = "Training on packed shards"  # must exist, with its snippets
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)


def section(text: str, title: str) -> tuple[str, int] | None:
    """The text under the heading `title` up to the next heading of the same or a higher level,
    and the line number where it starts."""
    lines = text.splitlines(keepends=True)
    in_fence = False
    start = level = None
    for i, line in enumerate(lines):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        m = None if in_fence else re.match(r"^(#+)\s+(.*?)\s*$", line)
        if not m:
            continue
        if start is None and m.group(2) == title:
            start, level = i, len(m.group(1))
        elif start is not None and len(m.group(1)) <= level:
            return "".join(lines[start:i]), start
    return ("".join(lines[start:]), start) if start is not None else None


def blocks(languages: tuple[str, ...]) -> list:
    text = README.read_text()
    params = []
    for m in FENCE.finditer(text):
        if m.group(1) in languages:
            line = text[: m.start()].count("\n") + 2
            params.append(pytest.param("README.md", line, m.group(2), id=f"README.md:{line}"))
    return params


def test_training_section_has_snippets():
    found = section(README.read_text(), SECTION)
    assert found is not None, f"README.md lost its '{SECTION}' section"
    assert len([m for m in FENCE.finditer(found[0]) if m.group(1) == "python"]) >= 4


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    import torch
    import transformers

    root = tmp_path_factory.mktemp("docs")
    real_pack(
        root / "packed", make_docs(40, seed=5, min_len=4, max_len=40, vocab=64), 64, shard_rows=4
    )
    _pair_pack(root / "pairs")
    cfg = transformers.Qwen3Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    transformers.Qwen3ForCausalLM(cfg).save_pretrained(root / "Qwen" / "Qwen3-0.6B")
    build_tiny_tokenizer().save_pretrained(root / "Qwen" / "Qwen3-0.6B")
    return root


def _pair_pack(out, n: int = 12) -> None:
    """A preference pack of `n` pairs (tiny vocabulary: ids < 64), written by pack's own writer."""
    import numpy as np

    from packtool.data.tokenized import TokenizedData
    from packtool.pack import PackConfig, pack_tokenized

    rng = np.random.default_rng(3)
    ids, labels = [], []
    for _ in range(n):
        prompt = rng.integers(2, 64, rng.integers(3, 9)).tolist()
        for _side in range(2):
            answer = rng.integers(2, 64, rng.integers(2, 12)).tolist()
            ids.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
    data = TokenizedData.from_lists(
        ids, labels, source_index=np.repeat(np.arange(n), 2), tokenizer={"pad_id": 0}, num_read=n
    )
    pack_tokenized(data.as_pairs(), PackConfig(pack_len=64, shard_rows=4), out)


PAIRS_JSONL = [
    {
        "prompt": [{"role": "user", "content": f"Is {i} even?"}],
        "chosen": [{"role": "assistant", "content": "Yes." if i % 2 == 0 else "No."}],
        "rejected": [{"role": "assistant", "content": "No." if i % 2 == 0 else "Yes."}],
    }
    for i in range(20)
]


@pytest.fixture
def in_workspace(workspace, monkeypatch, tmp_path):
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-datasets"))
    try:
        import datasets

        monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-datasets")
    except ImportError:
        pass
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model on a shared machine: one thread is much faster
    yield workspace
    torch.set_num_threads(threads)


@pytest.mark.parametrize("source,line,code", blocks(("python",)))
def test_python_snippet_runs(source, line, code, in_workspace):
    if re.search(r"^\s*(from|import) trl\b", code, re.M):
        pytest.importorskip("trl", reason=f"{source}:{line} uses TRL, which is not installed")
    if re.search(r"\b(Trainer|SFTTrainer)\(", code):
        pytest.importorskip(
            "accelerate", reason=f"{source}:{line} builds a Trainer, which needs accelerate"
        )
    namespace = {"__name__": "__docs__"}
    exec(compile(code, f"{source}:{line}", "exec"), namespace)  # noqa: S102  (our own docs)
    if "trainer" in namespace:
        assert namespace["trainer"].state.global_step > 0
    if "checkpoint" in namespace:
        assert namespace["checkpoint"]["sampler"]["global_position"] > 0


def commands_of(code: str) -> list[list[str]]:
    """`packtool ...` lines of a block, continuation lines joined, `&& next-step` cut off."""
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for line in joined.splitlines():
        line = line.split("#")[0].split("&&")[0].strip()
        if line.startswith("packtool "):
            out.append(shlex.split(line))
    return out


def _shell_block(p, first=False):
    """A README block of several verify runs (each trains tiny models on CPU: ~20 s) runs in
    `make test-slow`, and so does the first block (the quick start, ~50 s: sample, inspect,
    profile, pack, verify, each of which the sections' blocks below and tests/test_cli.py run in
    `make test`); every other block runs in `make test`."""
    commands = commands_of(p.values[2])
    several = sum(c[:2] == ["packtool", "verify"] for c in commands) > 1
    marks = [pytest.mark.slow] if several or first else []
    if any("--engine" in c and c[c.index("--engine") + 1] == "ray" for c in commands):
        marks += [  # with the other Ray tests (tests/cluster runs the same in make test)
            pytest.mark.slow,
            pytest.mark.xdist_group("ray"),
            pytest.mark.skipif(
                importlib.util.find_spec("ray") is None, reason="Ray Data is not installed"
            ),
        ]
    return pytest.param(*p.values, id=p.id, marks=marks)


SHELL_BLOCKS = [
    _shell_block(p, first=i == 0)
    for i, p in enumerate(p for p in blocks(("bash", "")) if commands_of(p.values[2]))
]


@pytest.mark.parametrize("source,line,code", SHELL_BLOCKS)
def test_shell_commands_are_real(source, line, code, tmp_path):
    import json

    import numpy as np

    commands = commands_of(code)
    env = dict(os.environ, HF_HUB_OFFLINE="1", PACKTOOL_CACHE=str(tmp_path / "cache"))
    cli = [sys.executable, "-m", "packtool"]
    subprocess.run(
        [*cli, "sample", "data.jsonl", "--n", "40"],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
    )
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 4,
                "hidden_size": 256,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 688,
                "vocab_size": 32000,
            }
        )
    )
    np.save(tmp_path / "lengths.npy", np.random.default_rng(0).integers(1, 6000, 500))
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in PAIRS_JSONL))
    if not any(a[1] == "pack" for a in commands):
        subprocess.run(
            [*cli, "pack", "data.jsonl", "--len", "4096", "--out", "packed/"],
            cwd=tmp_path,
            env=env,
            check=True,
            capture_output=True,
        )
    for argv in commands:
        done = subprocess.run(
            [*cli, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{source}:{line}: {shlex.join(argv)}\n{done.stderr[-2000:]}"
    if any(a[1] == "pack" for a in commands):
        from packtool.torch import PackedDataset, PairDataset

        out = next(a[a.index("--out") + 1] for a in commands if a[1] == "pack")
        task = json.loads((tmp_path / out / "manifest.json").read_text()).get("task")
        dataset = PairDataset if task == "preference" else PackedDataset
        assert len(dataset(tmp_path / out, cache_dir=tmp_path / "arrow")) > 0
