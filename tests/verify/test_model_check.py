"""verify --model: the input matrix on each architecture family, measured on tiny copies (CPU, no
download: configs built in-process from transformers' config classes and saved as config.json)."""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from typer.testing import CliRunner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from packs import model_samples  # noqa: E402

from packtool import schema  # noqa: E402
from packtool.cli import app  # noqa: E402
from packtool.verify import messages, model_check  # noqa: E402

KERNELS = [k for k in ("fla", "causal_conv1d", "mamba_ssm") if importlib.util.find_spec(k)]
no_kernels = pytest.mark.skipif(bool(KERNELS), reason=f"kernel packages installed: {KERNELS}")

# model_type (its config: arch.tiny.PRESETS, the table the benchmarks use too), expected cells
# (position_ids, +cu_seq_lens, +seq_idx) on a CPU without kernel packages, transformers 5.25:
# "exact", "leaks", or "refused: needs PKG"
MATRIX = [
    ("llama", ("exact", "exact", "exact")),
    ("qwen3", ("exact", "exact", "exact")),
    ("gemma3", ("exact", "exact", "exact")),
    ("qwen3_5", ("leaks", "refused: needs flash-linear-attention", "refused: needs causal-conv1d")),
    (
        "qwen3_next",
        ("leaks", "refused: needs flash-linear-attention", "refused: needs causal-conv1d"),
    ),
    ("nemotron_h", ("leaks", "leaks", "refused: needs causal-conv1d")),
    ("falcon_h1", ("leaks", "leaks", "refused: needs causal-conv1d")),
    ("lfm2", ("leaks", "leaks", "refused: needs causal-conv1d")),
    ("gpt_oss", ("leaks", "leaks", "leaks")),  # eager on CPU: its mask ignores position_ids
    # transformers 5.25 refuses seq_idx without causal-conv1d (5.24 never gave it to the scan)
    ("mamba2", ("leaks", "leaks", "refused: needs causal-conv1d")),
]


def _config(tmp_path, model_type: str, overrides: dict | None = None):
    """The preset of model_type (with `overrides` on top) saved as config.json."""
    from transformers import AutoConfig

    from packtool.arch.tiny import PRESETS

    folder = tmp_path / model_type
    over = {**PRESETS.get(model_type, {}), **(overrides or {})}
    AutoConfig.for_model(model_type, **over).save_pretrained(folder)
    path = folder / "config.json"
    return json.loads(path.read_text()), str(path), folder


FAST = {"llama", "qwen3_5", "nemotron_h"}  # the pass / fail cases run in make test


@no_kernels
@pytest.mark.parametrize(
    ("model_type", "expected"),
    [pytest.param(*m, marks=[] if m[0] in FAST else [pytest.mark.slow]) for m in MATRIX],
    ids=[m[0] for m in MATRIX],
)
def test_matrix(tmp_path, model_type, expected):
    cfg, path, _ = _config(tmp_path, model_type)
    checks, report = model_check.run(cfg, path, model_type, model_samples(), "cpu", 0)
    cells = messages.cells(report)
    got = tuple(re.sub(r" \(.*| [0-9.e+-]+$", "", c) for c in cells.values())
    assert got == expected, cells
    isolation, control = checks
    assert isolation.passed == (expected[0] == "exact")
    assert control.passed, control.message  # the negative control differs on every architecture
    assert report["control"] > model_check.POWER * report["tolerance"]
    if not isolation.passed:  # names the layer kind, the difference and the fix
        assert re.search(r"layer \d+ \([a-z_ +]+: \w+\) differs by", isolation.message)
        assert "Fix:" in isolation.message
        assert report["minimum"] is None


def test_every_layer_kind_kept(tmp_path):
    cfg, path, _ = _config(tmp_path, "qwen3_next")
    _, report = model_check.run(cfg, path, "qwen3_next", model_samples(1), "cpu", 0)
    kinds = {k for layer in report["layers"] for k in layer}
    assert kinds == {"linear attention", "full attention", "moe"}
    assert len(report["layers"]) == 4  # 3 linear + 1 full: the shortest prefix with every kind


def test_sliding_window_below_documents(tmp_path):
    from packtool.arch import tiny

    cfg, path, _ = _config(tmp_path, "gemma3")
    _, report = model_check.run(cfg, path, "gemma3", model_samples(1), "cpu", 0)
    assert "sliding attention" in {k for layer in report["layers"] for k in layer}
    from transformers import AutoConfig

    small = tiny.widths(AutoConfig.from_pretrained(path), pack_len=56, window=4)
    assert small.sliding_window == 4


def test_control_without_power():
    """Rows whose later documents are one token long cannot show a leak: the control says so."""
    from packtool.verify.messages import control_check

    report = {"control": 0.0, "tolerance": 1e-4}
    check = control_check(report, model_check.POWER)
    assert not check.passed and "no power" in check.message


def test_fit_keeps_two_documents():
    s = model_samples(1, lens=(40, 10), pack_len=56)[0]
    cut = model_check.fit(s, 24)
    assert list(cut.seq_lengths) == [12, 10] and len(cut.input_ids) == 22
    assert cut.position_ids.tolist() == [*range(12), *range(10)]
    assert model_check.fit(model_samples(1, lens=(50,), pack_len=56)[0], 24) is None


def test_rows_of_different_lengths_batch_together(tmp_path):
    """Rows whose documents fill the pack to different lengths (pad tails of their own) are cut
    by fit to different lengths: they are padded to one width and batched, not a stack error."""
    rows = model_samples(1, lens=(24, 17, 9)) + model_samples(1, lens=(20, 10))
    cut = [model_check.fit(s, 1024) for s in rows]
    assert [len(c.input_ids) for c in cut] == [50, 30]
    padded = model_check.pad(cut[1], 50)
    assert len(padded.input_ids) == 50 and list(padded.seq_lengths) == [20, 10]
    assert padded.position_ids.tolist() == [*range(20), *range(10), *range(20)]
    assert (padded.labels[30:] == schema.IGNORE_INDEX).all()
    cfg, path, _ = _config(tmp_path, "llama")
    (isolation, control), report = model_check.run(cfg, path, "llama", rows, "cpu", 0)
    assert isolation.passed and control.passed, (isolation.message, control.message)
    assert report["rows"] == 2 and report["tokens_per_row"] == 50


def test_recorder_leaves_a_module_called_twice_per_forward_alone():
    """A block shared between layers (called twice in one forward, listed under two layers):
    its input is ambiguous, so the probe neither records nor substitutes it."""
    import torch

    from packtool.verify.forwards import Recorder

    shared, once = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(x):
        return once(shared(shared(x)))

    rec = Recorder(
        [
            (0, "block", "full attention", shared),
            (1, "block", "full attention", shared),
            (1, "mlp", "moe", once),
        ]
    )
    x = torch.randn(1, 3, 4)
    with rec, torch.no_grad():
        rec.inputs, rec.outputs = {}, {}
        y = forward(x)
        assert rec.shared == {0, 1} and set(rec.inputs) == {2} and set(rec.outputs) == {2}
        rec.clean = {0: torch.zeros(1, 3, 4), 1: torch.zeros(1, 3, 4)}
        assert torch.equal(forward(x), y)  # not substituted
        rec.clean = None


def test_unknown_model_type_is_not_checked(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_arch_xyz"}))
    (check,), report = model_check.run(
        {"model_type": "no_such_arch_xyz"},
        str(tmp_path / "config.json"),
        "x",
        model_samples(),
        "cpu",
        0,
    )
    assert check.unchecked and not check.passed and check.status == "not_checked"
    assert "model_type 'no_such_arch_xyz' is not known to transformers" in check.message
    assert report["status"] == "not checked"


runner = CliRunner()


def test_cli_passes_llama_and_fails_qwen3_5(tmp_path, clean_pack):
    _, _, llama = _config(tmp_path, "llama")
    r = runner.invoke(app, ["verify", str(clean_pack), "--model", str(llama), "--rows", "2"])
    assert r.exit_code == 0, r.output
    assert "inputs  position_ids" in r.output and "exact" in r.output
    out = tmp_path / "v.json"
    _, _, qwen = _config(tmp_path, "qwen3_5")
    r = runner.invoke(
        app, ["verify", str(clean_pack), "--model", str(qwen), "--rows", "2", "--json", str(out)]
    )
    if KERNELS:
        pytest.skip("kernel packages installed")
    assert r.exit_code == 1, r.output
    assert "FAIL model isolation" in r.output and "linear attention" in r.output
    assert "flash-linear-attention" in r.output and "Traceback" not in r.output
    report = json.loads(out.read_text())["model"]
    assert report["minimum"] is None and set(report["matrix"]) == {
        "position_ids",
        "+cu_seq_lens",
        "+seq_idx",
    }


def test_cli_usage_errors(tmp_path, clean_pack):
    r = runner.invoke(app, ["verify", str(clean_pack), "--model", str(tmp_path / "none")])
    assert r.exit_code == 2 and "no such file or folder" in r.output
    r = runner.invoke(app, ["verify", str(clean_pack), "--allow-download"])
    assert r.exit_code == 2 and "add --model" in r.output
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "no_such_arch_xyz"}))
    r = runner.invoke(app, ["verify", str(clean_pack), "--model", str(tmp_path), "--rows", "2"])
    assert r.exit_code == 3 and "no_such_arch_xyz" in r.output and "Traceback" not in r.output
    assert "NOT CHECKED model isolation" in r.output and "verify not checked" in r.output


def test_rows_0_integrity_only_with_its_rate(tmp_path, clean_pack):
    _, _, folder = _config(tmp_path, "llama")
    r = runner.invoke(
        app, ["verify", str(clean_pack), "--model", str(folder), "--rows", "0", "--json", "-"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["passed"] and d["timings_s"]["integrity_tokens_per_s"] > 0  # not "(0.0k/s)"
    (iso,) = [c for c in d["checks"] if c["name"] == "model isolation"]
    assert iso["status"] == "skip"


def test_kernel_line_counts_in_words(tmp_path, clean_pack):
    _, _, folder = _config(tmp_path, "llama", {"num_hidden_layers": 1})
    r = runner.invoke(app, ["verify", str(clean_pack), "--model", str(folder), "--rows", "1"])
    assert r.exit_code == 0, r.output
    assert "(1 layer: full attention)" in r.output and ", 1 row of <= " in r.output


def test_minimax_default_builds_its_linear_attention_and_names_the_leaking_layer(tmp_path):
    """MiniMax declares linear_attention layers (MiniMaxLightningAttention, a class named
    *Attention): the tiny copy keeps one, and the probe names the layer that leaked, by index and
    declared type, not a guess from the first layer."""
    cfg, path, _ = _config(tmp_path, "minimax")
    (isolation, _), report = model_check.run(cfg, path, "minimax", model_samples(1), "cpu", 0)
    assert report["layer_types"] == ["full_attention", "linear_attention"]
    assert report["not_built"] == [] and not isolation.passed and not isolation.unchecked
    assert "layer 1 (linear_attention: MiniMaxLightningAttention) differs by" in isolation.message
    assert "layer 0 (" not in isolation.message  # its full attention is isolated
    assert [e["layer"] for e in report["leaking_layers"]["position_ids"]] == [1]


@pytest.mark.slow
def test_minimax_two_layers_blames_layer_0(tmp_path):
    over = {"layer_types": ["linear_attention", "full_attention"], "num_hidden_layers": 2}
    cfg, path, _ = _config(tmp_path, "minimax", over)
    (isolation, _), report = model_check.run(cfg, path, "minimax", model_samples(1), "cpu", 0)
    assert "layer 0 (linear_attention: MiniMaxLightningAttention)" in isolation.message
    assert "full attention (layer 0)" not in isolation.message


def test_a_declared_kind_not_built_is_not_checked(tmp_path, monkeypatch):
    """All layers built keep documents apart, but the config declares a kind the tiny copy lacks:
    'not checked' naming it, never a pass."""
    from packtool.arch import layers

    cfg, path, _ = _config(tmp_path, "llama", {"num_hidden_layers": 2})
    monkeypatch.setattr(layers, "not_built", lambda full, small: ["layer_types=linear_attention"])
    (isolation, _), report = model_check.run(cfg, path, "llama", model_samples(1), "cpu", 0)
    assert isolation.unchecked and not isolation.passed
    assert "linear_attention not checked" in isolation.message
    assert report["status"] == "not checked"


def test_remote_code_refused_before_transformers_is_asked(tmp_path, clean_pack, monkeypatch):
    """An auto_map config: one line, exit 3, and transformers is never asked (no y/N prompt)."""
    import transformers

    def asked(*a, **k):  # pragma: no cover - the failure
        raise AssertionError("transformers was asked to read a config with its own code")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", asked)
    (tmp_path / "config.json").write_text(
        json.dumps({"model_type": "custom_xyz", "auto_map": {"AutoConfig": "c.CustomConfig"}})
    )
    r = runner.invoke(app, ["verify", str(clean_pack), "--model", str(tmp_path), "--rows", "1"])
    assert r.exit_code == 3, r.output
    assert "does not run a model's own code" in r.output and "[y/N]" not in r.output


def test_an_encoder_is_not_checked(tmp_path, clean_pack):
    _, _, bert = _config(tmp_path, "bert")
    r = runner.invoke(
        app, ["verify", str(clean_pack), "--model", str(bert), "--rows", "1", "--json", "-"]
    )
    assert r.exit_code == 3
    doc = json.loads(r.output[r.output.index("{") :])
    assert doc["status"] == "not checked" and doc["not_checked"] == ["model isolation"]
    assert "not a causal LM" in doc["model"]["reason"] and not doc["passed"]


def test_the_bound_ends_not_checked(tmp_path):
    """A check past its wall-clock limit ends 'not checked: ... exceeded N s', its process killed."""
    cfg, path, _ = _config(tmp_path, "llama")
    (check,), report = model_check.bounded(
        cfg, path, "llama", model_samples(1), "cpu", 0, limit_s=0.01
    )
    assert check.unchecked and "exceeded 0 s" in check.message
    (check,), _ = model_check.bounded(cfg, path, "llama", model_samples(1), "cpu", 0, memory=1)
    assert check.unchecked and "GiB of memory" in check.message


def test_the_bound_returns_the_result(tmp_path):
    cfg, path, _ = _config(tmp_path, "llama", {"num_hidden_layers": 1})
    (isolation, control), report = model_check.bounded(
        cfg, path, "llama", model_samples(1), "cpu", 0
    )
    assert isolation.passed and control.passed and report["status"] == "passed"
