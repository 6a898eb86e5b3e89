"""Shared fixtures: offline, a private tokenization cache, the built-in Qwen3 tokenizer, a tiny one."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import pytest

# the shared test helpers (paths, packs, invariants) import as top-level modules from every subfolder
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tokenization results are cached under PACKTOOL_CACHE: never touch the user's cache."""
    path = tmp_path_factory.mktemp("packtool-cache")
    old = os.environ.get("PACKTOOL_CACHE")
    os.environ["PACKTOOL_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("PACKTOOL_CACHE", None)
    else:
        os.environ["PACKTOOL_CACHE"] = old


@pytest.fixture(autouse=True, scope="session")
def _engines_built_once_per_test_process():
    """A run builds its tokenizer's engines once (TokenizerSpec.engines: the Rust tokenizers and
    the byte table, 1-2 s for the built-in one); the suite makes hundreds of runs of the same few
    tokenizers in each test process, so here each is built once and handed to every later run's
    Engines. Built objects are never changed by their callers (loading.Engines)."""
    from packtool.tokenization import loading

    built: dict[tuple[str, str], object] = {}
    original = loading.Engines._get

    def _get(self, what: str):
        got = self._built.get(what)
        if got is None:
            key = (what, self.backend_json)
            got = built.get(key)
            if got is None:
                got = built[key] = original(self, what)
            else:
                self._built[what] = got
        return got

    loading.Engines._get = _get
    yield
    loading.Engines._get = original


@pytest.fixture(scope="session")
def qwen():
    """The built-in Qwen3 tokenizer (LoadedTokenizer), loaded once per session."""
    from packtool.tokenization.loading import load_tokenizer

    return load_tokenizer(None)


_TINY_SPECIALS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]


@functools.cache
def _tiny_vocabulary() -> str:
    """The tiny tokenizer, trained once per process (as JSON: every caller gets its own copy)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    specials = _TINY_SPECIALS
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="isolated")
    corpus = [
        "hello world how are you",
        "user assistant system tool",
        "the answer is four",
        "\n",
        ":",
    ]
    tok.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=specials))
    return tok.to_str()


def build_tiny_tokenizer(chat_template: str | None = None):
    """A word-level tokenizer trained in-process on a few words, with ChatML special tokens."""
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    specials = _TINY_SPECIALS
    fast = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_tiny_vocabulary()),
        pad_token="<pad>",
        unk_token="<unk>",
        eos_token="<|im_end|>",
        additional_special_tokens=specials[2:],
    )
    if chat_template:
        fast.chat_template = chat_template
    return fast


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer
