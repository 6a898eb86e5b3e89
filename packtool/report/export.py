"""Render an ExportResult: a rich summary on stderr, and the JSON report.

JSON top-level keys (schema "packtool.export/v1"): schema, format, pack, out, files (role → path),
bytes (role → size), record (export.json as written: counts, metadata, settings), warnings
([{code, message, count, items}]), timings (seconds; never in export.json).
"""

from __future__ import annotations

import os
from typing import Any

from packtool.export.publish import ExportResult
from packtool.report.format import size

SCHEMA = "packtool.export/v1"


def export_json(result: ExportResult) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
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
