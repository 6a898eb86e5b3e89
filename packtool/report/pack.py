"""Render a PackResult or an ExportResult: a rich summary on stderr, and the JSON report.

pack's JSON top-level keys (schema "packtool.pack/v1"): schema, out, manifest (manifest.json as
written), rows_over_lower_bound, warnings ([{code, message, count, items}], see
packtool.schema.manifest), timings (seconds; never in manifest.json, which stays byte-identical).

export's (schema "packtool.export/v1"): schema, format, pack, out, files (role → path), bytes
(role → size), record (export.json as written: counts, metadata, settings), warnings, timings
(seconds; never in export.json).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from packtool.export.publish import ExportResult
    from packtool.pack import PackResult
from packtool.report.format import plural, size
from packtool.schema.manifest import DROPPED, TRUNCATED

SCHEMA = "packtool.pack/v1"
EXPORT_SCHEMA = "packtool.export/v1"
LISTED = 5  # source indices quoted per category in the terminal


def pack_json(result: PackResult) -> dict[str, Any]:
    m = result.manifest
    lb = m["lower_bound_rows"]
    return {
        "schema": SCHEMA,
        "out": result.out,
        "manifest": m,
        "rows_over_lower_bound": round(m["counts"]["rows"] / lb, 6) if lb else None,
        "warnings": [w.to_json() for w in result.warnings],
        "timings": {k: round(v, 3) for k, v in result.seconds.items()},
        **({"engine": result.engine} if result.engine else {}),
    }


def _bar(fraction: float, width: int = 24) -> str:
    full = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * full + "·" * (width - full)


def _quote(items: list[dict], key: str = "source_index") -> str:
    head = ", ".join(str(x[key]) for x in items[:LISTED])
    return head + (f", … ({len(items) - LISTED} more)" if len(items) > LISTED else "")


def render_pack(result: PackResult, console) -> None:
    from rich.table import Table

    m = result.manifest
    c, t = m["counts"], m["tokens"]
    L = m["pack_len"]
    rows, lb = c["rows"], m["lower_bound_rows"]
    table = Table(title=f"packed → {result.out}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row(
        "rows",
        f"{rows:,} × {L} tokens  ({m['strategy']}, order {m['order']}"
        + (f", max {m['max_docs']} docs/row" if m["max_docs"] else "")
        + ")",
    )
    doc_pad = t.get("doc_pad") or 0
    used = f"({t['out']:,} + {doc_pad:,} doc pad)" if doc_pad else f"{t['out']:,}"
    table.add_row(
        "lower bound",
        f"{lb:,} rows = ceil({used} / {L});  rows / bound = {rows / lb:.5f}" if lb else "0",
    )
    table.add_row("fill", f"{m['fill']:.2%}  {_bar(m['fill'])}  pad {t['pad']:,} slots")
    n, fixed = m.get("pad_to_multiple", 1), m.get("fixed_docs", False)
    if n > 1 or fixed:
        parts = []
        if n > 1:
            share = doc_pad / (rows * L) if rows else 0.0
            parts.append(
                f"documents padded to multiples of {n}: {doc_pad:,} pad slots inside documents "
                f"({share:.2%} of the slots; seq_lengths padded, seq_lengths_unpadded real)"
            )
        if fixed:
            parts.append(
                f"fixed docs: {m['max_docs']} entries per row, cu_seqlens {m['max_docs'] + 1} segments a row"
            )
        table.add_row("layout", ";  ".join(parts))
    dpr = m["docs_per_row"]
    table.add_row("docs per row", f"min {dpr['min']}  mean {dpr['mean']:.2f}  max {dpr['max']}")
    hist = dpr["histogram"]
    peak = max(hist.values()) if hist else 1
    shown = sorted(hist.items(), key=lambda kv: int(kv[0]))
    if len(shown) > 12:
        shown = shown[:11] + [(f">{shown[10][0]}", sum(v for _, v in shown[11:]))]
    for k, v in shown:
        table.add_row("", f"{k:>4} {_bar(v / peak, 20)} {v:,}")
    inputs = m.get("inputs") or []
    pairs = m.get("task") == "preference"
    if inputs:  # a mixture: the global counts are of the weighted stream, each input's own below
        records = sum(int(x["counts"]["read"]) for x in inputs)
        table.add_row(
            "examples",
            f"{records:,} records read from {len(inputs)} inputs, {c['skipped']:,} skipped, "
            f"{c['tokenized']:,} examples after weights",
        )
    else:  # a preference pack's example is a pair: two documents, one row
        table.add_row(
            "pairs" if pairs else "examples",
            f"{c['examples_read']:,} read, {c['skipped']:,} skipped, {c['tokenized']:,} tokenized",
        )
    if pairs:
        table.add_row(
            "",
            f"{c['packed']:,} packed whole, {c['truncated']:,} truncated, {c['dropped']:,} "
            f"dropped → {c['documents']:,} documents (chosen, rejected side by side in a row)",
        )
    else:
        table.add_row(
            "",
            f"{c['packed']:,} packed whole, {c['truncated']:,} truncated, {c['split']:,} split "
            f"({c['split_parts']:,} parts), {c['dropped']:,} dropped → {c['documents']:,} documents",
        )
    table.add_row("tokens", f"{t['in']:,} in = {t['out']:,} packed + {t['cut']:,} cut")
    table.add_row(
        "loss tokens",
        f"{t['loss_in']:,} in → {t['loss_out']:,} trained "
        f"({t['loss_first_token']:,} masked at document starts, {t['loss_cut']:,} cut)",
    )
    total_bytes = sum(s.get("bytes", 0) for s in m["shards"])
    table.add_row(
        "shards",
        f"{len(m['shards'])} × ≤{m['shard_rows']:,} rows, {total_bytes / 2**20:,.1f} MiB, "
        f"pad id {m['pad_id']} ({m['pad_id_from']})",
    )
    for x in inputs:
        k = x["counts"]
        table.add_row(
            f"input {x['input']}",
            f"{x['spec']}: {k['read']:,} read, {k['skipped']:,} skipped, weight {x['weight']:g} → "
            f"{k['examples']:,} examples: {k['packed']:,} packed whole, {k['truncated']:,} "
            f"truncated, {k['split']:,} split, {k['dropped']:,} dropped",
        )
    secs = result.seconds
    table.add_row(
        "time", f"{secs['total']:.2f} s (plan {secs['plan']:.2f} s, write {secs['write']:.2f} s)"
    )
    e = result.engine
    if e:
        table.add_row(
            "engine",
            f"ray: {plural(e['workers'], 'worker')}, {plural(e['parts'], 'part')} read, "
            f"{plural(e['shards'], 'shard')} written; "
            f"peak RSS of one worker {e['worker_vmhwm'] / 2**20:,.0f} MiB "
            f"(anonymous {e['worker_rss_anon'] / 2**20:,.0f} MiB)",
        )
    console.print(table)
    unit, keeps = ("pair(s)", "truncate") if pairs else ("example(s)", "truncate|split")
    if m["truncated"]:
        console.print(
            f"[bold yellow]warning: truncated {c['truncated']:,} {unit} to {L} tokens, cutting "
            f"{sum(x['cut'] for x in m['truncated']):,} tokens: {_quote(m['truncated'])}[/]"
        )
    if m["split"]:
        console.print(
            f"[yellow]split {c['split']:,} example(s) into {c['split_parts']:,} parts "
            f"(each part its own document): {_quote(m['split'])}[/]"
        )
    if m["dropped"]:
        console.print(
            f"[yellow]dropped {c['dropped']:,} {unit}: {_quote(m['dropped'])} "
            f"(see 'dropped' in manifest.json; --overflow {keeps} keeps long ones)[/]"
        )
    for w in result.warnings:
        if w.code not in (TRUNCATED, DROPPED):  # drawn above from the manifest
            console.print(f"[yellow]warning: {w.message}[/]")


def export_json(result: ExportResult) -> dict[str, Any]:
    return {
        "schema": EXPORT_SCHEMA,
        "format": result.format,
        "pack": result.pack,
        "out": result.out,
        "files": result.files,
        "bytes": result.bytes,
        "record": result.record,
        "warnings": [w.to_json() for w in result.warnings],
        "timings": result.seconds,
    }


def render_export(result: ExportResult, console) -> None:
    from rich.table import Table

    r = result.record
    meta = r["metadata"]
    table = Table(
        title=f"exported {result.pack} → {result.out} ({result.format})",
        show_header=False,
        title_justify="left",
    )
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("data", f"{result.files['data']}  ({size(result.bytes['data'])})")
    table.add_row("metadata", result.files["metadata"])
    skipped = r["rows_without_documents"]
    table.add_row(
        "rows",
        f"{r['rows']:,}  (packed_sequence_size {r['pack_len']})"
        + (f"  ({skipped:,} rows without documents left out)" if skipped else ""),
    )
    table.add_row(
        "documents",
        f"{r['documents']:,}, at most {meta['max_samples_per_bin']} per row"
        + (
            f"  ({r['empty_documents_skipped']:,} empty entries skipped)"
            if r["empty_documents_skipped"]
            else ""
        ),
    )
    table.add_row(
        "tokens",
        f"{r['tokens']:,} stored, {r['loss_tokens']:,} in loss_mask (= manifest tokens.out, "
        "tokens.loss_out)",
    )
    if r["padded_documents"]:
        table.add_row("padding", f"{r['pad_slots_dropped']:,} pad slots dropped: {r['padding']}")
    console.print(table)
    for w in result.warnings:
        console.print(f"[yellow]warning:[/] {w.message}")
    s = r["settings"]
    data, meta_path = (os.path.abspath(result.files[k]) for k in ("data", "metadata"))
    console.print(
        "Megatron-Bridge: offline_packing_specs=PackedSequenceSpecs("
        f"packed_sequence_size={s['packed_sequence_size']}, "
        f"packed_train_data_path='{data}', packed_metadata_path='{meta_path}'); NeMo 2: the same three fields in "
        "packed_sequence_specs; micro batch size 1",
        soft_wrap=True,
        highlight=False,
    )
