"""Which tokenizers the fast backend serves, and the UTF-8 byte length of every token id: the
table FastBackend maps trained char spans through (packtool.tokenization.backends draws how).

Byte lengths per model (`supports_fast` says which tokenizers qualify):
    byte-level BPE (ByteLevel pre-tokenizer: Qwen3, Llama-3, gpt-oss)   number of chars of the piece
    other BPE (sentencepiece-style: Replace " "→"▁", ByteFallback)       UTF-8 length, "▁" = 1 byte,
                                                                          "<0xNN>" = 1 byte
    added tokens (override vocab ids)                                    UTF-8 length of content

A tokenizer whose model, normalizer, pre-tokenizer or post-processor could make a token's bytes
differ from its table length in a way the byte sum cannot catch is refused, with the reason
(`byte_rules_refusal`, cached on the TokenizerSpec); its runs use the reference backend.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")
_NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


def _byte_alphabet() -> frozenset[str]:
    """GPT-2's bytes_to_unicode: the 256 chars a byte-level vocabulary is written in."""
    bs = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
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
        elif (
            t == "Replace"
            and (n.get("pattern") or {}).get("String") == " "
            and len(n.get("content") or "") == 1
        ):
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
        ambiguous = (
            a.get("normalized") and rules.space and (rules.space in content or " " in content)
        )
        if not content or a.get("lstrip") or a.get("rstrip") or ambiguous:
            out[a["id"]] = -1
        elif rules.byte_fallback and _BYTE_PIECE.fullmatch(content):
            # the model emits it for one byte; a literal "<0x0A>" in the text is 6 bytes, which
            # only shortens the sum (so that text falls back)
            out[a["id"]] = 1
        else:
            out[a["id"]] = len(content.encode())
    out[out == 0] = -1
    return out


def table_of(spec: dict) -> tuple[ByteRules | None, np.ndarray | None, str | None]:
    """(rules, byte length of every token id, None), or (None, None, why not), of a parsed
    tokenizer JSON (backends.Engines.table keeps it)."""
    rules, reason = _byte_rules(spec)
    return (None, None, reason) if rules is None else (rules, _byte_lengths(spec, rules), None)


def _loads(text: str):
    """The tokenizer JSON (10+ MB for a 150k vocabulary), parsed by orjson."""
    import orjson

    return orjson.loads(text)


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def byte_rules_refusal(backend_json: str) -> str | None:
    """Why fastokens' spans cannot be mapped for this tokenizer JSON (the model, normalizer,
    pre-tokenizer or post-processor; see the module docstring), None when they can. Parses the
    JSON: TokenizerSpec decides it once and caches it."""
    try:
        spec = _loads(backend_json)
    except ValueError as e:
        return f"the tokenizer JSON cannot be parsed ({_first_line(e)})"
    return refusal_of(spec)


def refusal_of(spec: dict) -> str | None:
    """byte_rules_refusal of a parsed tokenizer JSON."""
    return _byte_rules(spec)[1]


def supports_fast(tokenizer, load: bool = True) -> str | None:
    """None when fastokens can serve this tokenizer (its backend JSON, or a TokenizerSpec: its
    cached byte_rules_refusal), else a short reason.

    fastokens must be importable, load the JSON, and the model / normalizer / pre-tokenizer must be
    one whose per-token byte lengths we can derive (see the module docstring). `load=False` skips
    building it (static checks only).
    """
    try:
        import fastokens
    except ImportError:
        return "fastokens is not installed"
    if isinstance(tokenizer, str):
        backend_json, reason = tokenizer, byte_rules_refusal(tokenizer)
    else:
        backend_json, reason = tokenizer.backend_json, tokenizer.fast_refusal
    if reason is not None or not load:  # (load=False: the caller builds it, Engines.preload)
        return reason
    try:
        fastokens.Tokenizer.from_json_str(backend_json)
    except Exception as e:
        return f"fastokens cannot load this tokenizer: {_first_line(e)}"
    return None
