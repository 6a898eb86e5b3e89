"""The run's chat template: which one (`pick`: ours, TRL's read without importing trl, the
tokenizer's or a file; the family table and its fixes) and its mode, decided on a probe
conversation (`choose`); refused where it cannot work.

    --chat-template auto (the default), decided once per run, announced, recorded in the manifest:

      built-in Qwen3 tokenizer ─────────────────────────▶ chatml-train (packtool's)      mode markers
      the tokenizer's template has {% generation %} ────▶ it, as it is                   mode markers
      it is an official template TRL ships a training
        version of (trl/chat_templates/X.jinja) ────────▶ trl:X_training                 mode markers
      otherwise the tokenizer's template, probed:
        prefix-preserving ───────────────────────────────▶ it                            mode prefix
        not, --train-on last ────────────────────────────▶ it                            mode last
        not ─────────────────────────────────────────────▶ refusal with this family's fix

    --chat-template tokenizer | chatml-train | trl:NAME | FILE picks one, probed the same way (hf
    backend, jinja); its trained runs must end in EOS or an end-of-turn token (`end_of_turn`), and
    every `<|name|>`-style marker it writes must be one token (`check_markers`).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, replace
from pathlib import Path

from packtool.errors import PacktoolError, UsageError
from packtool.tokenization.loading import package_dir

TEMPLATE_DIR = Path(__file__).parent / "templates"
BUILTIN_TEMPLATES = {p.stem: p for p in sorted(TEMPLATE_DIR.glob("*.jinja"))}
DEFAULT_DATE = "2026-01-01"  # what strftime_now() returns unless --template-date says otherwise
CHOICES = "auto | tokenizer | chatml-train | trl:NAME | FILE"

# family: (a marker its templates write, its fix when its own template cannot be used as it is)
FAMILIES = {
    "gpt-oss (harmony)": ("<|channel|>", "gptoss_training"),
    "Llama 3": ("<|start_header_id|>", "llama3_training"),
    "Gemma": ("<start_of_turn>", "gemma3_training"),
    "DeepSeek": ("<｜Assistant｜>", "deepseekv3_training"),
    "Cohere": ("<|START_OF_TURN_TOKEN|>", "cohere_training"),
    "GLM": ("[gMASK]", "glm4moe_training"),
    "Phi-3": ("<|assistant|>", "phi3_training"),
    "ChatML (Qwen)": ("<|im_start|>", None),  # chatml-train is ours
}


@dataclass(frozen=True)
class ChatTemplate:
    text: str  # the template itself (Jinja)
    name: str  # "chatml-train", "trl:llama3_training", a file path, or "tokenizer"
    hash: str
    has_generation: bool  # True when the template marks assistant text with {% generation %}
    origin: str = ""  # "packtool", "trl 1.16.0", "tokenizer", "file"
    mode: str = ""  # markers | prefix | last | all (see the module docstring); "" = not decided yet
    why: str = ""  # the decision, in words (announced)
    date: str | None = None  # the date strftime_now() returns, when the template calls it
    family: str | None = None
    end_of_turn: str | None = None  # the trained end token, e.g. "<|eot_id|> (EOS)"
    near: str | None = None  # TRL's training template of the official one this is a near miss of
    near_alike: str = ""  # how near, in words: "88% alike, 3 of 40 blocks differ"

    def info(self) -> dict:
        return {
            "chat_template": self.name,
            "chat_template_hash": self.hash,
            "chat_template_origin": self.origin,
            "chat_template_mode": self.mode,
            "chat_template_why": self.why,
            "generation_markers": self.has_generation,
            "template_date": self.date,
            "family": self.family,
            "end_of_turn": self.end_of_turn,
        }


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
        msg = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(
            f"chat template {template.name} does not parse: {msg}; fix the Jinja or pass "
            f"--chat-template {CHOICES}"
        ) from e


def make_template(text: str, name: str, origin: str = "file") -> ChatTemplate:
    has_gen = re.search(r"\{%-?\s*generation\s*-?%\}", text) is not None
    return ChatTemplate(text, name, hashlib.sha256(text.encode()).hexdigest()[:16], has_gen, origin)


# --------------------------------------------------------------------------- TRL's templates
def trl_dir() -> Path | None:
    """trl/chat_templates of the installed TRL, found without importing trl (which imports torch)."""
    trl = package_dir("trl")
    folder = trl / "chat_templates" if trl is not None else None
    return folder if folder is not None and folder.is_dir() else None


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


def _official(training: str) -> str:
    return training[: -len("_training")] + ".jinja"


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


def family_of(text: str) -> str | None:
    for family, (marker, _) in FAMILIES.items():
        if marker in text:
            return family
    return None


def family_fix(
    family: str | None, train_on: str, near: str | None = None, near_alike: str = ""
) -> str:
    """What to do when this family's own template cannot locate every assistant turn; `near` (a
    TRL training template this one is a near miss of, `near_alike` how near) first."""
    fixes = []
    training = FAMILIES.get(family, (None, None))[1] if family else None
    if near:
        fixes.append(
            f"--chat-template trl:{near} (TRL's training version of {_official(near)}, the official "
            "template this one is a near miss of" + (f": {near_alike})" if near_alike else ")")
        )
        if near == training:
            training = None
    if family == "ChatML (Qwen)":
        fixes.append("--chat-template chatml-train (packtool's ChatML training template)")
    elif training:
        have = trl_dir() is not None and (trl_dir() / f"{training}.jinja").is_file()
        fixes.append(
            f"--chat-template trl:{training} (TRL's training template for {family})"
            + ("" if have else ", after pip install 'packtool[templates]' (TRL)")
        )
    if train_on != "last":
        fixes.append("--train-on last (only the last assistant turn carries loss)")
    fixes.append("--chat-template FILE with {% generation %} markers")
    return "; or ".join(fixes)


# --------------------------------------------------------------------------- choosing
def own_template(spec) -> str | None:
    """The tokenizer's own template text (its default one when it has several), None without one."""
    own = spec.chat_template
    if isinstance(own, dict):  # several named templates: take the default one
        own = own.get("default") or next(iter(own.values()), None)
    return own or None


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
            f"({name[: -len('_training')]}.jinja)",
        )
    nearest = trl_nearest(own)
    if nearest and nearest[0][1] >= NEAR:
        name = nearest[0][0]
        return replace(
            tpl,
            near=name,
            near_alike=alike(nearest[0]),
            why=f"the tokenizer's own template, a near miss of TRL's official {_official(name)} "
            f"({alike(nearest[0])}): --chat-template trl:{name} is most likely its training version",
        )
    if nearest:  # named, not chosen: an older or other revision is no training version of this one
        named = ", ".join(f"{_official(n[0])} ({n[1]:.0%} alike)" for n in nearest[:2])
        return replace(
            tpl,
            why=f"the tokenizer's own template (no training version known; nearest of TRL's "
            f"official templates: {named}; compare with packtool inspect DATA --chat-template "
            f"trl:{nearest[0][0]} before training on one)",
        )
    return replace(tpl, why="the tokenizer's own template (no training version known)")
