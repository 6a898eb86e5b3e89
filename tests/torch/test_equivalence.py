"""Proof that training on packed rows equals training on the same examples unpacked (CPU, fp32).

Tiny random-weight decoders built from a config (no downloads): Llama (RoPE) and GPT-2 (absolute
positions, so a position that is not reset shows up in the logits, docs/ARCHITECTURE.md, "Semantics").

Attention paths, measured on CPU with transformers 5.24 / torch 2.13: sdpa, eager and flex_attention
all detect packed rows from restarting position_ids (no attention_mask, use_cache=False) and isolate
the documents; flex_attention compiles on first use (~45 s on CPU) so it runs in the slow test. A
reference varlen attention registered through transformers' AttentionInterface consumes the
collator's cu_seq_lens_q/k exactly as the flash-attention varlen kernel would (one causal attention
per segment of the flattened batch): the FlashAttention kernel itself is not exercised here.

Tolerances (fp32): loss rel 1e-5; every gradient within atol 1e-6 + rtol 1e-4 of the padded
reference (measured: loss ~1e-7 rel, gradients ~1e-7 abs). Training curves with gradient
accumulation 1 vs 4 agree within 1e-5 abs per step (measured ~1e-7). The wrong setups differ by
>= 1e-3 (measured 1e-2 .. 1e-1), two orders of magnitude above the tolerance.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
from packs import make_docs, real_pack, write_pack  # noqa: E402  (fixture writers)

from packtool.schema import IGNORE_INDEX  # noqa: E402
from packtool.torch import (  # noqa: E402
    PackedCollator,
    PackedDataset,
    PackedSampler,
    accumulation_groups,
    count_loss_tokens,
    document_block_mask,
    global_loss_tokens,
    token_loss_sum,
)

transformers = pytest.importorskip("transformers")

VOCAB = 64
PACK_LEN = 48
LOSS_RTOL = 1e-5
GRAD_ATOL, GRAD_RTOL = 1e-6, 1e-4
CURVE_ATOL = 1e-5
CURVE_WRONG_MIN = 1e-2
TOKEN_ATOL = 1e-5
WRONG_MIN = 0.1
INIT = 0.2  # wider than the default 0.02: attention is far from uniform, so leaks show

# --------------------------------------------------------------------------------------------------
# models and the reference varlen attention
# --------------------------------------------------------------------------------------------------


def segment_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """Reference varlen attention: one causal attention per [cu[i], cu[i+1]) of the flattened batch,
    which is what flash_attn_varlen_func computes from cu_seq_lens_q/k."""
    cu = kwargs.get("cu_seq_lens_q")
    if (
        cu is None
        or not torch.equal(cu, kwargs.get("cu_seq_lens_k"))
        or kwargs.get("max_length_q") is None
    ):
        raise AssertionError(
            "the reference varlen attention needs cu_seq_lens_q/k and max_length_q/k"
        )
    batch, heads, length, dim = query.shape
    groups = heads // key.shape[1]
    key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
    q, k, v = (t.transpose(1, 2).reshape(batch * length, heads, dim) for t in (query, key, value))
    if int(cu[-1]) != q.shape[0]:
        raise AssertionError(
            f"cu_seq_lens ends at {int(cu[-1])}, the batch has {q.shape[0]} tokens"
        )
    assert max(int(b - a) for a, b in zip(cu[:-1], cu[1:], strict=True)) == kwargs["max_length_q"]
    out = torch.empty_like(q)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
        seg = [t[a:b].transpose(0, 1) for t in (q, k, v)]
        out[a:b] = torch.nn.functional.scaled_dot_product_attention(
            *seg, is_causal=True, scale=scaling
        ).transpose(0, 1)
    return out.reshape(batch, length, heads, dim), None


transformers.AttentionInterface.register("packtool_segments", segment_attention)


def tiny_model(kind: str, attn: str, seed: int = 0):
    torch.manual_seed(seed)
    if kind == "llama":
        cfg = transformers.LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=128,
            initializer_range=INIT,
            attn_implementation=attn,
        )
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(
            vocab_size=VOCAB,
            n_embd=32,
            n_layer=2,
            n_head=4,
            n_positions=128,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=1,
            eos_token_id=2,
            initializer_range=INIT,
            attn_implementation=attn,
        )
        model = transformers.GPT2LMHeadModel(cfg)
    return model.float().train()


def model_inputs(batch: dict) -> dict:
    return {k: v for k, v in batch.items() if k != "labels"}


def loss_and_grads(model, batches: list[dict]):
    """Token-weighted loss over all `batches` (one optimizer step) and the resulting gradients."""
    model.zero_grad(set_to_none=True)
    n = global_loss_tokens(batches)
    total = 0.0
    for b in batches:
        loss = token_loss_sum(model(**model_inputs(b)).logits, b["labels"]) / n
        loss.backward()
        total += float(loss.detach())
    return total, {
        k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None
    }


def token_losses(model, batch: dict) -> torch.Tensor:
    """Per-token next-token loss at every loss position, in row-major order (no gradient)."""
    with torch.no_grad():
        logits = model(**model_inputs(batch)).logits[..., :-1, :]
    labels = batch["labels"][..., 1:]
    keep = labels != IGNORE_INDEX
    return torch.nn.functional.cross_entropy(logits[keep], labels[keep], reduction="none")


def padded_batch(docs) -> dict:
    """The same documents unpacked: one per row, right-padded, with a 0/1 attention_mask."""
    width = max(len(ids) for ids, _ in docs)
    ids = torch.zeros(len(docs), width, dtype=torch.long)
    labels = torch.full((len(docs), width), IGNORE_INDEX, dtype=torch.long)
    mask = torch.zeros(len(docs), width, dtype=torch.long)
    for r, (d_ids, d_labels) in enumerate(docs):
        n = len(d_ids)
        ids[r, :n], labels[r, :n], mask[r, :n] = (
            torch.from_numpy(d_ids),
            torch.from_numpy(d_labels),
            1,
        )
        labels[r, 0] = IGNORE_INDEX
    return {"input_ids": ids, "labels": labels, "attention_mask": mask, "use_cache": False}


def assert_grads_close(got: dict, want: dict):
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(
            got[k], want[k], atol=GRAD_ATOL, rtol=GRAD_RTOL, msg=lambda m, k=k: f"{k}: {m}"
        )


def max_grad_diff(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max() / (b[k].abs().max() + 1e-12)) for k in b)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny matmuls on a shared 2-core box: one thread is ~20x faster than oversubscribed ones."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(
    scope="module", params=["fixture-writer", "packtool-pack", "padded-8", "padded-8-fixed-4"]
)
def small_pack(request, tmp_path_factory):
    """The same 30 documents packed by the tests' own writer and by packtool's planner + writer,
    also with documents padded to multiples of 8 (--pad-to-multiple) and 4 entries a row (--fixed-docs)."""
    root = tmp_path_factory.mktemp("equiv")
    docs = make_docs(30, seed=7, min_len=2, max_len=30, vocab=VOCAB)
    if request.param == "fixture-writer":
        write_pack(root / "pack", docs, PACK_LEN, rows_per_shard=4)
    elif request.param == "packtool-pack":
        real_pack(root / "pack", docs, PACK_LEN, shard_rows=4)
    else:
        fixed = request.param.endswith("fixed-4")
        real_pack(
            root / "pack",
            docs,
            PACK_LEN,
            shard_rows=4,
            pad_to_multiple=8,
            fixed_docs=fixed,
            max_docs=4 if fixed else 0,
        )
    ds = PackedDataset(root / "pack", cache_dir=root / "cache")
    return ds, docs


def packed_docs(ds) -> list:
    """The documents' source indices in row order (the empty entries of fixed docs, -1, left out)."""
    return [int(i) for k in range(len(ds)) for i in ds[k]["source_index"] if i >= 0]


# --------------------------------------------------------------------------------------------------
# (a) one step: packed == unpacked-and-padded
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind,attn,mode",
    [
        ("llama", "sdpa", "hf"),
        ("llama", "eager", "hf"),
        ("gpt2", "sdpa", "hf"),
        ("gpt2", "eager", "hf"),
        (
            "llama",
            "packtool_segments",
            "hf",
        ),  # cu_seq_lens_q/k over [B, L] rows (flash path, B > 1)
        ("llama", "packtool_segments", "varlen"),  # flattened tokens, pad dropped
    ],
)
def test_packed_step_equals_padded_step(small_pack, kind, attn, mode):
    ds, docs = small_pack
    items = [ds[i] for i in range(len(ds))]
    if mode == "hf":
        packed = ds.collator()(items)
    else:
        flat = ds.collator("varlen", drop_padding=True)(items)
        cu = flat["cu_seqlens"]
        packed = {
            "input_ids": flat["input_ids"][None],
            "labels": flat["labels"][None],
            "position_ids": flat["position_ids"][None],
            "use_cache": False,
            "cu_seq_lens_q": cu,
            "cu_seq_lens_k": cu,
            "max_length_q": flat["max_seqlen"],
            "max_length_k": flat["max_seqlen"],
        }
    order = packed_docs(ds)
    assert sorted(order) == list(range(len(docs)))  # every document is in the pack once
    padded = padded_batch([docs[i] for i in order])
    assert int(count_loss_tokens(packed["labels"])) == int(count_loss_tokens(padded["labels"]))

    model = tiny_model(kind, attn)
    loss_p, grads_p = loss_and_grads(model, [packed])
    reference = tiny_model(kind, "sdpa" if attn == "packtool_segments" else attn)
    loss_u, grads_u = loss_and_grads(reference, [padded])
    assert loss_p == pytest.approx(loss_u, rel=LOSS_RTOL)
    assert_grads_close(grads_p, grads_u)
    # token by token too (packed rows hold the documents in `order`, as the padded rows do)
    torch.testing.assert_close(
        token_losses(model, packed), token_losses(reference, padded), atol=TOKEN_ATOL, rtol=0
    )

    # the model's own loss with num_items_in_batch is the same token-weighted mean
    with torch.no_grad():
        own = model(**packed, num_items_in_batch=count_loss_tokens(packed["labels"])).loss
    assert float(own) == pytest.approx(loss_p, rel=LOSS_RTOL)


@pytest.mark.slow
def test_flex_attention_block_mask_equals_padded(small_pack):
    """flex_attention through transformers with the BlockMask from document_id (compiles: ~1 min).

    Forward only: torch 2.13 raises "FlexAttention does not support backward on CPU"."""
    ds, docs = small_pack
    batch = PackedCollator("flex")([ds[i] for i in range(len(ds))])
    padded = padded_batch([docs[i] for i in packed_docs(ds)])
    inputs = {
        "input_ids": batch["input_ids"],
        "position_ids": batch["position_ids"],
        "use_cache": False,
        "attention_mask": document_block_mask(batch["document_id"]),
        "labels": batch["labels"],
    }
    # a fresh compile per pack: recompiling for a second batch shape (dynamic shapes) hits an inductor
    # C++ codegen error on CPU in torch 2.13 ("'cur_qSplitSize8' was not declared")
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = token_losses(tiny_model("llama", "flex_attention"), inputs)
    torch.testing.assert_close(
        got, token_losses(tiny_model("llama", "sdpa"), padded), atol=TOKEN_ATOL, rtol=0
    )


# --------------------------------------------------------------------------------------------------
# (c) the wrong setups differ: the equivalence above has power
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_wrong_attention_setups_differ(small_pack, kind):
    ds, docs = small_pack
    packed = PackedCollator(flash_kwargs=False)([ds[i] for i in range(len(ds))])
    padded = padded_batch([docs[i] for i in packed_docs(ds)])
    _, grads_u = loss_and_grads(tiny_model(kind, "sdpa"), [padded])
    wrong = {
        # an all-ones attention_mask beside packed position_ids: sdpa stops isolating documents
        "all-ones attention_mask": dict(
            packed, attention_mask=torch.ones_like(packed["input_ids"])
        ),
        # the model's default use_cache=True builds a cache, which switches off packed detection
        "use_cache left on": {k: v for k, v in packed.items() if k != "use_cache"},
        # plain causal rows: positions keep counting and documents see each other
        "positions not reset": {k: v for k, v in packed.items() if k != "position_ids"},
    }
    reference_tokens = token_losses(tiny_model(kind, "sdpa"), padded)
    for name, batch in wrong.items():
        model = tiny_model(kind, "sdpa")
        _, grads_w = loss_and_grads(model, [batch])
        assert max_grad_diff(grads_w, grads_u) > WRONG_MIN, name
        assert float((token_losses(model, batch) - reference_tokens).abs().max()) > WRONG_MIN, name


# --------------------------------------------------------------------------------------------------
# (b) gradient accumulation 1 vs 4 at equal global batch; (c) per-micro-batch means differ
# --------------------------------------------------------------------------------------------------


def train(ds, *, micro: int, accum: int, steps: int, per_micro_mean: bool = False) -> list[float]:
    model = tiny_model("llama", "sdpa", seed=1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.0)
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=micro,
        sampler=PackedSampler(ds, seed=11),
        collate_fn=PackedCollator(),
        drop_last=True,
    )
    losses = []
    for group in accumulation_groups(loader, accum):
        n = global_loss_tokens(group)
        step_loss = 0.0
        for mb in group:
            summed = token_loss_sum(model(**model_inputs(mb)).logits, mb["labels"])
            if per_micro_mean:  # the classic mistake: mean per micro-batch, then average the means
                loss = summed / count_loss_tokens(mb["labels"]) / accum
            else:
                loss = summed / n
            loss.backward()
            step_loss += float(loss.detach())
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(step_loss)
        if len(losses) == steps:
            break
    return losses


@pytest.fixture(scope="module")
def train_pack(tmp_path_factory):
    root = tmp_path_factory.mktemp("accum")
    # few, varied documents per row: micro-batches of 2 rows carry very different loss-token counts
    docs = make_docs(90, seed=3, min_len=4, max_len=40, vocab=VOCAB)
    write_pack(root / "pack", docs, PACK_LEN, rows_per_shard=16)
    return PackedDataset(root / "pack", cache_dir=root / "cache")


def test_grad_accumulation_1_vs_4_overlap(train_pack):
    steps = 6
    assert len(train_pack) >= 8 * steps
    one = train(train_pack, micro=8, accum=1, steps=steps)
    four = train(train_pack, micro=2, accum=4, steps=steps)
    assert len(one) == len(four) == steps
    assert max(abs(a - b) for a, b in zip(one, four, strict=True)) < CURVE_ATOL
    assert one[-1] < one[0]  # it trains

    wrong = train(train_pack, micro=2, accum=4, steps=steps, per_micro_mean=True)
    assert max(abs(a - b) for a, b in zip(one, wrong, strict=True)) > CURVE_WRONG_MIN


# --------------------------------------------------------------------------------------------------
# the Hugging Face Trainer weights tokens the same way
# --------------------------------------------------------------------------------------------------


def test_hf_trainer_divides_by_the_step_token_count(train_pack, tmp_path):
    """Trainer (accelerate installed) + PackedDataset + PackedCollator: each micro-batch's loss is divided
    by the loss tokens of the whole accumulation step, exactly `global_loss_tokens`, and the logged step
    loss is the token-weighted mean computed by hand."""
    pytest.importorskip("accelerate")
    from transformers import Trainer, TrainingArguments

    model = tiny_model("llama", "sdpa", seed=2)
    initial = tiny_model("llama", "sdpa", seed=2)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=4,
        max_steps=2,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = Trainer(
        model=model, args=args, train_dataset=train_pack, data_collator=PackedCollator()
    )
    calls = []
    compute_loss = trainer.compute_loss

    def spy(model, inputs, *a, **kw):
        calls.append(
            (
                {k: v.clone() if torch.is_tensor(v) else v for k, v in inputs.items()},
                kw.get("num_items_in_batch"),
            )
        )
        assert "attention_mask" not in inputs
        return compute_loss(model, inputs, *a, **kw)

    trainer.compute_loss = spy
    trainer.train()
    assert len(calls) == 8
    first_step = [b for b, _ in calls[:4]]
    for step in (calls[:4], calls[4:]):
        want = int(global_loss_tokens([b for b, _ in step]))
        assert {int(n) for _, n in step} == {want}
    with torch.no_grad():
        n = global_loss_tokens(first_step)
        by_hand = sum(
            float(token_loss_sum(initial(**model_inputs(b)).logits, b["labels"]) / n)
            for b in first_step
        )
    assert trainer.state.log_history[0]["loss"] == pytest.approx(by_hand, abs=1e-3)
