"""Two interchangeable tokenizer backends (on one `loading.Engines`): rendered texts + char spans →
ids, offsets, trained mask (a token is trained when its chars overlap a span [s, e) of its text).

    texts    ["<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHé!<|im_end|>\\n", "..."]
    spans    [int64[[52, 65]], int64[k, 2], ...]  "Hé!<|im_end|>"; sorted, non-overlapping char ranges

    ids      int32 [ 151644 872 198 13048 151645 198 151644 77091 198 39 963 0 151645 198 | ... ]
    offsets  int64 [0,                                                                  14, ...]  n + 1
    mask     bool  [ 0      0   0   0     0      0   0      0     0   1  1   1 1      0   | ... ]

`HFBackend` (the reference) maps spans through char offsets. `FastBackend` (fastokens: ids only)
through bytes: byte_len int32[vocab + 1] (-1: unknown; last slot: ids past the table), token t
covering bytes [ends[t-1], ends[t]) of ends = cumsum(byte_len[ids]). A text whose tokens' bytes do
not sum to its UTF-8 length (or hold a -1, or is not in its NFC form) goes through HFBackend
(`fallbacks`): every way a table length can differ from a token's real bytes shortens the sum.
Byte lengths (`refusal_of`: which tokenizers qualify):

    byte-level BPE (ByteLevel pre-tokenizer: Qwen3, Llama-3, gpt-oss)   number of chars of the piece
    other BPE (sentencepiece-style: Replace " "→"▁", ByteFallback)       UTF-8 length, "▁" = 1 byte,
                                                                          "<0xNN>" = 1 byte
    added tokens (override vocab ids)                                    UTF-8 length of content
"""

from __future__ import annotations

import itertools
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

BACKENDS = ("fastokens", "hf")

_BYTE_FALLBACK = re.compile(r'"byte_fallback"\s*:\s*true')
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


# -- which tokenizers fastokens serves, and the byte length of every token id ---------------------
def _byte_alphabet() -> frozenset[str]:
    """GPT-2's bytes_to_unicode: the 256 chars a byte-level vocabulary is written in."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    extra = [b for b in range(256) if b not in bs]
    return frozenset(map(chr, bs + [256 + k for k in range(len(extra))]))


@dataclass
class ByteRules:
    """How byte lengths are derived for one tokenizer, and what each text must pass."""

    bytelevel: bool
    space: str | None  # the char a normalizer writes for " " (sentencepiece "▁"), counted as 1 byte
    byte_fallback: bool
    forms: tuple[str, ...]  # unicode normal forms a text must already be in (NFC normalizer)


def _parts(node, key: str) -> list[dict]:
    """A component and, for a Sequence, its members (recursively)."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [p for sub in node.get(key) or [] for p in _parts(sub, key)]
    return [node]


def _byte_rules(spec: dict) -> tuple[ByteRules | None, str | None]:
    """The byte-length rules for a parsed tokenizer JSON, or a reason it cannot have one."""
    model = spec.get("model") or {}
    kind = model.get("type") or ("BPE" if "merges" in model else "unknown")
    if kind != "BPE":
        return None, f"{kind} models are not supported"
    for key in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            return None, f"BPE {key} {model[key]!r} is not supported"

    forms, space = [], None
    for n in _parts(spec.get("normalizer"), "normalizers"):
        t = n.get("type")
        if t in _NORMAL_FORMS:
            forms.append(t)
        elif t == "Replace" and (n.get("pattern") or {}).get("String") == " ":
            if len(n.get("content") or "") != 1:
                return None, f"normalizer {t} is not supported (it can change the text's length)"
            space = n["content"]
        else:
            return None, f"normalizer {t} is not supported (it can change the text's length)"

    bytelevel = False
    for p in _parts(spec.get("pre_tokenizer"), "pretokenizers"):
        t = p.get("type")
        if t == "ByteLevel":
            if p.get("add_prefix_space"):
                return None, "the ByteLevel pre-tokenizer adds a prefix space"
            bytelevel = True
        elif t == "Metaspace":
            prepend = p.get("prepend_scheme") or (
                "always" if p.get("add_prefix_space", True) else "never"
            )
            if prepend != "never":
                return None, f"the Metaspace pre-tokenizer prepends {p.get('replacement', '▁')!r}"
            if len(p.get("replacement") or "") != 1 or space not in (None, p["replacement"]):
                return None, "this Metaspace pre-tokenizer is not supported"
            space = p["replacement"]
        elif t not in ("Split", "Digits", "Punctuation"):
            return None, f"pre-tokenizer {t} is not supported"
    if bytelevel and space is not None:
        return None, "a Replace normalizer before a ByteLevel pre-tokenizer is not supported"
    if space is not None and model.get("byte_fallback") and space not in (model.get("vocab") or {}):
        return None, f"the vocabulary has no {space!r} piece"

    for p in _parts(spec.get("post_processor"), "processors"):
        t = p.get("type")
        if t in ("ByteLevel", "RobertaProcessing") and p.get("trim_offsets"):
            return None, f"the {t} post-processor trims offsets"
        if t not in ("ByteLevel", "TemplateProcessing", "BertProcessing", "RobertaProcessing"):
            return None, f"post-processor {t} is not supported"
    return ByteRules(bytelevel, space, bool(model.get("byte_fallback")), tuple(forms)), None


def _byte_lengths(spec: dict, rules: ByteRules) -> np.ndarray:
    """int32[max id + 2]: UTF-8 bytes of the text each id stands for; -1 where not derivable."""
    model = spec["model"]
    vocab: dict[str, int] = model.get("vocab") or {}
    added = spec.get("added_tokens") or []
    size = max([*vocab.values(), *(a["id"] for a in added), -1]) + 2
    out = np.full(size, -1, dtype=np.int32)
    if rules.bytelevel:
        alphabet = _byte_alphabet()
        for piece, i in vocab.items():
            if piece and alphabet.issuperset(piece):
                out[i] = len(piece)
    else:
        extra = len(rules.space.encode()) - 1 if rules.space else 0
        for piece, i in vocab.items():
            if rules.byte_fallback and _BYTE_PIECE.fullmatch(piece):
                out[i] = 1
            elif piece:
                out[i] = len(piece.encode()) - (extra * piece.count(rules.space) if extra else 0)
    unk = model.get("unk_token")
    if unk is not None and unk in vocab:
        out[vocab[unk]] = -1
    for a in added:
        content = a.get("content") or ""
        spaced = rules.space and (rules.space in content or " " in content)
        if not content or a.get("lstrip") or a.get("rstrip") or (a.get("normalized") and spaced):
            out[a["id"]] = -1
        elif rules.byte_fallback and _BYTE_PIECE.fullmatch(content):
            # one byte (a literal "<0x0A>" in the text only shortens the sum: it falls back)
            out[a["id"]] = 1
        else:
            out[a["id"]] = len(content.encode())
    out[out == 0] = -1
    return out


def table_of(spec: dict) -> tuple[ByteRules | None, np.ndarray | None, str | None]:
    """(rules, byte length of every token id, None), or (None, None, why not), of a parsed JSON."""
    rules, reason = _byte_rules(spec)
    return (None, None, reason) if rules is None else (rules, _byte_lengths(spec, rules), None)


def refusal_of(spec: dict) -> str | None:
    """Why fastokens' spans cannot be mapped for a parsed tokenizer JSON (its model, normalizer,
    pre-tokenizer or post-processor), None when they can (TokenizerSpec.fast_refusal keeps it)."""
    return _byte_rules(spec)[1]


# -- the mask rule -------------------------------------------------------------------------------
def spans_to_mask(offsets: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Tokens overlapping any char span [s, e). offsets: int[n, 2]; spans: int[k, 2], sorted. The
    first span ending after a token's start is the only one it can overlap."""
    offsets = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    starts, n = offsets[:, 0], len(offsets)
    if n == 0 or len(spans) == 0:
        return np.zeros(n, dtype=bool)
    j = np.searchsorted(spans[:, 1], starts, side="right")
    jj = np.minimum(j, len(spans) - 1)
    return (j < len(spans)) & (offsets[:, 1] > spans[jj, 0])


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
    if (
        rows is None
        or not (rows.ndim == 2 and rows.shape[1] == 2 or rows.size == 0)
        or len(rows.reshape(-1, 2)) != counts.sum()  # a flat item: [0, 2] for [(0, 2)]
    ):
        _refuse_shape(spans)
    rows = rows.reshape(-1, 2)
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
    """Tokens t, tiling [bounds[t], bounds[t + 1]), overlapping any span [s, e): per span, the run
    from the first token ending after s to the last starting before e (two searchsorted a span)."""
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

    def __init__(self, engines):  # a loading.Engines
        self.engines = engines
        self.backend_json = self.engines.backend_json

    def _tokenizer(self, texts: list[str] | None = None):
        """The Rust tokenizer to encode `texts` with (cut.CutBackend: one cut to them)."""
        return self.engines.rust()

    def encode(self, texts: list[str], add_special_tokens: bool = False):
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
                mask[base : int(offsets[i + 1])] = spans_to_mask(encs[i].offsets, mine)
                continue
            for a, b in ranges:
                mask[base + a : base + b + 1] = True
        return ids, offsets, mask


def _token_ranges(enc, spans: np.ndarray) -> list[tuple[int, int]] | None:
    """Inclusive token ranges trained by each span (None: use the offsets rule): char_to_token(s)
    .. char_to_token(e - 1), and the tokens after it that still start before e (the other byte
    tokens of a split multi-byte char)."""
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

    def __init__(self, engines):  # a loading.Engines
        self.engines = engines
        self.backend_json = self.engines.backend_json
        self.fallbacks = 0
        # fastokens reads a literal "<0x0A>" as the byte piece <0x0A>: such texts go through HF
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
        return [i for i, t in enumerate(texts) if "<0x" in t] if self._literal_bytes else []

    def encode(self, texts: list[str], add_special_tokens: bool = False):  # as HFBackend's
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

    def encode_spans(self, texts: list[str], spans: list[np.ndarray]):  # as HFBackend's
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
            for i in wide:
                ok[i] = all(unicodedata.is_normalized(f, texts[i]) for f in rules.forms)
            wide = [i for i in wide if ok[i]]
        owner = np.repeat(np.arange(len(texts)), counts)
        byte_rows = rows
        if wide:
            joined = "".join([texts[i] for i in wide])
            cp = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
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


def make_backend(name: str, engines):
    """ "hf" → HFBackend, "fastokens" → FastBackend on a loading.Engines; nothing is built yet."""
    if name not in BACKENDS:
        raise ValueError(
            f"unknown tokenizer backend {name!r}; expected one of {', '.join(BACKENDS)}"
        )
    return (HFBackend if name == "hf" else FastBackend)(engines)
