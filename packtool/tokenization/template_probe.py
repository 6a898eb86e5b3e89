"""Decide a chosen template's mode on a probe conversation, and refuse what cannot work.

    pick (chat_template) ──▶ mode from the template: all (--train-on all) | markers | prefix
        ──probe──▶ PROBE encoded with that mode (hf backend, jinja renderer)
            ok ─────────────────────────────────────────────────▶ that mode
            prefix fails, --train-on last, mode last works ─────▶ last
            prefix fails, the template is not prefix-preserving ▶ refusal with this family's fix
            any other failure ──────────────────────────────────▶ refusal: cannot render PROBE
        ──▶ the probe's trained runs must end in EOS or an end-of-turn token (`end_of_turn`)

The verdict (mode, end of turn) is cached per template, tokenizer files and library versions.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, replace

import packtool
from packtool.errors import UsageError
from packtool.formats.turns import make_example, make_message
from packtool.schema import IGNORE_INDEX
from packtool.tokenization import cache
from packtool.tokenization.chat_template import (
    CHOICES,
    DEFAULT_DATE,
    ChatTemplate,
    check_markers,
    check_parses,
    family_fix,
    family_of,
    pick,
)
from packtool.tokenization.encode import Encoder
from packtool.tokenization.loading import library_versions
from packtool.tokenization.render import ExampleError, NotPrefixPreserving

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
