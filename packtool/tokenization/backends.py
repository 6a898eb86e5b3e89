"""Two interchangeable tokenizer backends: rendered texts + char spans → ids, offsets, trained mask.

Both are built from one JSON string, the serialized Rust tokenizer that transformers really uses
(`AutoTokenizer.from_pretrained(folder).backend_tokenizer.to_str()`: transformers v5 rebuilds e.g.
Qwen2's pre-tokenizer and decoder, so it is not the folder's tokenizer.json). Ids are those of
`tokenizers.Tokenizer.encode_batch(texts, add_special_tokens=False)`; the mask is the rule of
`apply_chat_template(..., return_assistant_tokens_mask=True)`: a token is trained when its char
range overlaps a span [s, e) of its text.

    texts    ["<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHé!<|im_end|>\\n", "..."]
    spans    [int64[[52, 65]], int64[k, 2], ...]  "Hé!<|im_end|>"; sorted, non-overlapping char ranges

    ids      int32 [ 151644 872 198 13048 151645 198 151644 77091 198 39 963 0 151645 198 | ... ]
    offsets  int64 [0,                                                                  14, ...]  n + 1
    mask     bool  [ 0      0   0   0     0      0   0      0     0   1  1   1 1      0   | ... ]

`HFBackend` (the reference): `tokenizers` encode_batch; per span the first trained token is
char_to_token(s), the last char_to_token(e - 1) plus the tokens after it that still start before
e (the other pieces of a multi-byte char split over several byte tokens). Offsets are monotone, so
that range is exactly the overlap set. Spans on chars that map to no token (a normalizer removed
them) and empty spans take the offsets rule directly (`spans_to_mask` on `enc.offsets`).

`FastBackend`: fastokens `encode_batch_flat` gives ids only (two flat buffers, no per-token Python
objects). The mask comes from bytes instead of chars:

    byte_len  int32[vocab + 1]   UTF-8 bytes each id stands for; -1 = unknown (unk, lstrip/rstrip
                                 added tokens, pieces outside the byte alphabet); last slot: ids
                                 outside the table
    ends      cumsum(byte_len[ids]) over the whole batch: token t covers bytes [ends[t-1], ends[t])
    check     per text with spans: sum of its tokens' bytes == len(text.encode("utf-8")), no -1
              token, and (NFC normalizer) the text is already NFC; else that text alone goes
              through HFBackend and is counted in `fallbacks`. Also every text holding "<0x" when
              the model has byte_fallback: fastokens reads a literal "<0x0A>" as the byte piece
              <0x0A>, where tokenizers spells it out char by char (encode does the same)
    spans     chars → bytes (all-ASCII texts: identity; the others, joined: byte(c) = c + the
              extra UTF-8 bytes of the non-ASCII chars before c, from "".join(...).encode(
              "utf-32-le") and one searchsorted), shifted by the text's first byte in the batch
    mask      one searchsorted over all spans of all texts (spans_to_mask on byte ranges)

Why bytes give the char rule exactly: with an unchanged text the tokens tile its UTF-8 bytes, and
`tokenizers` reports for token bytes [b0, b1) the chars [char(b0), ceil_char(b1)) (a token holding
part of a multi-byte char gets that whole char). For a span [s, e) with byte bounds [B(s), B(e)):
char(b0) < e ⟺ b0 < B(e) and ceil_char(b1) > s ⟺ b1 > B(s). Once the text is known to be in its
normal form, every way a token's table length can differ from its real span (removed chars, a
literal "▁" or "<0x0A>" counted as one byte) shortens it, so an equal byte sum proves every token
exact. Normalizers that can lengthen text (Prepend, prefix spaces, Lowercase, ...) are refused by
`byte_rules.supports_fast`; NFC can lengthen and shorten within one text (so the sum alone is not
enough). Byte lengths per model, and which tokenizers qualify: packtool.tokenization.byte_rules.

Both backends encode with one `Engines`, the built forms of one tokenizer JSON (a TokenizerSpec
holds one: spec.engines, shared by every step, backend and template check of a run):

    backend_json ──▶ reference   tokenizers.Tokenizer (ids and offsets: HFBackend)
                 ──▶ fast        fastokens.Tokenizer (ids: FastBackend)
                 ──▶ table       (ByteRules, int32[vocab + 1] byte length per id), or why not
    preload()    fast and table built on a thread (native code: the GIL is released)

Each is built once, on first use (nothing is kept at module level); Engines pickle as the JSON and
the table, the Rust tokenizers rebuilt where they are used (fastokens, tokenizers imported then).
"""

from __future__ import annotations

import atexit
import itertools
import re
import threading
import unicodedata

import numpy as np

from packtool.tokenization.byte_rules import ByteRules, table_of

BACKENDS = ("fastokens", "hf")

_BYTE_FALLBACK = re.compile(r'"byte_fallback"\s*:\s*true')


def build_rust(backend_json: str, engine: str = "tokenizers"):
    """The Rust tokenizer (`tokenizers`, or `fastokens`) of a backend JSON, untruncated and
    unpadded as apply_chat_template encodes, built anew on each call (Engines keeps one)."""
    if engine == "fastokens":
        import fastokens

        tok = fastokens.Tokenizer.from_json_str(backend_json)
    else:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(backend_json)
    tok.no_truncation()
    tok.no_padding()
    return tok


class Engines:
    """The built forms of one tokenizer JSON (module docstring), each built once, on first use,
    under its own lock (the reference builds here while preload() builds the fast one)."""

    def __init__(self, backend_json: str):
        self.backend_json = backend_json
        self._built: dict[str, object] = {}  # "tokenizers" | "fastokens" | "table" → built
        self._locks = {k: threading.Lock() for k in ("tokenizers", "fastokens", "table")}
        self._thread: threading.Thread | None = None

    def __getstate__(self):
        return {"backend_json": self.backend_json, "table": self._built.get("table")}

    def __setstate__(self, state):
        self.__init__(state["backend_json"])
        if state["table"] is not None:
            self._built["table"] = state["table"]

    def _get(self, what: str):
        got = self._built.get(what)
        if got is None:
            with self._locks[what]:
                got = self._built.get(what)
                if got is None:
                    if what == "table":
                        import orjson

                        got = table_of(orjson.loads(self.backend_json))
                    else:
                        got = build_rust(self.backend_json, what)
                    self._built[what] = got
        return got

    def rust(self, engine: str = "tokenizers"):
        """The Rust tokenizer of `engine` (callers never change its settings)."""
        return self._get(engine)

    def table(self) -> tuple:
        """(ByteRules, byte length of every token id, None), or (None, None, why not)."""
        return self._get("table")

    def preload(self) -> None:
        """Start building the fastokens tokenizer and the byte table on a background thread."""
        if {"fastokens", "table"} <= self._built.keys() or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._preload, name="fastokens-load", daemon=True)
        self._thread.start()
        # a run that fails before its first encode (a refused record) must not exit while the
        # thread is inside native code: the interpreter would abort ("exception not rethrown")
        atexit.register(self._thread.join)

    def _preload(self) -> None:
        try:
            self.rust("fastokens")
            self.table()
        except Exception:  # raised again, in the caller's thread, by the first encode
            pass

    def wait(self) -> None:
        """Block until preload() has finished (before forking: a fork must not copy a half-built
        state, nor a held lock)."""
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
            self._thread = None

    def building(self) -> bool:
        """preload()'s thread is still running."""
        return self._thread is not None and self._thread.is_alive()


def _engines(tokenizer) -> Engines:  # Engines, or a bare backend JSON (given its own)
    return tokenizer if isinstance(tokenizer, Engines) else Engines(tokenizer)


# -- the mask rule -------------------------------------------------------------------------------
def _overlap(starts: np.ndarray, ends: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Tokens [starts, ends) overlapping any span [s, e); spans: int[k, 2], sorted, non-overlapping.

    The first span whose end lies after the token's start decides: if the token overlaps any span
    it overlaps that one (an earlier span ends at or before the token's start, a later one starts
    at or after this one's end).
    """
    n = len(starts)
    if n == 0 or len(spans) == 0:
        return np.zeros(n, dtype=bool)
    j = np.searchsorted(spans[:, 1], starts, side="right")
    ok = j < len(spans)
    jj = np.minimum(j, len(spans) - 1)
    return ok & (ends > spans[jj, 0])


def spans_to_mask(offsets: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Tokens overlapping any char span [s, e). offsets: int[n, 2]; spans: int[k, 2], sorted."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    return _overlap(offsets[:, 0], offsets[:, 1], np.asarray(spans, dtype=np.int64).reshape(-1, 2))


def _check_spans(texts: list[str], spans) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All spans as rows int64[k, 2], text i's rows[at[i]:at[i + 1]], and their counts, checked in
    one vectorized pass (one conversion per batch: items are lists of (start, end) or arrays)."""
    if len(spans) != len(texts):
        raise ValueError(f"{len(texts)} texts but {len(spans)} span arrays")
    try:
        counts = np.fromiter(map(len, spans), dtype=np.int64, count=len(spans))
        rows = np.array(list(itertools.chain.from_iterable(spans)), dtype=np.int64)
    except (TypeError, ValueError):  # an item without a length, rows of unequal lengths
        rows = counts = None
    if rows is None or not (rows.ndim == 2 and rows.shape[1] == 2 or rows.size == 0):
        _refuse_shape(spans)
    rows = rows.reshape(-1, 2)
    if len(rows) != counts.sum():  # a flat item: [0, 2] for [(0, 2)]
        _refuse_shape(spans)
    at = np.zeros(len(spans) + 1, dtype=np.int64)
    np.cumsum(counts, out=at[1:])
    if not len(rows):
        return rows, at, counts
    owner = np.repeat(np.arange(len(spans)), counts)
    limit = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))[owner]
    bad = (rows[:, 0] < 0) | (rows[:, 1] < rows[:, 0]) | (rows[:, 1] > limit)
    bad[1:] |= (owner[1:] == owner[:-1]) & (rows[1:, 0] < rows[:-1, 1])
    if bad.any():
        i = int(owner[np.flatnonzero(bad)[0]])
        raise ValueError(
            f"spans[{i}] must be sorted, non-overlapping [start, end) char ranges within texts[{i}]"
        )
    return rows, at, counts


def _refuse_shape(spans) -> None:
    """Raise naming the first item of `spans` that is not rows of (start, end) (the error path)."""
    for i, item in enumerate(spans):
        try:
            a = np.asarray(item, dtype=np.int64)
        except (TypeError, ValueError):
            a = None
        if a is None or not (a.size == 0 or (a.ndim == 2 and a.shape[1] == 2)):
            raise ValueError(
                f"spans[{i}] must be (start, end) pairs, e.g. [(0, 2)] or int64[k, 2]; got "
                f"{item!r:.60}"
            )
    raise ValueError("spans must be one list of (start, end) pairs per text")


def _covered(bounds: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Tokens t, tiling [bounds[t], bounds[t + 1]) (bounds non-decreasing), overlapping any span
    [s, e): the tokens overlapping one span are the run from the first that ends after s to the
    last that starts before e (two searchsorted per span, not one per token), each run set by one
    slice (cheaper than a running count over all the batch's tokens)."""
    n = len(bounds) - 1
    mask = np.zeros(max(n, 0), dtype=bool)
    if n <= 0 or not len(spans):
        return mask
    first = np.searchsorted(bounds[1:], spans[:, 0], side="right").tolist()
    stop = np.searchsorted(bounds[:-1], spans[:, 1], side="left").tolist()
    for a, b in zip(first, stop, strict=True):
        mask[a:b] = True
    return mask


def _flat(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.fromiter((len(x) for x in lists), dtype=np.int64, count=len(lists))
    offsets = np.zeros(len(lists) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    ids = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int32, count=int(offsets[-1]))
    return ids, offsets


# -- the reference backend -----------------------------------------------------------------------
class HFBackend:
    """`tokenizers` (Rust, with offsets): the reference both backends must agree with."""

    name = "hf"

    def __init__(self, tokenizer: Engines | str):
        self.engines = _engines(tokenizer)
        self.backend_json = self.engines.backend_json

    def _tokenizer(self, texts: list[str] | None = None):
        """The Rust tokenizer to encode `texts` with (here the whole one, whatever the texts)."""
        return self.engines.rust()

    def encode(
        self, texts: list[str], add_special_tokens: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flat int32 ids of all texts, int64 offsets[len(texts) + 1]."""
        texts = list(texts)
        encs = self._tokenizer(texts).encode_batch(texts, add_special_tokens=add_special_tokens)
        return _flat([e.ids for e in encs])

    def encode_spans(self, texts: list[str], spans: list[np.ndarray]):
        """Flat int32 ids, int64 offsets[n + 1], flat bool mask (token overlaps a char span of its text)."""
        texts = list(texts)
        rows, row_at, counts = _check_spans(texts, spans)
        encs = self._tokenizer(texts).encode_batch(texts, add_special_tokens=False)
        ids, offsets = _flat([e.ids for e in encs])
        mask = np.zeros(len(ids), dtype=bool)
        for i in np.flatnonzero(counts).tolist():
            base = int(offsets[i])
            mine = rows[row_at[i] : row_at[i + 1]]
            ranges = _token_ranges(encs[i], mine)
            if ranges is None:
                off = np.array(encs[i].offsets, dtype=np.int64).reshape(-1, 2)
                mask[base : int(offsets[i + 1])] = spans_to_mask(off, mine)
                continue
            for a, b in ranges:
                mask[base + a : base + b + 1] = True
        return ids, offsets, mask


def _token_ranges(enc, spans: np.ndarray) -> list[tuple[int, int]] | None:
    """Inclusive token ranges trained by each span, or None: use the offsets rule for this text.

    With monotone offsets, the tokens overlapping [s, e) are contiguous: from the first token that
    holds char s to the last token that starts before e. char_to_token(e - 1) is the first token
    holding char e - 1; when that char is split over several byte tokens, the next ones hold it too.
    """
    n = len(enc)
    ranges = []
    for s, e in spans.tolist():
        if s >= e:
            return None  # an empty span trains only a token straddling s
        a, b = enc.char_to_token(s), enc.char_to_token(e - 1)
        if a is None or b is None:
            return None
        while b + 1 < n:
            nxt = enc.token_to_chars(b + 1)
            if nxt is None or nxt[0] >= e:
                break
            b += 1
        ranges.append((a, b))
    return ranges


# -- the fast backend -----------------------------------------------------------------------------
class FastBackend:
    """fastokens ids + byte-length table for the mask; texts that fail the byte check use HFBackend."""

    name = "fastokens"

    def __init__(self, tokenizer: Engines | str):
        self.engines = _engines(tokenizer)
        self.backend_json = self.engines.backend_json
        self.fallbacks = 0
        # fastokens reads a literal "<0x0A>" in the text as the byte-fallback piece <0x0A>
        # (tokenizers spells it out char by char): such texts of byte-fallback models go through HF
        self._literal_bytes = _BYTE_FALLBACK.search(self.backend_json) is not None
        self._hf: HFBackend | None = None

    def __getstate__(self):
        return {"engines": self.engines, "fallbacks": self.fallbacks}

    def __setstate__(self, state):
        self.__init__(state["engines"])
        self.fallbacks = state["fallbacks"]

    def _tokenizer(self):
        return self.engines.rust("fastokens")

    def _table(self) -> tuple[ByteRules, np.ndarray]:
        rules, lengths, reason = self.engines.table()
        if reason is not None:
            raise ValueError(f"the fastokens backend cannot map spans for this tokenizer: {reason}")
        return rules, lengths

    def _reference(self) -> HFBackend:
        if self._hf is None:
            self._hf = HFBackend(self.engines)
        return self._hf

    def _suspects(self, texts: list[str]) -> list[int]:
        if not self._literal_bytes:
            return []
        return [i for i, t in enumerate(texts) if "<0x" in t]

    # encoding
    def encode(
        self, texts: list[str], add_special_tokens: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Flat int32 ids of all texts, int64 offsets[len(texts) + 1]."""
        texts = list(texts)
        ids_b, off_b = self._tokenizer().encode_batch_flat(
            texts, add_special_tokens=add_special_tokens
        )
        ids = np.frombuffer(ids_b, dtype="<u4").astype(np.int32)
        offsets = np.frombuffer(off_b, dtype="<u8").astype(np.int64)
        redo = self._suspects(texts)
        if redo:
            self.fallbacks += len(redo)
            r_ids, r_off = self._reference().encode([texts[i] for i in redo], add_special_tokens)
            ids, offsets, _ = _splice(len(texts), redo, (ids, offsets, None), (r_ids, r_off, None))
        return ids, offsets

    def encode_spans(self, texts: list[str], spans: list[np.ndarray]):
        """Flat int32 ids, int64 offsets[n + 1], flat bool mask (token overlaps a char span of its text)."""
        texts = list(texts)
        rows, row_at, counts = _check_spans(texts, spans)
        rules, table = self._table()
        ids_b, off_b = self._tokenizer().encode_batch_flat(texts, add_special_tokens=False)
        raw = np.frombuffer(ids_b, dtype="<u4")
        ids = raw.astype(np.int32)
        offsets = np.frombuffer(off_b, dtype="<u8").astype(np.int64)

        # byte range of every token in the batch: [cum[t], cum[t + 1])
        lens = table.take(raw, mode="clip")  # (ids past the table: its last slot)
        any_unknown = len(lens) > 0 and lens.min() < 0  # (no bool array for the usual batch)
        unknown = lens < 0 if any_unknown else None
        cum = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(np.where(unknown, 0, lens) if any_unknown else lens, out=cum[1:])
        base = cum[offsets[:-1]]  # first byte of each text in the batch
        tok_bytes = cum[offsets[1:]] - base
        ok = counts > 0
        if any_unknown:
            bad = np.zeros(len(ids) + 1, dtype=np.int64)
            np.cumsum(unknown, out=bad[1:])
            ok &= bad[offsets[1:]] == bad[offsets[:-1]]
        suspects = self._suspects(texts)
        ok[suspects] = False

        # char spans → byte spans; all-ASCII texts have equal char and byte positions. The others
        # are joined: byte(c) = c + the extra UTF-8 bytes of the non-ASCII chars before c
        text_bytes = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        wide = [i for i in np.flatnonzero(ok).tolist() if not texts[i].isascii()]
        if rules.forms:  # the normalizer would change these texts: their bytes no longer line up
            changed = [
                i
                for i in wide
                if not all(unicodedata.is_normalized(f, texts[i]) for f in rules.forms)
            ]
            ok[changed] = False
            wide = [i for i in wide if ok[i]]
        owner = np.repeat(np.arange(len(texts)), counts)
        byte_rows = rows
        if wide:
            cp = np.frombuffer(
                "".join([texts[i] for i in wide]).encode("utf-32-le"), dtype=np.uint32
            )
            at = np.flatnonzero(cp >= 0x80)
            extra = np.zeros(len(at) + 1, dtype=np.int64)
            v = cp[at]
            np.cumsum(1 + (v >= 0x800).astype(np.int64) + (v >= 0x10000), out=extra[1:])

            def byte_pos(c):
                return c + extra[np.searchsorted(at, c)]

            char_base = np.full(len(texts), -1, dtype=np.int64)
            char_base[wide] = np.cumsum([0] + [len(texts[i]) for i in wide[:-1]])
            b0 = byte_pos(char_base[wide])
            text_bytes[wide] = byte_pos(char_base[wide] + text_bytes[wide]) - b0
            sel = char_base[owner] >= 0
            cb = char_base[owner[sel]][:, None]
            byte_rows = rows.copy()
            byte_rows[sel] = byte_pos(cb + rows[sel]) - byte_pos(cb)
        ok &= tok_bytes == text_bytes

        keep = ok[owner]
        global_spans = byte_rows[keep] + base[owner[keep]][:, None]
        mask = _covered(cum, global_spans)

        redo = (counts > 0) & ~ok
        redo[suspects] = True
        redo = np.flatnonzero(redo).tolist()
        if redo:
            self.fallbacks += len(redo)
            mine = [rows[row_at[i] : row_at[i + 1]] for i in redo]
            ref = self._reference().encode_spans([texts[i] for i in redo], mine)
            ids, offsets, mask = _splice(len(texts), redo, (ids, offsets, mask), ref)
        return ids, offsets, mask


def _splice(n: int, redo: list[int], flat: tuple, ref: tuple) -> tuple:
    """Replace the tokens of texts `redo` in (ids, offsets, mask | None) with `ref`'s, for them only."""
    ids, offsets, mask = flat
    r_ids, r_off, r_mask = ref
    at = np.asarray(redo)
    if np.array_equal(np.diff(r_off), offsets[at + 1] - offsets[at]):  # same token counts: in place
        for k, i in enumerate(redo):
            a, b = int(offsets[i]), int(offsets[i + 1])
            ids[a:b] = r_ids[r_off[k] : r_off[k + 1]]
            if mask is not None:
                mask[a:b] = r_mask[r_off[k] : r_off[k + 1]]
        return ids, offsets, mask
    # fastokens and tokenizers disagree on a text's token count: rebuild the buffers
    pos = dict(zip(redo, range(len(redo)), strict=True))
    srcs = [
        (ids, mask, offsets, i) if i not in pos else (r_ids, r_mask, r_off, pos[i])
        for i in range(n)
    ]
    new_ids = np.concatenate([x[o[k] : o[k + 1]] for x, _, o, k in srcs]).astype(np.int32)
    new_off = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([o[k + 1] - o[k] for _, _, o, k in srcs], out=new_off[1:])
    new_mask = None
    if mask is not None:
        new_mask = np.concatenate([m[o[k] : o[k + 1]] for _, m, o, k in srcs]).astype(bool)
    return new_ids, new_off, new_mask


def make_backend(name: str, tokenizer: Engines | str):
    """ "hf" → HFBackend, "fastokens" → FastBackend (check `supports_fast` first), on `tokenizer`'s
    engines (a bare JSON: its own); nothing is built yet."""
    if name == "hf":
        return HFBackend(tokenizer)
    if name == "fastokens":
        return FastBackend(tokenizer)
    raise ValueError(f"unknown tokenizer backend {name!r}; expected one of {', '.join(BACKENDS)}")
