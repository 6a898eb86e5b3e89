"""Nothing trained that the data does not hold is silent (issue 23, items 3, 4, 6, 7): empty blocks a
template writes, empty assistant turns, examples without loss and reasoning a template drops are
counted per kind (label_audit.label_notes → tokenizer.label_audit), said, and refused by --strict-labels;
a near miss of an official template is recognised; a template without a tool role says so."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from packtool.config import TokenizeConfig
from packtool.errors import PacktoolError, UsageError
from packtool.formats.turns import make_example, make_message
from packtool.tokenization import chat_template as ct
from packtool.tokenization.chat_template import choose
from packtool.tokenization.encode import Encoder
from packtool.tokenization.loading import TokenizerSpec

CHAT = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello."},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye."},
]
# axolotl's conversation.missingturns.json: an assistant turn whose content is ""
MISSING = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "Still there?"},
    {"role": "assistant", "content": "Yes."},
]


@pytest.fixture(scope="module")
def spec(qwen):
    return TokenizerSpec.from_loaded(qwen)


def chat(messages):
    return make_example(
        "chat",
        [make_message(m["role"], m["content"], reasoning=m.get("reasoning")) for m in messages],
    )


def need_trl(name: str) -> None:
    folder = ct.trl_dir()
    if folder is None or not (folder / name).is_file():
        pytest.skip("TRL's template files are not installed")


def write(tmp_path, name, conversations) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps({"messages": m}) + "\n" for m in conversations))
    return str(path)


def load(path, **kw):
    from packtool.api import load_tokenized

    return load_tokenized(path, TokenizeConfig(num_proc=1, cache=False, **kw), progress=False)


# ------------------------------------------------------------------------- item 3: empty turns


def test_an_empty_assistant_turn_is_counted_said_and_refusable(tmp_path):
    path = write(tmp_path, "missing.jsonl", [CHAT, MISSING])
    td = load(path)
    assert td.tokenizer["label_audit"] == {
        "empty_turns": {"examples": 1, "turns": 1, "tokens": 1, "first": "missing.jsonl record 1"}
    }
    assert any(
        "1 assistant turn(s) of 1 example(s) have no text, reasoning or tool call: only what the "
        "template writes is trained in them, their end of turn (1 token(s) in all)"
        in w
        and w.endswith("source indices 1")
        for w in td.warnings
    )
    with pytest.raises(
        PacktoolError,
        match=r"^--strict-labels: missing\.jsonl record 1 trains an empty assistant turn .*"
        r"\(empty_turns; 1 example\(s\) in all",
    ):
        load(path, strict_labels=True)
    # a cache hit is refused the same way
    from packtool.api import load_tokenized

    load_tokenized(path, TokenizeConfig(num_proc=1), progress=False)
    with pytest.raises(PacktoolError, match="empty_turns"):
        load_tokenized(path, TokenizeConfig(num_proc=1, strict_labels=True), progress=False)


def test_clean_data_records_nothing_and_passes_strict(tmp_path):
    td = load(write(tmp_path, "clean.jsonl", [CHAT, CHAT[:2]]), strict_labels=True)
    assert "label_audit" not in td.tokenizer  # manifests of clean data keep their bytes
    assert not any("have no text" in w or "no loss token" in w for w in td.warnings)


def test_an_example_without_loss_is_a_kind_of_its_own(tmp_path):
    path = write(tmp_path, "noloss.jsonl", [CHAT, CHAT[:1]])
    td = load(path)
    assert td.tokenizer["label_audit"] == {
        "zero_loss_documents": {"examples": 1, "first": "noloss.jsonl record 1"}
    }
    with pytest.raises(PacktoolError, match=r"noloss\.jsonl record 1 has no loss token"):
        load(path, strict_labels=True)


# ------------------------------------------------------------------------- item 4: think blocks


def test_qwen3_training_trains_an_empty_think_block_in_every_turn_and_says_so(spec, tmp_path):
    need_trl("qwen3_training.jinja")
    t = choose(spec, "trl:qwen3_training")
    enc = Encoder(spec, t).encode([chat(CHAT)])
    # <think> \n\n </think> \n\n: four tokens in each of the two turns
    assert enc.notes == [{"template_inserted": [2, 8]}]
    path = write(tmp_path, "plain.jsonl", [CHAT, CHAT[:2]])
    td = load(path, chat_template="trl:qwen3_training")
    assert td.tokenizer["label_audit"] == {
        "template_inserted": {
            "examples": 2,
            "turns": 3,
            "tokens": 12,
            "first": "plain.jsonl record 0",
        }
    }
    assert any(
        "chat template 'trl:qwen3_training' writes an empty block the data does not hold" in w
        and "3 trained assistant turn(s) of 2 example(s), 12 trained token(s)" in w
        for w in td.warnings
    )
    with pytest.raises(
        PacktoolError,
        match=r"plain\.jsonl record 0 trains an empty block the template wrote.*template_inserted",
    ):
        load(path, chat_template="trl:qwen3_training", strict_labels=True)


def test_a_think_block_the_data_has_is_not_counted(spec):
    need_trl("qwen3_training.jinja")
    t = choose(spec, "trl:qwen3_training")
    with_reasoning = [CHAT[0], {**CHAT[1], "reasoning": "Greet back."}]
    in_content = [CHAT[0], {"role": "assistant", "content": "<think>\n\n</think>\n\nHello."}]
    enc = Encoder(spec, t).encode([chat(with_reasoning), chat(in_content)])
    assert enc.errors == [None, None] and enc.notes == [{}, {}]


def test_chatml_train_on_qwen3_says_it_writes_no_think_block(tmp_path):
    path = write(tmp_path, "plain.jsonl", [CHAT])
    td = load(path)  # the built-in Qwen3 tokenizer, chatml-train
    assert "label_audit" not in td.tokenizer  # said, never recorded or refused
    assert any(
        "chat template 'chatml-train' writes no <think> block in assistant turns without "
        "reasoning (1 example(s))"
        in w
        and "trl:qwen3_training" in w
        for w in td.warnings
    )
    load(path, strict_labels=True)


def test_reasoning_an_official_template_drops_is_counted(spec, tmp_path):
    # Qwen3's official template keeps the reasoning of the turns after the last user turn only
    own = replace(spec, builtin=False)
    t = choose(own, "tokenizer", train_on="last")
    turns = [CHAT[0], {**CHAT[1], "reasoning": "Greet back."}, *CHAT[2:]]
    enc = Encoder(own, t, "last").encode([chat(turns)])
    # ...and writes an empty <think></think> (4 tokens) into the last turn, which had none
    assert enc.errors == [None]
    assert enc.notes == [{"dropped_reasoning": [1, 0], "template_inserted": [1, 4]}]


@pytest.mark.parametrize("data", [CHAT, MISSING])
def test_fast_path_and_reference_path_agree_on_ids_labels_and_notes(spec, data):
    from packtool.tokenization.pipeline import fast_refused

    if fast_refused(spec, "auto") is not None:
        pytest.skip("fastokens is not available here")
    t = choose(spec, None)
    ref = Encoder(spec, t, backend="hf", renderer="jinja").encode([chat(data)])
    fast = Encoder(spec, t, backend="fastokens", renderer="native").encode([chat(data)])
    assert np.array_equal(ref.ids, fast.ids) and np.array_equal(ref.label_values, fast.label_values)
    assert ref.notes == fast.notes


def test_inspect_warns_and_strict_labels_refuses(tmp_path):
    from typer.testing import CliRunner

    from packtool.cli import app

    path = write(tmp_path, "missing.jsonl", [MISSING])
    out = CliRunner().invoke(app, ["inspect", path])
    assert out.exit_code == 0, out.output
    assert "warning:" in out.output and "have no text, reasoning or tool call" in " ".join(
        out.output.split()
    )
    out = CliRunner().invoke(app, ["inspect", path, "--strict-labels"])
    assert out.exit_code == 1
    said = " ".join(out.output.split())
    assert "--strict-labels: " in said and "missing.jsonl:1 trains an empty assistant turn" in said


def test_pack_strict_labels_is_a_one_line_error(tmp_path):
    from typer.testing import CliRunner

    from packtool.cli import app

    path = write(tmp_path, "missing.jsonl", [CHAT, MISSING])
    out = CliRunner().invoke(
        app, ["pack", path, "-o", str(tmp_path / "out"), "--len", "64", "--strict-labels"]
    )
    assert out.exit_code == 1
    said = " ".join(out.output.split())
    assert "--strict-labels: missing.jsonl record 1 trains an empty assistant turn" in said
    assert not (tmp_path / "out").exists()


def test_the_manifest_records_the_audit_and_pack_warns(tmp_path):
    from typer.testing import CliRunner

    from packtool.cli import app
    from packtool.schema import Manifest

    path = write(tmp_path, "missing.jsonl", [CHAT, MISSING])
    out = CliRunner().invoke(app, ["pack", path, "-o", str(tmp_path / "out"), "--len", "64"])
    assert out.exit_code == 0, out.output
    assert "warning: 1 assistant turn(s) of 1 example(s) have no text" in " ".join(
        out.output.split()
    )
    m = Manifest.from_json(json.loads((tmp_path / "out" / "manifest.json").read_text()))
    assert m.label_audit == {
        "empty_turns": {"examples": 1, "turns": 1, "tokens": 1, "first": "missing.jsonl record 1"}
    }


# ------------------------------------------------------------------------- item 6: near misses


def test_an_older_revision_of_an_official_template_is_a_near_miss(spec):
    need_trl("qwen3.jinja")
    official = (ct.trl_dir() / "qwen3.jinja").read_text()
    older = official.replace("reasoning_content.strip('\\n')", "reasoning_content.strip()")
    name, ratio, differ, blocks = ct.trl_near_miss(older)
    assert name == "qwen3_training" and 0.85 <= ratio < 1 and 0 < differ < blocks
    own = replace(spec, builtin=False, chat_template=older)
    picked = ct.pick(own, None)
    assert picked.near == "qwen3_training"
    assert "near miss of TRL's official qwen3.jinja" in picked.why
    assert "--chat-template trl:qwen3_training" in picked.why
    # not prefix-preserving: the refusal names TRL's training template first, then chatml-train
    with pytest.raises(
        UsageError,
        match=r"fix: --chat-template trl:qwen3_training .*; or --chat-template chatml-train",
    ) as refused:
        choose(own, None)
    # and says how near
    assert (
        f"qwen3.jinja, the official template this one is a near miss of: {ratio:.0%} alike, "
        in (str(refused.value))
    )


def test_the_builtin_qwen3_template_is_recognised_as_a_near_miss():
    need_trl("qwen3.jinja")
    from packtool.tokenization.loading import load_tokenizer

    # a fresh load: the session's shared tokenizer may carry another test's template
    builtin = TokenizerSpec.from_loaded(load_tokenizer(None)).chat_template
    found = ct.trl_near_miss(builtin)
    assert found is not None, builtin[:200]
    name, ratio, _, _ = found
    assert name == "qwen3_training" and ratio >= ct.NEAR


def test_a_near_miss_found_without_trl_is_not_remembered_once_trl_is_found(monkeypatch):
    need_trl("qwen3.jinja")
    official = (ct.trl_dir() / "qwen3.jinja").read_text()
    older = official.replace("reasoning_content.strip('\\n')", "reasoning_content.strip()")
    found = ct.trl_dir
    monkeypatch.setattr(ct, "trl_dir", lambda: None)
    assert ct.trl_near_miss(older) is None
    monkeypatch.setattr(ct, "trl_dir", found)
    assert ct.trl_near_miss(older)[0] == "qwen3_training"


def test_a_one_line_template_near_miss_is_found_block_by_block():
    need_trl("deepseekv3.jinja")
    official = (ct.trl_dir() / "deepseekv3.jinja").read_text()
    assert "\n" not in official.strip()  # DeepSeek-V3's template is one line
    older = official.replace("{% set ns = namespace(", "{%- set ns = namespace(", 1)
    assert older != official
    assert ct.trl_near_miss(older)[0] == "deepseekv3_training"


def test_a_template_below_a_near_miss_names_its_nearest_official_templates(spec):
    """DeepSeek-V3's own template is about 72% alike TRL's deepseekv3.jinja: not chosen as its
    training version, but named, with how near, so the user can compare."""
    need_trl("deepseekv3.jinja")
    blocks = ct._blocks((ct.trl_dir() / "deepseekv3.jinja").read_text())
    farther = "".join(b for i, b in enumerate(blocks) if i % 3)  # a third of its blocks gone
    assert ct.trl_near_miss(farther) is None
    picked = ct.pick(replace(spec, builtin=False, chat_template=farther), None)
    assert picked.near is None
    ratio = ct.trl_nearest(farther)[0][1]
    assert (
        f"nearest of TRL's official templates: deepseekv3.jinja ({ratio:.0%} alike)" in picked.why
    )
    assert "--chat-template trl:deepseekv3_training before training on one" in picked.why


def test_the_tokenizers_own_near_miss_chosen_by_name_keeps_its_fix(spec):
    """--chat-template tokenizer on a near miss that is not prefix-preserving: the refusal still
    names TRL's training version first, as it does under auto."""
    need_trl("qwen3.jinja")
    official = (ct.trl_dir() / "qwen3.jinja").read_text()
    older = official.replace("reasoning_content.strip('\\n')", "reasoning_content.strip()")
    own = replace(spec, builtin=False, chat_template=older)
    assert ct.pick(own, "tokenizer").near == "qwen3_training"
    with pytest.raises(UsageError, match=r"fix: --chat-template trl:qwen3_training \(TRL's"):
        choose(own, "tokenizer")


@pytest.mark.parametrize(
    "controls, names",
    [
        ({"<|im_start|>": 1, "<|im_end|>": 2}, ["chatml-train"]),
        ({"<|start_header_id|>": 1, "<|eot_id|>": 2}, ["trl:llama3_training"]),
        ({"<s>": 1, "</s>": 2}, []),
    ],
    ids=["chatml", "llama3", "unknown"],
)
def test_no_chat_template_names_what_fits_the_tokenizer(spec, controls, names):
    """A tokenizer without a template is told what fits its control tokens, and never sent to a
    template whose markers it lacks (which would refuse in turn)."""
    bare = replace(spec, builtin=False, chat_template=None, control_tokens=controls)
    with pytest.raises(PacktoolError) as refused:
        ct.pick(bare, None)
    msg = str(refused.value)
    assert "has no chat template; pass " in msg and "--chat-template FILE" in msg
    for name in names:
        assert f"--chat-template {name}" in msg
    if "chatml-train" not in names:
        assert "chatml-train" not in msg


def test_chatml_train_on_a_tokenizer_without_template_or_chatml_tokens_does_not_send_back(
    spec, monkeypatch
):
    """The markers refusal of --chat-template chatml-train on such a tokenizer does not say 'omit
    --chat-template' (auto would refuse: no template of its own)."""
    bare = replace(spec, builtin=False, chat_template=None, control_tokens={"<s>": 1})
    monkeypatch.setattr(ct, "_not_one_token", lambda backend_json, markers: markers)
    with pytest.raises(UsageError) as refused:
        ct.check_markers(bare, ct.pick(bare, "chatml-train"))
    assert "omit --chat-template" not in str(refused.value)
    assert "--chat-template FILE written for this model" in str(refused.value)


def test_an_unrelated_template_is_no_near_miss():
    need_trl("qwen3.jinja")
    assert ct.trl_near_miss("{% for m in messages %}{{ m.content }}{% endfor %}") is None


# ------------------------------------------------------------------------- item 7: no tool role

# Gemma 3's template, reduced to what matters here: roles must alternate, no tool role at all
GEMMA_LIKE = (
    "{{ bos_token }}{%- for message in messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}"
)


def test_a_template_without_tool_roles_says_so_on_tool_data(spec):
    t = replace(ct.make_template(GEMMA_LIKE, "gemma-like.jinja"), family="Gemma", mode="prefix")
    msgs = [
        make_message("user", "Weather?"),
        make_message(
            "assistant",
            "",
            [{"type": "function", "function": {"name": "weather", "arguments": {"c": "Paris"}}}],
        ),
        make_message("tool", "21C"),
        make_message("assistant", "21C."),
    ]
    err = Encoder(spec, t).encode([make_example("chat", msgs)]).errors[0]
    assert "Conversation roles must alternate" in err
    assert "the template of Gemma has no tool role" in err
    assert "--on-error skip" in err and "a template that supports tools" in err
    plain = Encoder(spec, t).encode([chat(CHAT)]).errors[0]
    assert plain is None  # the hint is for tool data only


def test_label_notes_finds_blocks_as_the_joined_pieces_do():
    """label_notes joins the trained text around the turn's text only when "</" is in a piece or
    straddles the join: the notes equal the plain rule (join, then search) on texts built from
    block pieces, a lone "<" or "/" on each side of the turn's text, and whitespace."""
    import random
    import re

    from packtool.tokenization.label_audit import TEMPLATE_INSERTED, label_notes
    from packtool.tokenization.render import locate

    block = re.compile(r"<([A-Za-z_][\w-]*)>\s*</\1>\s*")

    def oracle(text, a, b, c):
        at = locate(text, c, a, b)
        rest = text[a:at] + text[at + len(c) : b]
        return [m.group(0) for m in block.finditer(rest)] if "</" in rest else []

    rng = random.Random(0)
    pieces = [
        "<think>",
        "</think>",
        "<",
        "/",
        "think>",
        "\n",
        " ",
        "x",
        "</",
        "<think><",
        "/think>",
    ]
    for _ in range(3000):
        c = rng.choice(["A", "Ab", "/A", "A<"])
        before = "".join(rng.choices(pieces, k=rng.randint(0, 4)))
        after = "".join(rng.choices(pieces, k=rng.randint(0, 4)))
        text = "p" + before + c + after + "q"
        a, b = 1, len(text) - 1
        if locate(text, c, a, b) != a + len(before):
            continue  # the turn's text first found elsewhere: the same rule, a different place
        msgs = [{"role": "user", "content": "p"}, {"role": "assistant", "content": c}]
        got = label_notes(msgs, text, [(1, (a, b))], len)
        want = oracle(text, a, b, c)
        assert got.get(TEMPLATE_INSERTED, [0, 0]) == (
            [len(want), sum(map(len, want))] if want else [0, 0]
        ), (text, got, want)
