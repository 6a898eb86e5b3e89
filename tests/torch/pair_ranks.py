"""One data-parallel rank of test_pair_trl.test_two_gloo_ranks_equal_trl (run as a script, with
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set): rows rank::world of the pack, DDP over gloo,
the pair loss normalised by global_pairs and multiplied by the world size (DDP averages).
Rank 0 writes the step's loss (summed over ranks), the pair counts and the gradients to
OUT/rank0.pt.

    python pair_ranks.py PACK OUT BETA
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import transformers

from packtool.torch import (
    PairDataset,
    ReferenceLogps,
    global_pairs,
    model_inputs,
    pair_loss,
    sequence_logps,
)


def main(pack: str, out: str, beta: float) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    out_dir = Path(out)
    policy = transformers.LlamaForCausalLM.from_pretrained(out_dir / "policy", dtype=torch.float32)
    policy.train()
    model = torch.nn.parallel.DistributedDataParallel(policy)
    refs = ReferenceLogps.load(out_dir / "ref.npz")
    ds = PairDataset(pack, cache_dir=out_dir / f"cache{rank}")
    batch = ds.collator("hf")([ds[i] for i in range(rank, len(ds), world)])
    n = global_pairs([batch])
    logps, counts = sequence_logps(model(**model_inputs(batch)).logits, batch)
    loss_sum, pairs = pair_loss(logps, refs.for_batch(batch), counts=counts, beta=beta)
    (loss_sum / n * world).backward()
    total = loss_sum.detach() / n
    dist.all_reduce(total)
    shares = [None] * world
    dist.all_gather_object(shares, pairs)
    if rank == 0:
        grads = {k: p.grad.clone() for k, p in policy.named_parameters()}
        torch.save(
            {"loss": float(total), "pairs": int(n), "local_pairs": shares, "grads": grads},
            out_dir / "rank0.pt",
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main(sys.argv[1], sys.argv[2], float(sys.argv[3]))
