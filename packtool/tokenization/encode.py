"""Turn normalized examples into (input_ids, labels) with the loss on the right tokens.

Chat examples, template with generation markers (the fast path):

    rendered  "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello!<|im_end|>\\n"
    spans                                                          [------------------)   (chars)
    tokens     <|im_start|> user \\n Hi <|im_end|> \\n <|im_start|> assistant \\n Hello ! <|im_end|> \\n
    labels     -100 ...                                                    Hello ! <|im_end|> -100

1. render every conversation with jinja (transformers' own renderer, which records the character
   spans of `{% generation %}` blocks);
2. tokenize the whole batch in one call with offsets (Rust, no per-example Python tokenization);
3. map character spans to tokens with numpy: a token is trained when it overlaps a span — the
   same rule as `apply_chat_template(..., return_assistant_tokens_mask=True)`, so ids and masks
   are identical (tested).

Templates without markers fall back to a prefix diff per assistant turn i: the text that
render(messages[:i+1]) adds to render(messages[:i], add_generation_prompt=True). That only works
when the template is prefix-preserving; when it is not (Qwen3's official template rewrites earlier
turns), the example fails with a message that points to a training template.

Prompt-completion strings: prompt tokens (no loss) + completion tokens + EOS (loss), tokenized
separately so the boundary is exact. Plain text: every token + EOS carries loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packtool.formats import template_messages
from packtool.tokenization.loading import ChatTemplate

IGNORE = -100


class ExampleError(Exception):
    """One example cannot be encoded; the pipeline counts it (or stops, with --on-error error)."""


@dataclass
class Encoded:
    input_ids: list[np.ndarray]  # int32 each
    labels: list[np.ndarray]  # int32 each
    errors: list[str | None]  # per example: None, or why it was not encoded


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def spans_to_mask(offsets: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """Tokens overlapping any char span [s, e). offsets: int[n, 2]; spans: int[k, 2], sorted."""
    n = len(offsets)
    if n == 0 or len(spans) == 0:
        return np.zeros(n, dtype=bool)
    # first span whose end lies after the token's start; the token is trained if it starts before
    # that span ends (by construction) and ends after the span starts
    j = np.searchsorted(spans[:, 1], offsets[:, 0], side="right")
    ok = j < len(spans)
    jj = np.minimum(j, len(spans) - 1)
    return ok & (offsets[:, 1] > spans[jj, 0])


class Encoder:
    """Encodes batches of normalized examples (see packtool.formats) for one tokenizer + template."""

    def __init__(self, tokenizer, template: ChatTemplate, train_on: str = "assistant"):
        self.tok = tokenizer
        self.template = template
        self.train_on = train_on
        self.eos_id = tokenizer.eos_token_id
        # the Rust tokenizer behind the transformers wrapper: apply_chat_template tokenizes with
        # add_special_tokens=False, which is exactly backend.encode_batch(..., add_special_tokens=False)
        self._backend = tokenizer.backend_tokenizer
        self._kwargs = dict(tokenizer.special_tokens_map)
        ends = {t for t in [tokenizer.eos_token, *getattr(tokenizer, "all_special_tokens", [])] if t}
        self._end_tokens = tuple(sorted(ends))

    # -- rendering -------------------------------------------------------------------------------
    def _render(self, messages, tools, *, marks: bool, gen_prompt: bool = False):
        from transformers.utils.chat_template_utils import render_jinja_template

        texts, spans = render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=self.template.source,
            return_assistant_tokens_mask=marks,
            add_generation_prompt=gen_prompt,
            **self._kwargs,
        )
        return texts[0], (spans[0] if marks else None)

    def _opening_header(self, messages, tools) -> str:
        """What precedes an assistant turn that opens the conversation.

        Rendering an empty conversation works for some templates only; otherwise the header is the
        generation prompt as the template writes it after a user turn,
            G = render([user], generation prompt) - render([user]),
        and everything up to the first G in render(messages[:1]) is the prompt.
        """
        try:
            return self._render([], tools, marks=False, gen_prompt=True)[0]
        except Exception:
            pass
        probe = [{"role": "user", "content": "x"}]
        plain, _ = self._render(probe, tools, marks=False)
        prompted, _ = self._render(probe, tools, marks=False, gen_prompt=True)
        header = prompted[len(plain):] if prompted.startswith(plain) else ""
        first, _ = self._render(messages[:1], tools, marks=False)
        at = first.find(header) if header else -1
        if at < 0:
            raise ExampleError("the template has no recognisable generation prompt")
        return first[: at + len(header)]

    def _prefix_spans(self, messages, tools) -> tuple[str, list[tuple[int, int]]]:
        full, _ = self._render(messages, tools, marks=False)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            try:
                if i == 0:
                    before = self._opening_header(messages, tools)
                else:
                    before, _ = self._render(messages[:i], tools, marks=False, gen_prompt=True)
            except Exception as e:  # guessing "" here would train the prompt: refuse instead
                raise ExampleError(
                    f"chat template '{self.template.name}' cannot render the conversation before assistant "
                    f"turn {i} ({_first_line(e)}), so the turn cannot be located; use a template with "
                    "{% generation %} markers (e.g. --chat-template chatml-train)"
                ) from e
            upto, _ = self._render(messages[: i + 1], tools, marks=False)
            if not (upto.startswith(before) and full.startswith(upto)):
                raise ExampleError(
                    f"chat template '{self.template.name}' is not prefix-preserving (turn {i} renders "
                    "differently once later turns follow), so assistant tokens cannot be located; "
                    "use --chat-template chatml-train or a template with {% generation %} markers"
                )
            end = len(upto)
            stripped = upto.rstrip()
            if stripped.endswith(self._end_tokens):
                end = len(stripped)  # keep the end-of-turn token, not the newline after it
            spans.append((len(before), end))
        return full, spans

    def _chat_text(self, ex: dict) -> tuple[str, np.ndarray]:
        messages = template_messages(ex)
        if not messages:
            raise ExampleError("empty conversation")
        tools = ex.get("tools") or None
        try:
            if self.template.has_generation:
                text, spans = self._render(messages, tools, marks=True)
            else:
                text, spans = self._prefix_spans(messages, tools)
        except ExampleError:
            raise
        except Exception as e:  # jinja errors, raise_exception() inside templates
            raise ExampleError(f"chat template failed: {_first_line(e)}") from e
        if self.train_on == "all":
            return text, np.array([[0, len(text)]], dtype=np.int64)
        weights = [m.get("weight") for m in ex["messages"] if m["role"] == "assistant"]
        keep = [w is None or w > 0 for w in weights]
        if self.train_on == "last":
            keep = [False] * (len(keep) - 1) + [keep[-1]] if keep else keep
        if not all(keep):
            if len(spans) != len(weights):
                raise ExampleError(
                    f"the template marks {len(spans)} generation spans for {len(weights)} assistant turns, "
                    "so per-turn weights or --train-on last cannot be applied"
                )
            spans = [s for s, k in zip(spans, keep, strict=True) if k]
        arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
        return text, arr[arr[:, 0] < arr[:, 1]] if len(arr) else arr

    # -- batches ----------------------------------------------------------------------------------
    def _chat_tokens(self, texts: list[str], spans: list[np.ndarray]):
        """One Rust batch call for the chunk; each span is mapped to tokens with two lookups.

        A token is trained when it overlaps a span (transformers' rule). The first such token is
        the one holding the span's first char, the last the one holding its last char, and every
        token between them overlaps too:  tokens [char_to_token(s), char_to_token(e - 1)].
        Chars that map to no token (a normalizer removed them) fall back to the offsets rule.
        """
        encs = self._backend.encode_batch(texts, add_special_tokens=False)
        for enc, sp in zip(encs, spans, strict=True):
            ids = np.array(enc.ids, dtype=np.int32)
            mask = np.zeros(len(ids), dtype=bool)
            for s, e in sp.tolist():
                a, b = enc.char_to_token(s), enc.char_to_token(e - 1)
                if a is None or b is None:
                    off = np.array(enc.offsets, dtype=np.int64).reshape(-1, 2)
                    mask = spans_to_mask(off, sp)
                    break
                mask[a : b + 1] = True
            yield ids, np.where(mask, ids, IGNORE).astype(np.int32)

    def encode(self, examples: list[dict]) -> Encoded:
        n = len(examples)
        ids: list[np.ndarray | None] = [None] * n
        labels: list[np.ndarray | None] = [None] * n
        errors: list[str | None] = [None] * n
        chat_idx, chat_texts, chat_spans = [], [], []
        pc_idx, prompts, completions = [], [], []
        text_idx, texts = [], []
        for i, ex in enumerate(examples):
            kind = ex.get("kind")
            try:
                if kind == "chat":
                    t, s = self._chat_text(ex)
                    chat_idx.append(i), chat_texts.append(t), chat_spans.append(s)
                elif kind == "prompt_completion":
                    pc_idx.append(i), prompts.append(ex["prompt"]), completions.append(ex["completion"])
                elif kind == "text":
                    text_idx.append(i), texts.append(ex["text"])
                else:
                    raise ExampleError(f"unknown example kind {kind!r}")
            except ExampleError as e:
                errors[i] = str(e)
        if chat_texts:
            for i, (a, lab) in zip(chat_idx, self._chat_tokens(chat_texts, chat_spans), strict=True):
                ids[i], labels[i] = a, lab
        if pc_idx:
            p = self.tok(prompts, add_special_tokens=True)["input_ids"]
            c = self.tok(completions, add_special_tokens=False)["input_ids"]
            for j, i in enumerate(pc_idx):
                comp = list(c[j]) + ([self.eos_id] if self.eos_id is not None else [])
                a = np.asarray(list(p[j]) + comp, dtype=np.int32)
                lab = a.copy()
                if self.train_on != "all":
                    lab[: len(p[j])] = IGNORE
                ids[i], labels[i] = a, lab
        if texts:
            t = self.tok(texts, add_special_tokens=True)["input_ids"]
            for j, i in enumerate(text_idx):
                a = np.asarray(list(t[j]) + ([self.eos_id] if self.eos_id is not None else []), dtype=np.int32)
                ids[i], labels[i] = a, a.copy()
        empty = np.zeros(0, dtype=np.int32)
        for i in range(n):
            if errors[i] is None and (ids[i] is None or len(ids[i]) == 0):
                errors[i] = "renders to zero tokens"
        return Encoded(
            [x if x is not None else empty for x in ids],
            [x if x is not None else empty for x in labels],
            errors,
        )
