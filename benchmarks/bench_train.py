"""Real (non-pad) tokens per second: padded random batches vs packed rows, same data, same model, same run.

    python benchmarks/bench_train.py                       # CPU, fp32, sdpa, small config
    python benchmarks/bench_train.py --device cuda         # bf16, flash_attention_2 when installed

Data: `--docs` synthetic documents with lognormal lengths (median `--median`, sigma `--sigma`),
clipped to 8..`--len`. Both strategies see every step B = `--batch` rows of at most `--len` slots:

    padded   B documents in random order, padded to the longest of the batch, attention_mask 0/1
    packed   B rows of exactly `--len` tokens from packtool's planner (BFD, rows shuffled),
             collated by packtool.torch.PackedCollator (position_ids, cu_seq_lens, no attention_mask)

Two copies of one randomly initialized Llama-style model train side by side (forward, backward,
AdamW), steps interleaved padded/packed so that a noisy machine slows both alike; the first
`--warmup` steps of each are not timed. Batches are built before timing: this measures the model,
not the data path. Prints occupancy (real tokens / slots) and real tokens/s of each, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
import torch

from packtool.plan import plan_packs
from packtool.schema import IGNORE_INDEX
from packtool.torch import PackedCollator


def lognormal_lengths(n: int, median: float, sigma: float, max_len: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 8, max_len).astype(np.int64)


def make_docs(lengths: np.ndarray, vocab: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    return [rng.integers(1, vocab, size=int(n)).astype(np.int64) for n in lengths]


def padded_batches(docs, batch: int, seed: int) -> list[tuple[dict, int, int]]:
    """(batch, real tokens, slots) for random batches of `batch` documents padded to their longest."""
    order = np.random.default_rng(seed + 2).permutation(len(docs))
    out = []
    for s in range(0, len(order) - batch + 1, batch):
        members = [docs[i] for i in order[s : s + batch]]
        width = max(len(d) for d in members)
        ids = torch.zeros(batch, width, dtype=torch.long)
        mask = torch.zeros(batch, width, dtype=torch.long)
        for r, d in enumerate(members):
            ids[r, : len(d)], mask[r, : len(d)] = torch.from_numpy(d), 1
        labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
        labels[:, 0] = IGNORE_INDEX
        real = int(mask.sum())
        out.append(
            (
                {"input_ids": ids, "attention_mask": mask, "labels": labels, "use_cache": False},
                real,
                batch * width,
            )
        )
    return out


def packed_batches(
    docs, lengths, pack_len: int, batch: int, seed: int
) -> list[tuple[dict, int, int]]:
    """(batch, real tokens, slots) for `batch` packed rows of exactly `pack_len` tokens each."""
    plan = plan_packs(lengths, pack_len, strategy="bfd", order="sorted")
    rows = []
    for r in range(plan.num_rows):
        members = plan.doc_order[plan.row_offsets[r] : plan.row_offsets[r + 1]]
        ids = np.zeros(pack_len, np.int64)
        labels = np.full(pack_len, IGNORE_INDEX, np.int64)
        pos = np.zeros(pack_len, np.int64)
        at = 0
        for i in members:
            d = docs[i]
            ids[at : at + len(d)], labels[at + 1 : at + len(d)] = (
                d,
                d[1:],
            )  # -100 on each first token
            pos[at : at + len(d)] = np.arange(len(d))
            at += len(d)
        pos[at:] = np.arange(pack_len - at)
        rows.append(
            {
                "input_ids": torch.from_numpy(ids),
                "labels": torch.from_numpy(labels),
                "position_ids": torch.from_numpy(pos),
                "num_tokens": at,
            }
        )
    order = np.random.default_rng(seed + 3).permutation(len(rows))  # the writer shuffles rows too
    collate = PackedCollator()
    out = []
    for s in range(0, len(order) - batch + 1, batch):
        members = [rows[i] for i in order[s : s + batch]]
        out.append((collate(members), sum(m["num_tokens"] for m in members), batch * pack_len))
    return out


def build_model(args, attn: str, device: str, dtype: torch.dtype):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(args.seed)
    cfg = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=args.len,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(cfg).to(device=device, dtype=dtype).train()


def pick_attention(requested: str, device: str) -> str:
    if requested != "auto":
        return requested
    if device == "cuda":
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            return "sdpa"
    return "sdpa"


def to_device(batch: dict, device: str) -> dict:
    return {
        k: (v.to(device, non_blocking=True) if isinstance(v, torch.Tensor) else v)
        for k, v in batch.items()
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=600)
    p.add_argument("--median", type=float, default=96)
    p.add_argument("--sigma", type=float, default=0.9)
    p.add_argument(
        "--len", type=int, default=512, help="pack_len = the padded batches' longest allowed"
    )
    p.add_argument("--batch", type=int, default=4, help="rows per step, both strategies")
    p.add_argument("--steps", type=int, default=10, help="timed steps per strategy")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument(
        "--attn", default="auto", help="auto: flash_attention_2 on CUDA if installed, else sdpa"
    )
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    attn = pick_attention(args.attn, device)
    # flash-attention cannot take the padded batches' 0/1 mask and packed rows alike unless installed;
    # sdpa takes both. Both strategies always run the same implementation.

    lengths = lognormal_lengths(args.docs, args.median, args.sigma, args.len, args.seed)
    docs = make_docs(lengths, args.vocab, args.seed)
    batches = {
        "padded": padded_batches(docs, args.batch, args.seed),
        "packed": packed_batches(docs, lengths, args.len, args.batch, args.seed),
    }
    need = args.warmup + args.steps
    for name, bs in batches.items():
        if len(bs) < need:
            raise SystemExit(f"{name}: {len(bs)} batches < warmup+steps={need}; raise --docs")
    models = {name: build_model(args, attn, device, dtype) for name in batches}
    opts = {name: torch.optim.AdamW(m.parameters(), lr=1e-4) for name, m in models.items()}
    stats = {name: {"real": 0, "slots": 0, "seconds": 0.0} for name in batches}

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for step in range(need):
        for name in ("padded", "packed"):
            batch, real, slots = batches[name][step]
            batch = to_device(batch, device)
            sync()
            t0 = time.perf_counter()
            loss = models[name](**batch).loss
            loss.backward()
            opts[name].step()
            opts[name].zero_grad(set_to_none=True)
            sync()
            if step >= args.warmup:
                s = stats[name]
                s["real"] += real
                s["slots"] += slots
                s["seconds"] += time.perf_counter() - t0

    for s in stats.values():
        s["occupancy"] = s["real"] / s["slots"]
        s["real_tokens_per_s"] = s["real"] / s["seconds"]
    result = {
        "strategies": stats,
        "ratio_packed_over_padded": stats["packed"]["real_tokens_per_s"]
        / stats["padded"]["real_tokens_per_s"],
        "config": {k: v for k, v in vars(args).items() if k != "json"}
        | {"attn": attn, "dtype": str(dtype)},
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": __import__("transformers").__version__,
            "cpu_threads": torch.get_num_threads(),
            "device": torch.cuda.get_device_name()
            if device == "cuda"
            else platform.processor() or "cpu",
        },
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return result
    print(
        f"{args.steps} timed steps x {args.batch} rows, len {args.len}, {device} {dtype}, attn={attn}, "
        f"model {args.layers}x{args.hidden}, {torch.get_num_threads()} threads"
    )
    print(f"{'strategy':<8} {'occupancy':>9} {'real tokens':>12} {'seconds':>8} {'real tok/s':>11}")
    for name, s in stats.items():
        print(
            f"{name:<8} {s['occupancy']:>9.3f} {s['real']:>12,d} {s['seconds']:>8.2f} {s['real_tokens_per_s']:>11,.0f}"
        )
    print(f"packed / padded real tokens/s: {result['ratio_packed_over_padded']:.2f}x")
    return result


if __name__ == "__main__":
    main()
