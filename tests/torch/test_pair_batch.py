"""Preference packs on the trainer side: PairDataset, PairCollator's batch["pairs"], sequence_logps,
pair_loss, ReferenceLogps (keyed to pair and tokens) and the reward-model score."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packs import make_docs, write_pack  # noqa: E402
from pair_packs import make_pairs, pair_docs, sides, write_pair_pack  # noqa: E402

from packtool import schema  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.torch import (  # noqa: E402
    PackedCollator,
    PackedDataset,
    PairCollator,
    PairDataset,
    ReferenceLogps,
    global_pairs,
    model_inputs,
    pair_loss,
    reward_loss,
    sequence_logps,
    side_scores,
)

PACK_LEN = 40


@pytest.fixture
def pairs():
    return make_pairs(9, seed=2)


def test_pair_dataset_reads_sides_and_refuses_the_wrong_task(pairs, tmp_path):
    rows = write_pair_pack(tmp_path / "p", pairs, PACK_LEN, rows_per_shard=2)
    ds = PairDataset(tmp_path / "p", cache_dir=tmp_path / "c")
    assert len(ds) == len(rows) and ds.pairs == len(pairs)
    for i, want in enumerate(rows):
        item = ds[i]
        assert item["side"].dtype == torch.int8 and item["side"].tolist() == want["side"]
        assert item["input_ids"].tolist() == want["input_ids"].tolist()
        assert item["source_index"].tolist() == want["source_index"]
    with pytest.raises(PacktoolError, match="preference pack.*PairDataset"):
        PackedDataset(tmp_path / "p", cache_dir=tmp_path / "c")
    write_pack(tmp_path / "sft", make_docs(5), 32)
    with pytest.raises(PacktoolError, match="not a preference pack"):
        PairDataset(tmp_path / "sft", cache_dir=tmp_path / "c")
    # a manifest that says preference over shards without `side`
    m = json.loads((tmp_path / "sft" / schema.MANIFEST).read_text())
    (tmp_path / "sft" / schema.MANIFEST).write_text(json.dumps({**m, "task": "preference"}))
    with pytest.raises(PacktoolError, match="column side is missing"):
        PairDataset(tmp_path / "sft", cache_dir=tmp_path / "c2")[0]


@pytest.mark.parametrize("layout", ["plain", "padded-4-fixed-6"])
def test_pairs_of_a_batch(pairs, tmp_path, layout):
    multiple, max_docs = (4, 6) if layout != "plain" else (1, 0)
    rows = write_pair_pack(tmp_path / "p", pairs, 64, multiple=multiple, max_docs=max_docs)
    ds = PairDataset(tmp_path / "p", cache_dir=tmp_path / "c")
    items = [ds[i] for i in range(len(ds))]
    for mode, options in [
        ("hf", {}),
        ("varlen", {}),
        ("varlen", {"drop_padding": True}),
        ("flex", {}),
    ]:
        batch = ds.collator(mode, **options)(items)
        plain = PackedCollator(mode, fixed_docs=ds.fixed_docs, **options)(items)
        for k, v in plain.items():  # the SFT batch, untouched
            assert torch.equal(batch[k], v) if torch.is_tensor(v) else batch[k] == v, k
        p = batch["pairs"]
        assert p["side"].tolist() == [0, 1] * len(pairs)
        assert p["pair"].tolist() == [j for j in range(len(pairs)) for _ in (0, 1)]
        assert p["source_index"].tolist() == [
            s for r in rows for s in r["source_index"][0::2] if s >= 0
        ]
        assert p["document"].shape == batch["labels"].shape
        ids, doc = batch["input_ids"].reshape(-1), p["document"].reshape(-1)
        for d, j in enumerate(p["source_index"].repeat_interleave(2).tolist()):
            want_ids = sides(pairs[j])[d % 2][0]
            assert ids[doc == d].tolist() == want_ids.tolist()  # each document's real tokens
            assert int(p["last"][d]) == int(torch.nonzero(doc == d).max())
    assert "seq_idx" in PairCollator.for_model({"model_type": "qwen3_next"})(items)
    assert type(PairCollator.for_model({"model_type": "llama"})) is PairCollator
    assert "pairs" not in model_inputs(batch) and "labels" not in model_inputs(batch)


def test_a_pair_split_across_rows_or_swapped_is_refused(pairs, tmp_path):
    def split(pairs_, members):  # pairs 1 and 2 split across rows, sides still alternating:
        c1, r1, c2, r2 = pair_docs(pairs_, [1, 2])  # rows [c0 r0 c1 r2], [c2 r1 c3 r3]
        return (
            [*pair_docs(pairs_, [0]), c1, r2]
            if members == [0, 1]
            else [c2, r1, *pair_docs(pairs_, [3])]
        )

    def odd(pairs_, members):  # rows [c0 r0 c1], [r1 c2 r2]
        docs = pair_docs(pairs_, [0, 1, 2])
        return docs[:3] if members == [0, 1] else docs[3:]

    for docs_of in (split, odd):
        write_pair_pack(
            tmp_path / docs_of.__name__, pairs[:4], 96, rows=[[0, 1], [2, 3]], docs_of=docs_of
        )
        ds = PairDataset(tmp_path / docs_of.__name__, cache_dir=tmp_path / "c")
        for i in range(2):
            with pytest.raises(ValueError, match="split across rows"):
                ds.collator()([ds[i]])

    def swapped(pairs_, members):
        docs = pair_docs(pairs_, members)
        return [docs[1], docs[0], *docs[2:]]

    write_pair_pack(tmp_path / "w", pairs[:2], 96, rows=[[0, 1]], docs_of=swapped)
    ds = PairDataset(tmp_path / "w", cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match="chosen, rejected alternating"):
        ds.collator()([ds[0]])


def _by_hand(logits, pairs_, order):
    """Per document: the summed log p of its answer tokens, each predicted from its own document."""
    out, n = [], []
    for d, j in enumerate(order.repeat_interleave(2).tolist()):
        ids, labels = sides(pairs_[j])[d % 2]
        lp = torch.log_softmax(logits[d][: len(ids) - 1].float(), -1)
        keep = torch.tensor(labels[1:]) != schema.IGNORE_INDEX
        tgt = torch.tensor(ids[1:]).long()
        out.append(float(lp[torch.arange(len(tgt)), tgt][keep].sum()))
        n.append(int(keep.sum()))
    return out, n


def test_sequence_logps_sum_each_documents_answer(pairs, tmp_path):
    write_pair_pack(tmp_path / "p", pairs, PACK_LEN, multiple=4)
    ds = PairDataset(tmp_path / "p", cache_dir=tmp_path / "c")
    items = [ds[i] for i in range(len(ds))]
    batch = ds.collator("hf")(items)
    torch.manual_seed(0)
    logits = torch.randn(*batch["input_ids"].shape, 64)
    doc = batch["pairs"]["document"]
    per_doc = [logits[doc == d] for d in range(2 * len(pairs))]  # each document's own slots
    want, want_n = _by_hand(per_doc, pairs, batch["pairs"]["source_index"])
    got, n = sequence_logps(logits, batch)
    assert n.tolist() == want_n and np.allclose(got.tolist(), want, atol=1e-5)
    # varlen without the pad tails: the same logps from the kept slots' logits
    flat = ds.collator("varlen", drop_padding=True)(items)
    keep = (
        torch.arange(PACK_LEN)[None, :]
        < torch.tensor([int(i["seq_lengths"].sum()) for i in items])[:, None]
    )
    got_v, n_v = sequence_logps(logits[keep][None], flat)
    assert torch.equal(n_v, n) and torch.allclose(got_v, got, atol=1e-6)
    # a document's first token is never predicted from the previous document, even if labelled
    labelled = dict(batch, labels=batch["input_ids"].clone())
    got_l, n_l = sequence_logps(logits, labelled)
    prompt = [
        len(pairs[j][0]) - 1 for j in batch["pairs"]["source_index"].repeat_interleave(2).tolist()
    ]
    assert (n_l - n).tolist() == prompt  # the prompt's predicted tokens, never the first token
    with pytest.raises(ValueError, match="logits hold"):
        sequence_logps(logits[:, :-1], batch)


def test_pair_loss_formulas_and_global_pairs():
    logps = torch.tensor([-3.0, -5.0, -2.0, -1.0])
    ref = torch.tensor([-4.0, -4.5, -2.5, -1.5])
    counts = torch.tensor([2, 4, 1, 2])
    d = torch.tensor([(-3 + 4) - (-5 + 4.5), (-2 + 2.5) - (-1 + 1.5)])
    f = torch.nn.functional
    want = {
        "sigmoid": -f.logsigmoid(0.1 * d),
        "hinge": torch.relu(1 - 0.1 * d),
        "ipo": (torch.tensor([1 / 2 - (-0.5) / 4, 0.5 / 1 - 0.5 / 2]) - 5.0) ** 2,
        "simpo": -f.logsigmoid(0.1 * torch.tensor([-1.5 + 1.25, -2 + 0.5]) - 0.5),
    }
    for loss, per_pair in want.items():
        got, n = pair_loss(logps, ref, counts=counts, loss=loss, beta=0.1, gamma=0.5)
        assert n == 2 and abs(float(got) - float(per_pair.sum())) < 1e-6, loss
    with pytest.raises(ValueError, match="reference"):
        pair_loss(logps, loss="sigmoid")
    with pytest.raises(ValueError, match="counts"):
        pair_loss(logps, ref, loss="ipo")
    batches = [{"pairs": {"source_index": torch.arange(k)}} for k in (1, 3)]
    assert int(global_pairs(batches)) == 4


def _tiny(cls, **extra):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        initializer_range=0.2,
        attn_implementation="sdpa",
        pad_token_id=0,
        **extra,
    )
    torch.manual_seed(3)
    return getattr(transformers, cls)(config).eval()


def test_reference_logps_are_keyed_to_pair_and_tokens(pairs, tmp_path):
    model = _tiny("LlamaForCausalLM")
    write_pair_pack(tmp_path / "a", pairs, PACK_LEN)
    ds = PairDataset(tmp_path / "a", cache_dir=tmp_path / "c")
    collate = ds.collator("hf")
    refs = ReferenceLogps.compute(model, [collate([ds[i]]) for i in range(len(ds))])
    refs.save(tmp_path / "ref.npz")
    refs = ReferenceLogps.load(tmp_path / "ref.npz")
    assert len(refs) == len(pairs)
    # another layout of the same pairs (pack_len 96, one batch): the same values, from the store
    write_pair_pack(tmp_path / "b", pairs, 96)
    other = PairDataset(tmp_path / "b", cache_dir=tmp_path / "c")
    batch = other.collator("hf")([other[i] for i in range(len(other))])
    with torch.no_grad():
        fresh = sequence_logps(model(**model_inputs(batch)).logits, batch)[0]
    assert torch.allclose(refs.for_batch(batch), fresh, atol=1e-5)
    # one answer token changed: the stored values belong to other tokens
    changed = [(p, c.copy(), r) for p, c, r in pairs]
    changed[4][1][0] = (changed[4][1][0] % 63) + 1
    write_pair_pack(tmp_path / "d", changed, PACK_LEN)
    bad = PairDataset(tmp_path / "d", cache_dir=tmp_path / "c")
    batch = bad.collator("hf")([bad[i] for i in range(len(bad))])
    with pytest.raises(PacktoolError, match="source_index 4 were computed on other tokens"):
        refs.for_batch(batch)
    partial = ReferenceLogps.compute(model, [collate([ds[0]])])
    batch = collate([ds[len(ds) - 1]])
    with pytest.raises(PacktoolError, match="no reference log-probs for pair"):
        partial.for_batch(batch)


def test_reward_scores_read_each_sides_last_token(pairs, tmp_path):
    model = _tiny("LlamaForSequenceClassification", num_labels=1)
    write_pair_pack(tmp_path / "p", pairs, PACK_LEN)
    ds = PairDataset(tmp_path / "p", cache_dir=tmp_path / "c")
    batch = ds.collator("hf")([ds[i] for i in range(len(ds))])
    with torch.no_grad():
        hidden = model.base_model(**model_inputs(batch)).last_hidden_state
        scores = side_scores(model.score(hidden), batch)
        want = [
            float(model(input_ids=torch.tensor(ids[None]).long()).logits[0, 0])
            for j in batch["pairs"]["source_index"].tolist()
            for ids, _ in sides(pairs[j])
        ]  # the model's own pooled score, each side alone
    assert np.allclose(scores.tolist(), want, atol=1e-5)
    total, n = reward_loss(scores)
    s = torch.tensor(want)
    assert n == len(pairs)
    assert (
        abs(float(total) - float(-torch.nn.functional.logsigmoid(s[0::2] - s[1::2]).sum())) < 1e-5
    )
