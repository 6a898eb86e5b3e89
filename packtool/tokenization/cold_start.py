"""A cold start's tokenizer resolution, overlapped with what does not need it.

Resolving a tokenizer through transformers (no cached TokenizerSpec) takes 1.6-2.0 s of importing
and building, all of it holding the GIL, and only then could the fast backend start its own build
(fastokens, 1.0-1.7 s for a 150k vocabulary). When this process has other work to do (packtool.idle,
e.g. the pack stage's warm-up) the resolution runs in a forked child instead:

    parent  fork ─ guess: fastokens from the folder's tokenizer.json (thread, GIL released, from
                 here on) ─ import transformers (the reference path renders with it) ─ idle.run()
                 ─ parse the file, its byte table ─ (no answer yet: `tokenizers` from the file, the
                 reference path's encoder) ─ read the child's answer ─ waitpid
                 ─ the same encoder (spec.encoder == the file's encoder_digest)? ─▶ TokenizerSpec
                   (+ the guess, kept, with that encoder: backends.same_encoder)
    child        import transformers, resolve(name) ─▶ the spec's JSON through a pipe, exit 0
                 (any failure: exit 1, nothing sent: the parent resolves in place and raises the
                 error itself, word for word as without the child; no answer in CHILD_SECONDS:
                 killed, and the parent resolves in place)

The fork comes first, while this process is small and has no thread of its own: transformers is
imported in both (~0.8 CPU-s twice), but neither copies the other's pages. Forked later (after the
import, while fastokens builds) every page either side wrote after the fork was copied, and on VMs
that back memory at its first touch (~5-8 s of system time a GiB) that cost more than the import:
20k conversations cold, measured again from /tmp on 2 cores, 4 rounds side by side, built-in
0.1-0.4 s less system time and a median of 3.45 against 3.59 s; Llama 3 no difference
(benchmarks/README.md, "late afternoon").

transformers often rebuilds the file's tokenizer with flags encoding never reads (the decoder's,
ByteLevel's trim_offsets, merges spelled "a b" or ["a", "b"]): the guess is kept only when the
resolved JSON and the file are the same encoder (equal `encoder_digest`s), else dropped (waited for, then
the fast backend builds from the resolved JSON as it always does). The fast path is checked
against the reference path on the run's first examples either way (fast_check). The reference
path's `tokenizers` encoder is built from the file too when this process would otherwise wait for
the child (~0.5 s for a 128k vocabulary, holding the GIL, off the critical path), and used only
under the same condition: equal encoder digests are equal ids and offsets, what the reference reads
of it (its decoder, which may differ, is never asked: decoding builds rust_tokenizer's own).
"""

from __future__ import annotations

import atexit
import gc
import os
import threading
from pathlib import Path
from typing import Any

_GUESSES: dict[str, Any] = {}  # backend_json of a resolved spec -> its kept guess (a Guess)
# a child that has not answered by then is killed and the tokenizer resolved in place: resolving
# takes 1-3 s (a 262k vocabulary on a busy box, under a minute); a child that never answers would
# otherwise hang the run
CHILD_SECONDS = 300.0


class Guess:
    """fastokens built from a tokenizer.json on a thread; result() waits for it (None: it failed).
    `table`: byte_rules' table of the same file (its rules read nothing encoder_digest leaves out),
    set by resolve_aside while the child resolves; None until then."""

    def __init__(self, text: str):
        self.table = None
        self.reference = None  # `tokenizers` from the same file, built while the child resolves
        self._tok = None
        self._thread = threading.Thread(target=self._build, args=(text,), daemon=True)
        self._thread.start()
        atexit.register(self._thread.join)  # never exit while it is inside native code

    def _build(self, text: str) -> None:
        try:
            import fastokens

            tok = fastokens.Tokenizer.from_json_str(text)
            tok.no_truncation()
            tok.no_padding()
            self._tok = tok
        except Exception:  # the fast backend builds from the resolved JSON instead
            pass

    def result(self):
        self._thread.join()
        return self._tok


def take_guess(backend_json: str):
    """The kept guess for a spec's JSON (a Guess), once; None when there is none."""
    return _GUESSES.pop(backend_json, None)


def encoder_digest(parsed: dict) -> str:
    """sha256 of what encodes in a parsed tokenizer JSON (`_encoder`: all but the decoder, padding,
    truncation, ByteLevel pre-tokenizers' trim_offsets, read only when offsets are post-processed,
    and the spelling of merges), keys sorted: equal digests, the same encoder. A resolved spec
    carries its own (TokenizerSpec.encoder, from the parse resolving does anyway), so the cold
    start compares it with the file's without parsing the resolved JSON again."""
    import hashlib

    import orjson

    text = orjson.dumps(_encoder(parsed), option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(text).hexdigest()


def _encoder(d: dict) -> dict:
    d = {k: v for k, v in d.items() if k not in ("decoder", "padding", "truncation")}
    d["pre_tokenizer"] = _pre(d.get("pre_tokenizer"))
    model = dict(d.get("model") or {})
    merges = model.get("merges")
    if isinstance(merges, list) and not all(isinstance(m, str) for m in merges):
        # spelled as a resolved spec spells them (loading.compact_merges): the spec's side is
        # then compared as it is
        model["merges"] = [merge_text(m) or m for m in merges]
    d["model"] = model
    return d


def merge_text(m) -> str | None:
    """A BPE merge ["a", "b"] spelled "a b" (what `tokenizers` also reads); None when it is not a
    pair of strings or a part holds a space (only the pair can say that: the one ambiguity)."""
    if isinstance(m, list) and len(m) == 2 and " " not in m[0] and " " not in m[1]:
        return f"{m[0]} {m[1]}"
    return None


def _pre(p):
    if not isinstance(p, dict):
        return p
    if p.get("type") == "ByteLevel":
        return {k: v for k, v in p.items() if k != "trim_offsets"}
    if p.get("type") == "Sequence":
        return {**p, "pretokenizers": [_pre(x) for x in p.get("pretokenizers") or ()]}
    return p


def _read_answer(fd: int, seconds: float) -> bytes | None:
    """All the child writes to `fd` until it closes its end; None when that takes over `seconds`
    (a child forked from a process with threads can wait forever on a lock one of them held)."""
    import select
    import time

    deadline = time.monotonic() + seconds
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _answered(fd: int) -> bool:
    """The child has written its answer (or exited): reading `fd` would not wait."""
    import select

    return bool(select.select([fd], [], [], 0)[0])


def _read_aside(pending: Guess, text: str, answer: int) -> str | None:
    """The file's encoder digest, its byte table (pending.table) and, while the child has not
    answered, its `tokenizers` encoder (pending.reference); None, and no guess kept, when the file
    does not parse: the child fails on it too and the in-place resolution says why, in one line."""
    import orjson

    from packtool.tokenization.byte_rules import table_of

    try:
        parsed = orjson.loads(text)
        digest = encoder_digest(parsed)
        pending.table = table_of(parsed)
    except Exception:  # noqa: BLE001 - not a tokenizer JSON this process can read: no guess
        return None
    del parsed
    if not _answered(answer):  # the reference path's encoder too, while this process waits
        from packtool.tokenization.backends import build_rust

        try:
            pending.reference = build_rust(text)
        except Exception:  # noqa: BLE001 - the reference builds from the resolved JSON instead
            pending.reference = None
    return digest


def resolve_aside(resolve, rebuild, name: str | None, file: Path | None = None):
    """The TokenizerSpec `resolve(name)` gives (sent as its to_json(), made again by `rebuild`),
    resolved in a forked child while this process runs packtool.idle's pending work; None when
    there is none pending or no fork (resolve in place) or the child failed. `file`: the
    tokenizer.json to build the fast backend's guess from (None: no guess), kept when the
    resolved tokenizer is the same encoder."""
    from packtool import idle

    if not idle.pending() or not hasattr(os, "fork"):
        return None
    import orjson

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: resolve, answer, exit without running the parent's exit handlers
        code = 1
        try:
            # a short life that ends in os._exit: the cyclic collector would only walk the
            # inherited heap and the parsed JSON (0.3 s of a Llama 3 resolution) and free nothing
            gc.disable()
            os.close(r)
            spec = resolve(name)
            with os.fdopen(w, "wb") as out:
                out.write(orjson.dumps(spec.to_json()))
            code = 0
        except BaseException:  # noqa: BLE001 - the parent resolves again and reports it
            pass
        finally:
            os._exit(code)
    os.close(w)
    status = -1
    pending = None
    try:
        text = file.read_text(encoding="utf-8") if file is not None else None
        if text is not None:  # a chat run on the fast path
            pending = Guess(text)  # builds from here on, on its thread
            import transformers  # noqa: F401 - the reference path's renderer, needed after this
        idle.run()
        # the file's encoder digest and the fast backend's byte table, while the child
        # still resolves (0.1-0.4 s of parsing, ~0.3 s of table)
        file_digest = None
        if pending is not None:
            file_digest = _read_aside(pending, text, r)
        payload = _read_answer(r, CHILD_SECONDS)
        if payload is not None:  # else stuck (a lock some thread held at the fork?): killed below
            status = os.waitpid(pid, 0)[1]
    finally:
        os.close(r)
        if status == -1:  # interrupted or stuck: the child goes too (a stuck one: None below)
            try:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
            except OSError:
                pass
    if status != 0 or not payload:
        if pending is not None:
            pending.result()  # not inside native code when this process exits or forks
        return None
    spec = rebuild(orjson.loads(payload))
    if pending is not None:
        if spec.encoder == file_digest:
            _GUESSES[spec.backend_json] = pending
        else:
            pending.result()
    return spec
