"""packtool.arch without torch: the family table, what a batch needs, the early warning, config.json."""

from __future__ import annotations

import json

import pytest

from packtool import arch
from packtool.arch.config import folder_config, read_config
from packtool.errors import PacktoolError, UsageError


@pytest.mark.parametrize(
    ("config", "family"),
    [
        ({"model_type": "llama"}, "attention"),
        ({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}, "attention"),
        (
            {"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text"}},
            "gated_deltanet",
        ),
        ({"model_type": "qwen3_next"}, "gated_deltanet"),
        ({"model_type": "nemotron_h"}, "mamba2_hybrid"),
        ({"model_type": "falcon_h1"}, "mamba2_hybrid"),
        ({"model_type": "lfm2"}, "short_conv"),
        ({"model_type": "gpt_oss"}, "gpt_oss"),
        ({"model_type": "mamba2"}, "mamba2"),
        # an architecture the table does not name: its layer types decide
        (
            {"model_type": "new_hybrid", "layer_types": ["linear_attention", "full_attention"]},
            "gated_deltanet",
        ),
        ({"model_type": "new_conv", "layer_types": ["conv", "full_attention"]}, "short_conv"),
    ],
)
def test_family(config, family):
    assert arch.family(config).name == family


def test_inputs_for():
    assert arch.inputs_for({"model_type": "qwen3"}) == ("position_ids", "cu_seq_lens")
    assert "seq_idx" in arch.inputs_for({"model_type": "nemotron_h"})
    assert "seq_idx" in arch.inputs_for({"model_type": "qwen3_5"})


def test_warning_names_missing_kernels(monkeypatch):
    monkeypatch.setattr(arch, "installed", lambda name: False)
    w = arch.warning({"model_type": "qwen3_5"}, "cfg/")
    assert "flash-linear-attention and causal-conv1d" in w and "seq_idx" in w and "cfg/" in w
    assert arch.warning({"model_type": "llama"}, "cfg/") is None
    assert "train these unpacked" in arch.warning({"model_type": "mamba2"}, "cfg/")


def test_no_warning_with_kernels(monkeypatch):
    monkeypatch.setattr(arch, "installed", lambda name: True)
    assert arch.warning({"model_type": "nemotron_h"}, "x") is None


def test_read_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    cfg, path = read_config(str(tmp_path))
    assert cfg["model_type"] == "llama" and path.endswith("config.json")
    assert folder_config(str(tmp_path)) == cfg
    assert folder_config(str(tmp_path / "nope")) is None


def test_read_config_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(UsageError, match="no such file or folder"):
        read_config(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="has no config.json"):
        read_config(str(tmp_path))
    with pytest.raises(UsageError, match="not in the local cache; add --allow-download"):
        read_config("nobody-xyz/not-a-model")
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PacktoolError, match="cannot read"):
        read_config(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    with pytest.raises(PacktoolError, match="no 'model_type'"):
        read_config(str(tmp_path))


def test_readme_shows_the_table():
    """One table of architectures: every family's name and packages appear in the README's."""
    from paths import ROOT

    readme = (ROOT / "README.md").read_text()
    for f in (*arch.FAMILIES, arch.ATTENTION):
        assert f"`{f.name}`" in readme, f.name
        for k in f.kernels:
            assert arch.KERNELS[k] in readme


def test_model_warning(tmp_path, monkeypatch):
    from packtool.arch.config import model_warning

    monkeypatch.setattr(arch, "installed", lambda name: False)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}))
    assert "mamba-ssm and causal-conv1d" in model_warning(str(tmp_path), None)
    # a --tokenizer folder that is a whole model folder is read the same way
    assert "mamba-ssm" in model_warning(None, str(tmp_path))
    assert model_warning(None, None) is None
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))  # FLOPs-only
    assert model_warning(str(tmp_path), None) is None


def test_commands_warn_before_tokenizing(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from packtool.cli import app

    monkeypatch.setattr(arch, "installed", lambda name: False)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_next"}))
    data = tmp_path / "d.jsonl"
    data.write_text(
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "yo"},
                ]
            }
        )
        + "\n"
    )
    runner = CliRunner()
    r = runner.invoke(app, ["inspect", str(data), "--model", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert "warning: qwen3_next" in r.output and "flash-linear-attention" in r.output
    # pack says it before reading anything: here the data does not even exist
    missing = str(tmp_path / "nope.jsonl")
    r = runner.invoke(
        app,
        ["pack", missing, "--len", "64", "--out", str(tmp_path / "p"), "--model", str(tmp_path)],
    )
    assert r.exit_code != 0 and r.output.index("warning: qwen3_next") < r.output.index("error")
    r = runner.invoke(app, ["inspect", str(data), "--model", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such file or folder" in r.output
