"""A BPE tokenizer cut down to the words of a few texts (`packtool inspect`: one example): the same
ids and offsets, without building the whole tokenizer (benchmarks/README.md, "Renderers").

BPE encodes each word (a piece of the pre-tokenizer, byte-level mapped) on its own, and every
string it looks up while doing so is a contiguous substring of that word:

    word "Ġpacking"   symbols Ġ p a c k i n g, merged pair by pair in rank order
                      a pair (x, y) is two adjacent symbols, so x + y is a substring of the word;
                      with ignore_merges the whole word is looked up first: a substring too

So a tokenizer keeping, of the model, only the tokens that are substrings of the texts' words and
the merges whose result is one of them (in their order: BPE only compares ranks) encodes those
texts exactly as the whole one does, offsets included; everything around the model is kept.

The words come from the tokenizer's own pipeline: a *shell* (the same JSON, its model's vocabulary
replaced by the 256 byte-level symbols and no merges) encodes the texts; its symbols grouped by
`word_ids` spell the words, while added tokens come out whole under their own ids.

Tables, made once per tokenizer and kept as $PACKTOOL_CACHE/tokenizers/cut-<xxh3-128 of the
JSON>.bin (checksummed, cache.read_bytes): a warm cut builds no Python object per token:

    a JSON line, padded to 8 bytes   {"version": 3, "vocab": V, "merges": M, "longest": L,
                                      "tokens_bytes": B, "rest": the tokenizer JSON with the
                                      model's vocab and merges emptied}
    for the V tokens, then the M merges (spelled "left right"), each sorted by key:
        key     uint64[n]   crc32 << 32 | adler32 of the UTF-8 (zlib: a C call a string)
        value   int32[n]    the token's id; the merge's rank (its place in the JSON)
        start   uint32[n]   where its UTF-8 starts in the blob
        length  uint32[n]
    the tokens' blob (B bytes), then the merges' blob: UTF-8, one after the other

A lookup is one key, one searchsorted, and a compare of the bytes (a key proves nothing alone).
The merges a cut keeps are found from its tokens: for a kept token t, every split t[:k] + " " +
t[k:] that is a merge (a merge's parts are substrings of its result, so kept too; byte-level
symbols never spell a space).

`cut_json` answers None (the caller builds the whole tokenizer) for anything this does not
prove: a model other than BPE, dropout, a subword prefix or word suffix, byte fallback, no
ByteLevel pre-tokenizer, a vocabulary outside the byte-level alphabet or without all of it (the
whole model drops a symbol it lacks and merges across the gap, which no substring shows), a word
the added vocabulary let through that spells an added token the model lacks, or words with more
than MAX_SUBSTRINGS substrings up to the longest token's length.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass

import numpy as np

from packtool.tokenization.backends import HFBackend
from packtool.tokenization.loading import build_rust, merge_text

VERSION = 3
_REFUSED = json.dumps({"version": VERSION, "refused": True}).encode()  # cached: cannot be cut
MAX_SUBSTRINGS = 1_000_000  # beyond this many the whole tokenizer is cheaper to build


def _key(b: bytes) -> int:
    return zlib.crc32(b) << 32 | zlib.adler32(b)


@dataclass
class Lookup:
    """Strings → int32 values by key (module docstring): sorted keys, values, and the strings' bytes."""

    key: np.ndarray  # uint64[n], sorted
    value: np.ndarray  # int32[n]
    start: np.ndarray  # uint32[n]
    length: np.ndarray  # uint32[n]
    blob: bytes

    @classmethod
    def of(cls, items: list[str], values) -> Lookup:
        raw = [s.encode() for s in items]
        n = len(raw)
        key = np.fromiter(map(_key, raw), dtype=np.uint64, count=n)
        length = np.fromiter(map(len, raw), dtype=np.uint32, count=n)
        start = np.zeros(n, dtype=np.uint32)
        np.cumsum(length[:-1], out=start[1:])
        order = np.argsort(key, kind="stable")
        value = np.asarray(values, dtype=np.int32)
        return cls(key[order], value[order], start[order], length[order], b"".join(raw))

    def find(self, items: list[str]) -> list[int | None]:
        """Each string's value, None where it is not one of them."""
        raw = [s.encode() for s in items]
        keys = np.fromiter(map(_key, raw), dtype=np.uint64, count=len(raw))
        at = np.searchsorted(self.key, keys).tolist()
        n = len(self.key)
        out: list[int | None] = []
        for b, k, i in zip(raw, keys.tolist(), at, strict=True):
            hit = None
            while i < n and int(self.key[i]) == k:
                s = int(self.start[i])
                if self.blob[s : s + int(self.length[i])] == b:
                    hit = int(self.value[i])
                    break
                i += 1
            out.append(hit)
        return out

    def arrays(self) -> list[bytes]:
        return [
            self.key.astype("<u8").tobytes(),
            self.value.astype("<i4").tobytes(),
            self.start.astype("<u4").tobytes(),
            self.length.astype("<u4").tobytes(),
        ]

    @classmethod
    def read(cls, data: bytes, at: int, n: int) -> tuple[Lookup, int]:
        """The lookup of n strings whose arrays start at byte `at` (blob set by the caller)."""
        key = np.frombuffer(data, "<u8", n, at)
        value = np.frombuffer(data, "<i4", n, at + 8 * n)
        start = np.frombuffer(data, "<u4", n, at + 12 * n)
        length = np.frombuffer(data, "<u4", n, at + 16 * n)
        return cls(key, value, start, length, b""), at + 20 * n


@dataclass
class Tables:
    """A byte-level BPE tokenizer's model as two lookups (module docstring), and the JSON around it."""

    rest: dict  # the tokenizer JSON, model vocab {} and merges []
    tokens: Lookup  # token → id
    merges: Lookup  # "left right" → rank
    longest: int  # the longest token, in chars

    def to_bytes(self) -> bytes:
        head = {
            "version": VERSION,
            "vocab": len(self.tokens.key),
            "merges": len(self.merges.key),
            "longest": self.longest,
            "tokens_bytes": len(self.tokens.blob),
            "rest": self.rest,
        }
        line = json.dumps(head).encode()
        line += b" " * (-(len(line) + 1) % 8) + b"\n"  # the arrays 8-byte aligned
        return b"".join(
            [line, *self.tokens.arrays(), *self.merges.arrays(), self.tokens.blob, self.merges.blob]
        )

    @classmethod
    def from_bytes(cls, body: bytes) -> Tables:
        """The tables of to_bytes (zero-copy); ValueError for another version's layout."""
        line, _, _ = body.partition(b"\n")
        head = json.loads(line)
        if head.get("version") != VERSION:
            raise ValueError(f"tables of version {head.get('version')}, not {VERSION}")
        v, m, nb = head["vocab"], head["merges"], head["tokens_bytes"]
        tokens, at = Lookup.read(body, len(line) + 1, v)
        merges, at = Lookup.read(body, at, m)
        tokens.blob, merges.blob = body[at : at + nb], body[at + nb :]
        if len(tokens.blob) != nb:
            raise ValueError("the tables are cut short")
        return cls(head["rest"], tokens, merges, head["longest"])


def _alphabet() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet())


def refusal(tok: dict) -> str | None:
    """Why a tokenizer JSON's model cannot be cut (module docstring), or None."""
    model = tok.get("model") or {}
    if model.get("type") != "BPE":
        return f"model {model.get('type')!r}, not BPE"
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return f"the BPE model sets {key}"
    if model.get("byte_fallback"):
        return "the BPE model sets byte_fallback"
    if not _byte_level(tok.get("pre_tokenizer")):
        return "no ByteLevel pre-tokenizer"
    alphabet = set(_alphabet())
    vocab = model.get("vocab", {})
    if not all(alphabet.issuperset(t) for t in vocab):
        return "a token outside the byte-level alphabet"
    if not alphabet.issubset(vocab):  # a symbol the model lacks is dropped, joining its neighbours
        return "a byte-level symbol missing from the vocabulary"
    return None


def _byte_level(pre: dict | None) -> bool:
    """The pre-tokenizer maps every piece to byte-level symbols (ByteLevel, alone or in a Sequence)."""
    if not pre:
        return False
    if pre.get("type") == "Sequence":
        return any(map(_byte_level, pre.get("pretokenizers", [])))
    return pre.get("type") == "ByteLevel"


def build_tables(backend_json: str) -> Tables | None:
    """The tables of a tokenizer JSON (one parse of it), or None if its model cannot be cut."""
    tok = json.loads(backend_json)
    if refusal(tok) is not None:
        return None
    model = tok["model"]
    vocab: dict[str, int] = model["vocab"]
    # spelled "a b" (no part holds a space: the alphabet has none)
    merges = [m if isinstance(m, str) else merge_text(m) for m in model.get("merges", [])]
    return Tables(
        rest={**tok, "model": {**model, "vocab": {}, "merges": []}},
        tokens=Lookup.of(list(vocab), list(vocab.values())),
        merges=Lookup.of(merges, np.arange(len(merges))),
        longest=max(map(len, vocab), default=1),
    )


def tables_path(backend_json: str):
    """Where the cache keeps the tables of a tokenizer JSON."""
    import xxhash

    from packtool.tokenization import cache

    digest = xxhash.xxh3_128_hexdigest(backend_json.encode())
    return cache.tokenizer_path("cut-" + digest).with_suffix(".bin")


def tables_for(backend_json: str) -> Tables | None:
    """The tables of a tokenizer JSON, from the cache or made (and cached); None: cannot be cut."""
    from packtool.tokenization import cache

    path = tables_path(backend_json)
    body = cache.read_bytes(path)
    if body == _REFUSED:
        return None
    if body is not None:
        try:
            return Tables.from_bytes(body)
        except (ValueError, KeyError, UnicodeDecodeError):
            pass  # (checksummed: another version's layout or refusal) made again below
    tables = build_tables(backend_json)
    cache.write_bytes(path, tables.to_bytes() if tables is not None else _REFUSED)
    return tables


def _added(tables: Tables) -> dict[str, int]:
    """The added tokens, as model vocabulary entries under their own ids.

    Loading a tokenizer JSON gives an added token the id of its text in the model's vocabulary, or
    else the next free id; only the whole vocabulary makes that its id in the JSON. Listed in the
    vocabulary, every cut (and the shell) keeps the ids."""
    return {t["content"]: int(t["id"]) for t in tables.rest.get("added_tokens", [])}


def words(tables: Tables, texts: list[str]) -> list[str]:
    """The distinct words the texts' tokenizer hands its model (module docstring: the shell)."""
    added = _added(tables)
    base = max(int(tables.tokens.value.max(initial=-1)), *added.values(), -1) + 1
    shell = {**tables.rest}
    shell["model"] = {
        **tables.rest["model"],
        "vocab": {**{c: base + i for i, c in enumerate(_alphabet())}, **added},
        "merges": [],
        "ignore_merges": False,
    }
    found: set[str] = set()
    for enc in build_rust(json.dumps(shell)).encode_batch(list(texts), add_special_tokens=False):
        current, parts = None, []
        for sym, i, w in zip(enc.tokens, enc.ids, enc.word_ids, strict=True):
            if i < base or w != current:
                found.add("".join(parts))
                parts, current = [], w
            if i >= base:
                parts.append(sym)
        found.add("".join(parts))
    found.discard("")
    return sorted(found)


def cut_json(tables: Tables, texts: list[str]) -> str | None:
    """The JSON of the cut tokenizer for these texts, or None when the words are too many."""
    ws = words(tables, texts)
    longest = tables.longest
    if sum(len(w) * min(len(w), longest) for w in ws) > MAX_SUBSTRINGS:
        return None
    subs = {
        w[i:j]
        for w in ws
        for i in range(len(w))
        for j in range(i + 1, min(len(w), i + longest) + 1)
    }
    subs = list(subs)
    ids = tables.tokens.find(subs)
    kept = {t: i for t, i in zip(subs, ids, strict=True) if i is not None}
    added, words_set = _added(tables), set(ws)
    for t, i in zip(added, tables.tokens.find(list(added)), strict=True):
        if i is not None:  # the whole tokenizer gives these the model's id
            added[t] = i
        elif t in words_set:  # a word the added vocabulary let through (e.g. single_word): its
            return None  # whole-word lookup would find an entry that the whole model lacks
    unk = tables.rest["model"].get("unk_token")
    if unk is not None:
        (i,) = tables.tokens.find([unk])
        if i is not None:
            kept[unk] = i
    splits = [(t[:k], t[k:]) for t in kept for k in range(1, len(t))]
    ranks = tables.merges.find([f"{a} {b}" for a, b in splits])
    found = sorted((r, a, b) for (a, b), r in zip(splits, ranks, strict=True) if r is not None)
    model = dict(tables.rest["model"])
    model["vocab"] = {**kept, **added}
    model["merges"] = [[a, b] for _, a, b in found]
    return json.dumps({**tables.rest, "model": model})


class CutBackend(HFBackend):
    """HFBackend whose Rust tokenizer is cut to each call's texts (the whole one where it cannot
    be); `decoder()`: a tokenizer cut to every text encoded so far, that decodes all the ids they
    gave (an example may be encoded in several calls: a prompt, then its completion)."""

    def __init__(self, engines):  # a loading.Engines
        super().__init__(engines)
        self.texts: list[str] = []
        self.last = None  # the tokenizer of the last call
        self.calls = 0

    def _tokenizer(self, texts: list[str] | None = None):
        if texts is None:
            return self.engines.rust()
        self.texts.extend(texts)
        self.calls += 1
        self.last = self._cut(texts)
        return self.last

    def _cut(self, texts: list[str]):
        tables = tables_for(self.backend_json)
        js = cut_json(tables, texts) if tables is not None else None
        return self.engines.rust() if js is None else build_rust(js)

    def decoder(self):
        if not self.texts:
            return self.engines.rust()
        return self.last if self.calls == 1 else self._cut(self.texts)
