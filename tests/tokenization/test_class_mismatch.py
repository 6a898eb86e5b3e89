"""A tokenizer folder whose tokenizer_config.json names a class that does not fit its tokenizer.json
(DeepSeek-V3 names LlamaTokenizerFast over a ByteLevel BPE): transformers' AutoTokenizer notices and
loads the file as it is; the named class would rebuild it with a Metaspace pre-tokenizer and drop
every space. packtool must resolve it as AutoTokenizer does, so the pack holds the trainer's ids."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli import app

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|User|>{{ m['content'] }}"
    "{% else %}<|Assistant|>{{ m['content'] }}<|end|>{% endif %}{% endfor %}"
)
CHATS = [
    [
        {"role": "user", "content": "Who are you?"},
        {"role": "assistant", "content": " Hello I am a model."},
    ],
    [
        {"role": "user", "content": "你好 世界"},
        {"role": "assistant", "content": "Hello, who are you? 你好"},
    ],
]


def bytelevel_folder_naming_llama(folder):
    """A small ByteLevel BPE trained in-process, its config naming LlamaTokenizerFast."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|begin|>", "<|end|>", "<|User|>", "<|Assistant|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["Who are you? Hello I am a model. 你好 世界"] * 20, trainer)
    tok.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<|begin|>",
        "eos_token": "<|end|>",
        "chat_template": TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def mismatched(tmp_path):
    return bytelevel_folder_naming_llama(tmp_path / "tok")


def test_the_folder_resolves_to_the_tokenizer_autotokenizer_loads(mismatched):
    from transformers import AutoTokenizer

    from packtool.tokenization.loading import TokenizerSpec, load_spec, load_tokenizer

    auto = AutoTokenizer.from_pretrained(str(mismatched))
    loaded = load_tokenizer(str(mismatched))
    assert loaded.tokenizer.tokenize(" Hello I am") == auto.tokenize(" Hello I am")
    assert (
        load_spec(str(mismatched), cache=False).backend_json
        == TokenizerSpec.from_tokenizer(auto).backend_json
    )


def test_the_pack_holds_the_ids_apply_chat_template_gives(mismatched, tmp_path):
    from transformers import AutoTokenizer

    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CHATS))
    out = tmp_path / "packed"
    args = ["pack", str(data), "--tokenizer", str(mismatched), "--len", "256", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--no-shuffle", "--no-cache"])
    assert result.exit_code == 0, result.output
    auto = AutoTokenizer.from_pretrained(str(mismatched))
    table = pq.read_table(next((out / "data").glob("*.parquet"))).to_pylist()
    docs = {}
    for row in table:
        start = 0
        for n, src in zip(row["seq_lengths"], row["source_index"], strict=True):
            docs[src] = row["input_ids"][start : start + n]
            start += n
    assert sorted(docs) == [0, 1]
    for i, chat in enumerate(CHATS):
        want = auto.apply_chat_template(chat, tokenize=True, return_dict=True)["input_ids"]
        assert docs[i] == want, (auto.decode(docs[i]), auto.decode(want))
