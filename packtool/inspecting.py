"""`packtool inspect`: one example, as the trainer will see it.

Record N, in its file's format (tokenization.source's rules), through the reference step of the
RunPlan a pack of its file makes (pipeline.plan_run), with the renderer of the plan's fast path
(jinja with --tokenizer-backend fastokens, whose step is then compared with it), its token stream
split into runs of trained / untrained tokens:

    runs = [{"text": "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n", "loss": False, "tokens": 9},
            {"text": "Hello!<|im_end|>", "loss": True, "tokens": 3}, ...]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from packtool.config import TokenizeConfig
from packtool.errors import PacktoolError, UsageError
from packtool.schema import IGNORE_INDEX


def _runs(tok, ids: np.ndarray, labels: np.ndarray) -> list[dict[str, Any]]:
    """Trained / untrained runs of the token stream, decoded by `tok` (a Rust tokenizer: no
    transformers import), or as ids when there is none."""
    loss = labels != IGNORE_INDEX
    if len(ids) == 0:
        return []
    cuts = np.flatnonzero(np.diff(loss.astype(np.int8))) + 1
    bounds = [0, *cuts.tolist(), len(ids)]
    runs = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        text = (
            tok.decode(ids[a:b].tolist(), skip_special_tokens=False)
            if tok is not None
            else " ".join(str(t) for t in ids[a:b])
        )
        runs.append({"text": text, "loss": bool(loss[a]), "tokens": int(b - a)})
    return runs


def inspect_example(data: str, cfg: TokenizeConfig, index: int = 0) -> dict[str, Any]:
    from packtool.formats import AUTO, FormatError
    from packtool.formats.detect import ColumnCheck
    from packtool.formats.normalize import normalize
    from packtool.io.readers import iter_records
    from packtool.tokenization.source import is_pretokenized, record_format

    if index < 0:
        raise UsageError(f"--index {index} must be >= 0")
    fmt = reason = None  # of the target's own file: each file of a folder is detected on its own
    target = None
    count = 0
    current = None
    records = iter_records(data, cfg.read)
    columns = ColumnCheck(cfg.read)
    for rec in records:
        count += 1
        columns.feed(rec.record)
        if rec.file != current:
            current, fmt, reason = rec.file, None, None
        if fmt is None and rec.record is not None and not is_pretokenized(rec.record, cfg.read):
            fmt, reason = record_format(rec.record, cfg.read) or (None, None)
        if rec.index == index:
            target = rec
            break
    if target is None:
        raise UsageError(f"--index {index} is past the end of {data} ({count} records)")
    for rec in records:  # a --column that matches no record read so far: read on until one does
        if columns.done:  # (at the end of the input the reader raises, naming the mapping)
            break
        columns.feed(rec.record)
    where = {"file": target.file, "line": target.line, "index": target.index}
    if target.position is not None and target.position != target.index:
        where["record"] = target.position  # its index within its own file (after a folder's first)
    if target.record is None:
        raise PacktoolError(f"{target.where}: {target.error}")
    if is_pretokenized(target.record, cfg.read):
        from packtool.tokenization.pretokenized import RecordError, label_source_of, record_arrays

        try:
            ids, labels, _ = record_arrays(target.record, label_source_of(target.record))
        except RecordError as e:
            raise PacktoolError(f"{target.where}: pre-tokenized record: {e}") from None
        tok_info, tok = {"name": None}, None
        # a pack's rows decode with the tokenizer that made them
        name = cfg.tokenizer or _pack_tokenizer(data)
        if name:
            from packtool.tokenization.loading import load_spec

            spec = load_spec(None if name == "builtin" else name)
            tok, tok_info = spec.engines.rust(), spec.info()
        return {
            **where,
            "format": "pretokenized",
            "format_reason": "record carries input_ids",
            "tokenizer": tok_info,
            "example": None,
            "tokens": int(len(ids)),
            "loss_tokens": int(np.count_nonzero(labels != IGNORE_INDEX)),
            "runs": _runs(tok, ids, labels),
        }

    from packtool.io.readers import RawBatch
    from packtool.tokenization.pipeline import FastCheck, compare, plan_run
    from packtool.tokenization.source import FileDecision

    try:  # fmt None: no record of its file up to it fits a format; normalizing says why (its keys)
        example = normalize(target.record, fmt or AUTO, cfg.read)
    except FormatError as e:
        raise PacktoolError(f"{target.where}: {e}") from None
    decision = FileDecision(target.file, "chat", format=fmt, why=reason, first_len=1)
    plan = plan_run(cfg, [decision])  # the plan a pack of this file makes
    spec, template = plan.step.spec, plan.template
    batch = RawBatch(target.file, records=[target.record], start=target.index, fmt=decision.fmt)
    reference = plan.reference or plan.step
    check = FastCheck.of(plan) if cfg.tokenizer_backend == "fastokens" else None
    if check is None and plan.step.renderer != "jinja":  # the run's renderer: jinja is imported
        reference = reference.with_backend("hf", plan.step.renderer)  # only for what it hands on
    cut = None
    if reference.backend == "hf":  # the same ids from a tokenizer cut to this example's words
        from packtool.tokenization.cut import CutBackend

        cut = CutBackend(spec.engines)
        reference = reference.with_backend("hf", reference.renderer, built=cut)
    res = reference(batch)  # the record as a pack encodes it: a batch of one
    if res.rejects:
        raise PacktoolError(f"{target.where}: {res.rejects[0][1]}")
    backend = plan.backend  # what a pack tries, checked on each run's first examples
    if check is not None:  # --tokenizer-backend fastokens: compared on this example too
        check.conclude(1, compare(plan.step(batch), res, batch))
        backend = check.report
    ids, labels = (_values(res.table.column(c)) for c in ("input_ids", "labels"))
    audit, label_warnings = _label_audit(target, template, res.notes, labels, cfg)
    return {
        **where,
        "format": fmt,
        "format_reason": reason,
        "tokenizer": {
            **spec.info(),
            **template.info(),
            "special_in_content": {
                "mode": cfg.special_in_content,
                "examples": int(bool(res.special)),
            },
            **({"label_audit": audit} if audit else {}),
        },
        "label_warnings": label_warnings,
        "tokenizer_backend": backend.to_dict(),
        "train_on": cfg.train_on,
        "example": example,
        "tokens": int(len(ids)),
        "loss_tokens": int(np.count_nonzero(labels != IGNORE_INDEX)),
        "input_ids": ids.tolist(),
        "labels": labels.tolist(),
        # decoded by the tokenizer that encoded it (cut to its words: tokenization.cut), or the Rust one
        "runs": _runs(spec.engines.rust() if cut is None else cut.decoder(), ids, labels),
    }


def _values(column) -> np.ndarray:
    """A list column's values as numpy (not ListArray.flatten, which imports pyarrow.compute, nor
    Array.to_numpy, which imports pandas)."""
    from packtool.data.labels import arrow_numpy

    offsets = arrow_numpy(column.offsets)
    return arrow_numpy(column.values)[offsets[0] : offsets[-1]]


def _label_audit(target, template, notes, labels, cfg) -> tuple[dict, list[str]]:
    """This example's label audit (packtool.tokenization.label_audit) of its step's `notes`, and
    its warnings; --strict-labels refuses it as a pack would."""
    from packtool.tokenization.label_audit import audit_warnings, label_audit, strict_problem

    zero = [] if np.any(labels != IGNORE_INDEX) else [target.index]
    audit, idx = label_audit(notes, zero, lambda i: target.where)
    problem = strict_problem(audit) if cfg.strict_labels else None
    if problem:
        raise PacktoolError(problem)
    return audit, audit_warnings(audit, idx, template.name, lambda x: ", ".join(map(str, x)))


def _pack_tokenizer(data: str) -> str | None:
    """The tokenizer a pack's manifest records ("builtin" for the built-in one), if `data` is a pack
    whose tokenizer can be found here."""
    import os

    from packtool import schema

    tok = (schema.read_pack_manifest(data) or {}).get("tokenizer")
    name = (tok.get("name") if isinstance(tok, dict) else None) or ""
    if "built-in" in name:
        return "builtin"
    return name if name and os.path.isdir(os.path.expanduser(name)) else None
