"""Render a VerifyResult: a rich table of checks on stderr, and the JSON report.

JSON top-level keys (schema "packtool.verify/v1"): schema, path, passed, self_test, failed (names),
kernels (what computed attention in the isolation checks that ran, with their models; empty
when none ran), kernel_calls ({backend: {model: {varlen_calls, varlen_tokens, dense_calls,
forwards, attention_layers}}}: counted, not inferred), timings_s, config, checks [{name, status
(pass|fail|skip|not_checked), passed, message, evidence}], status (passed | failed | not checked),
not_checked (names: checks asked for that could not be run, exit code 3). The "FlashAttention kernel" check's evidence holds
the totals, the expected call count, the trial call and any `auto` fallback notes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

SCHEMA = "packtool.verify/v1"
STATUS = {
    "pass": "[green]PASS[/]",
    "fail": "[bold red]FAIL[/]",
    "skip": "[yellow]SKIP[/]",
    "not_checked": "[bold yellow]NOT CHECKED[/]",
}


def verify_json(result) -> dict[str, Any]:
    return {"schema": SCHEMA, **result.to_dict()}


def _num(v) -> str:
    if isinstance(v, float):
        return "0" if v == 0 else f"{v:.3g}"
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:,}"
    return str(v)


def evidence_text(ev: dict[str, Any]) -> str:
    """The context of a check in a few words (the numbers themselves are in the message)."""
    parts = []
    if "dtype" in ev:
        parts.append(
            f"{ev['dtype']} {ev.get('device', '?')}, {ev.get('rows_tested', '?')} rows, "
            f"{ev.get('documents', '?')} docs, {ev.get('seconds', '?')} s"
        )
    calls = ev.get("kernel_calls")
    if calls and (calls.get("varlen_calls") or calls.get("dense_calls")):
        parts.append(
            f"{_num(calls['varlen_calls'])} varlen / {_num(calls['dense_calls'])} dense calls"
        )
    if ev.get("rows_failed"):
        parts.append(f"{_num(ev['rows_failed'])} rows failed")
    if "sha256_checked" in ev:
        parts.append(
            f"{ev['shards']} shards, {_num(ev['rows'])} rows, {ev['sha256_checked']} sha256"
        )
    if "unique" in ev:
        parts.append(f"{_num(ev['documents'])} docs, {_num(ev['unique'])} sources")
    return "; ".join(parts)


def _rate(per_s: float) -> str:
    return f"{per_s / 1e6:.1f}M/s" if per_s >= 1e5 else f"{per_s / 1e3:.1f}k/s"


def render_verify(result, console, verbosity: int = 1) -> None:
    """verbosity 1 (default): a short summary when every check passes, the whole table when one
    fails; 2 (-v): the whole table always; 0 (-q, for CI): the last line, and each failure in full."""
    from rich.table import Table

    full = verbosity >= 2 or (verbosity == 1 and not result.passed)
    if full:
        title = "verify --self-test" if result.self_test else f"verify {result.path}"
        table = Table(title=title, title_justify="left", show_lines=False)
        table.add_column("", no_wrap=True)
        table.add_column("check", style="bold")
        table.add_column("result")
        table.add_column("evidence", style="dim")
        for c in result.checks:
            table.add_row(STATUS[c.status], c.name, c.message, evidence_text(c.evidence))
        console.print(table)
    elif verbosity == 1:
        groups = Counter(
            c.name.split(" ")[0]
            if c.name.startswith(("isolation", "sources", "model"))
            else "integrity"
            for c in result.checks
            if not c.skipped
        )
        console.print(
            "checks passed: "
            + ", ".join(f"{k} {n}" for k, n in groups.items())
            + " (-v lists every check)",
            soft_wrap=True,
        )
        for c in result.checks:
            if c.skipped and c.name != "FlashAttention kernel":
                console.print(f"[yellow]SKIP[/] {c.name}: {c.message}", soft_wrap=True)
    if verbosity >= 1:
        _kernel_lines(result, console)
    for c in result.failed:
        console.print(f"[bold red]FAIL[/] {c.name}: {c.message}", soft_wrap=True)
    for c in result.not_checked:
        console.print(f"[bold yellow]NOT CHECKED[/] {c.name}: {c.message}", soft_wrap=True)
    if verbosity == 0:
        _last_line(result, console)
        return
    t = result.timings
    scanned = next((c.evidence for c in result.checks if "rows_scanned" in c.evidence), None)
    if "integrity" in t:
        line = f"timing  integrity {t['integrity']:.2f} s"
        if scanned:
            line += (
                f" over every row: {scanned['rows_scanned']:,} rows, {scanned['tokens_scanned']:,} token slots "
                f"({_rate(t.get('integrity_tokens_per_s', 0))})"
            )
        if "isolation" in t:
            line += f", isolation {t['isolation']:.2f} s"
        console.print(line, soft_wrap=True)
    _last_line(result, console)


def _kernel_lines(result, console) -> None:
    """What ran, as plain unwrapped lines (grep-able CI logs); with --model, the input matrix."""
    for k in result.kernels:
        console.print(f"kernel  {k}", soft_wrap=True)
    if result.model:
        from packtool.verify.messages import cells

        for name, words in cells(result.model).items():
            console.print(f"inputs  {name:<13} {words}", soft_wrap=True)
    for c in result.checks:
        if c.name == "FlashAttention kernel":
            if c.skipped:
                console.print(f"kernel  {c.message}", soft_wrap=True)
                continue
            if c.evidence.get("fallback"):
                console.print(
                    f"kernel  auto passed over: {'; '.join(c.evidence['fallback'])}", soft_wrap=True
                )
            if c.evidence.get("trial"):
                console.print(
                    f"kernel  {c.evidence['backend']}: {c.evidence['trial']}", soft_wrap=True
                )


def _last_line(result, console) -> None:
    skipped = sum(c.skipped for c in result.checks)
    if result.passed:
        console.print(
            f"[bold green]verify passed[/]: {len(result.checks) - skipped} checks"
            + (f", {skipped} skipped" if skipped else "")
        )
    elif result.failed:
        names = ", ".join(c.name for c in result.failed)
        console.print(
            f"[bold red]verify failed[/]: {len(result.failed)} of {len(result.checks)} checks ({names})",
            soft_wrap=True,
        )
    else:  # nothing failed, but what was asked was not checked: never a pass (exit code 3)
        names = ", ".join(c.name for c in result.not_checked)
        console.print(
            f"[bold yellow]verify not checked[/]: {len(result.not_checked)} of "
            f"{len(result.checks)} checks could not be run ({names}); nothing failed",
            soft_wrap=True,
        )
