"""Say what was read and how, before a command's own report (stderr, rich markup):

format: messages — every record has a messages list
(a folder or glob whose files differ in format: one line for the input, then one per file)
format: mixed: alpaca (identity.json 91), sharegpt (a.json 300) — each file's format detected ...
  identity.json: alpaca, 91 records — has 'instruction' and 'output' (with 'input')
  a.json: sharegpt, 300 records — has 'conversations' with from/value turns
tokenizer: Qwen/Qwen3-0.6B (built-in)
chat template: NAME (ORIGIN) — why; labels from generation markers; end of turn <|im_end|>; ...
examples: 600 read, 598 tokenized, 2 skipped, tokenizer backend fastokens (from cache)
(a mixture: one line per input, before the totals of the weighted stream)
input 1 chats.jsonl: messages, 600 records, 598 tokenized, weight 1 → 598 examples
input 2 alpaca.json::weight=0.5: alpaca, 91 records, 91 tokenized, weight 0.5 → 46 examples
warning: ...

inputs_table: what each input of a mixture contributes (profile's terminal summary)
render_inspect: `packtool inspect`'s example: format, conversation, tokens with loss highlighted
  input  spec                       format    weight  examples   tokens   share
  1      chats.jsonl                messages       1       598  210,455   82.1%
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def template_line(tok: dict) -> str:
    """`chat template: NAME (ORIGIN) — why; labels: mode; end of turn: ...; date: ...` in one line."""
    mode = {
        "markers": "generation markers",
        "prefix": "render diffs, every assistant turn",
        "last": "render diffs, last assistant turn",
        "all": "every token",
    }.get(tok.get("chat_template_mode"), "")
    parts = [
        f"chat template: {tok['chat_template']}"
        + (f" ({tok['chat_template_origin']})" if tok.get("chat_template_origin") else "")
        + (f" — {tok['chat_template_why']}" if tok.get("chat_template_why") else "")
    ]
    if mode:
        parts.append(f"labels from {mode}")
    if tok.get("end_of_turn"):
        parts.append(f"end of turn {tok['end_of_turn']}")
    if tok.get("template_date"):
        parts.append(f"date fixed to {tok['template_date']} (--template-date)")
    return "; ".join(parts)


MAX_FILES = 20  # files listed one per line; the rest counted by format


def format_lines(td) -> list[str]:
    """One line per file, 'identity.json: alpaca, 91 records — why', when the files of the input
    were not all read in one format (td.format is then a 'mixed: ...' summary, or the one format
    beside files that fit none); else none."""
    if len({f.format for f in td.formats.values()}) < 2:
        return []
    names = td.file_names()
    items = list(td.formats.items())
    lines = [
        f"{names[p]}: {f.format}, {f.records:,} record{'s' if f.records != 1 else ''} — {f.reason}"
        for p, f in items[:MAX_FILES]
    ]
    if len(items) > MAX_FILES:
        rest = Counter(f.format for _, f in items[MAX_FILES:])
        lines.append(
            f"… and {len(items) - MAX_FILES} more files: "
            + ", ".join(f"{k} {fmt}" for fmt, k in sorted(rest.items()))
        )
    return lines


def announce(td, con, warnings: bool = True) -> None:
    """Say what was read and how: format and why, tokenizer and template, cache, warnings, skips."""
    from rich.markup import escape

    tok = td.tokenizer or {}
    con.print(f"format: [cyan]{escape(td.format)}[/] — {escape(td.format_reason)}")
    for line in format_lines(td):
        con.print(f"  {escape(line)}")
    if tok.get("name"):
        con.print(f"tokenizer: {tok['name']}")
        if tok.get("chat_template") and "no chat template" not in td.format_reason:
            con.print(template_line(tok))  # (prompt/completion strings: formats says what is done)
    for b in td.inputs:
        con.print(escape(input_line(b)))
    backend = (td.backend or {}).get("name")
    what, done = "examples", len(td)
    if td.task == "preference":  # a record is a pair, tokenized as two sides
        what, done = "pairs", len(td) // 2
    con.print(
        f"{what}: {td.num_read} read, {done} tokenized, {len(td.skipped)} skipped"
        + (f", tokenizer backend {backend}" if backend else "")
        + (" (from cache)" if td.cache_hit else "")
    )
    for w in td.warnings if warnings else ():
        con.print(f"[yellow]warning:[/] {w}")


def input_line(b) -> str:
    """'input 2 alpaca.json::weight=0.5: alpaca, 91 records, 91 tokenized, weight 0.5 → 46 examples'
    of a data.InputBlock."""
    skipped = f", {b.skipped:,} skipped" if b.skipped else ""
    return (
        f"input {b.number} {b.spec}: {b.format}, {b.records:,} records, {b.tokenized:,} tokenized"
        f"{skipped}, weight {b.weight:g} → {b.examples:,} examples"
    )


def inputs_table(shares: list[dict]):
    """A rich table of a mixture's inputs (TokenizedData.input_shares): what each contributes."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    t = Table(box=box.SIMPLE_HEAD, title="inputs", title_justify="left")
    t.add_column("input", justify="right")
    t.add_column("spec")
    t.add_column("format")
    for name in ("weight", "examples", "tokens", "share"):
        t.add_column(name, justify="right")
    for x in shares:
        t.add_row(
            str(x["input"]),
            escape(x.get("name") or x["spec"]),
            escape(x["format"]),
            f"{x['weight']:g}",
            f"{x['examples']:,}",
            f"{x['tokens']:,}",
            f"{x['share']:.1%}",
        )
    return t


def render_inspect(result: dict[str, Any], console) -> None:
    from rich.markup import escape
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
