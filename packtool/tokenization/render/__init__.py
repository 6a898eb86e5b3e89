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
(benchmarks/README.md, "Renderers"). What each renders must appear in its text (content.py).
"""

from __future__ import annotations

from packtool.tokenization.chat_template import BUILTIN_TEMPLATES
from packtool.tokenization.render.compiled import compile_template
from packtool.tokenization.render.content import (
    ExampleError,
    NotPrefixPreserving,
    appears,
    first_line,
    leaf_values,
    locate,
    lost_content,
)
from packtool.tokenization.render.jinja import dated_text
from packtool.tokenization.render.renderer import Renderer

__all__ = [
    "ExampleError",
    "NotPrefixPreserving",
    "Renderer",
    "appears",
    "best",
    "dated_text",
    "first_line",
    "leaf_values",
    "locate",
    "lost_content",
]


def best(template) -> tuple[str, str | None]:
    """The fast path's renderer and, when it is jinja, why: "native" for the built-in chatml-train
    template (byte for byte), else "compiled" where MiniJinja compiles the template (TRL's
    gptoss_training rendered natively in front of it: the chain), else jinja."""
    if template.text == BUILTIN_TEMPLATES["chatml-train"].read_text():
        return "native", None
    _, why = compile_template(dated_text(template), {})
    if why is not None:
        return "jinja", f"chat template '{template.name}': {why}; jinja renders it"
    return "compiled", None
