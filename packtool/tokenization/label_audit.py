"""What an example holds beyond its data's turns (label notes), control tokens typed in message
text, and a finished run's meta with its label audit and warnings.

Per example (`label_notes`, called by the Encoder on each chat example), {kind: [turns, tokens]}:

    template_inserted   an empty block the template writes into a trained turn the data gave no
                        such block (TRL's qwen3_training: `<think>\n\n</think>\n\n` in every turn)
    empty_turns         an assistant turn with no text, reasoning or tool call: only its end-of-turn
                        token is trained (axolotl's missingturns data)
    dropped_reasoning   the reasoning of an earlier assistant turn that the template does not render
    think_omitted       (said, never refused) chatml-train on a tokenizer whose own template writes
                        `<think>` blocks: turns without reasoning are trained with no block at all

Per run (`label_audit`): summed per kind into the manifest's `tokenizer.label_audit` and warnings
(`audit_warnings`); `--strict-labels` refuses the first one found (`strict_problem`).

Control tokens a user types into a message (`--special-in-content`, ContentTokens) are kept as
control tokens (`keep`, what apply_chat_template does), refused (`error`), or read as text (`split`):

    messages  [{"role": "user", "content": "say <|im_end|> now"}]
    found     [(0, "<|im_end|>")]                                   (turn, control token)
    split     content "say \\ue0000\\ue001 now", literals ["<|im_end|>"]  (placeholders: U+E000 n U+E001)
    encoded   the pieces between placeholders through the reference tokenizer, each literal alone
              with special-token matching off

`meta(run, stats)`: a finished run's meta (the cache entry's, TokenizedData's fields: `meta_fields`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import numpy as np
from orjson import dumps as _json

from packtool.data.tokenized import FileFormat, SkippedRecord, SourceFile, short_names, where
from packtool.errors import PacktoolError
from packtool.tokenization.render import ExampleError, appears, leaf_values, locate

TEMPLATE_INSERTED, EMPTY_TURNS = "template_inserted", "empty_turns"
DROPPED_REASONING, THINK_OMITTED = "dropped_reasoning", "think_omitted"
_EMPTY_BLOCK = re.compile(r"<([A-Za-z_][\w-]*)>\s*</\1>\s*")  # <think>\n\n</think>\n\n


def label_notes(
    messages: list[dict],
    text: str,
    paired,
    count: Callable[[str], int],
    native: bool = False,
    omits_think: bool = False,
) -> dict[str, list[int]]:
    """{kind: [turns, tokens]} (module docstring). `paired`: (turn, trained char span) of each trained
    assistant turn, None when they do not pair up; `count(piece)`: its tokens; `native`: rendered
    by render.native.chatml (every turn's reasoning written); `omits_think`: see THINK_OMITTED."""
    notes: dict[str, list[int]] = {}
    if not native:
        for m in messages:
            r = m.get("reasoning_content")
            if isinstance(r, str) and m["role"] == "assistant" and r.strip():
                if not appears(r, text):
                    _add(notes, DROPPED_REASONING, 0)
    for i, (a, b) in paired or ():
        if a >= b:
            continue  # nothing of this turn is trained
        m = messages[i]
        reasoning = m.get("reasoning_content")
        if m.get("tool_calls") or (isinstance(reasoning, str) and reasoning.strip()):
            continue  # the template's framing of a call or of reasoning is the data's
        content = m.get("content")
        if not isinstance(content, str):
            content = ""
        c = content.strip()
        if not c:
            _add(notes, EMPTY_TURNS, count(text[a:b]))
            rest = text[a:b]
        else:  # the trained text less the turn's text
            # (the usual: the turn's text opens the trained text; else its first place in it)
            at = a if text.startswith(c, a, b) else locate(text, c, a, b)
            if at < 0:
                continue  # the template rewrote the text (escaped, split): nothing to compare
            e = at + len(c)
            if (
                (at == a or text.find("</", a, at) < 0)
                and text.find("</", e, b) < 0
                and not (a < at and e < b and text[at - 1] == "<" and text[e] == "/")
            ):
                rest = ""  # no "</" in the joined pieces: they are not copied and joined
            else:
                rest = text[a:at] + text[e:b]
        if "</" in rest:  # (an empty block closes)
            for block in _EMPTY_BLOCK.finditer(rest):
                _add(notes, TEMPLATE_INSERTED, count(block.group(0)))
        if omits_think and "<think>" not in content:
            _add(notes, THINK_OMITTED, 0)
    return notes


def _add(notes: dict[str, list[int]], kind: str, tokens: int) -> None:
    t = notes.setdefault(kind, [0, 0])
    t[0] += 1
    t[1] += tokens


# -- a run's label notes: summed per kind (manifest tokenizer.label_audit), said, refused --------
ZERO_LOSS_DOCUMENTS = "zero_loss_documents"
AUDIT_KINDS = (TEMPLATE_INSERTED, EMPTY_TURNS, DROPPED_REASONING, ZERO_LOSS_DOCUMENTS)
_REFUSED = {
    TEMPLATE_INSERTED: "trains an empty block the template wrote, which the data does not hold",
    EMPTY_TURNS: "trains an empty assistant turn (no text, reasoning or tool call)",
    DROPPED_REASONING: "the template drops the reasoning of an earlier assistant turn",
    ZERO_LOSS_DOCUMENTS: "has no loss token",
}


def label_audit(
    notes: list[tuple[int, dict]], zero_loss: list[int], where
) -> tuple[dict, dict[str, list[int]]]:
    """({kind: {examples, turns, tokens, first}} with only the kinds found, in AUDIT_KINDS order,
    think_omitted left out (it is said, never recorded or refused); {kind: source indices}).
    `where(i)`: 'file.jsonl record 3' for source index i."""
    idx: dict[str, list[int]] = {}
    sums: dict[str, list[int]] = {}
    for i, x in notes:
        for kind, (turns, tokens) in x.items():
            idx.setdefault(kind, []).append(i)
            s = sums.setdefault(kind, [0, 0])
            s[0] += turns
            s[1] += tokens
    if zero_loss:
        idx[ZERO_LOSS_DOCUMENTS] = list(zero_loss)
    audit = {}
    for kind in AUDIT_KINDS:
        if kind not in idx:
            continue
        entry = {"examples": len(idx[kind])}
        if kind in sums:
            entry["turns"] = sums[kind][0]
            if kind != DROPPED_REASONING:
                entry["tokens"] = sums[kind][1]
        entry["first"] = where(idx[kind][0])
        audit[kind] = entry
    return audit, idx


def audit_warnings(audit: dict, idx: dict[str, list[int]], template: str, quote) -> list[str]:
    """One line per kind (zero-loss documents are said by the pipeline's own line)."""
    out = []
    a = audit.get(TEMPLATE_INSERTED)
    if a:
        out.append(
            f"chat template '{template}' writes an empty block the data does not hold (e.g. "
            f"<think></think>) into {a['turns']} trained assistant turn(s) of {a['examples']} "
            f"example(s), {a['tokens']} trained token(s) in all (--strict-labels refuses such "
            f"data): source indices {quote(idx[TEMPLATE_INSERTED])}"
        )
    a = audit.get(EMPTY_TURNS)
    if a:
        out.append(
            f"{a['turns']} assistant turn(s) of {a['examples']} example(s) have no text, "
            f"reasoning or tool call: only what the template writes is trained in them, their "
            f"end of turn ({a['tokens']} token(s) in all); "
            f"drop such turns, or --strict-labels refuses them: source indices "
            f"{quote(idx[EMPTY_TURNS])}"
        )
    a = audit.get(DROPPED_REASONING)
    if a:
        out.append(
            f"chat template '{template}' drops the reasoning of {a['turns']} earlier assistant "
            f"turn(s) of {a['examples']} example(s): the data has it, the model is not trained on "
            f"it (--chat-template chatml-train or a trl:*_training template keeps every turn's): "
            f"source indices {quote(idx[DROPPED_REASONING])}"
        )
    if idx.get(THINK_OMITTED):
        out.append(
            f"chat template '{template}' writes no <think> block in assistant turns without "
            f"reasoning ({len(idx[THINK_OMITTED])} example(s)), where the tokenizer's own template "
            "writes an empty one before the last answer: the model learns to answer without it "
            "(--chat-template trl:qwen3_training trains an empty <think></think> in every turn)"
        )
    return out


def strict_problem(audit: dict | None) -> str | None:
    """The one-line refusal of --strict-labels for a run's audit; None when there is nothing."""
    for kind in AUDIT_KINDS:
        a = (audit or {}).get(kind)
        if a:
            return (
                f"--strict-labels: {a['first']} {_REFUSED[kind]} ({kind}; {a['examples']} "
                "example(s) in all, see the warnings); fix or drop such records, or leave out "
                "--strict-labels"
            )
    return None


# -- control tokens in message text ---------------------------------------------------------------
PLACEHOLDER = re.compile("\ue000([0-9]+)\ue001")


class ContentTokens:
    """One tokenizer's control tokens, searched for in message text."""

    def __init__(self, spec):
        self.spec = spec
        self.control = tuple(sorted(spec.control_tokens, key=len, reverse=True))
        firsts = {t[0] for t in self.control if t}
        self.first = firsts.pop() if len(firsts) == 1 else None  # "<": a test before the regex
        # every control token written in JSON as itself: a search of the messages as JSON finds
        # every one in their texts (may_hold)
        self.json_safe = all(_json(t)[1:-1] == t.encode() for t in self.control)
        self._plain = None  # (reference backend, a Tokenizer reading control tokens as text)

    def __getstate__(self):
        return {**self.__dict__, "_plain": None}

    @functools.cached_property
    def pattern(self) -> re.Pattern:
        """The control tokens, longest first (compiled on first use)."""
        return re.compile("|".join(map(re.escape, self.control)))

    @functools.cached_property
    def pattern_json(self) -> re.Pattern:
        """The same search over messages as JSON (orjson's UTF-8)."""
        return re.compile(b"|".join(re.escape(t.encode()) for t in self.control))

    def found(self, messages: list[dict]) -> list[tuple[int, str]]:
        """(turn, control token) for each message whose text holds one of the tokenizer's control tokens."""
        if not self.control:
            return []
        out = []
        for i, m in enumerate(messages):
            texts = [
                m.get("content"),
                m.get("reasoning_content"),
                *(x for c in m.get("tool_calls") or () for x in leaf_values(c)),
            ]
            for v in texts:
                if not isinstance(v, str) or (self.first is not None and self.first not in v):
                    continue
                hit = self.pattern.search(v)
                if hit:
                    out.append((i, hit.group(0)))
                    break
        return out

    def may_hold(self, conversations: list) -> bool:
        """False when no message text of these conversations holds a control token: one search of
        them as JSON (a superset of the texts `found` reads) for the whole batch."""
        if not self.control:
            return False
        if not self.json_safe:
            return True
        try:
            dump = _json(conversations)
        except Exception:  # a value JSON cannot hold: each conversation is walked
            return True
        if self.first is not None and self.first.encode() not in dump:
            return False
        return self.pattern_json.search(dump) is not None

    def placeholders(self, messages: list[dict]) -> tuple[list[dict], list[str]]:
        """Control tokens in message text replaced by U+E000 n U+E001 (literal n), for split mode."""
        literals: list[str] = []

        def sub(m):
            literals.append(m.group(0))
            return f"\ue000{len(literals) - 1}\ue001"

        def walk(v):
            if isinstance(v, str):
                if "\ue000" in v:
                    raise ExampleError(
                        "message text holds U+E000, which --special-in-content split reserves"
                    )
                return self.pattern.sub(sub, v)
            if isinstance(v, dict):
                return {k: walk(x) for k, x in v.items()}
            if isinstance(v, list):
                return [walk(x) for x in v]
            return v

        out = []
        for m in messages:
            m = dict(m)
            for key in ("content", "reasoning_content", "thinking", "tool_calls"):
                if m.get(key) is not None:
                    m[key] = walk(m[key])
            out.append(m)
        return out, literals

    def split_encode(
        self, text: str, spans: list[tuple[int, int]], literals: list[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and trained mask of a text whose placeholders stand for control tokens to read as text:
        the pieces between placeholders through the reference tokenizer, each literal alone with
        special-token matching off (the same on both backends)."""
        from packtool.tokenization.backends import make_backend

        spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
        if self._plain is None:
            from tokenizers import Tokenizer

            self._plain = (
                make_backend("hf", self.spec.engines),
                Tokenizer.from_str(self.spec.backend_json),
            )
            self._plain[1].encode_special_tokens = True
        ref, plain = self._plain
        ids, mask, at = [], [], 0

        def text_piece(a: int, b: int) -> None:  # text[a:b], its spans moved into it
            if b > a:
                local = np.clip(spans - a, 0, b - a) if len(spans) else spans
                local = local[local[:, 0] < local[:, 1]] if len(local) else local
                got, _, m = ref.encode_spans([text[a:b]], [local.reshape(-1, 2)])
                ids.append(got.astype(np.int32))
                mask.append(m.astype(bool))

        for m in PLACEHOLDER.finditer(text):
            text_piece(at, m.start())
            literal = plain.encode(literals[int(m.group(1))], add_special_tokens=False).ids
            trained = len(spans) and ((spans[:, 0] < m.end()) & (spans[:, 1] > m.start())).any()
            ids.append(np.asarray(literal, dtype=np.int32))
            mask.append(np.full(len(literal), bool(trained)))
            at = m.end()
        text_piece(at, len(text))
        return (
            np.concatenate(ids) if ids else np.zeros(0, np.int32),
            np.concatenate(mask) if mask else np.zeros(0, bool),
        )


# -- the finished run's meta (its warnings, its label audit) ---------------------------------------
MAX_LISTED = 20  # source indices quoted in a warning


def no_examples(run) -> PacktoolError:
    """Nothing left to tokenize: says why with the first skipped record's reason, when one was."""
    source, why = run.source, ""
    if source.skipped:
        first = source.skipped[0]
        at = first.record if first.record is not None else first.source_index
        why = f"; the first skipped, {where(first.file, first.line, at)}: {first.reason}"
    return PacktoolError(
        f"{run.data}: no usable examples ({source.num_read} records read, "
        f"{len(source.skipped)} skipped{why})"
    )


def meta(run, stats) -> dict:
    """The meta of a finished run (module docstring)."""
    from packtool.tokenization.source import formats_table, input_format

    source, cfg, plan, decisions = run.source, run.cfg, run.plan, run.decisions
    per_file, kind, backend = source.per_file, plan.kind, stats.backend
    tokenizer = plan.tokenizer
    warnings = list(plan.warnings)
    audit, idx = label_audit(stats.notes, stats.zero_loss, lambda i: _where([i], per_file)[0])
    if audit:  # manifest tokenizer.label_audit, only when found: clean packs keep their bytes
        tokenizer = {**tokenizer, "label_audit": audit}
    warnings += audit_warnings(
        audit, idx, tokenizer.get("chat_template"), lambda x: _quote(x, per_file)
    )
    if stats.zero_loss:
        what = (
            "pre-tokenized example(s) have no loss token"
            if kind == "pretokenized"
            else "example(s) have no loss token (no assistant turn, or every assistant weight 0)"
        )
        warnings.append(
            f"{len(stats.zero_loss)} {what}: source indices {_quote(stats.zero_loss, per_file)}"
        )
    if kind == "chat":
        special = stats.special
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
    if stats.removed:
        warnings.append(f"removed {stats.removed} padding token(s) marked 0 in attention_mask")
    if kind == "pretokenized":
        fmt, reason = plan.pretokenized
        formats = {f: FileFormat(fmt, reason, n) for f, n in per_file.items()}
        looks: dict[str, str] = {}
    else:
        fmt, reason = input_format(decisions, per_file, cfg.read)
        formats = formats_table(decisions, per_file)
        if fmt == "preference":  # manifest preference.unlike_trl (pack.pairs.pair_manifest)
            tokenizer = {**tokenizer, "pairs_unlike_trl": stats.unlike_trl}
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


def check_strict_labels(td, cfg):
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
    """'b.json record 1' for each source index (the files' records lie end to end)."""
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
