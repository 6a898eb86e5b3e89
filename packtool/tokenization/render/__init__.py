"""A ChatTemplate rendered: one conversation → the text, and the char spans to train.

    Renderer(spec, template, train_on, renderer).conversation(messages, tools) -> text, spans
    best(template) -> (renderer, why jinja)       the fast path's renderer: made once per run

    text   "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n"
    spans                                                     [(52, 68)]   "Hello!<|im_end|>"

Renderers, each giving the text and spans of the one below it for what it covers (the rest goes
one step down, per conversation; benchmarks/README.md, "Renderers"):

    native (native.py: chatml-train, gptoss_training; by the template's bytes) ──NotNative──▶ compiled
    (compiled.py: MiniJinja) ──NotCompiled──▶ jinja (`render_jinja`: transformers', the reference)

How assistant text is located is the template's `mode` (chat_template.choose):

    markers   each {% generation %} block, less the generation prompt the template writes at its
              start (the model is given it at inference, e.g. `<|start|>assistant`)
    prefix    for each assistant turn i, what render(messages[:i+1]) adds to
              render(messages[:i], add_generation_prompt=True); a template that renders an earlier
              turn differently once later turns follow raises NotPrefixPreserving
    last      that for the last turn only (templates that rewrite earlier turns, --train-on last)
    all       the whole text (--train-on all)

A span ends at the turn's end-of-turn token; what the template drops (`lost_content`) is refused.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import hashlib
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from packtool.tokenization.loading import package_dir
from packtool.tokenization.render import native

TEMPLATE_DIR = Path(__file__).parent.parent / "templates"
BUILTIN_TEMPLATES = {p.stem: p for p in sorted(TEMPLATE_DIR.glob("*.jinja"))}

# family: (a marker its templates write, its fix when its own template cannot be used as it is)
FAMILIES = {
    "gpt-oss (harmony)": ("<|channel|>", "gptoss_training"),
    "Llama 3": ("<|start_header_id|>", "llama3_training"),
    "Gemma": ("<start_of_turn>", "gemma3_training"),
    "DeepSeek": ("<｜Assistant｜>", "deepseekv3_training"),
    "Cohere": ("<|START_OF_TURN_TOKEN|>", "cohere_training"),
    "GLM": ("[gMASK]", "glm4moe_training"),
    "Phi-3": ("<|assistant|>", "phi3_training"),
    "ChatML (Qwen)": ("<|im_start|>", None),  # chatml-train is ours
}


@dataclass(frozen=True)
class ChatTemplate:
    text: str  # the template itself (Jinja)
    name: str  # "chatml-train", "trl:llama3_training", a file path, or "tokenizer"
    hash: str
    has_generation: bool  # True when the template marks assistant text with {% generation %}
    origin: str = ""  # "packtool", "trl 1.16.0", "tokenizer", "file"
    mode: str = ""  # markers | prefix | last | all (module docstring); "" = not decided yet
    why: str = ""  # the decision, in words (announced)
    date: str | None = None  # the date strftime_now() returns, when the template calls it
    family: str | None = None
    end_of_turn: str | None = None  # the trained end token, e.g. "<|eot_id|> (EOS)"
    near: str | None = None  # TRL's training template of the official one this is a near miss of
    near_alike: str = ""  # how near, in words: "88% alike, 3 of 40 blocks differ"

    def info(self) -> dict:
        return {
            "chat_template": self.name,
            "chat_template_hash": self.hash,
            "chat_template_origin": self.origin,
            "chat_template_mode": self.mode,
            "chat_template_why": self.why,
            "generation_markers": self.has_generation,
            "template_date": self.date,
            "family": self.family,
            "end_of_turn": self.end_of_turn,
        }


def make_template(text: str, name: str, origin: str = "file") -> ChatTemplate:
    has_gen = re.search(r"\{%-?\s*generation\s*-?%\}", text) is not None
    return ChatTemplate(text, name, hashlib.sha256(text.encode()).hexdigest()[:16], has_gen, origin)


def own_template(spec) -> str | None:
    """The tokenizer's own template text (its default one when it has several), None without one."""
    own = spec.chat_template
    if isinstance(own, dict):  # several named templates: take the default one
        own = own.get("default") or next(iter(own.values()), None)
    return own or None


def trl_dir() -> Path | None:
    """trl/chat_templates of the installed TRL, found without importing trl (which imports torch)."""
    trl = package_dir("trl")
    folder = trl / "chat_templates" if trl is not None else None
    return folder if folder is not None and folder.is_dir() else None


def family_of(text: str) -> str | None:
    return next((family for family, (marker, _) in FAMILIES.items() if marker in text), None)


def family_fix(
    family: str | None, train_on: str, near: str | None = None, near_alike: str = ""
) -> str:
    """What to do when this family's own template cannot locate every assistant turn; `near` (a
    TRL training template this one is a near miss of, `near_alike` how near) first."""
    fixes = []
    training = FAMILIES.get(family, (None, None))[1] if family else None
    if near:
        fixes.append(
            f"--chat-template trl:{near} (TRL's training version of {official_name(near)}, the official "
            "template this one is a near miss of" + (f": {near_alike})" if near_alike else ")")
        )
        if near == training:
            training = None
    if family == "ChatML (Qwen)":
        fixes.append("--chat-template chatml-train (packtool's ChatML training template)")
    elif training:
        have = trl_dir() is not None and (trl_dir() / f"{training}.jinja").is_file()
        fixes.append(
            f"--chat-template trl:{training} (TRL's training template for {family})"
            + ("" if have else ", after pip install 'packtool[templates]' (TRL)")
        )
    if train_on != "last":
        fixes.append("--train-on last (only the last assistant turn carries loss)")
    fixes.append("--chat-template FILE with {% generation %} markers")
    return "; or ".join(fixes)


def official_name(training: str) -> str:  # X_training → X.jinja
    return training[: -len("_training")] + ".jinja"


@functools.lru_cache(maxsize=8)
def native_for(text: str):
    """A template's native renderer: native.chatml for the built-in chatml-train, native.gptoss for
    the installed TRL's gptoss_training.jinja byte for byte, else None."""
    if text == BUILTIN_TEMPLATES["chatml-train"].read_text():
        return native.chatml
    folder = trl_dir()
    gptoss = folder / "gptoss_training.jinja" if folder is not None else None
    if gptoss is not None and gptoss.is_file() and text == gptoss.read_text():
        return native.gptoss
    return None


class ExampleError(Exception):
    """One example cannot be encoded; the source counts it (or stops, with --on-error error)."""


class NotPrefixPreserving(ExampleError):
    """The template renders an earlier turn differently once later turns follow (mode prefix)."""


def first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def locate(text: str, value: str, start: int = 0, end: int = sys.maxsize) -> int:
    """text.find(value, start, end), faster for long values (by their first 16 chars)."""
    at = text.find(value[:16], start, end)
    if at < 0 or text.startswith(value, at, end):
        return at
    return text.find(value, at, end)


def appears(value: str, text: str) -> bool:  # as it is, stripped, or JSON-escaped (`tojson`)
    if locate(text, value) >= 0 or locate(text, value.strip()) >= 0:
        return True
    return any(json.dumps(value, ensure_ascii=a)[1:-1] in text for a in (False, True))


def leaf_values(value) -> list:  # of tool-call arguments (strings, numbers, booleans), depth first
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
    """What of the conversation the rendered `text` lacks, in words (None: nothing): a message's
    text; the last assistant turn's reasoning (templates may drop earlier turns' by design); each
    tool call's name (as often as it is called), argument names and values; each tool definition."""
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
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
            missing = []
            if isinstance(args, dict):
                missing = [k for k in args if k not in text] + [
                    repr(v) for v in leaf_values(args) if not _leafappears(v, text)
                ]
            elif isinstance(args, str) and args.strip() and not appears(args, text):
                missing = ["(all)"]
            if missing:
                return f"the arguments {', '.join(map(str, missing))} of tool call {name!r} of turn {i}"
    for name in defined:
        if name and name not in text:
            return f"the tool definition {name!r}"
    return None


class Renderer:
    """One tokenizer's template in its mode: conversation → (text, trained char spans)."""

    def __init__(self, spec, template: ChatTemplate, train_on: str, renderer: str = "jinja"):
        self.spec = spec
        self.template = template
        self.train_on = train_on
        # chain start: "native" (chatml-train's), "compiled" (top: gpt-oss native, MiniJinja), "jinja"
        self.renderer = renderer
        self._kwargs = dict(spec.special_tokens)
        ends = {t for t in [spec.eos_token, *spec.all_special_tokens, *spec.control_tokens] if t}
        self._end_tokens = tuple(sorted(ends))
        self._gen_prompt: str | None = None
        self._heads: list[str] | None = None
        self.mode = template.mode or ("markers" if template.has_generation else "prefix")
        self._text = dated_text(template)
        self._compiled = self._own = None  # compiled / native renderer, on first use

    def __getstate__(self):
        return {**self.__dict__, "_compiled": None, "_own": None}

    def _native(self, messages, tools) -> tuple[str, list, bool] | None:
        """(text, spans, complete) of the template's native renderer; None: not rendered so."""
        if self._own is None:  # (False: none)
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
        # complete: the text holds everything lost_content looks for (chatml-train's always)
        complete = self.renderer == "native"
        try:
            if self.mode == "markers":
                got = self._native(messages, tools)
                text, spans, own_complete = got or (
                    *self._render(messages, tools, marks=True),
                    False,
                )
                complete = complete or own_complete
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
        return render_jinja(
            self._text, self._kwargs, messages, tools, marks=marks, gen_prompt=gen_prompt
        )

    def _after_user(self, tools) -> str:
        """G = render([user], generation prompt) - render([user]): the generation prompt."""
        probe = [{"role": "user", "content": "x"}]
        plain, _ = self._render(probe, tools, marks=False)
        prompted, _ = self._render(probe, tools, marks=False, gen_prompt=True)
        return prompted[len(plain) :] if prompted.startswith(plain) else ""

    def _before(self, messages, i: int, tools) -> str:
        """What precedes assistant turn i: render(messages[:i], generation prompt); for turn 0, the
        empty conversation's prompt, else render(messages[:1]) up to its first `_after_user`."""
        if i:
            return self._render(messages[:i], tools, marks=False, gen_prompt=True)[0]
        with contextlib.suppress(Exception):
            return self._render([], tools, marks=False, gen_prompt=True)[0]
        header = self._after_user(tools)
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
                before = self._before(messages, i, tools)
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
        """The end of text[a:b] as trained: before whitespace after a closing end-of-turn token."""
        end = b = len(text) if b is None else b
        while end > a and text[end - 1].isspace():
            end -= 1
        return end if text.endswith(self._end_tokens, a, end) else b

    def _last_span(self, messages, tools) -> tuple[str, list[tuple[int, int]]]:
        """Only the last turn (templates that rewrite earlier turns: gpt-oss drops their reasoning)."""
        full, _ = self._render(messages, tools, marks=False)
        if messages[-1]["role"] != "assistant":
            return full, []
        before = self._before(messages, len(messages) - 1, tools)
        if not full.startswith(before):
            raise ExampleError(
                f"chat template '{self.template.name}' renders the conversation before the last assistant turn "
                f"differently once that turn follows, so it cannot be located; fix: {self._fix()}"
            )
        return full, [(len(before), self._turn_end(full))]

    def generation_prompt(self) -> str:
        """What the template writes to open an assistant turn at inference (the generation prompt)."""
        if self._gen_prompt is None:  # native: no jinja (transformers is not imported)
            by_native = self.renderer == "native"
            self._gen_prompt = native.GENERATION_PROMPT if by_native else self._after_user(None)
        return self._gen_prompt

    def _trim_prompt(self, text: str, spans) -> list[tuple[int, int]]:
        """Generation blocks less the generation prompt (or its longest head ending in a special
        token: DeepSeek's `<｜Assistant｜>`) at their start and whitespace after a closing end of
        turn; a last block of only the EOS (Phi-3's training template) joins the turn before it."""
        heads = self._prompt_heads()
        shortest = heads[-1] if heads else None
        out: list[tuple[int, int]] = []
        eos = self.spec.eos_token
        for a, b in spans:
            if out and eos is not None and b - a == len(eos) and text.startswith(eos, a):
                if not text[out[-1][1] : a].strip():
                    out[-1] = (out[-1][0], b)
                    continue
            if shortest is not None and text.startswith(shortest, a, b):
                a += self._prompt_at(text, a, b)
            out.append((a, self._turn_end(text, a, b) if a < b and text[b - 1].isspace() else b))
        return out

    def _prompt_heads(self) -> list[str]:
        """The generation prompt and its heads that end in a special token, longest first."""
        if self._heads is None:
            g = self.generation_prompt()
            self._heads = (
                [g] + [g[:k] for k in range(len(g) - 1, 0, -1) if g[:k].endswith(self._end_tokens)]
                if g
                else []
            )
        return self._heads

    def _prompt_at(self, text: str, a: int, b: int) -> int:
        """Length of the longest of `_prompt_heads` written at text[a:b] (0: none)."""
        for head in self._prompt_heads():
            if len(head) <= b - a and text.startswith(head, a):
                return len(head)
        return 0

    def _no_tools(self, messages: list[dict], tools) -> str:
        """Why a record with tools fails where the template never mentions them (Gemma 3's refusal
        only says that roles must alternate); else ''."""
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
    """The fast path's renderer (the manifest's) and, if jinja, why: "native" only for chatml-train;
    else "compiled" where MiniJinja compiles it (the chain's top: gptoss_training native first)."""
    if native_for(template.text) is native.chatml:
        return "native", None
    from packtool.tokenization.render.compiled import compile_template  # (not for native)

    _, why = compile_template(dated_text(template), {})
    if why is not None:
        return "jinja", f"chat template '{template.name}': {why}; jinja renders it"
    return "compiled", None


# -- jinja: the reference ----------------------------------------------------------------------
def render_jinja(
    text: str, kwargs: dict, messages, tools, *, marks: bool, gen_prompt: bool = False
):
    """transformers' render_jinja_template (what apply_chat_template calls): (text, the char spans
    of the `{% generation %}` blocks when `marks`, else None); transformers imported on first use."""
    from transformers.utils.chat_template_utils import render_jinja_template

    texts, spans = render_jinja_template(
        conversations=[messages],
        tools=tools,
        chat_template=text,
        return_assistant_tokens_mask=marks,
        add_generation_prompt=gen_prompt,
        **kwargs,
    )
    return texts[0], (spans[0] if marks else None)


def preload() -> None:  # transformers' renderer imported now (packtool.idle)
    from transformers.utils.chat_template_utils import render_jinja_template  # noqa: F401


def dated_text(template: ChatTemplate) -> str:
    """The template with strftime_now() fixed to `template.date` (a macro shadowing the global)."""
    if not template.date:
        return template.text
    day = datetime.date.fromisoformat(template.date)
    formats = sorted(set(re.findall(r"strftime_now\(\s*[\"']([^\"']*)[\"']\s*\)", template.text)))
    table = json.dumps({f: day.strftime(f) for f in formats})
    macro = "{%%- macro strftime_now(fmt) -%%}{{ %s[fmt] if fmt in %s else %s }}{%%- endmacro %%}"
    return macro % (table, table, json.dumps(template.date)) + template.text
