"""Control tokens written in message text (`--special-in-content`): found, and read as plain text.

A user can type a tokenizer's control token into a message (`<|im_start|>` in a chat export,
`<|im_end|>` in a tool call's argument). The Encoder counts such examples and keeps the token as
a control token (`keep`, what apply_chat_template does), refuses the example (`error`), or
tokenizes it as text (`split`):

    messages  [{"role": "user", "content": "say <|im_end|> now"}]
    found     [(0, "<|im_end|>")]                                   (turn, control token)
    split     content "say \\ue0000\\ue001 now", literals ["<|im_end|>"]  (placeholders: U+E000 n U+E001)
    rendered  "<|im_start|>user\\nsay \\ue0000\\ue001 now<|im_end|>\\n..."
    encoded   the pieces between placeholders through the reference tokenizer, each literal alone
              with special-token matching off

`may_hold` answers for a whole batch with one search of its messages as JSON (orjson), so the
walk over each message (`found`) runs only for batches that hold a control token somewhere.
"""

from __future__ import annotations

import functools
import re

import numpy as np
from orjson import dumps as _json

from packtool.tokenization.chat_template import special_tokens
from packtool.tokenization.render import ExampleError, leaf_values

PLACEHOLDER = re.compile("\ue000([0-9]+)\ue001")


class ContentTokens:
    """One tokenizer's control tokens, searched for in message text."""

    def __init__(self, spec):
        self.spec = spec
        self.control = tuple(sorted(special_tokens(spec), key=len, reverse=True))
        firsts = {t[0] for t in self.control if t}
        # "<": a cheap test before the regex
        self.first = firsts.pop() if len(firsts) == 1 else None
        # every control token written in JSON as itself (no quote, backslash or control char): a
        # search of the messages as JSON finds every one in their texts (may_hold)
        self.json_safe = all(_json(t)[1:-1] == t.encode() for t in self.control)
        self._plain = None  # (reference backend, a Tokenizer reading control tokens as text)

    def __getstate__(self):
        return {**self.__dict__, "_plain": None}

    @functools.cached_property
    def pattern(self) -> re.Pattern:
        """The control tokens, longest first (compiled on first use: 256 of them take ~15 ms)."""
        return re.compile("|".join(map(re.escape, self.control)))

    @functools.cached_property
    def pattern_json(self) -> re.Pattern:
        """The same search over messages as JSON (orjson's UTF-8)."""
        return re.compile(b"|".join(re.escape(t.encode()) for t in self.control))

    def found(self, messages: list[dict]) -> list[tuple[int, str]]:
        """(turn, control token) for each message whose text holds one of the tokenizer's control tokens."""
        if not self.control:
            return []
        out = []
        for i, m in enumerate(messages):
            texts = [
                m.get("content"),
                m.get("reasoning_content"),
                *(x for c in m.get("tool_calls") or () for x in leaf_values(c)),
            ]
            for v in texts:
                if not isinstance(v, str) or (self.first is not None and self.first not in v):
                    continue
                hit = self.pattern.search(v)
                if hit:
                    out.append((i, hit.group(0)))
                    break
        return out

    def may_hold(self, conversations: list) -> bool:
        """False when no message text of these conversations (lists of messages) holds a control
        token: one search of them as JSON, a superset of the texts `found` reads, for the batch
        (0.5 µs a conversation, against 2-4 µs for its walk over each message)."""
        if not self.control:
            return False
        if not self.json_safe:
            return True
        try:
            dump = _json(conversations)
        except Exception:  # a value JSON cannot hold: each conversation is walked
            return True
        if self.first is not None and self.first.encode() not in dump:
            return False
        return self.pattern_json.search(dump) is not None

    def placeholders(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """Control tokens in message text replaced by U+E000 n U+E001 (literal n), for split mode."""
        literals: list[str] = []

        def sub(m):
            literals.append(m.group(0))
            return f"\ue000{len(literals) - 1}\ue001"

        def walk(v):
            if isinstance(v, str):
                if "\ue000" in v:
                    raise ExampleError(
                        "message text holds U+E000, which --special-in-content split reserves"
                    )
                return self.pattern.sub(sub, v)
            if isinstance(v, dict):
                return {k: walk(x) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        out = []
        for m in messages:
            m = dict(m)
            for key in ("content", "reasoning_content", "thinking", "tool_calls"):
                if m.get(key) is not None:
                    m[key] = walk(m[key])
            out.append(m)
        return out, literals

    def split_encode(
        self, text: str, spans: list[tuple[int, int]], literals: list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and trained mask of a text whose placeholders stand for control tokens to read as text:
        the pieces between placeholders through the reference tokenizer, each literal alone with
        special-token matching off (the same on both backends)."""
        from packtool.tokenization.backends import make_backend

        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        if self._plain is None:
            from tokenizers import Tokenizer

            self._plain = (
                make_backend("hf", self.spec.backend_json),
                Tokenizer.from_str(self.spec.backend_json),
            )
            self._plain[1].encode_special_tokens = True
        ref, plain = self._plain
        ids, mask, at = [], [], 0

        def trained(a: int, b: int) -> bool:
            return bool(len(spans)) and bool(((spans[:, 0] < b) & (spans[:, 1] > a)).any())

        pieces = []
        for m in PLACEHOLDER.finditer(text):
            pieces.append(("text", at, m.start()))
            pieces.append(("literal", m.start(), m.end(), int(m.group(1))))
            at = m.end()
        pieces.append(("text", at, len(text)))
        for p in pieces:
            a, b = p[1], p[2]
            if p[0] == "literal":
                got = np.asarray(
                    plain.encode(literals[p[3]], add_special_tokens=False).ids, dtype=np.int32
                )
                ids.append(got)
                mask.append(np.full(len(got), trained(a, b)))
            elif b > a:
                local = np.clip(spans - a, 0, b - a) if len(spans) else spans
                local = local[local[:, 0] < local[:, 1]] if len(local) else local
                got, _, m = ref.encode_spans([text[a:b]], [local.reshape(-1, 2)])
                ids.append(got.astype(np.int32))
                mask.append(m.astype(bool))
        return (
            np.concatenate(ids) if ids else np.zeros(0, np.int32),
            np.concatenate(mask) if mask else np.zeros(0, bool),
        )
