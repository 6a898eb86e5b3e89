"""A cold start: the tokenizer resolved in a child process while this one does its idle work, and
the fast backend's build from the folder's tokenizer.json kept only for the same encoder."""

from __future__ import annotations

import json
import os

import pytest
from paths import SHARED_TOKENIZERS

from packtool import idle
from packtool.tokenization.cold_start import (
    encoder_digest,
    resolve_aside,
    take_guess,
)
from packtool.tokenization.loading import (
    TokenizerSpec,
    _resolve,
    builtin_tokenizer_dir,
    load_spec,
)


@pytest.fixture(autouse=True)
def _no_idle_left():
    idle.clear()
    yield
    idle.clear()


def _file_and_spec(folder):
    file = (folder or builtin_tokenizer_dir()) / "tokenizer.json"
    return file, _resolve(None if folder is None else str(folder))


@pytest.mark.parametrize("folder", [None, SHARED_TOKENIZERS / "llama3"], ids=["builtin", "llama3"])
def test_the_folders_file_and_what_transformers_resolves_are_the_same_encoder(folder):
    if folder is not None and not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    file, spec = _file_and_spec(folder)
    # the digest the spec carries is its own JSON's, and the file's: what the cold start compares
    assert spec.encoder == encoder_digest(json.loads(spec.backend_json))
    assert spec.encoder == encoder_digest(json.loads(file.read_text()))


def test_a_difference_encoding_reads_is_not_the_same_encoder():
    file, spec = _file_and_spec(None)
    text = file.read_text()
    base = json.loads(text)
    vocab = dict(base["model"]["vocab"])
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]  # two ids swapped
    changed = [
        {**base, "model": {**base["model"], "vocab": vocab}},
        {**base, "normalizer": {"type": "Lowercase"}},
        {**base, "added_tokens": base["added_tokens"][:-1]},
    ]
    for d in changed:
        assert encoder_digest(d) != spec.encoder
    # what encoding never reads: the decoder, ByteLevel's trim_offsets, the spelling of merges
    pre = json.loads(json.dumps(base["pre_tokenizer"]))
    for p in pre["pretokenizers"]:
        if p["type"] == "ByteLevel":
            p["trim_offsets"] = not p.get("trim_offsets")
    merges = [m if isinstance(m, str) else " ".join(m) for m in base["model"]["merges"]]
    same = {
        **base,
        "decoder": None,
        "pre_tokenizer": pre,
        "model": {**base["model"], "merges": [m.split(" ") for m in merges]},
    }
    assert encoder_digest(same) == spec.encoder


def test_resolving_aside_gives_the_spec_of_resolving_in_place_and_runs_the_idle_work():
    ran = []
    idle.later(lambda: ran.append("idle"))
    file = builtin_tokenizer_dir() / "tokenizer.json"
    spec = resolve_aside(_resolve, TokenizerSpec.from_json, None, file)
    assert ran == ["idle"]
    assert spec is not None and spec == _resolve(None)
    guess = take_guess(spec.backend_json)  # the same encoder: the guess is kept, once
    assert guess is not None and take_guess(spec.backend_json) is None
    from packtool.tokenization.byte_rules import byte_table

    rules, lengths, reason = byte_table(spec.backend_json)  # the file's table is the spec's
    assert guess.table[0] == rules and guess.table[2] == reason
    assert guess.table[1].tolist() == lengths.tolist()
    from packtool.tokenization.backends import FastBackend, rust_tokenizer

    texts = ["<|im_start|>user\nHello, wörld! 12345<|im_end|>\n", "  spaces\tand\ttabs\n\n"]
    got = FastBackend(spec.backend_json, guess).encode(texts)
    want = rust_tokenizer(spec.backend_json, "fastokens").encode_batch_flat(
        texts, add_special_tokens=False
    )
    import numpy as np

    assert np.frombuffer(want[0], "<u4").tolist() == got[0].tolist()


def test_nothing_idle_resolves_in_place():
    assert resolve_aside(_resolve, TokenizerSpec.from_json, None, None) is None


def test_a_failing_child_leaves_the_error_to_the_in_place_resolution(tmp_path):
    idle.later(lambda: None)
    assert resolve_aside(_resolve, TokenizerSpec.from_json, str(tmp_path / "nothing-here")) is None


def test_a_different_encoder_drops_the_guess(tmp_path):
    d = json.loads((builtin_tokenizer_dir() / "tokenizer.json").read_text())
    d["normalizer"] = {"type": "Lowercase"}  # a file that is not what transformers resolves
    other = tmp_path / "tokenizer.json"
    other.write_text(json.dumps(d))
    idle.later(lambda: None)
    spec = resolve_aside(_resolve, TokenizerSpec.from_json, None, other)
    assert spec is not None and take_guess(spec.backend_json) is None


def test_load_spec_resolves_aside_when_idle_work_is_pending(tmp_path, monkeypatch):
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    ran = []
    with idle.meanwhile(lambda: ran.append(1)):
        spec = load_spec(None, guess_fast=True)
    assert ran == [1]
    assert take_guess(spec.backend_json) is not None
    assert load_spec(None) == spec  # and cached as the in-place resolution caches it


TEXTS = [
    "<|im_start|>user\nHello, wörld! 12345<|im_end|>\n",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>",
    "<|start|>assistant<|channel|>final<|message|>ok<|return|>",
    "  spaces\tand\ttabs\n\n  ünïcödé 🙂 漢字 don't    stop",
]


@pytest.mark.parametrize(
    "folder",
    [
        None,
        SHARED_TOKENIZERS / "llama3",
        pytest.param(SHARED_TOKENIZERS / "gptoss", marks=pytest.mark.slow),
    ],
    ids=["builtin", "llama3", "gptoss"],
)
def test_tokenizers_from_the_file_encodes_as_what_transformers_resolves(folder):
    """What backends.same_encoder relies on: where the digests are equal, `tokenizers` built from
    the folder's file gives the resolved JSON's ids and offsets, on these texts and every message
    of the shared data's chat records (and 300 generated conversations)."""
    if folder is not None and not folder.is_dir():
        pytest.skip(f"{folder} is not here")
    from chat_examples import chat_examples

    from packtool.tokenization.backends import build_rust

    file, spec = _file_and_spec(folder)
    if encoder_digest(json.loads(file.read_text())) != spec.encoder:
        pytest.skip("transformers resolves another encoder: the cold start builds no reference")
    texts = TEXTS + [
        m["content"]
        for ex in chat_examples()
        for m in ex["messages"]
        if isinstance(m.get("content"), str)
    ]
    a, b = build_rust(file.read_text()), build_rust(spec.backend_json)
    for special in (False, True):
        for x, y in zip(
            a.encode_batch(texts, add_special_tokens=special),
            b.encode_batch(texts, add_special_tokens=special),
            strict=True,
        ):
            assert (x.ids, x.offsets) == (y.ids, y.offsets)


def test_the_reference_encoder_built_while_waiting_serves_the_run(monkeypatch):
    """While the child has not answered, the parent builds `tokenizers` from the file; the run's
    reference encodes with it (and check_markers looks tokens up in it), never decodes with it."""
    from packtool.tokenization import backends, cold_start
    from packtool.tokenization.backends import HFBackend, encoder, rust_tokenizer

    monkeypatch.setattr(cold_start, "_answered", lambda fd: False)
    monkeypatch.setattr(backends, "_ENCODERS", {})
    idle.later(lambda: None)
    file = builtin_tokenizer_dir() / "tokenizer.json"
    spec = resolve_aside(_resolve, TokenizerSpec.from_json, None, file)
    guess = take_guess(spec.backend_json)
    assert guess is not None and guess.reference is not None
    assert encoder(spec.backend_json) is rust_tokenizer(spec.backend_json)  # not given yet
    backends.same_encoder(spec.backend_json, guess.reference)
    assert encoder(spec.backend_json) is guess.reference
    ids, offsets = HFBackend(spec.backend_json).encode(TEXTS)
    want = rust_tokenizer(spec.backend_json).encode_batch(TEXTS, add_special_tokens=False)
    assert ids.tolist() == [i for e in want for i in e.ids]
    guess.result()


def test_a_chat_plan_encodes_its_reference_with_the_encoder_built_meanwhile(tmp_path, monkeypatch):
    from packtool.config import TokenizeConfig
    from packtool.tokenization import backends, cold_start
    from packtool.tokenization.run_plan import plan_run

    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(cold_start, "_answered", lambda fd: False)
    monkeypatch.setattr(backends, "_ENCODERS", {})
    plan = plan_run(TokenizeConfig(), [], preload=True)
    try:
        assert plan.reference is not None and plan.backend.name == "fastokens"
        spec = plan.reference.spec
        made = backends._ENCODERS.get(spec.backend_json)
        assert made is not None and made is not backends.rust_tokenizer(spec.backend_json)
    finally:
        plan.wait()


def test_a_truncated_tokenizer_file_is_one_line_error_not_a_traceback(tmp_path, monkeypatch):
    """The parent reads the folder's file aside (digest, table, encoder) while the child resolves:
    a file it cannot parse keeps no guess, and the error is the in-place resolution's one line."""
    import shutil

    from packtool.errors import PacktoolError

    folder = tmp_path / "tok"
    shutil.copytree(builtin_tokenizer_dir(), folder)
    text = (folder / "tokenizer.json").read_text()
    (folder / "tokenizer.json").write_text(text[:5000])
    monkeypatch.setenv("PACKTOOL_CACHE", str(tmp_path / "cache"))
    idle.later(lambda: None)
    assert (
        resolve_aside(_resolve, TokenizerSpec.from_json, str(folder), folder / "tokenizer.json")
        is None
    )
    with (
        idle.meanwhile(lambda: None),
        pytest.raises(PacktoolError, match="cannot load a tokenizer"),
    ):
        load_spec(str(folder), guess_fast=True)


def test_a_reference_that_fails_to_build_aside_is_built_later(monkeypatch):
    from packtool.tokenization import backends, cold_start

    def fail(*a, **k):
        raise ValueError("no")

    monkeypatch.setattr(cold_start, "_answered", lambda fd: False)
    monkeypatch.setattr(backends, "build_rust", fail)
    idle.later(lambda: None)
    file = builtin_tokenizer_dir() / "tokenizer.json"
    spec = resolve_aside(_resolve, TokenizerSpec.from_json, None, file)
    guess = take_guess(spec.backend_json)
    assert guess is not None and guess.reference is None and guess.table is not None
    guess.result()


def _stuck(name):  # a child that never answers (as one stuck on a lock held at the fork would)
    import time

    time.sleep(120)


def test_a_child_that_never_answers_is_killed_and_the_run_resolves_in_place(monkeypatch):
    import time

    from packtool.tokenization import cold_start

    monkeypatch.setattr(cold_start, "CHILD_SECONDS", 0.5)
    idle.later(lambda: None)
    t0 = time.monotonic()
    assert resolve_aside(_stuck, TokenizerSpec.from_json, None) is None
    assert time.monotonic() - t0 < 30  # not the child's 120 s
    monkeypatch.undo()  # the next resolution, with the usual time, is unaffected
    idle.later(lambda: None)
    assert resolve_aside(_resolve, TokenizerSpec.from_json, None) == _resolve(None)


def _resolve_without_collector(name):
    import gc

    if gc.isenabled():  # the child exits 1: resolve_aside gives None
        raise RuntimeError("the resolving child runs the cyclic collector")
    return _resolve(name)


def test_the_resolving_child_runs_without_the_cyclic_collector():
    """It lives until os._exit; collections would walk the inherited heap and the parsed JSON
    (0.3 s of a Llama 3 resolution) and free nothing."""
    import gc

    idle.later(lambda: None)
    assert resolve_aside(_resolve_without_collector, TokenizerSpec.from_json, None) == _resolve(
        None
    )
    assert gc.isenabled()  # this process's is untouched


def test_the_child_is_forked_before_the_fast_backend_starts_building(monkeypatch):
    """Forked first, while this process has no thread of its own running: forked later, both
    sides copy every page the other still shares and writes (the fastokens build's heap, the
    refcounts of everything transformers imported), and a lock held by the building thread at the
    fork would be held forever in the child."""
    import threading

    before = set(threading.enumerate())
    at_fork = []
    real_fork = os.fork

    def fork():
        at_fork.append(set(threading.enumerate()) - before)
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    idle.later(lambda: None)
    file = builtin_tokenizer_dir() / "tokenizer.json"
    spec = resolve_aside(_resolve, TokenizerSpec.from_json, None, file)
    assert at_fork == [set()]  # no thread started before the fork
    assert spec == _resolve(None) and take_guess(spec.backend_json) is not None  # built after it
