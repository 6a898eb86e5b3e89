"""inspect on a folder whose files differ in format: each file detected on its own, positions named
within the record's own file."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from packtool.cli import app
from packtool.config import ReadConfig, TokenizeConfig
from packtool.errors import PacktoolError
from packtool.inspecting import inspect_example

CHAT = [
    {
        "messages": [
            {"role": "user", "content": f"hi {i}"},
            {"role": "assistant", "content": f"ok {i}"},
        ]
    }
    for i in range(3)
]
ALPACA = [{"instruction": f"say {w}", "input": "", "output": w} for w in ("one", "two")]


@pytest.fixture
def mixed(tmp_path):
    """a_chat.jsonl (3 messages records, --index 0..2) + b_inst.json (2 alpaca, --index 3..4)."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a_chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHAT))
    (folder / "b_inst.json").write_text(json.dumps(ALPACA))
    return folder


def cfg(**read):
    return TokenizeConfig(num_proc=1, tokenizer_backend="hf", read=ReadConfig(**read))


def test_each_file_detected_on_its_own(mixed):
    first = inspect_example(str(mixed), cfg(), 2)
    assert first["format"] == "messages" and first["line"] == 3 and "record" not in first
    second = inspect_example(str(mixed), cfg(), 4)
    assert second["format"] == "alpaca", second["format_reason"]
    assert second["index"] == 4 and second["record"] == 1
    assert second["file"].endswith("b_inst.json")
    text = "".join(r["text"] for r in second["runs"])
    assert "say two" in text and "two" in "".join(r["text"] for r in second["runs"] if r["loss"])


def test_errors_name_the_record_within_its_file(mixed):
    bad = json.loads((mixed / "b_inst.json").read_text())
    bad[1] = {"instruction": "say", "input": "", "output": 7}
    (mixed / "b_inst.json").write_text(json.dumps(bad))
    with pytest.raises(PacktoolError) as e:
        inspect_example(str(mixed), cfg(), 4)
    assert "b_inst.json record 1:" in str(e.value)
    assert "record 4" not in str(e.value)


def test_cli_header_names_file_record_and_index(mixed):
    r = CliRunner().invoke(
        app,
        ["inspect", str(mixed), "--index", "4", "--tokenizer-backend", "hf"],
        env={"COLUMNS": "300"},  # a long tmp path would otherwise fold mid-name
    )
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())  # rich wraps long paths at the terminal width
    assert "b_inst.json record 1 (--index 4)" in flat
    assert "format: alpaca" in flat


def test_a_compiled_template_is_inspected_without_jinja(tmp_path):
    """inspect renders with the plan's renderer (MiniJinja for a TRL template): transformers' jinja
    is not imported once the spec and the template verdict are cached, and ids and labels are
    those of the jinja reference (--tokenizer-backend hf)."""
    import subprocess
    import sys

    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CHAT))
    ref = inspect_example(str(data), cfg_for("hf"), 1)
    assert ref["tokenizer_backend"]["renderer"] == "jinja"
    code = (
        "import json, sys; from packtool.config import TokenizeConfig; "
        "from packtool.inspecting import inspect_example; "
        f"r = inspect_example({str(data)!r}, TokenizeConfig(num_proc=1, chat_template="
        "'trl:qwen3_training'), 1); "
        "print(json.dumps([r['input_ids'], r['labels'], r['tokenizer_backend']['renderer'], "
        "'transformers.utils.chat_template_utils' in sys.modules]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ids, labels, renderer, jinja = json.loads(out.stdout.splitlines()[-1])
    assert (ids, labels) == (ref["input_ids"], ref["labels"])
    assert renderer == "compiled" and not jinja


def cfg_for(backend):
    return TokenizeConfig(num_proc=1, tokenizer_backend=backend, chat_template="trl:qwen3_training")


def test_a_prompt_completion_prompt_decodes_whole(tmp_path):
    """inspect encodes a string prompt and its completion in two calls; the runs it shows decode
    with a tokenizer cut to both, so non-Latin prompt text is shown, not only the completion's."""
    import json

    from packtool.config import TokenizeConfig
    from packtool.inspecting import inspect_example

    path = tmp_path / "pc.jsonl"
    record = {"prompt": "你好，请介绍一下你自己。", "completion": "我是一个助手。"}
    path.write_text(json.dumps(record, ensure_ascii=False) + "\n", encoding="utf-8")
    got = inspect_example(str(path), TokenizeConfig(), 0)
    assert [r["text"] for r in got["runs"]] == [
        "你好，请介绍一下你自己。",
        "我是一个助手。<|im_end|>",
    ]
