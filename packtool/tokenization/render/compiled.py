"""The compiled renderer: any chat template rendered with MiniJinja (Rust), the text and the
generation spans transformers' jinja renderer gives (benchmarks/README.md, "Renderers").

    Compiled(text, globals)              compiles the template; Unfit (why) when MiniJinja cannot
        .render(messages, tools, marks, gen_prompt) -> (text, spans | None)
                                         NotCompiled: hand this conversation to jinja

The template is compiled with what transformers gives templates: trim_blocks, lstrip_blocks,
loop controls (break/continue), `raise_exception`, `strftime_now`, `namespace`, `dict`, and
`tojson` as transformers defines it (json.dumps, ensure_ascii=False: not jinja's HTML-escaping
one). The tests whose MiniJinja meaning differs from jinja's are rewritten in the text:
`X is iterable` (MiniJinja: none is iterable) and `X is sequence` (jinja: strings and dicts are).

Generation blocks become spans through two reserved characters (the control characters STX and
ETX, "start" and "end of text": a text of ASCII and marks stays one byte a char, which MiniJinja's
output and the slicing decode and copy fastest) that the template writes where a block opens and
closes; each tag is replaced by an `if true` block, so its whitespace control (`{%-`, `-%}`,
trim_blocks, lstrip_blocks) is the tag's own:

    template  {%- generation -%}{{ content }}{%- endgeneration -%}
    becomes   {%- if true %}{{ '\\x02' }}{% endif -%}{{ content }}{%- if true %}{{ '\\x03' }}{% endif -%}
    renders   <|im_start|>assistant\\n\\x02Hello!<|im_end|>\\x03\\n
    text      <|im_start|>assistant\\nHello!<|im_end|>\\n      the characters taken out
    spans                              [(22, 38)]           where they stood, in the text

What the two engines would render differently is never rendered here (NotCompiled: jinja renders
it): a float MiniJinja prints otherwise (an exponent, 16-17 significant digits), a reserved
character in the data, and anything MiniJinja refuses (so a refused example gets jinja's own
message). Every run checks the rest on its first examples (pipeline.FastCheck).
"""

from __future__ import annotations

import datetime
import json
import re

from packtool.tokenization.render.native import alias

OPEN, CLOSE = "\x02", "\x03"  # STX, ETX: reserved here (data holding them goes to jinja)
_TAG = re.compile(r"\{%([-+]?)\s*(end)?generation\s*([-+]?)%\}")
_OPERAND = r"(?<![\w.|\])'\"])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*|\[[^\[\]()]*\]|\([^()]*\))*)"
_IS = re.compile(_OPERAND + r"\s+is\s+(not\s+)?(iterable|sequence)\b")


class Unfit(Exception):
    """MiniJinja cannot compile this template (the run renders it with jinja)."""


class NotCompiled(Exception):
    """This conversation is rendered by jinja."""


def raise_exception(message):
    raise NotCompiled(message)  # jinja renders it again: its error, with its message


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(fmt):
    return datetime.datetime.now().strftime(fmt)


def translate(text: str, marks: bool) -> str:
    """The template with its generation tags as `if true` blocks (writing OPEN / CLOSE when
    `marks`) and the tests MiniJinja reads differently spelled out."""

    def tag(m: re.Match) -> str:
        out = f"{{{{ '{CLOSE if m.group(2) else OPEN}' }}}}" if marks else ""
        return "{%" + m.group(1) + " if true %}" + out + "{% endif " + m.group(3) + "%}"

    def test(m: re.Match) -> str:
        x, neg, name = m.group(1), m.group(2), m.group(3)
        if name == "iterable":  # jinja: none is not iterable (an undefined is, in both)
            expr = f"({x} is not none and {x} is iterable)"
        else:  # jinja: anything with a length and items (strings, dicts, lists, undefined)
            expr = f"({x} is string or {x} is mapping or {x} is sequence)"
        return f"(not {expr})" if neg else expr

    return _IS.sub(test, _TAG.sub(tag, text))


def exact_float(v: float) -> bool:
    """MiniJinja prints `v` as Python does: zero, or 1e-4 <= |v| < 1e15 (no exponent) with at most
    15 significant digits (one shortest form; with 16-17 digits the two round differently)."""
    if v == 0:
        return True
    if not 1e-4 <= abs(v) < 1e15:
        return False
    return len(repr(abs(v)).replace(".", "").strip("0")) <= 15


def plain(v) -> bool:
    """`v` holds nothing the engines would print differently: no float MiniJinja writes otherwise,
    no reserved character, none of U+001C-U+001F (Python's strip/trim/split take them for
    whitespace, MiniJinja's do not)."""
    stack = [v]
    while stack:
        v = stack.pop()
        t = type(v)
        if t is dict:
            for x in v.values():
                if type(x) is not str:
                    stack.append(x)
                elif _odd(x):
                    return False
            for k in v:
                if type(k) is not str:
                    stack.append(k)
                elif _odd(k):
                    return False
        elif t is str:
            if _odd(v):
                return False
        elif t is list or t is tuple:
            stack += v
        elif t is float and not exact_float(v):
            return False
    return True


def _odd(x: str) -> bool:
    return OPEN in x or CLOSE in x or "\x1c" in x or "\x1d" in x or "\x1e" in x or "\x1f" in x


def prepared(messages, tools) -> list | None:
    """The messages with reasoning under each name templates read it by, as transformers passes
    it (native.alias), when plain((messages, tools)); else None."""
    out = []
    for m in messages:
        if type(m) is not dict:
            return [alias(m) for m in messages] if plain((messages, tools)) else None
        if not plain(m):
            return None
        out.append(alias(m))
    return out if tools is None or plain(tools) else None


def spans_of(marked: str) -> tuple[str, list[tuple[int, int]]]:
    """The text less the OPEN / CLOSE characters, and the (start, end) of each block in it (the
    marks found with str.find, the pieces between them joined once). Blocks alternate OPEN, CLOSE:
    anything else is refused."""
    a = marked.find(OPEN)
    b = marked.find(CLOSE)  # the first CLOSE: the one after `a`
    if a < 0:
        if b >= 0:
            raise NotCompiled("a generation block closed twice")
        return marked, []
    if 0 <= b < a:
        raise NotCompiled("a generation block closed twice")
    pieces, spans, at = [marked[:a]], [], a  # at: where the block starts in the text
    while a >= 0:
        nxt = marked.find(OPEN, a + 1)
        if b < 0 or 0 <= nxt < b:
            raise NotCompiled("an unclosed generation block")  # or nested blocks
        end = nxt if nxt >= 0 else len(marked)
        after = marked.find(CLOSE, b + 1)  # the next block's CLOSE, if it is after `nxt`
        if 0 <= after < end:
            raise NotCompiled("a generation block closed twice")
        spans.append((at, at + b - a - 1))
        at += end - a - 2
        pieces += (marked[a + 1 : b], marked[b + 1 : end])
        a, b = nxt, after
    return "".join(pieces), spans


class Compiled:
    """One template compiled twice: with span marks (mode markers) and without."""

    def __init__(self, text: str, special_tokens: dict):
        try:
            import minijinja
        except ImportError as e:  # pragma: no cover - a dependency
            raise Unfit(f"minijinja is not installed ({e})") from None
        env = minijinja.Environment(
            trim_blocks=True,
            lstrip_blocks=True,
            undefined_behavior="lenient",
            debug=False,
        )
        env.add_filter("tojson", tojson)
        env.add_global("raise_exception", raise_exception)
        env.add_global("strftime_now", strftime_now)
        env.add_global("documents", None)
        if any(OPEN in x or CLOSE in x for x in (text, *map(str, special_tokens.values()))):
            raise Unfit("the template or a special token holds a reserved character (STX, ETX)")
        for k, v in special_tokens.items():
            env.add_global(k, v)
        try:
            env.add_template("marked", translate(text, True))
            env.add_template("plain", translate(text, False))
        except minijinja.TemplateError as e:
            raise Unfit(_first_line(str(e))) from None
        self.env = env

    def render(self, messages, tools, *, marks: bool, gen_prompt: bool = False):
        given = prepared(messages, tools)
        if given is None:
            raise NotCompiled("a float or a reserved character in the data")
        try:
            text = self.env.render_template(
                "marked" if marks else "plain",
                messages=given,
                tools=tools,
                add_generation_prompt=gen_prompt,
            )
        except Exception as e:  # raise_exception(), or what MiniJinja refuses: jinja says
            raise NotCompiled(_first_line(str(e))) from e
        if not marks:
            return text, None
        return spans_of(text)


def compile_template(text: str, special_tokens: dict) -> tuple[Compiled | None, str | None]:
    """(the compiled template, None), or (None, why it renders with jinja)."""
    try:
        return Compiled(text, special_tokens), None
    except Unfit as e:
        return None, f"MiniJinja cannot compile it ({e})"


def _first_line(s: str) -> str:
    return s.strip().splitlines()[0] if s.strip() else "error"
