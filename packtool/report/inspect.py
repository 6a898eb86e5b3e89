"""Render an inspected example: format, conversation, and the token stream with loss highlighted."""

from __future__ import annotations

from typing import Any


def render_inspect(result: dict[str, Any], console) -> None:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    # 'chat.jsonl:3 (--index 2)', 'data.json record 4', 'b.json record 1 (--index 7)' (a folder)
    if result.get("line"):
        where = f"{result['file']}:{result['line']} (--index {result['index']})"
    elif "record" in result:
        where = f"{result['file']} record {result['record']} (--index {result['index']})"
    else:
        where = f"{result['file']} record {result['index']}"
    console.print(f"[bold]{where}[/]")
    console.print(f"format: [cyan]{result['format']}[/] — {result['format_reason']}")
    tok = result.get("tokenizer") or {}
    if tok.get("name"):
        from packtool.report.tokenized import template_line

        console.print(f"tokenizer: {tok['name']}")
        plain = (result.get("example") or {}).get("kind") == "prompt_completion"
        if tok.get("chat_template") and not plain:  # strings: the format line says what is done
            console.print(template_line(tok))
        sic = tok.get("special_in_content") or {}
        if sic.get("examples"):
            console.print(
                f"[yellow]warning:[/] this example holds control tokens in message text "
                f"(--special-in-content {sic.get('mode')})"
            )
    for w in result.get("label_warnings") or ():  # what is trained that the data lacks
        console.print(f"[yellow]warning:[/] {w}")
    backend = result.get("tokenizer_backend") or {}
    if backend.get("name"):
        console.print(
            f"tokenizer backend: {backend['name']}"
            + (f" ({backend['reason']})" if backend.get("reason") else "")
        )
    ex = result.get("example")
    if ex and ex.get("messages"):
        table = Table(title="normalized conversation", show_lines=True, expand=True)
        table.add_column("#", justify="right", width=3)
        table.add_column("role", width=9)
        table.add_column("content")
        table.add_column("weight", width=6)
        for i, m in enumerate(ex["messages"]):
            content = m.get("content") or ""
            if m.get("reasoning_content"):
                content = f"[think] {m['reasoning_content']}\n{content}"
            if m.get("tool_calls"):
                content += "".join(
                    f"\n→ {c['function']['name']}({c['function'].get('arguments')})"
                    for c in m["tool_calls"]
                )
            if len(content) > 600:
                content = content[:600] + f" … ({len(content)} chars)"
            w = m.get("weight")
            table.add_row(str(i), m["role"], Text(content), "" if w is None else f"{w:g}")
        console.print(table)
        if ex.get("tools"):
            console.print(
                f"tools: {', '.join(t.get('function', t).get('name', '?') for t in ex['tools'])}"
            )
    text = Text()
    # a CI log or a pipe: colour is lost, brackets are not
    plain = not console.is_terminal or console.no_color
    for run in result["runs"]:
        if plain:
            text.append(f"[[{run['text']}]]" if run["loss"] else run["text"])
        else:
            text.append(run["text"], style="bold black on green" if run["loss"] else "dim")
    from rich.markup import escape

    legend = (
        escape("rendered tokens: [[trained]] no loss")
        if plain
        else "rendered tokens: [black on green] trained [/] [dim]no loss[/]"
    )
    console.print(Panel(text, title=legend, expand=True))
    share = result["loss_tokens"] / result["tokens"] if result["tokens"] else 0.0
    console.print(
        f"tokens: [bold]{result['tokens']}[/]   loss tokens: [bold]{result['loss_tokens']}[/] "
        f"({share:.1%})"
    )
    if result["loss_tokens"] == 0:
        console.print(
            "[yellow]warning: this example has no loss token (no assistant turn, or weights 0)[/]"
        )
