"""The run's chat template: which one (`pick`: ours, TRL's read without importing trl, the
tokenizer's or a file) and its mode, decided on a probe conversation (`choose`); refused where it
cannot work.

    --chat-template auto (the default), decided once per run, announced, recorded in the manifest:

      built-in Qwen3 tokenizer ─────────────────────────▶ chatml-train (packtool's)      mode markers
      the tokenizer's template has {% generation %} ────▶ it, as it is                   mode markers
      it is an official template TRL ships a training
        version of (trl/chat_templates/X.jinja) ────────▶ trl:X_training                 mode markers
      otherwise the tokenizer's template, probed:
        prefix-preserving ───────────────────────────────▶ it                            mode prefix
        not, --train-on last ────────────────────────────▶ it                            mode last
        not ─────────────────────────────────────────────▶ refusal with this family's fix

    --chat-template tokenizer | chatml-train | trl:NAME | FILE picks one, probed the same way.

The probe (`choose` → `probe`): PROBE encoded in the template's mode (hf backend, jinja renderer);
where mode prefix fails, mode last for --train-on last, else a refusal with the family's fix (or
"cannot render PROBE"). Its trained runs must end in EOS or an end-of-turn token (`end_of_turn`),
and every `<|name|>`-style marker the template writes must be one token (`check_markers`). The
verdict (mode, end of turn) is cached per template, tokenizer files and library versions.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import packtool
from packtool.errors import PacktoolError, UsageError
from packtool.formats.turns import make_example, make_message
from packtool.schema import IGNORE_INDEX
from packtool.tokenization import cache
from packtool.tokenization.encode import Encoder
from packtool.tokenization.loading import library_versions
from packtool.tokenization.render import (
    BUILTIN_TEMPLATES,
    FAMILIES,
    ChatTemplate,
    ExampleError,
    NotPrefixPreserving,
    family_fix,
    family_of,
    first_line,
    make_template,
    official_name,
    own_template,
    trl_dir,
)

DEFAULT_DATE = "2026-01-01"  # what strftime_now() returns unless --template-date says otherwise
CHOICES = "auto | tokenizer | chatml-train | trl:NAME | FILE"


def check_parses(template: ChatTemplate) -> None:
    """A template that does not parse is a usage error (found before reading); built-in and TRL
    templates are known to parse (no transformers import for them)."""
    if template.origin not in ("file", "tokenizer"):
        return
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # private helper moved: rendering will report the error per example
        return
    try:
        _compile_jinja_template(template.text)
    except Exception as e:
        raise UsageError(
            f"chat template {template.name} does not parse: {first_line(e)}; fix the Jinja or pass "
            f"--chat-template {CHOICES}"
        ) from e


# --------------------------------------------------------------------------- TRL's templates
def trl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trl")
    except PackageNotFoundError:
        return "?"


def _officials(folder: Path) -> list[tuple[str, str]]:
    """(X_training, text of X.jinja) for each official template X that TRL ships a training version of."""
    out = []
    for training in sorted(folder.glob("*_training.jinja")):
        official = folder / (training.name[: -len("_training.jinja")] + ".jinja")
        if official.is_file():
            out.append((training.stem, official.read_text(encoding="utf-8")))
    return out


def trl_training_name(text: str) -> str | None:
    """`X_training` when `text` is TRL's official template X.jinja and TRL ships X_training.jinja."""
    folder = trl_dir()
    for training, official in _officials(folder) if folder is not None else ():
        if official.strip() == text.strip():
            return training
    return None


NEAR = 0.85  # blocks alike (difflib ratio) for a near miss of an official template
_BLOCK = re.compile(r"(?=\{[{%#])|(?<=[}%#]\})")  # between Jinja tags: one-line templates too


def _blocks(text: str) -> list[str]:
    return [b for b in (x.strip() for x in _BLOCK.split(text)) if b]


def trl_near_miss(text: str) -> tuple[str, float, int, int] | None:
    """(X_training, ratio alike, blocks that differ, blocks) of the official template X.jinja that
    `text` is nearest to, when at least NEAR alike (compared block by block: text between tags)."""
    near = trl_nearest(text)
    return near[0] if near and near[0][1] >= NEAR else None


NEAREST = 0.6  # below this, an official template is not worth naming as a candidate


def trl_nearest(text: str) -> list[tuple[str, float, int, int]]:
    """trl_near_miss's tuples for every official template at least NEAREST alike, nearest first."""
    folder = trl_dir()
    return [] if folder is None else _nearest(text, folder)


@functools.lru_cache(maxsize=8)
def _nearest(text: str, folder: Path) -> list[tuple[str, float, int, int]]:
    """trl_nearest against one TRL folder (cached per folder: another TRL may come on the path)."""
    import difflib

    mine = _blocks(text)
    found = []
    for training, official in _officials(folder):
        theirs = _blocks(official)
        sm = difflib.SequenceMatcher(None, mine, theirs, autojunk=False)
        if sm.real_quick_ratio() < NEAREST or sm.quick_ratio() < NEAREST:
            continue
        ratio = sm.ratio()
        if ratio >= NEAREST:
            differ = sum(
                max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in sm.get_opcodes() if tag != "equal"
            )
            found.append((training, ratio, differ, max(len(mine), len(theirs))))
    return sorted(found, key=lambda t: -t[1])


def alike(near: tuple[str, float, int, int]) -> str:
    """How near a template is to TRL's official one, in words."""
    _, ratio, differ, blocks = near
    return f"{ratio:.0%} alike, {differ} of {blocks} blocks differ"


def _trl_template(name: str) -> ChatTemplate:
    folder = trl_dir()
    if folder is None:
        raise UsageError(
            f"--chat-template trl:{name} needs TRL's template files: pip install 'packtool[templates]' "
            "(or 'trl>=1,<2')"
        )
    path = folder / f"{name}.jinja"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(folder.glob("*_training.jinja")))
        raise UsageError(
            f"--chat-template trl:{name}: TRL {trl_version()} has no {name}.jinja; "
            f"its training templates: {known}"
        )
    return make_template(path.read_text(encoding="utf-8"), f"trl:{name}", f"trl {trl_version()}")


def template_key(choice: str | None) -> str:
    """The cache key of --chat-template: its bytes where the tokenizer's files and library versions do not cover
    them (a file, a built-in, a TRL template: edits never hit old entries)."""
    choice = choice or "auto"
    if choice in ("auto", "tokenizer"):  # auto may pick the built-in chatml-train: its bytes count
        builtin = BUILTIN_TEMPLATES["chatml-train"].read_bytes()
        return f"{choice}:{hashlib.sha256(builtin).hexdigest()}"
    if choice.startswith("trl:"):
        folder = trl_dir()
        path = folder / f"{choice[4:]}.jinja" if folder else None
    else:
        path = BUILTIN_TEMPLATES.get(choice) or Path(choice).expanduser()
    if path is not None and path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"name:{choice}"


# --------------------------------------------------------------------------- tokens
_MARKER = re.compile(r"<\|[A-Za-z0-9_]+\|>|<｜[^｜<>]{1,40}｜>|<(?:start|end)_of_turn>")
_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)


def _not_one_token(spec, markers: list[str]) -> list[str]:
    """The markers that are neither an added token nor a vocabulary entry (asked of the Rust
    tokenizer the probe builds next anyway)."""
    tok = spec.engines.rust()
    return [m for m in markers if tok.token_to_id(m) is None]


def check_markers(spec, template: ChatTemplate) -> None:
    """Every control marker the template writes must be one token of the tokenizer (else the model
    is trained on markers tokenized as text): UsageError naming marker, tokenizer and fix."""
    markers = sorted(set(_MARKER.findall(_COMMENT.sub("", template.text))))
    if not markers:
        return
    missing = _not_one_token(spec, markers)
    if not missing:
        return
    if template.name == "tokenizer":
        fix = "pass --chat-template FILE written for this model"
    elif own_template(spec):
        fix = (
            "omit --chat-template (auto picks this tokenizer's own template or its training "
            "version), or pass --chat-template FILE written for this model"
        )
    else:  # no template of its own: 'auto' would only refuse in turn
        fix = no_template_fix(spec)
    raise UsageError(
        f"chat template '{template.name}' writes {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
        f"not a single token of tokenizer {spec.name}: the markers would be tokenized as plain text and the "
        f"model trained on a format it never sees; {fix}"
    )


def no_template_fix(spec) -> str:
    """What to pass for a tokenizer without a chat template (its control tokens name the family)."""
    family = family_of(" ".join(spec.control_tokens))
    training = FAMILIES.get(family, (None, None))[1] if family else None
    fixes = []
    if training:
        fixes.append(f"--chat-template trl:{training} (TRL's training template for {family})")
    if {"<|im_start|>", "<|im_end|>"} <= set(spec.control_tokens):
        fixes.append("--chat-template chatml-train (packtool's ChatML training template)")
    fixes.append("--chat-template FILE written for this model (with {% generation %} markers)")
    return "pass " + "; or ".join(fixes)


# --------------------------------------------------------------------------- choosing
def pick(spec, choice: str | None) -> ChatTemplate:
    """The template `choice` names (None/"auto": the automatic choice), mode not decided yet."""
    choice = choice or "auto"
    if choice in BUILTIN_TEMPLATES:
        return make_template(BUILTIN_TEMPLATES[choice].read_text(), choice, "packtool")
    if choice.startswith("trl:"):
        return _trl_template(choice[4:])
    if choice not in ("auto", "tokenizer"):
        p = Path(choice).expanduser()
        if p.is_file():
            return make_template(p.read_text(), str(p))
        raise UsageError(f"--chat-template {choice!r} is neither a file nor one of {CHOICES}")
    if choice == "auto" and spec.builtin:
        return replace(
            pick(spec, "chatml-train"), why="the built-in Qwen3 tokenizer's training template"
        )
    own = own_template(spec)
    if not own:
        raise PacktoolError(f"tokenizer {spec.name} has no chat template; {no_template_fix(spec)}")
    tpl = make_template(own, "tokenizer", "tokenizer")
    if tpl.has_generation:
        return replace(tpl, why="the tokenizer's own template, with generation markers")
    if choice == "tokenizer":  # as it is; a near miss still names its fix, should the probe refuse
        near = trl_near_miss(own)
        return replace(
            tpl,
            why="the tokenizer's own template",
            near=near[0] if near else None,
            near_alike=alike(near) if near else "",
        )
    name = trl_training_name(own)
    if name:
        return replace(
            _trl_template(name),
            why=f"TRL's training version of the tokenizer's official template "
            f"({official_name(name)})",
        )
    nearest = trl_nearest(own)
    if nearest and nearest[0][1] >= NEAR:
        name = nearest[0][0]
        return replace(
            tpl,
            near=name,
            near_alike=alike(nearest[0]),
            why=f"the tokenizer's own template, a near miss of TRL's official {official_name(name)} "
            f"({alike(nearest[0])}): --chat-template trl:{name} is most likely its training version",
        )
    if nearest:  # named, not chosen: an older or other revision is no training version of this one
        named = ", ".join(f"{official_name(n[0])} ({n[1]:.0%} alike)" for n in nearest[:2])
        return replace(
            tpl,
            why=f"the tokenizer's own template (no training version known; nearest of TRL's "
            f"official templates: {named}; compare with packtool inspect DATA --chat-template "
            f"trl:{nearest[0][0]} before training on one)",
        )
    return replace(tpl, why="the tokenizer's own template (no training version known)")


# --------------------------------------------------------------------------- the probe
PROBE = [
    {"role": "system", "content": "You are a probe."},
    {"role": "user", "content": "First question?"},
    {"role": "assistant", "content": "First answer."},
    {"role": "user", "content": "Second question?"},
    {"role": "assistant", "content": "Second answer."},
]
_END_NAME = re.compile(r"end|eot|eos|eom|return|call|stop", re.IGNORECASE)  # end-of-turn tokens


@dataclass(frozen=True)
class Probe:
    """PROBE (or PROBE without its system turn) through one template and mode."""

    template: ChatTemplate
    encoded: object  # the Encoded of the first conversation that encoded; None when neither did
    error: str | None = None  # why the first conversation failed, when neither encoded
    prefix_preserving: bool = True  # False: an earlier turn renders differently once turns follow


def probe(spec, template: ChatTemplate, train_on: str) -> Probe:
    """Encode PROBE, then PROBE without its system turn (templates that refuse one), with `template`'s mode."""
    encoder = Encoder(spec, template, train_on, "hf")
    first = None
    for messages in (PROBE, PROBE[1:]):
        ex = make_example("chat", [make_message(m["role"], m["content"]) for m in messages])
        enc = encoder.encode([ex])
        if enc.errors[0] is None:
            return Probe(template, enc)
        first = first or (ex, enc.errors[0])
    ex, error = first
    try:  # the same conversation again, for the typed reason it failed
        encoder.chat_text(ex)
        preserving = True
    except NotPrefixPreserving:
        preserving = False
    except ExampleError:
        preserving = True
    return Probe(template, None, error, preserving)


def choose(
    spec, choice: str | None, train_on: str = "assistant", date: str | None = None
) -> ChatTemplate:
    """The run's template with its mode decided on a probe conversation; refuses what cannot work."""
    tpl = pick(spec, choice)
    family = family_of(tpl.text)
    uses_date = "strftime_now" in tpl.text
    tpl = replace(tpl, family=family, date=(date or DEFAULT_DATE) if uses_date else None)
    mode = "all" if train_on == "all" else "markers" if tpl.has_generation else "prefix"
    path = _verdict_path(spec, tpl, mode, train_on)
    stored = cache.read_json(path) if path is not None else None
    if isinstance(stored, dict) and set(stored) == {"mode", "end_of_turn"}:
        return replace(tpl, **stored)
    tpl = _probed(spec, tpl, mode, train_on, family)
    if path is not None:
        cache.write_json(path, {"mode": tpl.mode, "end_of_turn": tpl.end_of_turn})
    return tpl


def _verdict_path(spec, tpl: ChatTemplate, mode: str, train_on: str):
    """Where the probe's verdict is kept ($PACKTOOL_CACHE/templates), keyed by everything it depends
    on (a warm start renders nothing); None for a tokenizer without files."""
    if not spec.files_hash:
        return None
    parts = [tpl.text, tpl.date, mode, train_on, spec.name, spec.files_hash]
    parts += [library_versions(), packtool.__version__]
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]
    return cache.cache_root() / "templates" / f"{digest}.json"


def _probed(spec, tpl: ChatTemplate, mode: str, train_on: str, family) -> ChatTemplate:
    """The template in the mode that works on PROBE, its end-of-turn token found; else a refusal."""
    check_parses(tpl)
    check_markers(spec, tpl)
    got = probe(spec, replace(tpl, mode=mode), train_on)
    if got.error and mode == "prefix":
        last = probe(spec, replace(got.template, mode="last"), train_on)
        if train_on == "last" and not last.error:
            got = last
        elif not got.prefix_preserving:
            raise UsageError(
                f"chat template '{tpl.name}'{f' ({family})' if family else ''} of tokenizer {spec.name} is not "
                "prefix-preserving (it renders earlier turns differently once later turns follow), so its assistant "
                f"turns cannot be located; fix: {family_fix(family, train_on, tpl.near, tpl.near_alike)}"
            )
    tpl = got.template
    if got.error:
        error = got.error.replace(f"chat template '{tpl.name}' ", "").replace(" on this record", "")
        raise UsageError(
            f"chat template '{tpl.name}' cannot render a plain test conversation (system, user, "
            f"assistant turns): {error}; fix the template or pass --chat-template {CHOICES}"
        )
    if tpl.mode != "all":
        tpl = replace(tpl, end_of_turn=end_of_turn(spec, tpl, got.encoded))
    return tpl


def end_of_turn(spec, tpl: ChatTemplate, enc) -> str:
    """Each trained run of the probe must end in EOS or another special token: say which."""
    import numpy as np

    ids, labels = enc.input_ids[0], enc.labels[0]
    trained = labels != IGNORE_INDEX
    edges = np.flatnonzero(trained & ~np.append(trained[1:], False))  # last token of each run
    specials = {v: k for k, v in spec.control_tokens.items() if _END_NAME.search(k)}
    ends = [int(ids[i]) for i in edges]
    bad = [e for e in ends if e != spec.eos_id and e not in specials]
    if not ends or bad:
        tok = spec.engines.rust()
        what = repr(tok.decode([bad[0]], skip_special_tokens=False)) if bad else "nothing"
        raise UsageError(
            f"chat template '{tpl.name}' ends the trained part of an assistant turn with {what}, not with an "
            f"end-of-turn token of tokenizer {spec.name} (EOS {spec.eos_token!r}): the model would not learn to "
            f"stop; use a template whose assistant turns end in EOS or an end-of-turn token "
            f"(--chat-template {CHOICES})"
        )
    return ", ".join(
        f"{specials.get(e) or spec.eos_token} "
        f"({'EOS' if e == spec.eos_id else f'end-of-turn token; EOS is {spec.eos_token}'})"
        for e in dict.fromkeys(ends)
    )
