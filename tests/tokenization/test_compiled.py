"""The compiled renderer (MiniJinja) against transformers' jinja renderer: every TRL template and
every shared tokenizer's template over the shared data and 300 generated conversations, the same
text and generation spans; what it hands back to jinja; the fast path's step down on a difference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from chat_examples import chat, chat_examples
from paths import SHARED_TOKENIZERS, needs_shared

from packtool.formats.normalize import template_messages
from packtool.tokenization.chat_template import ChatTemplate, make_template, trl_dir
from packtool.tokenization.render import compiled, dated_text
from packtool.tokenization.render.compiled import Compiled, NotCompiled
from packtool.tokenization.render.native import alias

TRL = trl_dir()
TEMPLATES = sorted(p.name for p in TRL.glob("*.jinja")) if TRL is not None else []
SPECIAL = {"bos_token": "<s>", "eos_token": "</s>"}
ODD = [  # data the engines would print differently, or that holds the reserved characters
    [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"function": {"name": "f", "arguments": {"a": 0.1 + 0.2, "b": 1e-7, "c": 1e20}}}
            ],
        },
    ],
    [
        {"role": "user", "content": f"a{compiled.OPEN}b"},
        {"role": "assistant", "content": f"c{compiled.CLOSE}"},
    ],
    [  # Python's strip (jinja's trim) removes U+001C-U+001F, MiniJinja's keeps them
        {"role": "user", "content": "q\x1f"},
        {"role": "assistant", "content": "\x1ca"},
    ],
]
PLAIN = [  # what they print alike: bools, None, ints, short floats, nested arguments
    [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "ok",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "arguments": {"t": True, "n": None, "i": 3, "f": 1.75, "l": [0.5, "é"]},
                    },
                }
            ],
        },
    ]
]


@pytest.fixture(scope="module")
def conversations():
    out = [(template_messages(e), e.get("tools") or None) for e in chat_examples()]
    return out + [(m, None) for m in PLAIN]


def _jinja(source, messages, tools, gen_prompt):
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        texts, spans = render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=source,
            return_assistant_tokens_mask=True,
            add_generation_prompt=gen_prompt,
            **SPECIAL,
        )
    except Exception:
        return None
    return texts[0], [tuple(s) for s in spans[0]]


def _shared_templates():
    out = []
    for d in sorted(SHARED_TOKENIZERS.glob("*")) if SHARED_TOKENIZERS.is_dir() else ():
        if (d / "chat_template.jinja").is_file():
            out.append((d.name, (d / "chat_template.jinja").read_text()))
        elif (d / "tokenizer_config.json").is_file():
            t = json.loads((d / "tokenizer_config.json").read_text()).get("chat_template")
            if isinstance(t, str):
                out.append((d.name, t))
    return out


def _same_as_jinja(source, conversations, gen_prompt_first=40):
    """Renders every conversation (and the first ones with the generation prompt) both ways: the
    compiled text and spans must be jinja's, or the conversation handed to jinja; a conversation
    jinja refuses is never rendered. Returns (identical, handed back)."""
    engine = Compiled(source, SPECIAL)
    same = back = 0
    cases = [(m, t, False) for m, t in conversations]
    cases += [(m, t, True) for m, t in conversations[:gen_prompt_first]]
    for messages, tools, gp in cases:
        want = _jinja(source, messages, tools, gp)
        try:
            got = engine.render(messages, tools, marks=True, gen_prompt=gp)
        except NotCompiled:
            back += want is not None
            continue
        assert want is not None, ("compiled renders what jinja refuses", messages)
        assert got == want, messages
        same += 1
    return same, back


@pytest.mark.skipif(TRL is None, reason="TRL is not installed (its chat_templates/)")
@pytest.mark.parametrize("name", TEMPLATES)
def test_every_trl_template_renders_as_jinja(name, conversations):
    source = (TRL / name).read_text()
    same, back = _same_as_jinja(source, conversations)
    assert back == 0, f"{back} conversations handed back to jinja"  # no odd data among them
    if "llava_next" not in name:  # (its templates refuse string contents: all refused both ways)
        assert same > len(conversations) // 2


@needs_shared("tokenizers")
def test_shared_tokenizers_templates_render_as_jinja(conversations):
    shared = _shared_templates()
    assert {n for n, _ in shared} >= {"gptoss", "llama3"}
    for _, source in shared:
        same, back = _same_as_jinja(source, conversations)
        assert back == 0 and same > len(conversations)
    # gpt-oss writes today's date: the dated template (its strftime_now a macro) as the run uses it
    gptoss = dict(shared)["gptoss"]
    dated = dated_text(ChatTemplate(gptoss, "gptoss", "x", True, "own", date="2026-12-02"))
    assert _same_as_jinja(dated, conversations[:50], 10)[0] == 60


def test_odd_data_is_handed_to_jinja():
    engine = Compiled((TRL / "qwen3_training.jinja").read_text() if TRL else "{{ messages }}", {})
    for messages in ODD:
        with pytest.raises(NotCompiled):
            engine.render(messages, None, marks=True)
    for text, tokens in [
        (f"{{{{ x }}}}{compiled.OPEN}", {}),
        ("{{ x }}", {"eos_token": compiled.CLOSE}),
    ]:
        with pytest.raises(compiled.Unfit, match="reserved character"):
            Compiled(text, tokens)  # (a template or a special token holding a mark: jinja renders)
    assert compiled.exact_float(1.75) and compiled.exact_float(-0.0) and compiled.exact_float(1e14)
    assert not compiled.exact_float(0.1 + 0.2) and not compiled.exact_float(1e-5)
    assert not compiled.exact_float(1e15) and not compiled.exact_float(float("nan"))


def test_generation_tags_keep_their_whitespace_control():
    """Each spelling of the tag: the text and spans of transformers' renderer."""
    body = "{% for m in messages %}{{ m.role }}:\n  {%- if m.role == 'assistant' %}\n"
    for open_, close in [
        ("{% generation %}", "{% endgeneration %}"),
        ("{%- generation -%}", "{%- endgeneration -%}"),
        ("  {% generation %}\n", "\n  {% endgeneration %}\n"),
        ("{%+ generation %}", "{% endgeneration +%}"),
        ("{%generation%}", "{%endgeneration%}"),
    ]:
        source = body + open_ + " {{ m.content }} " + close + "{% endif %}|\n{% endfor %}"
        messages = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]
        want = _jinja(source, messages, None, False)
        assert Compiled(source, {}).render(messages, None, marks=True) == want, open_
        assert Compiled(source, {}).render(messages, None, marks=False)[0] == want[0]


def test_tests_minijinja_reads_otherwise_are_rewritten():
    source = (
        "{{ tools is iterable }} {{ tools is not iterable }} {{ messages[0].content is sequence }} "
        "{{ messages[0] is sequence }} {{ messages[0].get('content') is not sequence }} "
        "{{ messages[0].nope is iterable }} {{ raise_exception('no') if messages|length > 1 }}"
        "{{ {'a': 1.5, 'b': 'é<'}|tojson }} {{ [1, 2]|tojson(indent=2) }}"
    )
    messages = [{"role": "user", "content": "x"}]
    want = _jinja(source, messages, None, False)
    assert Compiled(source, {}).render(messages, None, marks=True) == want
    assert want[0].startswith("False True True True False True")
    with pytest.raises(NotCompiled, match="no"):  # raise_exception: jinja says it again
        Compiled(source, {}).render(messages * 2, None, marks=True)


def test_a_template_minijinja_cannot_compile_renders_with_jinja():
    from packtool.tokenization.render import best

    source = "{% for m in messages %}{{ m.content }}{% endfor %}{% if 0 %}{{ messages[0, 1] }}{% endif %}"
    odd = make_template(source, "odd")  # (jinja reads messages[0, 1] as a tuple subscript)
    renderer, why = best(odd)
    assert renderer == "jinja" and "chat template 'odd': MiniJinja cannot compile it" in why
    good = make_template("{% for m in messages %}{{ m.content }}{% endfor %}", "good")
    assert best(good) == ("compiled", None)


@needs_shared("tokenizers")
@pytest.mark.parametrize("family", ["llama3", "gptoss"])
def test_fast_path_equals_reference_on_other_families(family):
    """fastokens + compiled renderer against tokenizers + jinja with each family's TRL training
    template: identical ids, labels and refusals."""
    from packtool.tokenization.chat_template import pick
    from packtool.tokenization.encode import Encoder
    from packtool.tokenization.loading import load_spec

    spec = load_spec(str(SHARED_TOKENIZERS / family))
    name = {"llama3": "trl:llama3_training", "gptoss": "trl:gptoss_training"}[family]
    if TRL is None:
        pytest.skip("TRL is not installed")
    from packtool.tokenization.chat_template import choose

    tpl = choose(spec, name, "assistant", "2026-12-02")
    assert pick(spec, name).name == tpl.name
    examples = [chat(m, t) for m, t in [(e["messages"], e.get("tools")) for e in chat_examples()]]
    fast = Encoder(spec, tpl, backend="fastokens", renderer="compiled").encode(examples)
    ref = Encoder(spec, tpl, backend="hf", renderer="jinja").encode(examples)
    assert fast.errors == ref.errors and sum(e is None for e in ref.errors) > 300
    assert np.array_equal(fast.offsets, ref.offsets)
    assert np.array_equal(fast.ids, ref.ids) and np.array_equal(fast.label_values, ref.label_values)


@pytest.mark.skipif(TRL is None, reason="TRL is not installed (its chat_templates/)")
def test_a_renderer_difference_goes_to_the_reference(tmp_path, monkeypatch):
    """The compiled renderer differs on a probe: the run continues on the reference path
    (tokenizers + jinja: no intermediate rung), its report and one warning say why; forced
    fastokens is an error."""
    from packtool.api import load_tokenized
    from packtool.config import TokenizeConfig
    from packtool.demo_data import write_sample
    from packtool.errors import PacktoolError

    path = str(write_sample(tmp_path / "m.jsonl", n=30, seed=6))
    cfg = dict(num_proc=1, cache=False, chat_template="trl:qwen3_training")
    ok = load_tokenized(path, TokenizeConfig(**cfg), progress=False)
    assert ok.backend["name"] == "fastokens" and ok.backend["renderer"] == "compiled"
    assert ok.backend["check"] == {"examples": 30, "identical": True}
    real = Compiled.render

    def wrong(self, *a, **k):
        text, spans = real(self, *a, **k)
        return text + " ", spans

    monkeypatch.setattr(Compiled, "render", wrong)
    td = load_tokenized(path, TokenizeConfig(**cfg), progress=False)
    why = (
        f"the fast path (fastokens, compiled renderer) differs from tokenizers + jinja on {path}:1"
    )
    assert td.backend == {"name": "hf", "requested": "auto", "renderer": "jinja", "reason": why}
    assert f"tokenizer backend hf: {why}" in td.warnings
    assert td.table.to_pydict() == ok.table.to_pydict()
    with pytest.raises(
        PacktoolError, match="--tokenizer-backend fastokens: the fast path .*differs"
    ):
        load_tokenized(path, TokenizeConfig(**cfg, tokenizer_backend="fastokens"), progress=False)


def test_spans_of_marked_text():
    o, c = compiled.OPEN, compiled.CLOSE
    assert compiled.spans_of(f"ab{o}cd{c}e{o}{c}") == ("abcde", [(2, 4), (5, 5)])
    assert compiled.spans_of("plain") == ("plain", [])
    for bad in (f"a{o}b", f"a{c}b", f"{o}a{o}b{c}{c}", f"{o}a{c}{c}"):
        with pytest.raises(NotCompiled):
            compiled.spans_of(bad)


def test_spans_of_against_an_oracle():
    """Every string of a, b and the marks up to length 7: the blocks of a well-formed text (marks
    alternating, opening first), else NotCompiled."""
    import itertools

    o, c = compiled.OPEN, compiled.CLOSE
    for size in range(8):
        for chars in itertools.product(["a", "b", o, c], repeat=size):
            marked = "".join(chars)
            marks = [ch for ch in marked if ch in (o, c)]
            if marks != [o, c] * (len(marks) // 2):
                with pytest.raises(NotCompiled):
                    compiled.spans_of(marked)
                continue
            text = marked.replace(o, "").replace(c, "")
            at, spans = 0, []
            for ch in marked:
                if ch == o:
                    spans.append([at])
                elif ch == c:
                    spans[-1].append(at)
                else:
                    at += 1
            assert compiled.spans_of(marked) == (text, [tuple(x) for x in spans]), marked


def _walked(messages, tools):
    return [alias(m) for m in messages] if compiled.plain((messages, tools)) else None


def _outcome(fn, messages, tools):
    try:
        got = fn(messages, tools)
    except AttributeError:  # (a message that is no dict, aliased)
        return "AttributeError"
    return got, [list(m) for m in got or ()]  # (the keys' order too)


def test_plain_finds_what_the_engines_print_otherwise():
    """plain() walks keys, values, lists and tuples at any depth: a reserved character or a float
    MiniJinja prints otherwise anywhere makes the data not plain; everything else is."""
    o, c = compiled.OPEN, compiled.CLOSE

    class Text(str):  # a str subclass is written as its value, as a string is
        pass

    odd = [
        f"a{o}",
        {"k": [1, {"deep": (2, f"{c}")}]},
        {f"key{o}": 1},
        [{"args": {"x": 0.1 + 0.2}}],
        ({"y": 1e-7},),
        [float("nan")],
        {"z": [float("inf")]},
        1e16,
        "a\x1c",
        {"k": ["\x1f"]},
    ]
    alike = ["é", 0.5, 3, True, None, {"a": [1.75, "b", {"c": (0.0, -2.5)}]}, [], {}, Text("x")]
    assert [compiled.plain(v) for v in odd] == [False] * len(odd)
    assert [compiled.plain(v) for v in alike] == [True] * len(alike)
    assert compiled.plain((PLAIN[0], None)) and not compiled.plain((ODD[0], None))
    # prepared (the check and the aliasing in one pass) == each message aliased when plain, else None
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
    for v in [*odd, *alike]:
        for where in ("value", "key", "tools", "reasoning", "message"):
            given, tools = [dict(m) for m in msgs], None
            if where == "value":
                given[1]["extra"] = v
            elif where == "key" and isinstance(v, str | float | int):
                given[1][v] = "x"
            elif where == "tools":
                tools = [{"function": {"name": "f", "x": v}}]
            elif where == "reasoning":
                given[1]["reasoning"] = v
            elif where == "message":
                given.append(v)
            want = _outcome(_walked, given, tools)
            assert _outcome(compiled.prepared, given, tools) == want, (where, v)
