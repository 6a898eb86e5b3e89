"""Packed preference training equals TRL's DPOTrainer on the same pairs unpacked (CPU, fp32).

TRL is the reference, reached through TRL itself: a DPOTrainer (trl 1.16) built on a tiny random
Llama, a reference model and a word-level tokenizer built in-process, whose own collator
(`DataCollatorForPreference`: prompt_ids + chosen_ids / rejected_ids, right-padded, chosen rows
then rejected rows) and own `compute_loss` (fused LM head, reference forward beside the policy,
loss mean over the pairs) run on the pairs' token ids. The packed side: a preference pack written
by tests/pair_packs.py, PairDataset, PairCollator ("hf" rows, sdpa, no attention mask),
ReferenceLogps computed once, sequence_logps, pair_loss / global_pairs.

Tolerance: 1e-6 on the loss and on every gradient entry, absolute for values up to 1 and relative
above (`assert_exact`). Measured (torch 2.13 / transformers 5.25 / trl 1.16, this machine's CPU),
largest |packed - TRL|:
    sigmoid, hinge (beta 0.1)   loss <= 1.2e-7, gradients <= 3.9e-7 (|g| <= 0.5), whole batch,
                                accumulation over 1 + 3 pairs, two gloo ranks (sigmoid)
    ipo (beta 0.5)              loss <= 4.8e-7 (loss ~2.3), gradients <= 2.6e-6 where |g| reaches
                                3.3 (7.8e-7 relative: a few float32 ulps of sums taken in another order)
The controls that must differ do so by >= 1e-3 (measured 5e-2 on the loss, 1e-1 on gradients):
positions that run on across documents, and the per-micro-batch mean that weighs the pair of a
1-pair micro-batch three times one of a 3-pair micro-batch (ms-swift before PR #10144).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")

from pair_packs import make_pairs, write_pair_pack  # noqa: E402

from packtool.torch import (  # noqa: E402
    PairDataset,
    ReferenceLogps,
    global_pairs,
    model_inputs,
    pair_loss,
    sequence_logps,
)

VOCAB = 64
PACK_LEN = 40
BETA = 0.1
# ipo's loss is (delta - 1/(2 beta))^2: at beta 0.1 about 25, where one float32 ulp is 1.9e-6 (measured
# 3.8e-6 = 2 ulps, 1.5e-7 relative); at 0.5 about 2.4
BETAS = {"sigmoid": BETA, "hinge": BETA, "ipo": 0.5}
ATOL = 1e-6
WRONG_MIN = 1e-3
INIT = 0.2  # far from uniform attention, so a leak between documents shows
LOSSES = ("sigmoid", "hinge", "ipo")
HERE = Path(__file__).resolve().parent


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model on a shared machine: one thread is faster
    yield
    torch.set_num_threads(before)


def tiny_llama(seed: int):
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        initializer_range=INIT,
        attn_implementation="sdpa",
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(config).float()


def word_tokenizer():
    """t0 .. t63, one word each: only DPOTrainer's constructor needs a tokenizer (pad t0, eos t1)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t2"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="t0", eos_token="t1", unk_token="t2"
    )


def trl_trainer(policy, ref, loss: str, out: Path):
    args = trl.DPOConfig(
        output_dir=str(out),
        report_to="none",
        use_cpu=True,
        loss_type=[loss],
        beta=BETAS[loss],
        precompute_ref_log_probs=False,
        max_length=None,
        bf16=False,  # TRL's default on CPU too: accelerate would run the reference under bf16 autocast
    )
    one = datasets.Dataset.from_dict({"prompt": ["t3 t4"], "chosen": [" t5"], "rejected": [" t6"]})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        datasets.disable_progress_bars()
        return trl.DPOTrainer(
            model=policy,
            ref_model=ref,
            args=args,
            train_dataset=one,
            processing_class=word_tokenizer(),
        )


def trl_loss_and_grads(pairs, loss: str, out: Path, policy_seed=0, ref_seed=1):
    """TRL's loss and gradients on all `pairs` in one padded batch (its mean over the pairs)."""
    policy, ref = tiny_llama(policy_seed), tiny_llama(ref_seed)
    trainer = trl_trainer(policy, ref, loss, out)
    examples = [
        {"prompt_ids": p.tolist(), "chosen_ids": c.tolist(), "rejected_ids": r.tolist()}
        for p, c, r in pairs
    ]
    batch = trainer.data_collator(examples)
    assert batch["input_ids"].shape[0] == 2 * len(pairs) and (batch["attention_mask"] == 0).any()
    policy.train()
    value = trainer.compute_loss(policy, batch)
    value.backward()
    return float(value.detach()), {n: p.grad.clone() for n, p in policy.named_parameters()}


def packed_loss_and_grads(folder, cache, steps, loss: str, policy_seed=0, ref_seed=1, scale=None):
    """The packed loss (summed over `steps`: lists of row indices, one micro-batch each, all in one
    optimizer step) and the accumulated gradients. `scale(loss_sum, pairs, n)` overrides the
    normalisation (a wrong one, for the control)."""
    ds = PairDataset(folder, cache_dir=cache)
    collate = ds.collator("hf")
    batches = [collate([ds[i] for i in rows]) for rows in steps]
    refs = ReferenceLogps.compute(tiny_llama(ref_seed), [collate([ds[i]]) for i in range(len(ds))])
    policy = tiny_llama(policy_seed)
    policy.train()
    n = global_pairs(batches)
    total = 0.0
    for b in batches:
        logps, counts = sequence_logps(policy(**model_inputs(b)).logits, b)
        loss_sum, pairs = pair_loss(
            logps, refs.for_batch(b), counts=counts, loss=loss, beta=BETAS[loss]
        )
        value = loss_sum / n if scale is None else scale(loss_sum, pairs, n)
        value.backward()
        total += float(value.detach())
    return total, {name: p.grad.clone() for name, p in policy.named_parameters()}


def max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def scale(x) -> float:
    """The size of a loss or of a model's gradients: max |entry|."""
    if isinstance(x, dict):
        return max(float(v.abs().max()) for v in x.values())
    return abs(float(x))


def assert_exact(got, want, grads, want_grads, what: str):
    """Loss and every gradient entry within ATOL = 1e-6, absolute for values up to 1 and relative
    above (ipo's gradients reach ~4, where float32's ulp is 4.8e-7: sums taken in another order
    differ by a few ulps)."""
    d_loss, d_grad = abs(got - want), max_diff(grads, want_grads)
    print(
        f"{what}: loss {want:.6f} |diff| {d_loss:.1e}; grads max |g| {scale(want_grads):.2f} |diff| {d_grad:.1e}"
    )
    assert d_loss <= ATOL * max(1.0, scale(want))
    assert d_grad <= ATOL * max(1.0, scale(want_grads))


@pytest.fixture(scope="module")
def pairs():
    return make_pairs(8, seed=5, vocab=VOCAB)


@pytest.fixture(scope="module")
def pack(pairs, tmp_path_factory):
    folder = tmp_path_factory.mktemp("pairs") / "pack"
    rows = write_pair_pack(folder, pairs, PACK_LEN, rows_per_shard=2)
    assert len(rows) >= 3 and max(len(r["seq_lengths"]) for r in rows) >= 4  # >= 2 pairs a row
    return folder


@pytest.mark.parametrize("loss", LOSSES)
def test_packed_equals_trl(loss, pairs, pack, tmp_path):
    want, want_grads = trl_loss_and_grads(pairs, loss, tmp_path / "trl")
    n_rows = len(PairDataset(pack, cache_dir=tmp_path / "c"))
    got, grads = packed_loss_and_grads(pack, tmp_path / "c", [list(range(n_rows))], loss)
    assert_exact(got, want, grads, want_grads, loss)


@pytest.fixture(scope="module")
def one_and_three(pairs, tmp_path_factory):
    """Pairs 0..3 in two rows: pair 0 alone, pairs 1-3 together (micro-batches of 1 and 3 pairs)."""
    folder = tmp_path_factory.mktemp("accum") / "pack"
    write_pair_pack(folder, pairs[:4], 96, rows=[[0], [1, 2, 3]])
    return folder


@pytest.mark.parametrize("loss", LOSSES)
def test_accumulation_one_and_three_pairs_equals_trl(loss, pairs, one_and_three, tmp_path):
    want, want_grads = trl_loss_and_grads(pairs[:4], loss, tmp_path / "trl")
    got, grads = packed_loss_and_grads(one_and_three, tmp_path / "c", [[0], [1]], loss)
    assert_exact(got, want, grads, want_grads, f"{loss} 1+3")
    if loss == "sigmoid":  # the control: a mean per micro-batch, averaged over the 2 micro-batches
        bad, bad_grads = packed_loss_and_grads(
            one_and_three,
            tmp_path / "c",
            [[0], [1]],
            loss,
            scale=lambda loss_sum, pairs, n: loss_sum / pairs / 2,
        )
        print(
            f"per-micro-batch mean: |diff| {abs(bad - want):.1e}, grads {max_diff(bad_grads, want_grads):.1e}"
        )
        assert max_diff(bad_grads, want_grads) >= WRONG_MIN


def test_positions_that_do_not_restart_differ(pairs, tmp_path):
    """The negative control: the same rows with position_ids running on across documents (sdpa
    then sees one sequence per row, documents attend to each other) no longer match TRL."""
    folder = tmp_path / "runon"
    write_pair_pack(folder, pairs, PACK_LEN, restart=False)
    want, want_grads = trl_loss_and_grads(pairs, "sigmoid", tmp_path / "trl")
    n_rows = len(PairDataset(folder, cache_dir=tmp_path / "c"))
    got, grads = packed_loss_and_grads(folder, tmp_path / "c", [list(range(n_rows))], "sigmoid")
    print(
        f"run-on positions: |diff| {abs(got - want):.1e}, grads {max_diff(grads, want_grads):.1e}"
    )
    assert max(abs(got - want), max_diff(grads, want_grads)) >= WRONG_MIN


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_equal_trl(pairs, pack, tmp_path):
    """Two spawned processes (gloo, DDP), each its own rows of the pack (unequal pair counts): the
    loss summed over ranks and DDP's gradient equal TRL's on all pairs in one batch."""
    want, want_grads = trl_loss_and_grads(pairs, "sigmoid", tmp_path / "trl")
    tiny_llama(0).save_pretrained(tmp_path / "policy")
    ds = PairDataset(pack, cache_dir=tmp_path / "c")
    collate = ds.collator("hf")
    ReferenceLogps.compute(tiny_llama(1), [collate([ds[i]]) for i in range(len(ds))]).save(
        tmp_path / "ref.npz"
    )
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(HERE.parent),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / "pair_ranks.py"), str(pack), str(tmp_path), str(BETA)],
            env={**env, "RANK": str(r)},
        )
        for r in range(2)
    ]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    out = torch.load(tmp_path / "rank0.pt")
    assert out["pairs"] == len(pairs) and sorted(out["local_pairs"]) != [4, 4]  # unequal shares
    assert_exact(out["loss"], want, out["grads"], want_grads, "gloo")


class PairTrainer(transformers.Trainer):
    """Trainer on a PairDataset: DPO-family loss normalised over the pairs of the whole step."""

    loss_is_scaled_for_ga = True  # compute_loss divides by the step's pair count itself

    def __init__(self, *args, refs, loss="sigmoid", beta=0.1, **kwargs):
        super().__init__(*args, **kwargs)
        self.refs, self.loss_kw = refs, {"loss": loss, "beta": beta}

    def get_batch_samples(self, epoch_iterator, num_batches, device):
        batches, _ = super().get_batch_samples(epoch_iterator, num_batches, device)
        return batches, global_pairs(batches, device=device)  # pairs of the step, all ranks

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        out = model(**model_inputs(inputs))
        logps, counts = sequence_logps(out.logits, inputs)
        ref = self.refs.for_batch(inputs)
        loss_sum, _ = pair_loss(logps, ref, counts=counts, **self.loss_kw)
        loss = loss_sum / num_items_in_batch * self.accelerator.num_processes  # DDP averages
        return (loss, out) if return_outputs else loss


def test_hf_trainer_recipe_equals_trl(tmp_path):
    """The README's Hugging Face Trainer recipe (PairTrainer, as written there): one step of plain
    SGD (lr 1, no clipping) over micro-batches of 1 and 3 pairs (gradient_accumulation_steps=2)
    moves every weight by minus TRL's gradient on the same 4 pairs unpacked."""
    pairs = make_pairs(8, seed=5, vocab=VOCAB)[:4]
    write_pair_pack(tmp_path / "pack", pairs, 96, rows=[[0], [1, 2, 3]])
    ds = PairDataset(tmp_path / "pack", cache_dir=tmp_path / "c")
    collator = ds.collator("hf")
    refs = ReferenceLogps.compute(tiny_llama(1), [collator([ds[i]]) for i in range(len(ds))])
    _, want_grads = trl_loss_and_grads(pairs, "sigmoid", tmp_path / "trl")
    model = tiny_llama(0)
    before = {k: p.detach().clone() for k, p in model.named_parameters()}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=1,
        gradient_accumulation_steps=2,
        max_steps=1,
        learning_rate=1.0,
        lr_scheduler_type="constant",
        optim="sgd",
        weight_decay=0.0,
        max_grad_norm=0.0,
        remove_unused_columns=False,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = PairTrainer(
        model=model, args=args, train_dataset=ds, data_collator=collator, refs=refs, beta=BETA
    )
    trainer.train()
    moved = {k: before[k] - p.detach() for k, p in model.named_parameters()}  # lr 1: the gradient
    diff = max_diff(moved, want_grads)
    print(f"HF Trainer recipe: grads |diff| {diff:.1e}")
    assert diff <= ATOL
