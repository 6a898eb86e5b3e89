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

How assistant tokens are located is the template's `mode` (packtool.tokenization.chat_template
decides it once per run): `markers` trains each {% generation %} block less the generation prompt
the template writes at its start (given to the model at inference, e.g. `<|start|>assistant`);
`prefix` trains, for each assistant turn i, the text that render(messages[:i+1]) adds to
render(messages[:i], add_generation_prompt=True), which needs a prefix-preserving template; `last`
does that for the last turn only (non-prefix-preserving templates with --train-on last).

Two checks per example keep the data honest: every message's text, the last assistant turn's
reasoning, every tool call (its name, argument names and values) and tool definition must appear
in the rendered text, else the example is refused naming what the template dropped (`lost_content`);
and control tokens inside message text and tool-call arguments (`<|im_start|>` typed
by a user) are counted, and kept as control tokens (`keep`, what apply_chat_template does),
tokenized as plain text (`split`: such an example is tokenized piece by piece, each literal on its
own with special-token matching off), or refused (`error`) — `--special-in-content`.

What is trained that the data does not hold, and what of the data is not trained, is counted per
example and kind (`Encoded.notes`, `label_notes`; the pipeline sums them into the summary, the
manifest's `tokenizer.label_audit` and warnings, and `--strict-labels` refuses them):

    template_inserted   an empty block the template writes into a trained turn the data gave no
                        such block (TRL's qwen3_training: `<think>\n\n</think>\n\n` in every turn)
    empty_turns         an assistant turn with no text, reasoning or tool call: only its end-of-turn
                        token is trained (axolotl's missingturns data)
    dropped_reasoning   the reasoning of an earlier assistant turn that the template does not render
    think_omitted       (said, never refused) chatml-train on a tokenizer whose own template writes
                        `<think>` blocks: turns without reasoning are trained with no block at all

Prompt-completion strings: prompt tokens (no loss) + completion tokens + EOS (loss), tokenized
separately so the boundary is exact. Plain text: every token + EOS carries loss.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from packtool.config import ReadConfig
from packtool.formats.normalize import template_messages
from packtool.schema import IGNORE_INDEX
from packtool.tokenization.chat_template import ChatTemplate, family_fix
from packtool.tokenization.loading import TokenizerSpec


class ExampleError(Exception):
    """One example cannot be encoded; the source counts it (or stops, with --on-error error)."""


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
        return [self.ids[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)]

    @property
    def labels(self) -> list[np.ndarray]:
        return [
            self.label_values[a:b] for a, b in zip(self.offsets[:-1], self.offsets[1:], strict=True)
        ]


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def dated_source(template: ChatTemplate) -> str:
    """The template with strftime_now() fixed to `template.date` (a macro shadowing the global), so a
    template that writes today's date (gpt-oss) renders the same text on every day."""
    if not template.date:
        return template.source
    import datetime

    day = datetime.date.fromisoformat(template.date)
    formats = sorted(set(re.findall(r"strftime_now\(\s*[\"']([^\"']*)[\"']\s*\)", template.source)))
    table = json.dumps({f: day.strftime(f) for f in formats})
    return (
        "{%- macro strftime_now(fmt) -%}{{ "
        + table
        + "[fmt] if fmt in "
        + table
        + " else "
        + json.dumps(template.date)
        + " }}{%- endmacro %}"
        + template.source
    )


_PLACEHOLDER = re.compile("\ue000([0-9]+)\ue001")
TEMPLATE_INSERTED, EMPTY_TURNS, DROPPED_REASONING, THINK_OMITTED = (
    "template_inserted",
    "empty_turns",
    "dropped_reasoning",
    "think_omitted",
)
_EMPTY_BLOCK = re.compile(r"<([A-Za-z_][\w-]*)>\s*</\1>\s*")  # <think>\n\n</think>\n\n


def _appears(value: str, text: str) -> bool:
    """`value` is in `text` as it is, stripped, or JSON-escaped (templates that `tojson` content)."""
    if value in text or value.strip() in text:
        return True
    return any(json.dumps(value, ensure_ascii=a)[1:-1] in text for a in (False, True))


def _scalars(value) -> list:
    """The leaf values of tool-call arguments (strings, numbers, booleans), depth first."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in _scalars(v)]
    if isinstance(value, list):
        return [x for v in value for x in _scalars(v)]
    return [] if value is None else [value]


def _leaf_appears(value, text: str) -> bool:
    if isinstance(value, str):
        return not value.strip() or _appears(value, text)
    return any(s in text for s in {json.dumps(value), str(value)})  # 3 / 3.0 / true / True


def lost_content(messages: list[dict], tools, text: str) -> str | None:
    """What of the conversation the rendered `text` lacks, in words; None when everything is there:
    a message's text; the reasoning of the last assistant turn (templates may drop earlier turns'
    reasoning by design: gpt-oss, Qwen3); each tool call's name (as often as it is called, beside
    its definitions), argument names and values; each tool definition."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    defined = [
        (t.get("function", t) if isinstance(t, dict) else {}).get("name") for t in tools or ()
    ]
    calls: dict[str, int] = {}
    for i, m in enumerate(messages):
        c = m.get("content")
        if isinstance(c, str) and c.strip() and not _appears(c, text):
            return f"the text of turn {i} ({m['role']})"
        r = m.get("reasoning_content")
        if i == last and isinstance(r, str) and r.strip() and not _appears(r, text):
            return f"the reasoning of turn {i} (the last assistant turn)"
        for call in m.get("tool_calls") or ():
            fn = call.get("function", call) if isinstance(call, dict) else {}
            name = fn.get("name")
            if not name:
                continue
            calls[name] = calls.get(name, 0) + 1
            if text.count(name) < calls[name] + defined.count(name):
                return f"the tool call {name!r} of turn {i} ({m['role']})"
            args = fn.get("arguments")
            if isinstance(args, dict):
                missing = [k for k in args if k not in text] + [
                    repr(v) for v in _scalars(args) if not _leaf_appears(v, text)
                ]
            else:
                missing = (
                    ["(all)"]
                    if isinstance(args, str) and args.strip() and not _appears(args, text)
                    else []
                )
            if missing:
                return f"the arguments {', '.join(map(str, missing))} of tool call {name!r} of turn {i}"
    for name in defined:
        if name and name not in text:
            return f"the tool definition {name!r}"
    return None


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
        from packtool.tokenization.chat_template import special_tokens

        self.spec = spec
        self.renderer = renderer  # "jinja" (transformers' renderer) | "native" (chatml.render: built-in template)
        self.template = template
        self.train_on = train_on
        self.backend_name = backend
        self.special_in_content = special_in_content  # keep | split | error
        self.eos_id = spec.eos_id
        self._kwargs = dict(spec.special_tokens)
        specials = special_tokens(spec)
        ends = {t for t in [spec.eos_token, *spec.all_special_tokens, *specials] if t}
        self._end_tokens = tuple(sorted(ends))
        self._backend = None
        self._plain = None  # a tokenizers.Tokenizer that reads control tokens as text (split mode)
        self._gen_prompt: str | None = None
        self._heads: list[str] | None = (
            None  # the generation prompt and its heads that end in a special token
        )
        mode = template.mode if template is not None else ""
        if not mode and template is not None:
            mode = "markers" if template.has_generation else "prefix"
        self.mode = mode
        self._source = dated_source(template) if template is not None else None
        longest_first = sorted(specials, key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, longest_first))) if specials else None
        firsts = {t[0] for t in specials if t}
        self._special_first = (
            firsts.pop() if len(firsts) == 1 else None
        )  # "<": a cheap test before the regex
        from packtool.tokenization.chat_template import _own

        # chatml-train on a tokenizer whose own template writes <think> blocks (Qwen3): said per turn
        self._omits_think = (
            template is not None
            and template.name == "chatml-train"
            and "<think>" in (_own(spec) or "")
        )
        self._counts: dict[str, int] = {}  # tokens of a trained piece (an empty block, a lone end)

    def __getstate__(self):
        return {**self.__dict__, "_backend": None, "_plain": None}

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
            chat_template=self._source,
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
        header = prompted[len(plain) :] if prompted.startswith(plain) else ""
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
                    f"turn {i} ({_first_line(e)}), so the turn cannot be located; fix: {self._fix()}"
                ) from e
            upto, _ = self._render(messages[: i + 1], tools, marks=False)
            if not (upto.startswith(before) and full.startswith(upto)):
                raise ExampleError(
                    f"chat template '{self.template.name}' is not prefix-preserving on this conversation (turn {i} "
                    f"renders differently once later turns follow), so assistant tokens cannot be located; "
                    f"fix: {self._fix()}"
                )
            spans.append((len(before), self._turn_end(upto)))
        return full, spans

    def _fix(self) -> str:
        from packtool.tokenization.chat_template import family_of

        family = self.template.family or family_of(self.template.source)
        return family_fix(family, self.train_on, self.template.near)

    def _turn_end(self, upto: str) -> int:
        stripped = upto.rstrip()
        if stripped.endswith(self._end_tokens):
            return len(stripped)  # keep the end-of-turn token, not the newline after it
        return len(upto)

    def _last_span(self, messages, tools) -> tuple[str, list[tuple[int, int]]]:
        """Only the last turn, for templates that rewrite earlier turns (gpt-oss drops their reasoning):
        render(messages[:-1], generation prompt) must be a prefix of render(messages)."""
        full, _ = self._render(messages, tools, marks=False)
        if messages[-1]["role"] != "assistant":
            return full, []
        if len(messages) == 1:
            before = self._opening_header(messages, tools)
        else:
            before, _ = self._render(messages[:-1], tools, marks=False, gen_prompt=True)
        if not full.startswith(before):
            raise ExampleError(
                f"chat template '{self.template.name}' renders the conversation before the last assistant turn "
                f"differently once that turn follows, so it cannot be located; fix: {self._fix()}"
            )
        return full, [(len(before), self._turn_end(full))]

    def generation_prompt(self, tools=None) -> str:
        """What the template writes to open an assistant turn at inference (the generation prompt)."""
        if self._gen_prompt is None:
            probe = [{"role": "user", "content": "x"}]
            plain, _ = self._render(probe, None, marks=False)
            prompted, _ = self._render(probe, None, marks=False, gen_prompt=True)
            self._gen_prompt = prompted[len(plain) :] if prompted.startswith(plain) else ""
        return self._gen_prompt

    def _trim_prompt(self, text: str, spans) -> list[tuple[int, int]]:
        """Generation blocks less the generation prompt at their start (the model is given it; a
        block may start with only its leading special tokens, e.g. DeepSeek's `<｜Assistant｜>` of
        `<｜Assistant｜><think>\\n`), and less whitespace after a closing end-of-turn token (the
        next turn's, never generated). A last block that holds only the EOS (Phi-3's training
        template closes the conversation so) joins the turn before it."""
        g = self.generation_prompt()
        out: list[tuple[int, int]] = []
        if not g:
            self._heads = []
        for a, b in spans:
            if out and text[a:b] == self.spec.eos_token and not text[out[-1][1] : a].strip():
                out[-1] = (out[-1][0], b)
                continue
            a += self._prompt_at(text, a, b, g)
            out.append((a, a + self._turn_end(text[a:b])))
        return out

    def _prompt_at(self, text: str, a: int, b: int, g: str) -> int:
        """Length of the generation prompt `g` (or of its longest head that ends in a special token)
        written at text[a:b]."""
        if self._heads is None:
            self._heads = [g] + [
                g[:k] for k in range(len(g) - 1, 0, -1) if g[:k].endswith(self._end_tokens)
            ]
        for head in self._heads:
            if len(head) <= b - a and text.startswith(head, a):
                return len(head)
        return 0

    def _content_specials(self, messages: list[dict]) -> list[tuple[int, str]]:
        """(turn, control token) for each message whose text holds one of the tokenizer's control tokens."""
        if self._specials is None:
            return []
        out = []
        for i, m in enumerate(messages):
            texts = [
                m.get("content"),
                m.get("reasoning_content"),
                *(x for c in m.get("tool_calls") or () for x in _scalars(c)),
            ]
            for v in texts:
                if not isinstance(v, str) or (
                    self._special_first is not None and self._special_first not in v
                ):
                    continue
                hit = self._specials.search(v)
                if hit:
                    out.append((i, hit.group(0)))
                    break
        return out

    def _placeholders(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
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
                return self._specials.sub(sub, v)
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

    def _no_tools(self, messages: list[dict], tools) -> str:
        """'; the template has no tool role ...' when the record uses tools (a tool turn, a tool call,
        tool definitions) and the template never mentions them (Gemma 3: its refusal only says that
        roles must alternate); else ''."""
        used = tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
        if not used or re.search(r"\btools?\b|tool_calls", self.template.source):
            return ""
        return (
            f" (the template{f' of {self.template.family}' if self.template.family else ''} has no "
            "tool role: it renders no tool turns, calls or definitions); drop tool records with "
            "--on-error skip, or use a template that supports tools (--chat-template chatml-train "
            "for ChatML models, trl:NAME or FILE)"
        )

    def _count(self, piece: str) -> int:
        """Tokens of a trained piece on its own (cached: the same few pieces recur)."""
        n = self._counts.get(piece)
        if n is None:
            n = len(self.backend.encode([piece], add_special_tokens=False)[0])
            if len(self._counts) < 4096:
                self._counts[piece] = n
        return n

    def label_notes(self, messages: list[dict], text: str, paired) -> dict[str, list[int]]:
        """{kind: [turns, tokens]} of what is trained that the data does not hold and of what the data
        holds that the template does not render (the kinds of the module docstring). `paired`: (turn,
        trained char span) of each trained assistant turn, None when spans and turns do not pair up."""
        notes: dict[str, list[int]] = {}

        def add(kind: str, tokens: int) -> None:
            t = notes.setdefault(kind, [0, 0])
            t[0] += 1
            t[1] += tokens

        if self.renderer != "native":  # the native renderer writes every turn's reasoning
            for m in messages:
                r = m.get("reasoning_content")
                if m["role"] == "assistant" and isinstance(r, str) and r.strip():
                    if not _appears(r, text):
                        add(DROPPED_REASONING, 0)
        for i, (a, b) in paired or ():
            if a >= b:
                continue  # nothing of this turn is trained
            m = messages[i]
            body = text[a:b]
            content = m.get("content") if isinstance(m.get("content"), str) else ""
            reasoning = m.get("reasoning_content")
            if m.get("tool_calls") or (isinstance(reasoning, str) and reasoning.strip()):
                continue  # the template's framing of a call or of reasoning is the data's
            c = content.strip()
            if not c:
                add(EMPTY_TURNS, self._count(body))
            elif c not in body:
                continue  # the template rewrote the text (escaped, split): nothing to compare
            rest = body.replace(c, "", 1) if c else body
            for block in _EMPTY_BLOCK.finditer(rest):
                add(TEMPLATE_INSERTED, self._count(block.group(0)))
            if self._omits_think and "<think>" not in content:
                add(THINK_OMITTED, 0)
        return notes

    def _chat_text(self, ex: dict) -> tuple[str, np.ndarray, list[str], bool, dict]:
        """(rendered text, trained char spans, control-token literals of split mode, content had
        control tokens, label_notes)."""
        messages = template_messages(ex)
        if not messages:
            raise ExampleError("empty conversation")
        tools = ex.get("tools") or None
        found = self._content_specials(messages)
        literals: list[str] = []
        if found and self.special_in_content == "error":
            i, tok = found[0]
            raise ExampleError(
                f"turn {i} ({messages[i]['role']}) holds the control token {tok!r} in its text (a fake turn or "
                "marker typed in the data); --special-in-content split tokenizes it as plain text, keep as a "
                "control token"
            )
        if found and self.special_in_content == "split":
            messages, literals = self._placeholders(messages)
        try:
            if self.mode == "markers":
                text, spans = self._render(messages, tools, marks=True)
                spans = self._trim_prompt(text, spans)
            elif self.mode == "last" and self.train_on != "all":
                text, spans = self._last_span(messages, tools)
            elif self.mode == "all" or self.train_on == "all":
                text, spans = self._render(messages, tools, marks=False)
            else:
                text, spans = self._prefix_spans(messages, tools)
        except ExampleError:
            raise
        except Exception as e:  # jinja errors, raise_exception() inside templates
            raise ExampleError(
                f"chat template '{self.template.name}' failed on this record: {_first_line(e)}"
                + self._no_tools(messages, tools)
            ) from e
        # the native renderer writes every text, call and definition by construction (and is checked
        # against the jinja reference, which runs this check, on every run's first examples)
        lost = None if self.renderer == "native" else lost_content(messages, tools, text)
        if lost:
            raise ExampleError(
                f"chat template '{self.template.name}' drops {lost}: the model would be trained without it; use a "
                "template that renders it (--chat-template trl:NAME or FILE), or drop such records"
                + self._no_tools(messages, tools)
            )
        if self.train_on == "all":
            whole = np.array([[0, len(text)]], dtype=np.int64)
            return text, whole, literals, bool(found), self.label_notes(messages, text, None)
        weights = [m.get("weight") for m in ex["messages"] if m["role"] == "assistant"]
        turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        keep = [w is None or w > 0 for w in weights]
        if self.train_on == "last" or self.mode == "last":
            keep = [False] * (len(keep) - 1) + [keep[-1]] if keep else keep
        paired = None
        if self.mode == "last":  # one span, the last turn's
            spans = spans if keep and keep[-1] else []
            paired = list(zip(turns[-1:], spans, strict=False))
        elif len(spans) == len(turns):
            paired = [(t, s) for t, s, k in zip(turns, spans, keep, strict=True) if k]
            spans = [s for _, s in paired]
        elif not all(keep):
            raise ExampleError(
                f"the template marks {len(spans)} generation spans for {len(weights)} assistant turns, "
                "so per-turn weights or --train-on last cannot be applied"
            )
        notes = self.label_notes(messages, text, paired)
        arr = np.array(spans, dtype=np.int64).reshape(-1, 2)
        return text, (arr[arr[:, 0] < arr[:, 1]] if len(arr) else arr), literals, bool(found), notes

    def _split_encode(
        self, text: str, spans: np.ndarray, literals: list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and trained mask of a text whose placeholders stand for control tokens to read as text:
        the pieces between placeholders through the reference tokenizer, each literal alone with
        special-token matching off (the same on both backends)."""
        from packtool.tokenization.backends import make_backend

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
        for m in _PLACEHOLDER.finditer(text):
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

    # -- batches ----------------------------------------------------------------------------------
    @staticmethod
    def _each(fn, *columns: list) -> list[tuple | str]:
        """fn(*columns) for the whole batch (a backend call returning flat arrays, offsets, ...), split
        into one tuple of arrays per item; where the batch call fails (a text no tokenizer accepts),
        item by item, so one bad example becomes its error string instead of failing the batch."""

        def split(out) -> list[tuple]:
            flat, off, *rest = out
            return [
                tuple(x[off[j] : off[j + 1]] for x in (flat, *rest)) for j in range(len(off) - 1)
            ]

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
        split_items: list[tuple[int, str, np.ndarray, list[str]]] = []
        special = np.zeros(n, dtype=bool)
        notes: list[dict] = [{} for _ in range(n)]
        pc_idx, prompts, completions = [], [], []
        text_idx, texts = [], []
        for i, ex in enumerate(examples):
            kind = ex.get("kind")
            try:
                if kind == "chat":
                    t, s, literals, special[i], notes[i] = self._chat_text(ex)
                    if literals:
                        split_items.append((i, t, s, literals))
                    else:
                        chat_idx.append(i), chat_texts.append(t), chat_spans.append(s)
                elif kind == "prompt_completion":
                    (
                        pc_idx.append(i),
                        prompts.append(ex["prompt"]),
                        completions.append(ex["completion"]),
                    )
                elif kind == "text":
                    text_idx.append(i), texts.append(ex["text"])
                else:
                    raise ExampleError(f"unknown example kind {kind!r}")
            except ExampleError as e:
                errors[i] = str(e)
        eos = np.array([self.eos_id] if self.eos_id is not None else [], dtype=np.int32)
        encode = self.backend.encode
        if chat_texts:
            for i, item in zip(
                chat_idx, self._each(self.backend.encode_spans, chat_texts, chat_spans), strict=True
            ):
                if isinstance(item, str):
                    errors[i] = item
                    continue
                ids, mask = item
                pieces[i] = (ids, np.where(mask, ids, IGNORE_INDEX).astype(np.int32))
        for i, t, s, literals in split_items:
            try:
                ids, mask = self._split_encode(t, s, literals)
            except Exception as e:
                errors[i] = f"the tokenizer cannot encode this example: {_first_line(e)}"
                continue
            pieces[i] = (ids, np.where(mask, ids, IGNORE_INDEX).astype(np.int32))
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
            for i, ti in zip(
                text_idx,
                self._each(lambda t: encode(t, add_special_tokens=True), texts),
                strict=True,
            ):
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
                notes[i] = {}
        empty = np.zeros(0, dtype=np.int32)
        lengths = np.array([len(x[0]) if x is not None else 0 for x in pieces], dtype=np.int64)
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        ids = np.concatenate([x[0] if x is not None else empty for x in pieces]) if n else empty
        labels = np.concatenate([x[1] if x is not None else empty for x in pieces]) if n else empty
        return Encoded(
            ids.astype(np.int32, copy=False),
            labels.astype(np.int32, copy=False),
            offsets,
            errors,
            special,
            notes,
        )


# ---------------------------------------------------------------------------------------------
# the step that worker processes run


@dataclass
class StepResult:
    """What one batch became: the good rows, and (row in the batch, reason) for every other."""

    table: Any  # pyarrow.RecordBatch of packtool.data.arrow.token_schema()
    rejects: list[tuple[int, str]] = field(default_factory=list)
    removed_padding: int = 0
    special: list[int] = field(
        default_factory=list
    )  # source indices whose message text holds control tokens
    notes: list[tuple[int, dict]] = field(
        default_factory=list
    )  # (source index, Encoder.label_notes) of each encoded example that has some


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
        """This step on another backend and renderer; `built`: that backend, already built (or building)."""
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
        from packtool.data.arrow import token_batch
        from packtool.formats import FormatError
        from packtool.formats.normalize import normalize

        records, read_errors = batch.parsed()
        fmt = (
            batch.fmt if getattr(batch, "fmt", None) is not None else self.fmt
        )  # its file's format
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
        )

    def _pretokenized(self, batch) -> StepResult:
        import pyarrow as pa

        from packtool.data.arrow import arrow_array, token_schema
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


# ---------------------------------------------------------------------------------------------
# a run's label notes: summed per kind (manifest tokenizer.label_audit), said, refused

ZERO_LOSS_DOCUMENTS = "zero_loss_documents"
AUDIT_KINDS = (TEMPLATE_INSERTED, EMPTY_TURNS, DROPPED_REASONING, ZERO_LOSS_DOCUMENTS)
_REFUSED = {
    TEMPLATE_INSERTED: "trains an empty block the template wrote, which the data does not hold",
    EMPTY_TURNS: "trains an empty assistant turn (no text, reasoning or tool call)",
    DROPPED_REASONING: "the template drops the reasoning of an earlier assistant turn",
    ZERO_LOSS_DOCUMENTS: "has no loss token",
}


def label_audit(
    notes: list[tuple[int, dict]], zero_loss: list[int], where
) -> tuple[dict, dict[str, list[int]]]:
    """({kind: {examples, turns, tokens, first}} with only the kinds found, in AUDIT_KINDS order,
    think_omitted left out (it is said, never recorded or refused); {kind: source indices}).
    `where(i)`: 'file.jsonl record 3' for source index i."""
    idx: dict[str, list[int]] = {}
    sums: dict[str, list[int]] = {}
    for i, x in notes:
        for kind, (turns, tokens) in x.items():
            idx.setdefault(kind, []).append(i)
            s = sums.setdefault(kind, [0, 0])
            s[0] += turns
            s[1] += tokens
    if zero_loss:
        idx[ZERO_LOSS_DOCUMENTS] = list(zero_loss)
    audit = {}
    for kind in AUDIT_KINDS:
        if kind not in idx:
            continue
        entry = {"examples": len(idx[kind])}
        if kind in sums:
            entry["turns"] = sums[kind][0]
            if kind != DROPPED_REASONING:
                entry["tokens"] = sums[kind][1]
        entry["first"] = where(idx[kind][0])
        audit[kind] = entry
    return audit, idx


def audit_warnings(audit: dict, idx: dict[str, list[int]], template: str, quote) -> list[str]:
    """One line per kind (zero-loss documents are said by the pipeline's own line)."""
    out = []
    a = audit.get(TEMPLATE_INSERTED)
    if a:
        out.append(
            f"chat template '{template}' writes an empty block the data does not hold (e.g. "
            f"<think></think>) into {a['turns']} trained assistant turn(s) of {a['examples']} "
            f"example(s), {a['tokens']} trained token(s) in all (--strict-labels refuses such "
            f"data): source indices {quote(idx[TEMPLATE_INSERTED])}"
        )
    a = audit.get(EMPTY_TURNS)
    if a:
        out.append(
            f"{a['turns']} assistant turn(s) of {a['examples']} example(s) have no text, "
            f"reasoning or tool call: only what the template writes is trained in them, their "
            f"end of turn ({a['tokens']} token(s) in all); "
            f"drop such turns, or --strict-labels refuses them: source indices "
            f"{quote(idx[EMPTY_TURNS])}"
        )
    a = audit.get(DROPPED_REASONING)
    if a:
        out.append(
            f"chat template '{template}' drops the reasoning of {a['turns']} earlier assistant "
            f"turn(s) of {a['examples']} example(s): the data has it, the model is not trained on "
            f"it (--chat-template chatml-train or a trl:*_training template keeps every turn's): "
            f"source indices {quote(idx[DROPPED_REASONING])}"
        )
    if idx.get(THINK_OMITTED):
        out.append(
            f"chat template '{template}' writes no <think> block in assistant turns without "
            f"reasoning ({len(idx[THINK_OMITTED])} example(s)), where the tokenizer's own template "
            "writes an empty one before the last answer: the model learns to answer without it "
            "(--chat-template trl:qwen3_training trains an empty <think></think> in every turn)"
        )
    return out


def strict_problem(audit: dict | None) -> str | None:
    """The one-line refusal of --strict-labels for a run's audit; None when there is nothing."""
    for kind in AUDIT_KINDS:
        a = (audit or {}).get(kind)
        if a:
            return (
                f"--strict-labels: {a['first']} {_REFUSED[kind]} ({kind}; {a['examples']} "
                "example(s) in all, see the warnings); fix or drop such records, or leave out "
                "--strict-labels"
            )
    return None
