"""The encode step: a batch of raw records → an Arrow batch of (input_ids, labels).

    RawBatch ──parse (orjson)──▶ records ──normalize──▶ examples ──render──▶ texts + char spans
        ──backend (fastokens | hf)──▶ flat ids + trained mask ──▶ pa.RecordBatch (packtool.data)
    every refused record: (row in batch, reason), reported to the RecordSource by the caller

`EncodeStep` is that whole function: plain data, picklable, building its backend on first use in
whichever process runs it (a process pool or Ray tasks, over any partition of the input).

    rendered  "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\nHello!<|im_end|>\\n"
    spans                                                          [------------------)   (chars)
    tokens     <|im_start|> user \\n Hi <|im_end|> \\n <|im_start|> assistant \\n Hello ! <|im_end|> \\n
    labels     -100 ...                                                    Hello ! <|im_end|> -100

The whole batch is tokenized in one call; a token is trained when it overlaps a span (the rule of
apply_chat_template's assistant mask). Control tokens typed in message text follow
`--special-in-content` (label_audit.ContentTokens); what is trained that the data does not hold
is counted per example (`Encoded.notes`). Prompt-completion: prompt tokens (no loss) + completion
tokens + EOS, tokenized apart so the boundary is exact. Plain text: every token + EOS.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from packtool.config import ReadConfig
from packtool.formats.normalize import template_messages
from packtool.schema import IGNORE_INDEX
from packtool.tokenization.label_audit import ContentTokens, label_notes
from packtool.tokenization.loading import TokenizerSpec
from packtool.tokenization.render import (
    ChatTemplate,
    ExampleError,
    Renderer,
    first_line,
    own_template,
)


@dataclass
class Encoded:
    """A batch of examples as flat buffers: example i is ids[offsets[i]:offsets[i+1]]."""

    ids: np.ndarray  # int32, all examples back to back
    label_values: np.ndarray  # int32, the same layout
    offsets: np.ndarray  # int64[n + 1]
    errors: list[str | None]  # per example: None, or why it was not encoded (then it has 0 tokens)
    special: np.ndarray | None = None  # bool[n]: message content holds control tokens
    notes: list[dict] | None = None  # per example: label_notes' {kind: [turns, tokens]}

    @property
    def input_ids(self) -> list[np.ndarray]:
        return [self.ids[a:b] for a, b in itertools.pairwise(self.offsets)]

    @property
    def labels(self) -> list[np.ndarray]:
        return [self.label_values[a:b] for a, b in itertools.pairwise(self.offsets)]


class Encoder:
    """Encodes batches of normalized examples (see packtool.formats) for one tokenizer + template."""

    def __init__(
        self,
        spec: TokenizerSpec,
        template: ChatTemplate | None,
        train_on: str = "assistant",
        backend: str = "hf",
        renderer: str = "jinja",
        special_in_content: str = "keep",
    ):
        self.spec = spec
        # the fast path's renderer (render.best: "native" | "compiled"), or "jinja": the reference
        self.renderer = renderer
        self.template = template
        self.train_on = train_on
        self.backend_name = backend
        self.special_in_content = special_in_content  # keep | split | error
        self.eos_id = spec.eos_id
        self.render = Renderer(spec, template, train_on, renderer) if template is not None else None
        self.mode = self.render.mode if self.render is not None else ""
        self._backend = None
        self.content = ContentTokens(spec)  # control tokens in message text
        # chatml-train on a tokenizer whose own template writes <think> blocks (Qwen3): said per turn
        self._omits_think = (
            template is not None
            and template.name == "chatml-train"
            and "<think>" in (own_template(spec) or "")
        )
        self._counts: dict[str, int] = {}  # tokens of a trained piece (an empty block, a lone end)

    def __getstate__(self):
        return {**self.__dict__, "_backend": None}

    @property
    def backend(self):
        if self._backend is None:
            from packtool.tokenization.backends import make_backend

            self._backend = make_backend(self.backend_name, self.spec.engines)
        return self._backend

    def _count(self, piece: str) -> int:
        """Tokens of a trained piece on its own (cached: the same few pieces recur)."""
        n = self._counts.get(piece)
        if n is None:
            n = len(self.backend.encode([piece], add_special_tokens=False)[0])
            if len(self._counts) < 4096:
                self._counts[piece] = n
        return n

    def _notes(self, messages: list[dict], text: str, paired) -> dict[str, list[int]]:
        native = self.renderer == "native"
        return label_notes(messages, text, paired, self._count, native, self._omits_think)

    def chat_text(
        self, ex: dict, scan: bool = True
    ) -> tuple[str, list[tuple[int, int]], list[str], bool, dict]:
        """(rendered text, trained char spans, control-token literals of split mode, content had
        control tokens, label_notes); `scan` False: the batch's messages hold no control token."""
        messages = template_messages(ex)
        if not messages:
            raise ExampleError("empty conversation")
        tools = ex.get("tools") or None
        found = self.content.found(messages) if scan else []
        literals: list[str] = []
        if found and self.special_in_content == "error":
            i, tok = found[0]
            raise ExampleError(
                f"turn {i} ({messages[i]['role']}) holds the control token {tok!r} in its text (a fake turn or "
                "marker typed in the data); --special-in-content split tokenizes it as plain text, keep as a "
                "control token"
            )
        if found and self.special_in_content == "split":
            messages, literals = self.content.placeholders(messages)
        text, spans = self.render.conversation(messages, tools)
        if self.train_on == "all":
            return text, [(0, len(text))], literals, bool(found), self._notes(messages, text, None)
        given = ex["messages"]  # (their weights: template_messages leaves them out)
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        keep = [(w := given[i].get("weight")) is None or w > 0 for i in turns]
        if keep and (self.train_on == "last" or self.mode == "last"):
            keep = [False] * (len(keep) - 1) + [keep[-1]]
        paired = None
        if self.mode == "last":  # one span, the last turn's
            spans = spans if keep and keep[-1] else []
            paired = list(zip(turns[-1:], spans, strict=False))
        elif len(spans) == len(turns):
            if all(keep):  # (the usual: no weights)
                paired = list(zip(turns, spans, strict=True))
            else:
                paired = [(t, s) for t, s, k in zip(turns, spans, keep, strict=True) if k]
                spans = [s for _, s in paired]
        elif not all(keep):
            raise ExampleError(
                f"the template marks {len(spans)} generation spans for {len(turns)} assistant turns, "
                "so per-turn weights or --train-on last cannot be applied"
            )
        notes = self._notes(messages, text, paired)
        return text, [(a, b) for a, b in spans if a < b], literals, bool(found), notes

    # -- batches ----------------------------------------------------------------------------------
    @staticmethod
    def _each(fn, *columns: list) -> list[tuple | str]:
        """fn(*columns) for the whole batch (a backend call returning flat arrays, offsets, ...), split
        into one tuple of arrays per item; where the batch call fails (a text no tokenizer accepts),
        item by item (_one_by_one)."""
        try:
            return _per_item(fn(*columns))
        except Exception:
            return _one_by_one(fn, *columns)

    def _chats(self, texts: list[str], spans: list) -> tuple[np.ndarray, ...] | list[tuple | str]:
        """The chat texts as (flat ids, offsets, flat labels) in one backend call; where it fails,
        item by item (the batch is not tried twice)."""
        try:
            ids, offsets, mask = self.backend.encode_spans(texts, spans)
        except Exception:
            items = _one_by_one(self.backend.encode_spans, texts, spans)
            return [x if isinstance(x, str) else (x[0], _labels(*x)) for x in items]
        return ids.astype(np.int32, copy=False), offsets, _labels(ids, mask)

    def encode(self, examples: list[dict]) -> Encoded:
        n = len(examples)
        pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # items encoded one by one
        errors: list[str | None] = [None] * n
        chat_idx, chat_texts, chat_spans = [], [], []
        split_items: list[tuple[int, str, list, list[str]]] = []
        special = [False] * n
        notes: list[dict] = [{} for _ in range(n)]
        pc_idx, prompts, completions = [], [], []
        text_idx, texts = [], []
        scan = self.content.may_hold(
            [ex["messages"] for ex in examples if ex.get("kind") == "chat"]
        )
        for i, ex in enumerate(examples):
            kind = ex.get("kind")
            try:
                if kind == "chat":
                    t, s, literals, special[i], notes[i] = self.chat_text(ex, scan)
                    if literals:
                        split_items.append((i, t, s, literals))
                    else:
                        chat_idx.append(i)
                        chat_texts.append(t)
                        chat_spans.append(s)
                elif kind == "prompt_completion":
                    pc_idx.append(i)
                    prompts.append(ex["prompt"])
                    completions.append(ex["completion"])
                elif kind == "text":
                    text_idx.append(i)
                    texts.append(ex["text"])
                else:
                    raise ExampleError(f"unknown example kind {kind!r}")
            except ExampleError as e:
                errors[i] = str(e)
        eos = np.array([self.eos_id] if self.eos_id is not None else [], dtype=np.int32)
        encode = self.backend.encode
        flat = None  # the chat texts encoded in one call: (item indices, ids, offsets, labels)
        if chat_texts:
            got = self._chats(chat_texts, chat_spans)
            if isinstance(got, tuple):
                flat = (np.asarray(chat_idx, dtype=np.int64), *got)
            else:
                for i, item in zip(chat_idx, got, strict=True):
                    if isinstance(item, str):
                        errors[i] = item
                    else:
                        pieces[i] = item
        for i, t, s, literals in split_items:
            try:
                ids, mask = self.content.split_encode(t, s, literals)
            except Exception as e:
                errors[i] = f"the tokenizer cannot encode this example: {first_line(e)}"
                continue
            pieces[i] = (ids, _labels(ids, mask))
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
                    lab[: len(pi[0])] = IGNORE_INDEX
                pieces[i] = (a, lab)
        if texts:
            got = self._each(lambda t: encode(t, add_special_tokens=True), texts)
            for i, ti in zip(text_idx, got, strict=True):
                if isinstance(ti, str):
                    errors[i] = ti
                    continue
                a = np.concatenate([ti[0], eos]).astype(np.int32)
                pieces[i] = (a, a.copy())
        return _assemble(n, flat, pieces, errors, np.array(special, dtype=bool), notes)


def _per_item(out) -> list[tuple]:
    """A backend call's (flat, offsets, *more flat) as one tuple of arrays per item."""
    flat, off, *rest = out
    return [tuple(x[off[j] : off[j + 1]] for x in (flat, *rest)) for j in range(len(off) - 1)]


def _one_by_one(fn, *columns: list) -> list[tuple | str]:
    """fn called on each item alone, so one bad example becomes its error string instead of
    failing the batch."""
    items: list[tuple | str] = []
    for row in zip(*columns, strict=True):
        try:
            items += _per_item(fn(*([x] for x in row)))
        except Exception as e:
            items.append(f"the tokenizer cannot encode this example: {first_line(e)}")
    return items


def _labels(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, ids, IGNORE_INDEX).astype(np.int32, copy=False)


def _assemble(n: int, flat, pieces: dict, errors: list, special, notes: list) -> Encoded:
    """One Encoded from the chat texts encoded together (`flat`: item indices, ids, offsets,
    labels) and the items encoded one by one (`pieces`); an item without tokens and without an
    error renders to zero tokens. Only chat texts (the usual batch): their buffers as they are."""
    parts = []  # (item indices, ids, labels, lengths), each in item order
    if flat is not None:
        parts.append((flat[0], flat[1], flat[3], np.diff(flat[2])))
    if pieces:
        idx = sorted(pieces)
        ids, labels = zip(*(pieces[i] for i in idx), strict=True)
        parts.append((idx, np.concatenate(ids), np.concatenate(labels), [len(x) for x in ids]))
    lengths = np.zeros(n, dtype=np.int64)
    for idx, _, _, lens in parts:
        lengths[idx] = lens
    for i, length in enumerate(lengths.tolist()):
        if errors[i] is None and length == 0:
            errors[i] = "renders to zero tokens"
        if errors[i] is not None:
            notes[i] = {}
    ids = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int32)
    labels = np.concatenate([p[2] for p in parts]) if parts else ids
    if len(parts) > 1:  # tokens back in item order
        order = np.argsort(np.concatenate([np.repeat(p[0], p[3]) for p in parts]), kind="stable")
        ids, labels = ids[order], labels[order]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Encoded(
        ids.astype(np.int32, copy=False),
        labels.astype(np.int32, copy=False),
        offsets,
        errors,
        special,
        notes,
    )


# -- the step that worker processes run -----------------------------------------------------------
@dataclass
class StepResult:
    """What one batch became: the good rows, and (row in the batch, reason) for every other."""

    table: Any  # pyarrow.RecordBatch of packtool.data.tokenized.token_schema()
    rejects: list[tuple[int, str]] = field(default_factory=list)
    removed_padding: int = 0
    # source indices whose message text holds control tokens
    special: list[int] = field(default_factory=list)
    # (source index, label_audit.label_notes' {kind: [turns, tokens]}) of each example with some
    notes: list[tuple[int, dict]] = field(default_factory=list)
    # preference pairs packed here whose ids TRL's DPOTrainer would tokenize otherwise (pairs.unlike_trl)
    unlike_trl: int = 0


@dataclass
class EncodeStep:
    """RawBatch → StepResult: parse, normalize, render, tokenize, label. Plain data; picklable.

    kind "chat": records of the batch's `fmt` (its file's format: messages, sharegpt, ...; else the
    step's `fmt`) through `Encoder`;
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
    special_in_content: str = "keep"
    _encoder: Encoder | None = field(default=None, repr=False, compare=False)

    def __getstate__(self):
        return {**self.__dict__, "_encoder": None}

    def with_backend(self, backend: str, renderer: str = "jinja", built=None) -> EncodeStep:
        """This step on another backend and renderer (the same spec: the same engines); `built`:
        a backend object to encode with instead (inspect's CutBackend)."""
        step = replace(self, backend=backend, renderer=renderer, _encoder=None)
        if built is not None:
            step.encoder._backend = built
        return step

    @property
    def encoder(self) -> Encoder:
        if self._encoder is None:
            self._encoder = Encoder(
                self.spec,
                self.template,
                self.train_on,
                self.backend,
                self.renderer,
                self.special_in_content,
            )
        return self._encoder

    def __call__(self, batch) -> StepResult:
        if self.kind == "pretokenized":
            return self._pretokenized(batch)
        from packtool.data.tokenized import token_batch
        from packtool.formats import FormatError
        from packtool.formats.normalize import normalize

        records, read_errors = batch.parsed()
        fmt = batch.fmt if batch.fmt is not None else self.fmt  # its file's format
        rejects: list[tuple[int, str]] = []
        keep, examples = [], []
        for i, (rec, err) in enumerate(zip(records, read_errors, strict=True)):
            if rec is None:
                rejects.append((i, err or "unreadable record"))
                continue
            try:
                examples.append(normalize(rec, fmt, self.read))
                keep.append(i)
            except FormatError as e:
                rejects.append((i, str(e)))
        if fmt == "preference":  # two sides a record, checked side against side
            from packtool.tokenization.pairs import encode_pairs

            enc, keep, unlike_trl = encode_pairs(self.encoder, examples, keep)
        else:
            unlike_trl = 0
            enc = self.encoder.encode(examples)
        good = np.array([e is None for e in enc.errors], dtype=bool)
        # a refused pair's two sides carry one row and one reason: dict.fromkeys keeps one reject
        rejects += dict.fromkeys((keep[j], e) for j, e in enumerate(enc.errors) if e is not None)
        rejects.sort()
        if not good.all():
            lens = np.diff(enc.offsets)
            tok_keep = np.repeat(good, lens)
            offsets = np.concatenate([[0], np.cumsum(lens[good])])
            ids, labels = enc.ids[tok_keep], enc.label_values[tok_keep]
        else:
            offsets, ids, labels = enc.offsets, enc.ids, enc.label_values
        kept = np.asarray(keep, dtype=np.int64)
        rows = kept[good] if keep else np.zeros(0, np.int64)
        special = (
            (batch.start + kept[enc.special & good]).tolist()
            if keep and enc.special is not None
            else []
        )
        notes = [
            (batch.start + keep[j], x)
            for j, x in enumerate(enc.notes or ())
            if x and enc.errors[j] is None
        ]
        return StepResult(
            token_batch(ids, labels, offsets, batch.start + rows),
            rejects,
            special=special,
            notes=notes,
            unlike_trl=unlike_trl,
        )

    def _pretokenized(self, batch) -> StepResult:
        import pyarrow as pa

        from packtool.data.labels import arrow_array
        from packtool.data.tokenized import token_schema
        from packtool.tokenization import pretokenized as pt

        if batch.arrow is not None:
            v = pt.validate_batch(batch.arrow, self.label_source)
            rejects = list(v.rejects)
        else:
            records, read_errors = batch.parsed()
            rejects = [
                (i, err or "unreadable record")
                for i, (r, err) in enumerate(zip(records, read_errors, strict=True))
                if r is None
            ]
            ok = [i for i, r in enumerate(records) if r is not None]
            v = pt.records_batch([records[i] for i in ok], self.label_source)
            rejects += [(ok[j], reason) for j, reason in v.rejects]
            v.keep = np.asarray(ok, dtype=np.int64)[v.keep] if len(ok) else v.keep
        rejects = sorted((i, f"pre-tokenized record: {r}") for i, r in rejects)
        src = arrow_array(batch.start + np.asarray(v.keep, dtype=np.int64))
        table = pa.RecordBatch.from_arrays([*v.table.columns, src], schema=token_schema())
        return StepResult(table, rejects, v.removed_padding)
