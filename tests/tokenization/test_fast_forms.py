"""Checks rewritten for speed against their old forms, kept here verbatim as oracles: the same
output on random inputs built from the pieces each check looks at.

    Renderer._trim_prompt   generation blocks less the prompt at their start and the whitespace
                            after an end-of-turn token (old: every head tried, _turn_end called)
    label_notes             the notes of a trained turn (old: locate() for every turn's text)
"""

from __future__ import annotations

import random

import pytest

from packtool.tokenization.chat_template import make_template
from packtool.tokenization.label_audit import _EMPTY_BLOCK, label_notes
from packtool.tokenization.render import Renderer, appears, locate

TEMPLATE = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"


class _Spec:
    special_tokens = {"bos_token": "<s>", "eos_token": "<|eot|>"}
    eos_token = "<|eot|>"
    all_special_tokens = ["<s>", "<|eot|>", "<|start|>", "<|A|>"]
    control_tokens = {"<s>": 0, "<|eot|>": 1, "<|start|>": 2, "<|A|>": 3}


def _old_trim_prompt(r: Renderer, text: str, spans) -> list[tuple[int, int]]:
    """Renderer._trim_prompt before its fast path (with its _prompt_at)."""
    g = r.generation_prompt()
    heads = [g] + [g[:k] for k in range(len(g) - 1, 0, -1) if g[:k].endswith(r._end_tokens)]
    heads = heads if g else []

    def prompt_at(a, b):
        for head in heads:
            if len(head) <= b - a and text.startswith(head, a):
                return len(head)
        return 0

    out: list[tuple[int, int]] = []
    eos = r.spec.eos_token
    for a, b in spans:
        if out and eos is not None and b - a == len(eos) and text.startswith(eos, a):
            if not text[out[-1][1] : a].strip():
                out[-1] = (out[-1][0], b)
                continue
        a += prompt_at(a, b)
        out.append((a, r._turn_end(text, a, b)))
    return out


@pytest.mark.parametrize(
    "prompt",
    ["<|start|>assistant", "<|A|><think>\n", "<|start|><|A|>\n", "assistant:", "<|eot|>", ""],
)
def test_trim_prompt_equals_its_old_form(prompt):
    r = Renderer(_Spec(), make_template(TEMPLATE, "t", "test"), "assistant", "jinja")
    r._gen_prompt = prompt  # (what generation_prompt() found for the template)
    pieces = [prompt, prompt[:3], "<|start|>", "<|A|>", "<|eot|>", "\n", " ", "x", "yz", "<"]
    rng = random.Random(len(prompt))
    for _ in range(3000):
        text = "".join(rng.choices(pieces, k=rng.randint(0, 12)))
        cuts = sorted(rng.choices(range(len(text) + 1), k=2 * rng.randint(0, 3)))
        spans = list(zip(cuts[::2], cuts[1::2], strict=True))
        if rng.random() < 0.3 and spans:  # an EOS-only block after a turn (Phi-3's)
            spans.append((len(text), len(text) + len("<|eot|>")))
            text += "<|eot|>"
        assert r._trim_prompt(text, spans) == _old_trim_prompt(r, text, spans), (text, spans)


def _old_label_notes(messages, text, paired, count, native=False, omits_think=False):
    """label_notes before its fast path."""
    notes: dict[str, list[int]] = {}

    def add(kind, tokens):
        t = notes.setdefault(kind, [0, 0])
        t[0] += 1
        t[1] += tokens

    if not native:
        for m in messages:
            r = m.get("reasoning_content")
            if m["role"] == "assistant" and isinstance(r, str) and r.strip():
                if not appears(r, text):
                    add("dropped_reasoning", 0)
    for i, (a, b) in paired or ():
        if a >= b:
            continue
        m = messages[i]
        content = m.get("content") if isinstance(m.get("content"), str) else ""
        reasoning = m.get("reasoning_content")
        if m.get("tool_calls") or (isinstance(reasoning, str) and reasoning.strip()):
            continue
        c = content.strip()
        if not c:
            add("empty_turns", count(text[a:b]))
            rest = text[a:b]
        else:
            at = locate(text, c, a, b)
            if at < 0:
                continue
            e = at + len(c)
            if (
                text.find("</", a, at) < 0
                and text.find("</", e, b) < 0
                and not (a < at and e < b and text[at - 1] == "<" and text[e] == "/")
            ):
                rest = ""
            else:
                rest = text[a:at] + text[e:b]
        if "</" in rest:
            for block in _EMPTY_BLOCK.finditer(rest):
                add("template_inserted", count(block.group(0)))
        if omits_think and "<think>" not in content:
            add("think_omitted", 0)
    return notes


def test_label_notes_equals_its_old_form():
    rng = random.Random(0)
    pieces = ["<think>", "</think>", "<", "/", "\n", " ", "x", "A", "</", "<|eot|>", "<think>\n\n"]
    contents = ["A", " A\n", "Ax", "/A", "A<", "", "  ", None, 3, "<think>A"]
    for _ in range(5000):
        messages, paired, text = [], [], ""
        for i in range(rng.randint(1, 4)):
            m = {"role": rng.choice(["user", "assistant", "assistant"])}
            c = rng.choice(contents)
            if c is not None:
                m["content"] = c
            if rng.random() < 0.15:
                m["reasoning_content"] = rng.choice(["r", " ", "A", 5])
            if rng.random() < 0.1:
                m["tool_calls"] = rng.choice([[], [{"name": "f"}]])
            before = "".join(rng.choices(pieces, k=rng.randint(0, 3)))
            after = "".join(rng.choices(pieces, k=rng.randint(0, 3)))
            body = c.strip() if isinstance(c, str) and rng.random() < 0.7 else "B"
            a = len(text) + rng.choice([0, len(before)])
            text += before + body + after
            if m["role"] == "assistant":
                paired.append((i, (a, rng.choice([len(text), len(text) - len(after), a]))))
            messages.append(m)
        for native in (False, True):
            for omits in (False, True):
                args = (messages, text, paired, len, native, omits)
                assert label_notes(*args) == _old_label_notes(*args), args
