"""Labels on real tokenizers of three model families, checked by an independent reader of the packs.

For the built-in Qwen3 tokenizer and the real Llama-3 and gpt-oss tokenizers in ../shared/tokenizers,
every file in ../shared/data is packed with `--chat-template auto` (and gpt-oss's own template with
`--train-on last`). The checker below never calls the encoder: it reads the shards, cuts each
packed document's trained runs (labels != -100), decodes them with the raw `tokenizers` library and
compares them with what each family's format says the model must write for each assistant turn of
the record, written here from the formats' documentation:

    Qwen / ChatML  [<think>\\n R \\n</think>\\n\\n] content [\\n<tool_call>\\n{"name": .., "arguments": ..}\\n</tool_call>] <|im_end|>
    Llama 3        content.strip() <|eot_id|>
    gpt-oss        <|channel|>final<|message|> content <|end|>          (<|return|> on the conversation's last turn,
                   preceded there by <|channel|>analysis<|message|> R <|end|><|start|>assistant when it has reasoning);
                   tool calls: [<|channel|>analysis<|message|> R <|end|><|start|>assistant]
                                to=functions.NAME<|channel|>commentary json<|message|> ARGS <|call|>

Runs must match one to one, in order, the record's trained assistant turns: so nothing from system,
user or tool turns is trained and no assistant turn is missed. Records the run refused are allowed
only for the stated reasons. Skipped cleanly where the shared folders are absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from paths import SHARED

from packtool.api import load_tokenized, pack
from packtool.config import ReadConfig, TokenizeConfig
from packtool.formats.detect import detect_format
from packtool.formats.normalize import normalize
from packtool.io.readers import iter_records
from packtool.pack import PackConfig

DATA = sorted((SHARED / "data").glob("*.json*")) if (SHARED / "data").is_dir() else []
LLAMA3 = SHARED / "tokenizers" / "llama3"
GPTOSS = SHARED / "tokenizers" / "gptoss"
READ = ReadConfig(on_error="skip")


def _trl_has(name: str) -> bool:
    from packtool.tokenization.chat_template import trl_dir

    folder = trl_dir()
    return folder is not None and (folder / f"{name}.jinja").is_file()


# ------------------------------------------------------------------------- what each family writes


def _chatml_calls(m) -> str:
    out = ""
    for j, call in enumerate(m.get("tool_calls") or ()):
        fn = call["function"]
        args = (
            fn["arguments"]
            if isinstance(fn["arguments"], str)
            else json.dumps(fn["arguments"], ensure_ascii=False)
        )
        out += "\n" if (j == 0 and m["content"]) or j > 0 else ""
        out += (
            '<tool_call>\n{"name": "' + fn["name"] + '", "arguments": ' + args + "}\n</tool_call>"
        )
    return out


def expected_chatml(messages, train_on):
    out = []
    for m in messages:
        if m["role"] != "assistant" or m.get("weight") == 0:
            continue
        r = m.get("reasoning_content")
        think = f"<think>\n{r.strip(chr(10))}\n</think>\n\n" if r else ""
        out.append(think + m["content"] + _chatml_calls(m) + "<|im_end|>")
    return out


def expected_llama3(messages, train_on):
    return [
        m["content"].strip() + "<|eot_id|>"
        for m in messages
        if m["role"] == "assistant" and m.get("weight") != 0
    ]


def expected_gptoss(messages, train_on):
    """Exact strings, or ("call", name, arguments) for a tool-call turn (its JSON is parsed back)."""
    out = []
    for i, m in enumerate(messages):
        if m["role"] != "assistant" or m.get("weight") == 0:
            continue
        last = i == len(messages) - 1
        if m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            out.append(
                ("call", fn["name"], fn["arguments"], m.get("reasoning_content") or m["content"])
            )
        elif last:
            r = m.get("reasoning_content")
            head = f"<|channel|>analysis<|message|>{r}<|end|><|start|>assistant" if r else ""
            out.append(head + "<|channel|>final<|message|>" + m["content"] + "<|return|>")
        else:
            out.append("<|channel|>final<|message|>" + m["content"] + "<|end|>")
    return out


def _matches(run: str, want) -> bool:
    if isinstance(want, str):
        return run == want
    _, name, args, analysis = want
    head = f"<|channel|>analysis<|message|>{analysis}<|end|><|start|>assistant" if analysis else ""
    if head and run.startswith(
        head
    ):  # harmony keeps a call's reasoning until a final answer follows
        run = run[len(head) :]
    if not (
        run.startswith(f" to=functions.{name}<|channel|>commentary") and run.endswith("<|call|>")
    ):
        return False
    return (
        json.loads(run[run.rindex("<|message|>") + len("<|message|>") : -len("<|call|>")]) == args
    )


# ------------------------------------------------------------------------- reading packs back


def packed_documents(out: Path):
    """{source_index: (ids, labels)} of every packed document (split documents are not expected)."""
    docs = {}
    for shard in sorted((out / "data").glob("*.parquet")):
        t = pq.read_table(shard)
        ids = np.stack(t.column("input_ids").to_numpy(zero_copy_only=False))
        labels = np.stack(t.column("labels").to_numpy(zero_copy_only=False))
        for r, (lengths, sources) in enumerate(
            zip(
                t.column("seq_lengths").to_pylist(),
                t.column("source_index").to_pylist(),
                strict=True,
            )
        ):
            at = 0
            for n, s in zip(lengths, sources, strict=True):
                assert s not in docs, f"document {s} packed twice"
                docs[s] = (ids[r, at : at + n], labels[r, at : at + n])
                at += n
    return docs


def trained_runs(ids, labels, tok) -> list[str]:
    on = labels != -100
    assert np.array_equal(labels[on], ids[on]), "a trained label differs from its input id"
    edges = np.flatnonzero(np.diff(np.concatenate([[0], on.astype(np.int8), [0]])))
    return [
        tok.decode(ids[a:b].tolist(), skip_special_tokens=False)
        for a, b in zip(edges[::2], edges[1::2], strict=True)
    ]


def records(data: Path, read: ReadConfig):
    recs = [r.record for r in iter_records(str(data), read)]
    fmt, _ = detect_format(recs[0], read)
    return [normalize(r, fmt, read) for r in recs]


def check_family(tmp_path, data: Path, tokenizer, expected, allowed_refusals, **options):
    from tokenizers import Tokenizer

    from packtool.tokenization.loading import load_spec

    cfg = TokenizeConfig(
        tokenizer=str(tokenizer) if tokenizer else None,
        num_proc=1,
        cache=False,
        read=READ,
        **options,
    )
    td = load_tokenized(str(data), cfg, progress=False)
    out = tmp_path / data.stem
    pack(td, PackConfig(pack_len=16384, overflow="split"), out)
    manifest = json.loads((out / "manifest.json").read_text())
    assert not manifest["split"], "no document should need splitting at 16384"
    for s in manifest["skipped"]:
        assert any(a in s["reason"] for a in allowed_refusals), (data.name, s)
    tok = Tokenizer.from_str(load_spec(cfg.tokenizer).backend_json)
    docs = packed_documents(out)
    examples = records(data, READ)
    checked = 0
    for src, (ids, labels) in docs.items():
        ex = examples[src]
        msgs = ex["messages"]
        want = expected(msgs, cfg.train_on)
        if cfg.train_on == "last" or manifest["tokenizer"].get("chat_template_mode") == "last":
            want = want[-1:] if msgs and msgs[-1]["role"] == "assistant" else []
        got = trained_runs(ids, labels, tok)
        assert len(got) == len(want), (data.name, src, got, want)
        for g, w in zip(got, want, strict=True):
            assert _matches(g, w), (data.name, src, g, w)
        checked += 1
    return {
        "file": data.name,
        "packed": checked,
        "refused": len(manifest["skipped"]),
        "template": manifest["tokenizer"]["chat_template"],
        "mode": manifest["tokenizer"]["chat_template_mode"],
    }


# ------------------------------------------------------------------------- the families

QWEN_REFUSALS = ("no assistant", "empty conversation")


@pytest.mark.parametrize("data", DATA, ids=[d.name for d in DATA])
def test_builtin_qwen3_labels_are_exact(tmp_path, data):
    got = check_family(tmp_path, data, None, expected_chatml, QWEN_REFUSALS)
    assert got["template"] == "chatml-train" and got["mode"] == "markers" and got["packed"] > 0, got


LLAMA_REFUSALS = (
    "drops the tool call",
    "drops the tool definition",
    "drops the text of turn",
    "drops the arguments",
)


@pytest.mark.slow
@pytest.mark.parametrize("data", DATA, ids=[d.name for d in DATA])
def test_llama3_labels_are_exact_or_refused(tmp_path, data):
    if not LLAMA3.is_dir():
        pytest.skip(f"{LLAMA3} is absent")
    if (
        "reason_tool_use" in data.name
    ):  # every record has tool calls or reasoning, which Llama 3.0 cannot render
        from packtool.errors import PacktoolError

        with pytest.raises(
            PacktoolError, match=r"jsonl:1: chat template 'trl:llama3_training' drops the"
        ):
            load_tokenized(
                str(data),
                TokenizeConfig(tokenizer=str(LLAMA3), num_proc=1, cache=False),
                progress=False,
            )
        return
    got = check_family(tmp_path, data, LLAMA3, expected_llama3, LLAMA_REFUSALS)
    if (
        "glaive" in data.name
    ):  # Llama 3.0's template has no tools: every tool record is refused, never packed
        assert got["refused"] > 0
    assert got["mode"] == "markers" if _trl_has("llama3_training") else got["mode"] == "prefix"


# gpt-oss's template raises on some shapes (content and reasoning beside a tool call, a tool turn
# without a preceding call); harmony drops a tool-calling turn's text when a final answer follows.
GPTOSS_REFUSALS = (
    "failed on this record",
    "drops the text of turn",
    "drops the tool",
    "drops the arguments",
)


@pytest.mark.slow
@pytest.mark.parametrize("data", DATA, ids=[d.name for d in DATA])
def test_gptoss_training_template_labels_are_exact(tmp_path, data):
    if not GPTOSS.is_dir() or not _trl_has("gptoss_training"):
        pytest.skip("needs ../shared/tokenizers/gptoss and TRL's gptoss_training.jinja")
    got = check_family(tmp_path, data, GPTOSS, expected_gptoss, GPTOSS_REFUSALS)
    assert got["template"] == "trl:gptoss_training" and got["mode"] == "markers", got


@pytest.mark.slow  # tests/test_templates.py covers the same mode on one conversation in make test
@pytest.mark.parametrize(
    "data",
    [d for d in DATA if d.name in ("dummy_conversation.json", "v1_sft_demo.jsonl")],
    ids=lambda d: d.name,
)
def test_gptoss_own_template_with_train_on_last(tmp_path, data):
    if not GPTOSS.is_dir():
        pytest.skip(f"{GPTOSS} is absent")
    got = check_family(
        tmp_path,
        data,
        GPTOSS,
        expected_gptoss,
        GPTOSS_REFUSALS,
        chat_template="tokenizer",
        train_on="last",
    )
    assert got["mode"] == "last" and got["packed"] > 0, got
