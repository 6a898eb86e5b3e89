"""transformers' jinja renderer: the reference every other renderer gives the same text and spans as.

    render(text, kwargs, messages, tools, marks, gen_prompt) -> (text, spans | None)
        render_jinja_template (what apply_chat_template calls); spans: the character spans of the
        `{% generation %}` blocks (return_assistant_tokens_mask), when `marks`
    dated_text(template) -> the template's text, today's date fixed (every renderer renders it)

transformers is imported on first use: a run imports it while it would wait
(run_plan.plan_run, packtool.idle), inspect and a run whose renderers cover every conversation
never do.
"""

from __future__ import annotations

import json
import re

from packtool.tokenization.chat_template import ChatTemplate


def render(text: str, kwargs: dict, messages, tools, *, marks: bool, gen_prompt: bool = False):
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


def preload() -> None:
    """transformers' renderer imported now (packtool.idle: while this process would wait)."""
    from transformers.utils.chat_template_utils import render_jinja_template  # noqa: F401


def dated_text(template: ChatTemplate) -> str:
    """The template with strftime_now() fixed to `template.date` (a macro shadowing the global), so a
    template that writes today's date (gpt-oss) renders the same text on every day."""
    if not template.date:
        return template.text
    import datetime

    day = datetime.date.fromisoformat(template.date)
    formats = sorted(set(re.findall(r"strftime_now\(\s*[\"']([^\"']*)[\"']\s*\)", template.text)))
    table = json.dumps({f: day.strftime(f) for f in formats})
    return (
        "{%- macro strftime_now(fmt) -%}{{ "
        + table
        + "[fmt] if fmt in "
        + table
        + " else "
        + json.dumps(template.date)
        + " }}{%- endmacro %}"
        + template.text
    )
