"""The encode step: a batch of raw records → an Arrow batch of (input_ids, labels), loss on the right tokens.

    RawBatch ──parse (orjson)──▶ records ──normalize──▶ examples ──render──▶ texts + char spans
        ──backend (fastokens | hf)──▶ flat ids + trained mask ──▶ pa.RecordBatch (packtool.data)
    every refused record: (row in batch, reason), reported to the RecordSource by the caller

`EncodeStep` is that whole function: plain data (tokenizer spec, template, options), picklable,
no global state; it builds its tokenizer backend on first use in whichever process runs it, so a
process pool (or a distributed engine) can run it over any partition of the input.

Chat examples, template with generation markers (the fast path):

    rendered  "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello!<|im_end|>\\n"
    spans                                                          [------------------)   (chars)
    tokens     <|im_start|> user \\n Hi <|im_end|> \\n <|im_start|> assistant \\n Hello ! <|im_end|> \\n
    labels     -100 ...                                                    Hello ! <|im_end|> -100

1. render every conversation: transformers' jinja renderer, which records the character spans of
   `{% generation %}` blocks, or for the built-in chatml-train template the native renderer
   (packtool.tokenization.chatml: same text and spans, ~20x faster);
2. tokenize the whole batch in one call (Rust; see packtool.tokenization.backends: fastokens maps
   spans through per-token byte lengths, hf through character offsets);
3. a token is trained when it overlaps a span — the same rule as
   `apply_chat_template(..., return_assistant_tokens_mask=True)`, so ids and masks are identical
   (tested, and checked at the start of every run on the run's own data).

Templates without markers fall back to a prefix diff per assistant turn i: the text that
render(messages[:i+1]) adds to render(messages[:i], add_generation_prompt=True). That only works
when the template is prefix-preserving; when it is not (Qwen3's official template rewrites earlier
turns), the example fails with a message that points to a training template.

Prompt-completion strings: prompt tokens (no loss) + completion tokens + EOS (loss), tokenized
separately so the boundary is exact. Plain text: every token + EOS carries loss.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from packtool.config import ReadConfig
from packtool.formats import template_messages
from packtool.schema import IGNORE_INDEX as IGNORE
from packtool.tokenization.loading import ChatTemplate, TokenizerSpec


class ExampleError(Exception):
    """One example cannot be encoded; the source counts it (or stops, with --on-error error)."""


@dataclass
class Encoded:
    """A batch of examples as flat buffers: example i is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray  # int32, all examples back to back
    label_values: np.ndarray  # int32, the same layout
    offsets: np.ndarray  # int64[n + 1]
    errors: list[str | None]  # per example: None, or why it was not encoded (then it has 0 tokens)

    @property
    def input_ids(self) -> list[np.ndarray]:
        return [self.ids[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]

    @property
    def labels(self) -> list[np.ndarray]:
        return [self.label_values[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


class Encoder:
    """Encodes batches of normalized examples (see packtool.formats) for one tokenizer + template."""

    def __init__(self, spec: TokenizerSpec, template: ChatTemplate | None, train_on: str = "assistant",
                 backend: str = "hf", renderer: str = "jinja"):
        self.spec = spec
        self.renderer = renderer  # "jinja" (transformers' renderer) | "native" (chatml.render: built-in template)
        self.template = template
        self.train_on = train_on
        self.backend_name = backend
        self.eos_id = spec.eos_id
        self._kwargs = dict(spec.special_tokens)
        ends = {t for t in [spec.eos_token, *spec.all_special_tokens] if t}
        self._end_tokens = tuple(sorted(ends))
        self._backend = None

    def __getstate__(self):
        return {**self.__dict__, "_backend": None}

    @property
    def backend(self):
        if self._backend is None:
            from packtool.tokenization.backends import make_backend

            self._backend = make_backend(self.backend_name, self.spec.backend_json)
        return self._backend

    # -- rendering -------------------------------------------------------------------------------
    def _render(self, messages, tools, *, marks: bool, gen_prompt: bool = False):
        if self.renderer == "native" and marks and not gen_prompt:
            from packtool.tokenization import chatml

            try:
                return chatml.render(messages, tools)
            except chatml.NotNative:
                pass
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
    @staticmethod
    def _each(fn, *columns: list) -> list[tuple | str]:
        """fn(*columns) for the whole batch (a backend call returning flat arrays, offsets, ...), split
        into one tuple of arrays per item; where the batch call fails (a text no tokenizer accepts),
        item by item, so one bad example becomes its error string instead of failing the batch."""

        def split(out) -> list[tuple]:
            flat, off, *rest = out
            return [tuple(x[off[j]:off[j + 1]] for x in (flat, *rest)) for j in range(len(off) - 1)]

        try:
            return split(fn(*columns))
        except Exception:
            items: list[tuple | str] = []
            for row in zip(*columns, strict=True):
                try:
                    items += split(fn(*([x] for x in row)))
                except Exception as e:
                    items.append(f"the tokenizer cannot encode this example: {_first_line(e)}")
            return items

    def encode(self, examples: list[dict]) -> Encoded:
        n = len(examples)
        pieces: list[tuple[np.ndarray, np.ndarray] | None] = [None] * n
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
        eos = np.array([self.eos_id] if self.eos_id is not None else [], dtype=np.int32)
        encode = self.backend.encode
        if chat_texts:
            for i, item in zip(chat_idx, self._each(self.backend.encode_spans, chat_texts, chat_spans), strict=True):
                if isinstance(item, str):
                    errors[i] = item
                    continue
                ids, mask = item
                pieces[i] = (ids, np.where(mask, ids, IGNORE).astype(np.int32))
        if pc_idx:
            p = self._each(lambda t: encode(t, add_special_tokens=True), prompts)
            c = self._each(lambda t: encode(t, add_special_tokens=False), completions)
            for i, pi, ci in zip(pc_idx, p, c, strict=True):
                if isinstance(pi, str) or isinstance(ci, str):
                    errors[i] = pi if isinstance(pi, str) else ci
                    continue
                a = np.concatenate([pi[0], ci[0], eos]).astype(np.int32)
                lab = a.copy()
                if self.train_on != "all":
                    lab[: len(pi[0])] = IGNORE
                pieces[i] = (a, lab)
        if texts:
            for i, ti in zip(text_idx, self._each(lambda t: encode(t, add_special_tokens=True), texts), strict=True):
                if isinstance(ti, str):
                    errors[i] = ti
                    continue
                a = np.concatenate([ti[0], eos]).astype(np.int32)
                pieces[i] = (a, a.copy())
        for i in range(n):
            if errors[i] is None and (pieces[i] is None or len(pieces[i][0]) == 0):
                errors[i] = "renders to zero tokens"
            if errors[i] is not None:
                pieces[i] = None
        empty = np.zeros(0, dtype=np.int32)
        lengths = np.array([len(x[0]) if x is not None else 0 for x in pieces], dtype=np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate([x[0] if x is not None else empty for x in pieces]) if n else empty
        labels = np.concatenate([x[1] if x is not None else empty for x in pieces]) if n else empty
        return Encoded(ids.astype(np.int32, copy=False), labels.astype(np.int32, copy=False), offsets, errors)


# ---------------------------------------------------------------------------------------------
# the step that worker processes run


@dataclass
class StepResult:
    """What one batch became: the good rows, and (row in the batch, reason) for every other."""

    table: Any  # pyarrow.RecordBatch of packtool.data.token_schema()
    rejects: list[tuple[int, str]] = field(default_factory=list)
    removed_padding: int = 0


@dataclass
class EncodeStep:
    """RawBatch → StepResult: parse, normalize, render, tokenize, label. Plain data; picklable.

    kind "chat": records of `fmt` (messages, sharegpt, ...) through `Encoder`;
    kind "pretokenized": records that carry input_ids, labels from `label_source`.
    """

    kind: str
    read: ReadConfig
    fmt: str | None = None
    spec: TokenizerSpec | None = None
    template: ChatTemplate | None = None
    train_on: str = "assistant"
    backend: str = "hf"
    label_source: str = "all"
    renderer: str = "jinja"
    _encoder: Encoder | None = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        return {**self.__dict__, "_encoder": None}

    def with_backend(self, backend: str, renderer: str = "jinja", built=None) -> EncodeStep:
        """This step on another backend and renderer; `built`: that backend, already built (or building)."""
        step = replace(self, backend=backend, renderer=renderer, _encoder=None)
        if built is not None:
            step.encoder._backend = built
        return step

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = Encoder(self.spec, self.template, self.train_on, self.backend, self.renderer)
        return self._encoder

    def __call__(self, batch) -> StepResult:
        if self.kind == "pretokenized":
            return self._pretokenized(batch)
        from packtool.data import token_batch
        from packtool.formats import FormatError, normalize

        records, read_errors = batch.parsed()
        rejects: list[tuple[int, str]] = []
        keep, examples = [], []
        for i, (rec, err) in enumerate(zip(records, read_errors, strict=True)):
            if rec is None:
                rejects.append((i, err or "unreadable record"))
                continue
            try:
                examples.append(normalize(rec, self.fmt, self.read))
                keep.append(i)
            except FormatError as e:
                rejects.append((i, str(e)))
        enc = self.encoder.encode(examples)
        good = np.array([e is None for e in enc.errors], dtype=bool)
        rejects += [(keep[j], e) for j, e in enumerate(enc.errors) if e is not None]
        rejects.sort()
        if not good.all():
            lens = np.diff(enc.offsets)
            tok_keep = np.repeat(good, lens)
            offsets = np.concatenate([[0], np.cumsum(lens[good])])
            ids, labels = enc.ids[tok_keep], enc.label_values[tok_keep]
        else:
            offsets, ids, labels = enc.offsets, enc.ids, enc.label_values
        rows = np.asarray(keep, dtype=np.int64)[good] if keep else np.zeros(0, np.int64)
        return StepResult(token_batch(ids, labels, offsets, batch.start + rows), rejects)

    def _pretokenized(self, batch) -> StepResult:
        import pyarrow as pa

        from packtool.data import arrow_array, token_schema
        from packtool.tokenization import pretokenized as pt

        if batch.arrow is not None:
            v = pt.validate_batch(batch.arrow, self.label_source)
            rejects = list(v.rejects)
        else:
            records, read_errors = batch.parsed()
            rejects = [(i, err or "unreadable record") for i, (r, err) in enumerate(zip(records, read_errors,
                                                                                          strict=True)) if r is None]
            ok = [i for i, r in enumerate(records) if r is not None]
            v = pt.records_batch([records[i] for i in ok], self.label_source)
            rejects += [(ok[j], reason) for j, reason in v.rejects]
            v.keep = np.asarray(ok, dtype=np.int64)[v.keep] if len(ok) else v.keep
        rejects = sorted((i, f"pre-tokenized record: {r}") for i, r in rejects)
        src = arrow_array(batch.start + np.asarray(v.keep, dtype=np.int64))
        table = pa.RecordBatch.from_arrays([*v.table.columns, src], schema=token_schema())
        return StepResult(table, rejects, v.removed_padding)
