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
        ({"model_type": "mamba"}, "mamba"),
        ({"model_type": "falcon_mamba", "layer_types": ["linear_attention"]}, "mamba"),
        ({"model_type": "rwkv"}, "recurrent"),
        ({"model_type": "recurrent_gemma"}, "recurrent"),
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
    assert "train it unpacked" in arch.warning({"model_type": "mamba2"}, "cfg/")
    assert "Mamba model (v1" in arch.warning({"model_type": "mamba"}, "cfg/")  # not "Mamba-2"
    assert "--max-docs 1" in arch.warning({"model_type": "rwkv"}, "cfg/")


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
    with pytest.raises(PacktoolError, match="is not JSON"):
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


def test_declared_kinds_per_layer():
    """Every way a config declares its layers, in its own words; the prefix holding them all."""
    from packtool.arch import layers

    minimax = {"num_hidden_layers": 4, "layer_types": ["full_attention", "linear_attention"] * 2}
    assert layers.declared_kinds(minimax) == {
        "layer_types=full_attention",
        "layer_types=linear_attention",
    }
    assert layers.declared_prefix(minimax) == 2
    nemotron = {"num_hidden_layers": 5, "hybrid_override_pattern": "M-M*-"}
    assert layers.declared_prefix(nemotron) == 4
    lfm2 = {"num_hidden_layers": 4, "full_attn_idxs": [2]}
    assert layers.declared(lfm2)[2] == ("full_attn_idxs",) and layers.declared_prefix(lfm2) == 3
    jamba = {"num_hidden_layers": 16, "attn_layer_period": 8, "attn_layer_offset": 4}
    assert layers.declared_prefix(jamba) == 5
    small = {**minimax, "num_hidden_layers": 1, "layer_types": ["full_attention"]}
    assert layers.not_built(minimax, small) == ["layer_types=linear_attention"]
    assert layers.word("layer_types=linear_attention") == "linear_attention"
    assert layers.declared_kinds({"num_hidden_layers": 2, "layer_rope_theta": [1.0, 2.0]}) == set()


def test_concern_own_code_unknown_type_encoder():
    from packtool.arch.config import concern

    own = concern({"model_type": "llama", "auto_map": {"AutoConfig": "x.C"}}, "m/")
    assert "does not run a model's own code" in own and "auto_map: AutoConfig" in own
    assert "not known to transformers" in concern({"model_type": "no_such_xyz"}, "m/")
    assert "not a causal LM" in concern({"model_type": "t5"}, "m/")
    assert concern({"model_type": "llama"}, "m/") is None
    assert (
        concern({"model_type": "qwen3_5", "text_config": {"model_type": "qwen3_5_text"}}, "m")
        is None
    )
    assert (
        concern({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text"}}, "m") is None
    )


@pytest.mark.parametrize("command", ["inspect", "profile", "pack", "verify"])
def test_one_rule_for_model_in_every_command(tmp_path, command):
    """--model read by one function: a file that is not JSON is the same one-line error (exit 1)
    in all four commands; an auto_map config is the same one-line warning in inspect/profile/pack."""
    from typer.testing import CliRunner

    from packtool.cli import app

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{not json")
    args = {
        "inspect": ["inspect", str(data)],
        "profile": ["profile", "--synthetic", "lognormal:median=50,n=100"],
        "pack": ["pack", str(data), "--len", "64", "--out", str(tmp_path / "p")],
        "verify": ["verify", str(tmp_path)],
    }[command]
    if command == "verify":
        (tmp_path / "manifest.json").write_text("{}")
    r = CliRunner().invoke(app, [*args, "--model", str(model)])
    assert r.exit_code == 1, r.output
    assert "config.json is not JSON" in r.output and "Traceback" not in r.output
    if command == "verify":
        return
    sizes = {"hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 128}
    sizes |= {"num_attention_heads": 4, "vocab_size": 512}  # profile's FLOPs read them
    (model / "config.json").write_text(
        json.dumps({"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "x.M"}, **sizes})
    )
    r = CliRunner().invoke(app, [*args, "--model", str(model)])
    assert "warning:" in r.output and "does not run a model's own code" in r.output, r.output
    (model / "config.json").write_text(json.dumps({"model_type": "no_such_xyz", **sizes}))
    r = CliRunner().invoke(app, [*args, "--model", str(model)])
    assert "warning:" in r.output and "'no_such_xyz' is not known to transformers" in r.output
