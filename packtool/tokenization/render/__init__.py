"""Chat templates rendered: one conversation → the text, and the char spans to train.

    Renderer(spec, template, train_on, renderer).conversation(messages, tools) -> text, spans
    best(template) -> (renderer, why jinja)       the fast path's renderer: made once per run

Renderers, each giving the text and `{% generation %}` spans of the one before it in this order,
for the conversations it covers; what it does not cover goes one step down, per conversation:

    native (chatml.py: the built-in chatml-train; gptoss.py: TRL's gptoss_training; picked by
    the template's bytes)
      ──NotNative──▶ compiled (compiled.py: any template in MiniJinja)
      ──NotCompiled──▶ jinja (jinja.py: transformers' renderer, the reference)

A run's fast path (run_plan.RunPlan.step) is fastokens with the renderer `best` picks ("native",
"compiled": the chain above from its top; "jinja": a template MiniJinja cannot compile); its
reference path is tokenizers with jinja alone. run_plan.FastCheck compares the two on each run's first
examples; on a difference the run continues on the reference path (RunPlan.on_difference) and
its report says so:

    fastokens + best renderer  ──differs on a probe──▶  tokenizers + jinja

A renderer is kept only where it earns >= 20% end to end against the next one down
(benchmarks/README.md, "Renderers"). What each renders must appear in its text (lost_content, below).

One conversation, rendered (Renderer):

    messages (packtool.formats.template_messages) ──Renderer.conversation──▶ text, spans
    text   "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    spans                                                     [(52, 65)]   "Hello!<|im_end|>"

Each render goes down the chain above, from where the run's renderer starts
("jinja": at jinja): the template's native renderer (`native_for`: the built-in chatml-train, TRL's
gptoss_training, by their bytes) → the compiled one (MiniJinja) → transformers'
jinja. How assistant text is located is the template's `mode` (decided once per run by
packtool.tokenization.template_probe):

    markers   each {% generation %} block, less the generation prompt the template writes at its
              start (the model is given it at inference, e.g. `<|start|>assistant`)
    prefix    for each assistant turn i, what render(messages[:i+1]) adds to
              render(messages[:i], add_generation_prompt=True); a template that renders an earlier
              turn differently once later turns follow raises NotPrefixPreserving
    last      that for the last turn only (templates that rewrite earlier turns, --train-on last)
    all       the whole text (--train-on all)

A span ends at the turn's end-of-turn token (not the newline after it). What the template drops
of the record refuses the example (lost_content).

What every renderer's output must hold, and how an example is refused:

    lost_content(messages, tools, text) -> None | what the text lacks, in words
        every message's text, the last assistant turn's reasoning, every tool call (its name,
        argument names and values) and tool definition must appear in the rendered text, else
        the example is refused naming what the template dropped (Renderer.conversation)
    locate / appears / leaf_values       the searches it (and label_audit) is made of
    ExampleError, NotPrefixPreserving    one example cannot be encoded (the source counts it)
"""

from __future__ import annotations

import json
import re
import sys

from packtool.tokenization.chat_template import (
    BUILTIN_TEMPLATES,
    ChatTemplate,
    family_fix,
    family_of,
    special_tokens,
)
from packtool.tokenization.render import chatml, jinja

dated_text = jinja.dated_text


class ExampleError(Exception):
    """One example cannot be encoded; the source counts it (or stops, with --on-error error)."""


class NotPrefixPreserving(ExampleError):
    """The template renders an earlier turn differently once later turns follow (mode prefix)."""


def first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def locate(text: str, value: str, start: int = 0, end: int = sys.maxsize) -> int:
    """text.find(value, start, end), by the first place of its first 16 chars and a compare there
    (str.find prepares a long needle anew on each call)."""
    at = text.find(value[:16], start, end)
    if at < 0 or text.startswith(value, at, end):
        return at
    return text.find(value, at, end)


def appears(value: str, text: str) -> bool:
    """`value` is in `text` as it is, stripped, or JSON-escaped (templates that `tojson` content)."""
    if locate(text, value) >= 0 or locate(text, value.strip()) >= 0:
        return True
    return any(json.dumps(value, ensure_ascii=a)[1:-1] in text for a in (False, True))


def leaf_values(value) -> list:
    """The leaf values of tool-call arguments (strings, numbers, booleans), depth first."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaf_values(v)]
    if isinstance(value, list):
        return [x for v in value for x in leaf_values(v)]
    return [] if value is None else [value]


def _leafappears(value, text: str) -> bool:
    if isinstance(value, str):
        return not value.strip() or appears(value, text)
    return any(s in text for s in {json.dumps(value), str(value)})  # 3 / 3.0 / true / True


def lost_content(messages: list[dict], tools, text: str) -> str | None:
    """What of the conversation the rendered `text` lacks, in words; None when everything is there:
    a message's text; the reasoning of the last assistant turn (templates may drop earlier turns'
    reasoning by design: gpt-oss, Qwen3); each tool call's name (as often as it is called, beside
    its definitions), argument names and values; each tool definition."""
    last = len(messages) - 1
    while last >= 0 and messages[last]["role"] != "assistant":
        last -= 1
    defined = [
        (t.get("function", t) if isinstance(t, dict) else {}).get("name") for t in tools or ()
    ]
    calls: dict[str, int] = {}
    at = 0  # where the last text was found: the next is usually just after it
    for i, m in enumerate(messages):
        c = m.get("content")
        if isinstance(c, str):
            if (k := locate(text, c, at)) >= 0:
                at = k + len(c)
            elif c.strip() and not appears(c, text):
                return f"the text of turn {i} ({m['role']})"
        if i == last:
            r = m.get("reasoning_content")
            if isinstance(r, str) and r.strip() and not appears(r, text):
                return f"the reasoning of turn {i} (the last assistant turn)"
        if "tool_calls" not in m:
            continue
        for call in m["tool_calls"] or ():
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
                    repr(v) for v in leaf_values(args) if not _leafappears(v, text)
                ]
            else:
                missing = (
                    ["(all)"]
                    if isinstance(args, str) and args.strip() and not appears(args, text)
                    else []
                )
            if missing:
                return f"the arguments {', '.join(map(str, missing))} of tool call {name!r} of turn {i}"
    for name in defined:
        if name and name not in text:
            return f"the tool definition {name!r}"
    return None


def native_for(text: str):
    """The native renderer of a template, by its bytes: render(messages, tools, kwargs, date) ->
    (text, spans, complete) or NotNative; None when the template has none."""
    if text == BUILTIN_TEMPLATES["chatml-train"].read_text():
        return chatml.native
    from packtool.tokenization.render import gptoss  # (imported only for another template)

    return gptoss.native_for(text)


class Renderer:
    """One tokenizer's template in its mode: conversation → (text, trained char spans)."""

    def __init__(self, spec, template: ChatTemplate, train_on: str, renderer: str = "jinja"):
        self.spec = spec
        self.template = template
        self.train_on = train_on
        # where the chain starts: "native" | "compiled" (the native renderer, if the template has
        # one, then MiniJinja, then jinja), "jinja" (the reference: jinja alone)
        self.renderer = renderer
        self._kwargs = dict(spec.special_tokens)
        ends = {t for t in [spec.eos_token, *spec.all_special_tokens, *special_tokens(spec)] if t}
        self._end_tokens = tuple(sorted(ends))
        self._gen_prompt: str | None = None
        self._heads: list[str] | None = None  # the generation prompt, its heads ending in a special
        mode = template.mode or ("markers" if template.has_generation else "prefix")
        self.mode = mode
        self._text = jinja.dated_text(template)
        self._compiled = None  # the compiled template, built on first use (False: none)
        self._own = None  # the template's native renderer, looked up on first use (False: none)

    def __getstate__(self):
        return {**self.__dict__, "_compiled": None, "_own": None}

    def _native(self, messages, tools) -> tuple[str, list, bool] | None:
        """The template's native renderer: (text, spans, complete); None when it has none (or the
        run renders with jinja) or the renderer does not cover this conversation."""
        if self._own is None:
            self._own = (self.renderer != "jinja" and native_for(self.template.text)) or False
        if not self._own:
            return None
        try:
            return self._own(messages, tools, self._kwargs, self.template.date)
        except Exception:  # NotNative, or a value it does not expect: the next renderer
            return None

    def _engine(self):
        """(the compiled template, NotCompiled), or False: none (MiniJinja imported on first use)."""
        if self._compiled is None:
            from packtool.tokenization.render.compiled import NotCompiled, compile_template

            engine = compile_template(self._text, self._kwargs)[0]
            self._compiled = (engine, NotCompiled) if engine else False
        return self._compiled

    def conversation(self, messages: list[dict], tools) -> tuple[str, list[tuple[int, int]]]:
        """(text, trained char spans) in the template's mode; ExampleError saying what failed."""
        # the text holds everything lost_content looks for: chatml-train's by construction, a
        # native renderer's where it says so (checked against the jinja reference, which runs
        # lost_content, on every run's first examples)
        complete = self.renderer == "native"
        try:
            if self.mode == "markers":
                got = self._native(messages, tools)
                if got is None:
                    text, spans = self._render(messages, tools, marks=True)
                else:
                    text, spans, native_complete = got
                    complete = complete or native_complete
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
                f"chat template '{self.template.name}' failed on this record: {first_line(e)}"
                + self._no_tools(messages, tools)
            ) from e
        lost = None if complete else lost_content(messages, tools, text)
        if lost:
            raise ExampleError(
                f"chat template '{self.template.name}' drops {lost}: the model would be trained without it; use a "
                "template that renders it (--chat-template trl:NAME or FILE), or drop such records"
                + self._no_tools(messages, tools)
            )
        return text, spans

    def _render(self, messages, tools, *, marks: bool, gen_prompt: bool = False):
        if self.renderer != "jinja" and (compiled := self._engine()):
            engine, not_compiled = compiled
            try:
                return engine.render(messages, tools, marks=marks, gen_prompt=gen_prompt)
            except not_compiled:
                pass  # jinja renders it: the same text, or the error it gives
        return jinja.render(
            self._text, self._kwargs, messages, tools, marks=marks, gen_prompt=gen_prompt
        )

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
                    f"turn {i} ({first_line(e)}), so the turn cannot be located; fix: {self._fix()}"
                ) from e
            upto, _ = self._render(messages[: i + 1], tools, marks=False)
            if not (upto.startswith(before) and full.startswith(upto)):
                raise NotPrefixPreserving(
                    f"chat template '{self.template.name}' is not prefix-preserving on this conversation (turn {i} "
                    f"renders differently once later turns follow), so assistant tokens cannot be located; "
                    f"fix: {self._fix()}"
                )
            spans.append((len(before), self._turn_end(upto)))
        return full, spans

    def _fix(self) -> str:
        family = self.template.family or family_of(self.template.text)
        return family_fix(family, self.train_on, self.template.near, self.template.near_alike)

    def _turn_end(self, text: str, a: int = 0, b: int | None = None) -> int:
        """The end of text[a:b] as trained: before the whitespace after a closing end-of-turn
        token (keep the token, not the newline after it), else b."""
        b = len(text) if b is None else b
        end = b
        while end > a and text[end - 1].isspace():
            end -= 1
        return end if text.endswith(self._end_tokens, a, end) else b

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
        if self._gen_prompt is None and self.renderer == "native":
            self._gen_prompt = chatml.GENERATION_PROMPT  # (no jinja: transformers is not imported)
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
        template closes the conversation so) joins the turn before it.

        Per block, the usual case costs a few compares: a block not starting with the shortest
        head (a prefix of every head) has no prompt to trim, one starting with the whole prompt
        (the longest head) loses it; a block not ending in whitespace keeps its end (`_turn_end`
        moves an end only past whitespace)."""
        heads = self._heads if self._heads is not None else self._prompt_heads()
        shortest = heads[-1] if heads else None
        out: list[tuple[int, int]] = []
        eos = self.spec.eos_token
        for a, b in spans:
            if out and eos is not None and b - a == len(eos) and text.startswith(eos, a):
                if not text[out[-1][1] : a].strip():
                    out[-1] = (out[-1][0], b)
                    continue
            if shortest is not None and text.startswith(shortest, a, b):
                a += (
                    len(heads[0])
                    if text.startswith(heads[0], a, b)
                    else self._prompt_at(text, a, b)
                )
            out.append((a, self._turn_end(text, a, b) if a < b and text[b - 1].isspace() else b))
        return out

    def _prompt_heads(self) -> list[str]:
        """The generation prompt and its heads that end in a special token, longest first (each
        a prefix of the ones before it); [] when the template writes none."""
        if self._heads is None:
            g = self.generation_prompt()
            self._heads = (
                [g] + [g[:k] for k in range(len(g) - 1, 0, -1) if g[:k].endswith(self._end_tokens)]
                if g
                else []
            )
        return self._heads

    def _prompt_at(self, text: str, a: int, b: int) -> int:
        """Length of the generation prompt (or of its longest head that ends in a special token)
        written at text[a:b]."""
        for head in self._prompt_heads():
            if len(head) <= b - a and text.startswith(head, a):
                return len(head)
        return 0

    def _no_tools(self, messages: list[dict], tools) -> str:
        """'; the template has no tool role ...' when the record uses tools (a tool turn, a tool call,
        tool definitions) and the template never mentions them (Gemma 3: its refusal only says that
        roles must alternate); else ''."""
        used = tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
        if not used or re.search(r"\btools?\b|tool_calls", self.template.text):
            return ""
        return (
            f" (the template{f' of {self.template.family}' if self.template.family else ''} has no "
            "tool role: it renders no tool turns, calls or definitions); drop tool records with "
            "--on-error skip, or use a template that supports tools (--chat-template chatml-train "
            "for ChatML models, trl:NAME or FILE)"
        )


def best(template) -> tuple[str, str | None]:
    """The fast path's renderer and, when it is jinja, why: "native" for the built-in chatml-train
    template (byte for byte), else "compiled" where MiniJinja compiles the template (TRL's
    gptoss_training rendered natively in front of it: the chain), else jinja."""
    if template.text == BUILTIN_TEMPLATES["chatml-train"].read_text():
        return "native", None
    from packtool.tokenization.render.compiled import compile_template  # (not for native)

    _, why = compile_template(jinja.dated_text(template), {})
    if why is not None:
        return "jinja", f"chat template '{template.name}': {why}; jinja renders it"
    return "compiled", None
