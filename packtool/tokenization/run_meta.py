"""A finished run's meta: what TokenizedData (and the cache entry) carries besides the tokens.

    Tally           what the steps' results add up to: removed padding, and the source indices
                    (reading order) of examples without loss, with control tokens in text, with
                    label notes; `add(StepResult)` per batch (local), or filled from the parts (Ray)
    run_meta(source, cfg, plan, decisions, tally, backend) -> meta dict, as a cache entry stores it:
        format, format_reason, formats {file: [format, why, records]}, tokenizer (+ label_audit,
        special_in_content), backend (BackendReport.to_dict), warnings, sources, options,
        num_read, skipped
    meta_fields(meta) -> the TokenizedData fields of it

The local pool and the Ray engine both end here, so both say the same.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from packtool.config import TokenizeConfig
from packtool.data.arrow import arrow_numpy
from packtool.data.provenance import FileFormat, SkippedRecord, SourceFile, where
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError
from packtool.tokenization.decide import formats_table, input_format
from packtool.tokenization.label_audit import audit_warnings, label_audit, strict_problem
from packtool.tokenization.run_plan import BackendReport, RunPlan

MAX_LISTED = 20  # source indices quoted in a warning


@dataclass
class Tally:
    removed: int = 0
    zero_loss: list[int] = field(default_factory=list)
    special: list[int] = field(default_factory=list)
    notes: list[tuple[int, dict]] = field(default_factory=list)

    def add(self, result) -> None:
        """One batch's StepResult, in reading order."""
        self.removed += result.removed_padding
        self.special += result.special
        self.notes += result.notes
        loss = arrow_numpy(result.table.column("num_loss_tokens"))
        if not loss.all():
            self.zero_loss += arrow_numpy(result.table.column("source_index"))[loss == 0].tolist()


def no_examples(data: str, source) -> PacktoolError:
    """Nothing left to tokenize: says why with the first skipped record's reason, when one was."""
    why = ""
    if source.skipped:
        first = source.skipped[0]
        at = first.record if first.record is not None else first.source_index
        why = f"; the first skipped, {where(first.file, first.line, at)}: {first.reason}"
    return PacktoolError(
        f"{data}: no usable examples ({source.num_read} records read, "
        f"{len(source.skipped)} skipped{why})"
    )


def run_meta(
    source, cfg: TokenizeConfig, plan: RunPlan, decisions, tally: Tally, backend: BackendReport
) -> dict:
    """The meta of a finished run (module docstring): the warnings about examples without loss and
    control tokens in text, the tokenizer with its label audit and special_in_content count."""
    per_file, kind = source.per_file, plan.kind
    tokenizer = plan.tokenizer
    warnings = list(plan.warnings)
    audit, idx = label_audit(tally.notes, tally.zero_loss, lambda i: _where([i], per_file)[0])
    if audit:  # manifest tokenizer.label_audit, only when found: clean packs keep their bytes
        tokenizer = {**tokenizer, "label_audit": audit}
    warnings += audit_warnings(
        audit, idx, tokenizer.get("chat_template"), lambda x: _quote(x, per_file)
    )
    if tally.zero_loss:
        what = (
            "pre-tokenized example(s) have no loss token"
            if kind == "pretokenized"
            else "example(s) have no loss token (no assistant turn, or every assistant weight 0)"
        )
        warnings.append(
            f"{len(tally.zero_loss)} {what}: source indices {_quote(tally.zero_loss, per_file)}"
        )
    if kind == "chat":
        special = tally.special
        tokenizer = {
            **tokenizer,
            "special_in_content": {"mode": cfg.special_in_content, "examples": len(special)},
        }
        if special:
            how = {
                "keep": "kept as control tokens, as apply_chat_template does (--special-in-content "
                "split reads them as text, error refuses them)",
                "split": "tokenized as plain text (--special-in-content split)",
            }[cfg.special_in_content]
            warnings.append(
                f"{len(special)} example(s) hold control tokens in message text, {how}: source "
                f"indices {_quote(special, per_file)}"
            )
    if tally.removed:
        warnings.append(f"removed {tally.removed} padding token(s) marked 0 in attention_mask")
    if kind == "pretokenized":
        fmt, reason = plan.pretokenized
        formats = {f: FileFormat(fmt, reason, n) for f, n in per_file.items()}
        looks: dict[str, str] = {}
    else:
        fmt, reason = input_format(decisions, per_file, cfg.read)
        formats = formats_table(decisions, per_file)
        looks = {d.file: d.looks for d in decisions if d.looks is not None}
    said = [source.not_read_warning(), source.skip_warning(formats, cfg.read.format, looks)]
    warnings[:0] = [w for w in said if w]
    if backend.reason and backend.requested == "auto" and kind == "chat":
        which = "hf" if backend.name == "hf" else f"{backend.name}, {backend.renderer} renderer"
        warnings.append(f"tokenizer backend {which}: {backend.reason}")
    options = cfg.fingerprint_dict()  # everything that shapes ids and labels (verify --sources)
    if kind == "pretokenized":
        options.update(labels_from=plan.label_source, train_on=None, chat_template=None)
    return {
        "format": fmt,
        "format_reason": reason,
        "formats": {f: list(x) for f, x in formats.items()},
        "tokenizer": tokenizer,
        "backend": backend.to_dict(),
        "warnings": warnings,
        "sources": [s.__dict__ for s in source.files],
        "options": options,
        "num_read": source.num_read,
        "skipped": [s.to_json() for s in source.skipped],
        **(
            {"not_read": [{"path": p, "why": w} for p, w in source.not_read]}
            if source.not_read
            else {}
        ),
    }


def meta_fields(meta: dict) -> dict:
    """The TokenizedData fields of a run's meta (as a cache entry stores it: JSON)."""
    return {
        "num_read": meta["num_read"],
        "skipped": [SkippedRecord(**s) for s in meta["skipped"]],
        "format": meta["format"],
        "format_reason": meta["format_reason"],
        "formats": {f: FileFormat(*x) for f, x in (meta.get("formats") or {}).items()},
        "tokenizer": meta["tokenizer"],
        "sources": [SourceFile(**s) for s in meta["sources"]],
        "options": meta["options"],
        "warnings": list(meta["warnings"]),
        "backend": meta.get("backend", {}),
        "not_read": list(meta.get("not_read") or []),
    }


def check_strict_labels(td: TokenizedData, cfg: TokenizeConfig) -> TokenizedData:
    """--strict-labels: a run whose audit (tokenizer.label_audit) found anything is refused."""
    problem = strict_problem((td.tokenizer or {}).get("label_audit")) if cfg.strict_labels else None
    if problem:
        raise PacktoolError(problem)
    return td


def _quote(indices, per_file: dict[str, int]) -> str:
    """'3, 7, 12, … (40 more)'; with two or more files read ({file: records} in reading order),
    each index also named within its own file: '3 (a.jsonl record 3), 7 (b.json record 1)'."""
    idx = list(indices)
    head = idx[:MAX_LISTED]
    shown = map(str, head)
    if len(per_file) > 1:
        shown = (f"{i} ({w})" for i, w in zip(head, _where(head, per_file), strict=True))
    more = f", … ({len(idx) - MAX_LISTED} more)" if len(idx) > MAX_LISTED else ""
    return ", ".join(shown) + more


def _where(idx: list[int], per_file: dict[str, int]) -> list[str]:
    """'b.json record 1' for each source index (the file named even when it is the only one): the
    files' records lie end to end in reading order."""
    import numpy as np

    from packtool.data.provenance import short_names

    if not per_file:
        return [f"the input record {i}" for i in idx]
    names = short_names(per_file)
    files = list(per_file)
    ends = np.cumsum([per_file[f] for f in files])
    out = []
    for i in idx:
        k = min(int(np.searchsorted(ends, i, side="right")), len(files) - 1)
        out.append(f"{names[files[k]]} record {i - (int(ends[k - 1]) if k else 0)}")
    return out
