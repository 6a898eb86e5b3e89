"""The tokenize run plan: everything decided before a record is encoded, made once, frozen.

    plan_run(cfg, decisions) ──▶ RunPlan
        kind          "chat" | "pretokenized"               the input's (source.input_kind)
        step          EncodeStep run over every batch        (the fast path's, when it is tried)
        reference     EncodeStep of the reference path       None: the fast path is not tried
        tokenizer     {name, pad_id, ..., chat_template, chat_template_mode}   the manifest's
        template      ChatTemplate | None
        backend       BackendReport before any check
        warnings      what the choices cost, said once
        label_source, pretokenized (format, why)             of pre-tokenized input

The reference path is tokenizers + transformers' jinja renderer. The fast path, fastokens with the
best renderer (packtool.tokenization.render.best: native for the built-in chatml-train template,
else compiled, MiniJinja, with TRL's gptoss_training native in front), is tried
when `--tokenizer-backend auto` allows it and fastokens supports the tokenizer; it is checked on
probes (FastCheck, below) and, after a difference, the run starts again on
`plan.on_difference(why)`, the reference path:

    fastokens + best renderer  ──differs──▶  tokenizers + jinja

The local process pool and the Ray engine execute the same plan; neither decides anything of it.

The fast path's check (FastCheck): `--tokenizer-backend auto` runs the fast path only where it gives
ids, labels and refusals identical to the reference path's on the probes:

    probe of the run's first file      its first batch's first CHECK_EXAMPLES examples
    probe of each later file           its first batch's first CHECK_PER_FILE examples (of the first
                                       CHECK_FILES files; after them, only of a file whose format
                                       was not probed yet)

    FastCheck(backend)    FastCheck.of(plan): None when the plan does not try it; backend: the plan's
                          BackendReport (fastokens, its renderer, why the renderer is jinja)
        .take(file, fmt, n)   examples to compare from this file's first batch of n (0: none)
        .probes(files)        take of each (file, fmt, n) in reading order: [(file, fmt, examples)]
        .conclude(n, where)   after one probe of n examples compared: identical (`where` None), or
                              raises UseReference (the run continues on the reference path,
                              RunPlan.on_difference; --tokenizer-backend fastokens: PacktoolError)
        .report               the BackendReport after the probes concluded so far

    compare(fast result, reference result, probe batch) -> None | where they first differ

The local process pool takes its probes as its batches stream past, the Ray engine all at once from
its file decisions; both conclude them in reading order with this one object.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from packtool.config import TokenizeConfig
from packtool.errors import PacktoolError, UsageError
from packtool.tokenization.encode import EncodeStep
from packtool.tokenization.loading import load_spec
from packtool.tokenization.render import best
from packtool.tokenization.source import input_kind

BACKENDS = ("auto", "fastokens", "hf")


@dataclass(frozen=True)
class BackendReport:
    """Which tokenizer backend ran and why: the manifest's `backend` (`to_dict`, fields left out
    where None, in this order)."""

    name: str | None
    requested: str | None = None
    renderer: str | None = None
    check: dict | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k == "name" or v is not None}


@dataclass(frozen=True)
class RunPlan:
    kind: str
    step: EncodeStep
    reference: EncodeStep | None
    tokenizer: dict
    template: object
    backend: BackendReport
    warnings: tuple[str, ...] = ()
    label_source: str | None = None
    pretokenized: tuple[str, str] | None = None

    def on_difference(self, why: str) -> RunPlan:
        """This plan on the reference path after the fast path differed on a probe (`why`)."""
        return dataclasses.replace(
            self,
            step=self.reference,
            reference=None,
            backend=BackendReport("hf", self.backend.requested, "jinja", reason=why),
        )

    def wait(self) -> None:
        """A process must not exit (or fork) while the fast backend's preload thread is inside
        native code: wait for it."""
        if self.step.spec is not None:
            self.step.spec.engines.wait()

    def building(self) -> bool:
        """The fast backend is still being built on its thread (this process has time to spare)."""
        return self.step.spec is not None and self.step.spec.engines.building()


def check_backend(cfg: TokenizeConfig) -> None:
    if cfg.tokenizer_backend not in BACKENDS:
        raise UsageError(
            f"--tokenizer-backend {cfg.tokenizer_backend!r} is not one of {'|'.join(BACKENDS)}"
        )


def plan_run(cfg: TokenizeConfig, decisions, preload: bool = False) -> RunPlan:
    """The RunPlan of an input whose files were decided (`decisions`, reading order; those read so
    far). `preload`: start building the fast backend now, on a thread (GIL released: it
    overlaps what follows), for a step run in this process or forked workers."""
    kind, label_source = input_kind(decisions)
    if kind == "pretokenized":
        return _pretokenized_plan(cfg, label_source)
    from packtool.tokenization.chat_template import choose  # (not on a cache hit's imports)

    if preload:
        from packtool import idle
        from packtool.tokenization.render import preload as jinja_preload

        idle.later(jinja_preload)  # the probe and the reference path render with it
    spec = load_spec(cfg.tokenizer)
    why = fast_refused(spec, cfg.tokenizer_backend)
    if why is None and preload:
        spec.engines.preload()
    try:
        template = choose(spec, cfg.chat_template, cfg.train_on, cfg.template_date)
    except BaseException:
        spec.engines.wait()
        raise
    first = next((d for d in decisions if d.first_len), None)
    reference = EncodeStep(  # the reference path: tokenizers + jinja (fmt: of a batch with none)
        "chat",
        cfg.read,
        fmt=first.fmt if first is not None else cfg.read.format or "messages",
        spec=spec,
        template=template,
        train_on=cfg.train_on,
        special_in_content=cfg.special_in_content,
    )
    step, backend = reference, BackendReport("hf", cfg.tokenizer_backend, "jinja", reason=why)
    if why is None:
        renderer, note = best(template)
        step = reference.with_backend("fastokens", renderer)
        backend = BackendReport("fastokens", cfg.tokenizer_backend, renderer, {"examples": 0}, note)
    return RunPlan(
        "chat",
        step,
        reference if why is None else None,
        {**spec.info(), **template.info()},
        template,
        backend,
        tuple(template_warnings(template)),
    )


def _pretokenized_plan(cfg: TokenizeConfig, label_source: str) -> RunPlan:
    step = EncodeStep("pretokenized", cfg.read, label_source=label_source)
    labels_from = label_source if label_source != "all" else "every token"
    ignored = ["--chat-template"] if cfg.chat_template is not None else []
    if cfg.train_on != "assistant":
        ignored.append("--train-on")
    warning = (
        f"{' and '.join(ignored)} do not apply to pre-tokenized input: labels come from "
        f"{labels_from}"
    )
    if cfg.tokenizer is None:  # ids come as they are; a tokenizer only names the pad/eos ids
        tokenizer = {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None}
    else:
        tokenizer = load_spec(cfg.tokenizer).info()
    return RunPlan(
        "pretokenized",
        step,
        None,
        tokenizer,
        None,
        BackendReport(None, reason="pre-tokenized input is not tokenized"),
        (warning,) if ignored else (),
        label_source=label_source,
        pretokenized=("pretokenized", f"records carry input_ids; labels from {labels_from}"),
    )


def fast_refused(spec, requested: str) -> str | None:
    """Why the fast path is not tried (None: it is); --tokenizer-backend fastokens on a tokenizer
    it cannot serve is a UsageError."""
    if requested == "hf":
        return "--tokenizer-backend hf"
    from packtool.tokenization.backends import supports_fast

    why = supports_fast(spec, load=False)
    if why is not None and requested == "fastokens":
        raise UsageError(
            f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend auto or hf"
        )
    return why


def template_warnings(template) -> list[str]:
    """What a template without {% generation %} markers costs, said once."""
    if template.mode not in ("prefix", "last"):
        return []
    which = "assistant turns are" if template.mode == "prefix" else "the last assistant turn is"
    return [
        f"chat template '{template.name}' has no {{% generation %}} markers: {which} "
        "located by diffs of renders (slower; checked per example)"
    ]


CHECK_EXAMPLES = 256  # examples encoded by both backends before fastokens is trusted
CHECK_PER_FILE = 32  # ...and of each later file's first batch (a folder's files differ in format)
CHECK_FILES = 64  # files probed in full; beyond them only a file of a format not probed yet


class UseReference(Exception):
    """The fast path differed from the reference path on a probe: start again with the reference."""


class FastCheck:
    def __init__(self, backend: BackendReport):
        self.backend = backend  # the plan's, before any probe: fastokens, its renderer, its note
        self.files: list[str] = []  # files with a probe, in reading order
        self.formats: set[str] = set()
        self.examples = 0  # examples compared so far
        self.report: BackendReport | None = None

    @classmethod
    def of(cls, plan: RunPlan) -> FastCheck | None:
        """The check of a plan that tries the fast path (None when it does not)."""
        return cls(plan.backend) if plan.reference is not None else None

    def take(self, file: str, fmt: str | None, n: int) -> int:
        if not n or file in self.files:
            return 0
        if len(self.files) >= CHECK_FILES and fmt in self.formats:
            return 0
        first = not self.files
        self.files.append(file)
        self.formats.add(fmt)
        return min(n, CHECK_EXAMPLES if first else CHECK_PER_FILE)

    def probes(self, files: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        return [(f, fmt, k) for f, fmt, n in files if (k := self.take(f, fmt, n))]

    def conclude(self, n: int, where: str | None) -> None:
        self.examples += n
        check = {"examples": self.examples, "identical": where is None}
        if len(self.files) > 1:  # (one file: the report as it always was)
            check["files"] = len(self.files)
        backend = self.backend
        if where is None:
            self.report = dataclasses.replace(backend, check=check)
            return
        why = (
            f"the fast path (fastokens, {backend.renderer} renderer) differs from tokenizers + "
            f"jinja on {where}"
        )
        if backend.reason:  # (why the renderer is jinja)
            why = f"{backend.reason}; {why}"
        if backend.requested == "fastokens":
            raise PacktoolError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend hf")
        raise UseReference(why)


def compare(a, b, probe) -> str | None:
    """None when the fast path's result `a` of the probe is the reference's `b`, else where they
    first differ."""
    if a.rejects == b.rejects and a.table.equals(b.table):
        return None
    ra, rb = a.table.to_pydict(), b.table.to_pydict()
    for j, (x, y) in enumerate(zip(ra["input_ids"], rb["input_ids"], strict=False)):
        if x != y or ra["labels"][j] != rb["labels"][j]:
            return probe.where(int(ra["source_index"][j]) - probe.start)
    return "the first batch"
