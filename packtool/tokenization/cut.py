"""A BPE tokenizer cut down to the words of a few texts: the same ids and offsets, built in ms.

`packtool inspect` encodes one example. Building the whole Rust tokenizer for it was most of the
command's time: 0.3 s for Llama 3 (128k tokens, 280k merges), 0.75 s for gpt-oss (200k, 446k).
BPE encodes each word (a piece of the pre-tokenizer, byte-level mapped) on its own, and every
string it looks up while doing so is a contiguous substring of that word:

    word "Ġpacking"   symbols Ġ p a c k i n g, merged pair by pair in rank order
                      a pair (x, y) is two adjacent symbols, so x + y is a substring of the word;
                      with ignore_merges the whole word is looked up first: a substring too

So a tokenizer keeping, of the model, only the tokens that are substrings of the texts' words and
the merges whose result is one of them (in their order: BPE only compares ranks) encodes those
texts exactly as the whole one does, offsets included. Everything around the model (added tokens,
normalizer, pre-tokenizer, post-processor, decoder) is kept as it is, and decoding the ids it
gives is unchanged too.

The words come from the tokenizer's own pipeline: a *shell* (the same JSON, its model's vocabulary
replaced by the 256 byte-level symbols and no merges) encodes the texts; its symbols grouped by
`word_ids` spell the words, while added tokens come out whole under their own ids.

Tables, made once per tokenizer from its JSON (one parse, ~0.5 s for gpt-oss) and kept in the
cache as $PACKTOOL_CACHE/tokenizers/cut-<xxh3-128 of the JSON>.bin (checksummed, cache.read_bytes):

    a JSON line   {"version": 1, "vocab": V, "merges": M, "longest": L, "rest": the tokenizer JSON
                   with the model's vocab and merges emptied}
    ids           int32[V]      each token's id, in the JSON's order
    merges        int32[M, 3]   index (into the tokens) of the left part, the right part, the result
    tokens        UTF-8, the V tokens joined by "\\n" (byte-level symbols never spell a newline)

`cut_tokenizer` answers None (the caller builds the whole tokenizer) for anything this does not
prove: a model other than BPE, dropout, a subword prefix or word suffix, byte fallback, an unknown
token, a vocabulary outside the byte-level alphabet, or words with more than MAX_SUBSTRINGS
substrings up to the longest token's length.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from packtool.tokenization.backends import HFBackend

VERSION = 1
MAX_SUBSTRINGS = 1_000_000  # ~0.3 s of Python at most; beyond that the whole tokenizer is cheaper


@dataclass
class Tables:
    """A byte-level BPE tokenizer's model as arrays (module docstring), and the JSON around it."""

    rest: dict  # the tokenizer JSON, model vocab {} and merges []
    ids: np.ndarray  # int32[V]
    merges: np.ndarray  # int32[M, 3]: left, right, result (indices into tokens)
    tokens: list[str]  # sorted
    longest: int  # the longest token, in chars

    def to_bytes(self) -> bytes:
        head = {
            "version": VERSION,
            "vocab": len(self.tokens),
            "merges": len(self.merges),
            "longest": self.longest,
            "rest": self.rest,
        }
        return b"".join(
            (
                json.dumps(head).encode() + b"\n",
                self.ids.astype("<i4").tobytes(),
                self.merges.astype("<i4").tobytes(),
                "\n".join(self.tokens).encode(),
            )
        )

    @classmethod
    def from_bytes(cls, body: bytes) -> Tables | None:
        """The tables of to_bytes; None for another version's layout."""
        line, _, data = body.partition(b"\n")
        head = json.loads(line)
        if head.get("version") != VERSION:
            return None
        v, m = head["vocab"], head["merges"]
        ids = np.frombuffer(data, dtype="<i4", count=v)
        merges = np.frombuffer(data, dtype="<i4", count=3 * m, offset=4 * v).reshape(m, 3)
        tokens = data[4 * v + 12 * m :].decode().split("\n") if v else []
        if len(tokens) != v:
            raise ValueError(f"{len(tokens)} tokens, the header says {v}")
        return cls(head["rest"], ids, merges, tokens, head["longest"])


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
    alphabet = set(_alphabet())
    if not all(alphabet.issuperset(t) for t in model.get("vocab", {})):
        return "a token outside the byte-level alphabet"
    return None


def build_tables(backend_json: str) -> Tables | None:
    """The tables of a tokenizer JSON (one parse of it), or None if its model cannot be cut."""
    tok = json.loads(backend_json)
    if refusal(tok) is not None:
        return None
    model = tok["model"]
    vocab: dict[str, int] = model["vocab"]
    tokens = sorted(vocab)  # sorted: a cut finds its substrings by bisection, with no dict to build
    index = {t: i for i, t in enumerate(tokens)}
    rows = []
    for pair in model.get("merges", []):
        a, b = pair.split(" ", 1) if isinstance(pair, str) else pair
        rows.append((index[a], index[b], index.get(a + b, -1)))
    rest = {**tok, "model": {**model, "vocab": {}, "merges": []}}
    return Tables(
        rest=rest,
        ids=np.fromiter(map(vocab.__getitem__, tokens), dtype=np.int32, count=len(tokens)),
        merges=np.array(rows, dtype=np.int32).reshape(-1, 3),
        tokens=tokens,
        longest=max(map(len, tokens), default=1),
    )


def tables_for(backend_json: str) -> Tables | None:
    """The tables of a tokenizer JSON, from the cache or made (and cached); None: cannot be cut."""
    import xxhash

    from packtool.tokenization import cache

    path = cache.tokenizer_path("cut-" + xxhash.xxh3_128_hexdigest(backend_json.encode()))
    path = path.with_suffix(".bin")
    body = cache.read_bytes(path)
    if body is not None:
        try:
            return Tables.from_bytes(body) if body else None
        except (ValueError, KeyError, UnicodeDecodeError):
            pass  # (checksummed: another packtool's layout) made again below
    tables = build_tables(backend_json)
    cache.write_bytes(path, tables.to_bytes() if tables is not None else b"")
    return tables


def _added(tables: Tables) -> dict[str, int]:
    """The added tokens, as model vocabulary entries under their own ids.

    Loading a tokenizer JSON gives an added token the id of its text in the model's vocabulary, or
    else the next free id; only the whole vocabulary makes that its id in the JSON. Listed in the
    vocabulary, every cut (and the shell) keeps the ids."""
    return {t["content"]: int(t["id"]) for t in tables.rest.get("added_tokens", [])}


def words(tables: Tables, texts: list[str]) -> list[str]:
    """The distinct words the texts' tokenizer hands its model (module docstring: the shell)."""
    from tokenizers import Tokenizer

    added = _added(tables)
    base = max(int(tables.ids.max(initial=-1)), *added.values(), -1) + 1
    shell = {**tables.rest}
    shell["model"] = {
        **tables.rest["model"],
        "vocab": {**{c: base + i for i, c in enumerate(_alphabet())}, **added},
        "merges": [],
        "ignore_merges": False,
    }
    tok = Tokenizer.from_str(json.dumps(shell))
    tok.no_truncation()
    tok.no_padding()
    found: set[str] = set()
    for enc in tok.encode_batch(list(texts), add_special_tokens=False):
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
    index = _Index(tables.tokens)
    added = _added(tables)
    if any(
        w in added and w not in index for w in ws
    ):  # (a word the added vocabulary let through, e.g. single_word)
        return None  # its whole-word lookup would find the added entry: the whole model lacks it
    for t in list(added):  # the whole tokenizer gives these the model's id
        if t in index:
            added[t] = int(tables.ids[index[t]])
    kept = np.zeros(len(tables.tokens) + 1, dtype=bool)  # last slot: a merge without a result
    kept[[i for i in map(index.get, subs) if i is not None]] = True
    unk = tables.rest["model"].get("unk_token")
    if unk is not None and unk in index:
        kept[index[unk]] = True
    rows = tables.merges[kept[tables.merges[:, 2]]]
    model = dict(tables.rest["model"])
    model["vocab"] = {
        **{tables.tokens[i]: int(tables.ids[i]) for i in np.flatnonzero(kept[:-1])},
        **added,
    }
    model["merges"] = [[tables.tokens[a], tables.tokens[b]] for a, b in rows[:, :2].tolist()]
    return json.dumps({**tables.rest, "model": model})


class _Index:
    """Sorted tokens → their index, by bisection (a dict of 200k tokens takes 90 ms to build)."""

    def __init__(self, tokens: list[str]):
        self.tokens = tokens

    def get(self, s: str) -> int | None:
        from bisect import bisect_left

        i = bisect_left(self.tokens, s)
        return i if i < len(self.tokens) and self.tokens[i] == s else None

    def __contains__(self, s: str) -> bool:
        return self.get(s) is not None

    def __getitem__(self, s: str) -> int:
        i = self.get(s)
        if i is None:
            raise KeyError(s)
        return i


class CutBackend(HFBackend):
    """HFBackend whose Rust tokenizer is cut to each call's texts (the whole one where it cannot
    be); `built`: the tokenizer the last call used, e.g. to decode what it gave."""

    def __init__(self, backend_json: str):
        super().__init__(backend_json)
        self.built = None

    def _tokenizer(self, texts: list[str] | None = None):
        from tokenizers import Tokenizer

        from packtool.tokenization.backends import rust_tokenizer

        tables = tables_for(self.backend_json) if texts is not None else None
        js = cut_json(tables, texts) if tables is not None else None
        if js is None:
            self.built = rust_tokenizer(self.backend_json)
        else:
            self.built = Tokenizer.from_str(js)
            self.built.no_truncation()
            self.built.no_padding()
        return self.built
