"""Say what was read and how, before a command's own report (stderr, rich markup):

    format: messages — every record has a messages list
    tokenizer: Qwen/Qwen3-0.6B (built-in)
    chat template: NAME (ORIGIN) — why; labels from generation markers; end of turn <|im_end|>; ...
    examples: 600 read, 598 tokenized, 2 skipped, tokenizer backend fastokens (from cache)
    warning: ...
"""

from __future__ import annotations


def template_line(tok: dict) -> str:
    """`chat template: NAME (ORIGIN) — why; labels: mode; end of turn: ...; date: ...` in one line."""
    mode = {"markers": "generation markers", "prefix": "render diffs, every assistant turn",
            "last": "render diffs, last assistant turn", "all": "every token"}.get(tok.get("chat_template_mode"), "")
    parts = [f"chat template: {tok['chat_template']}" + (f" ({tok['chat_template_origin']})"
                                                          if tok.get("chat_template_origin") else "")
             + (f" — {tok['chat_template_why']}" if tok.get("chat_template_why") else "")]
    if mode:
        parts.append(f"labels from {mode}")
    if tok.get("end_of_turn"):
        parts.append(f"end of turn {tok['end_of_turn']}")
    if tok.get("template_date"):
        parts.append(f"date fixed to {tok['template_date']} (--template-date)")
    return "; ".join(parts)


def announce(td, con, warnings: bool = True) -> None:
    """Say what was read and how: format and why, tokenizer and template, cache, warnings, skips."""
    tok = td.tokenizer or {}
    con.print(f"format: [cyan]{td.format}[/] — {td.format_reason}")
    if tok.get("name"):
        con.print(f"tokenizer: {tok['name']}")
        if tok.get("chat_template"):
            con.print(template_line(tok))
    backend = (td.backend or {}).get("name")
    con.print(f"examples: {td.num_read} read, {len(td)} tokenized, {len(td.skipped)} skipped"
              + (f", tokenizer backend {backend}" if backend else "") + (" (from cache)" if td.cache_hit else ""))
    for w in td.warnings if warnings else ():
        con.print(f"[yellow]warning:[/] {w}")
