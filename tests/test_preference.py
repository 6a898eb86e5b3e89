"""Preference pairs end to end (`packtool pack` → shards → `packtool verify`): every side's ids and
labels are what `AutoTokenizer.from_pretrained(folder).apply_chat_template(prompt + [answer])`
gives, for every input shape, with the built-in tokenizer and ../shared/tokenizers/*; pairs whose
sides do not share their prompt are refused whole and counted."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from paths import ROOT, SHARED_DATA, SHARED_TOKENIZERS
from ray_packs import cli

sys.path.insert(0, str(ROOT / "benchmarks"))
from families import prompt_ids  # noqa: E402
from zoo import expected_marked, template_text  # noqa: E402

Q = {"role": "user", "content": "What is 2 + 2?"}
BUILT = [
    {"prompt": [Q], "chosen": [{"role": "assistant", "content": "4."}],
     "rejected": [{"role": "assistant", "content": "Five, I think."}], "margin": 2.5},
    {"prompt": "Name a colour.", "chosen": "Blue.", "rejected": "A car."},
    {"chosen": [Q, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"},
                {"role": "assistant", "content": "6"}],
     "rejected": [Q, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"},
                  {"role": "assistant", "content": "33"}]},
    {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "human", "value": "Hi"}],
     "chosen": {"from": "gpt", "value": "Hello."}, "rejected": {"from": "gpt", "value": "Go away."},
     "score_chosen": 9, "score_rejected": 2},
    {"chosen_messages": [Q, {"role": "assistant", "content": [{"type": "text", "value": "4"}]}],
     "rejected_messages": [Q, {"role": "assistant", "content": [{"type": "text", "value": "22"}]}]},
]  # fmt: skip


def _tokenizers():
    out = [pytest.param(None, id="built-in")]
    for name in ("llama3", "gptoss"):
        folder = SHARED_TOKENIZERS / name
        mark = pytest.mark.skipif(not folder.is_dir(), reason=f"{folder} is absent")
        out.append(pytest.param(folder, id=name, marks=mark))
    return out


def _files(tmp_path: Path) -> list[Path]:
    built = tmp_path / "built.jsonl"
    built.write_text("".join(json.dumps(r) + "\n" for r in BUILT))
    files = [built]
    pref = SHARED_DATA / "preference"
    if pref.is_dir():
        head = tmp_path / "dpo_zh_head.json"
        head.write_text(json.dumps(json.loads((pref / "dpo_zh_demo.json").read_text())[:24]))
        files += [head, pref / "v1_dpo_demo.jsonl"]
    return files


def _hf(folder):
    from transformers import AutoTokenizer

    if folder is None:
        from packtool.tokenization.loading import builtin_tokenizer_dir

        folder = builtin_tokenizer_dir()
    return AutoTokenizer.from_pretrained(str(folder))


def _sides(out: Path) -> dict[tuple[int, int], tuple[list[int], list[int]]]:
    docs = {}
    for shard in sorted((out / "data").glob("*.parquet")):
        for row in pq.read_table(shard).to_pylist():
            at = 0
            for n, src, side in zip(
                row["seq_lengths"], row["source_index"], row["side"], strict=True
            ):
                docs[src, side] = (row["input_ids"][at : at + n], row["labels"][at : at + n])
                at += n
    return docs


@pytest.mark.parametrize("folder", _tokenizers())
def test_each_side_is_apply_chat_template_of_prompt_and_answer(tmp_path, folder):
    from packtool.config import ReadConfig
    from packtool.formats.normalize import normalize, template_messages
    from packtool.io.readers import iter_records

    hf = _hf(folder)
    for data in _files(tmp_path):
        out = tmp_path / f"out-{data.stem}"
        args = ["pack", data, "--len", "8192", "--out", out, "--no-cache"]
        r = cli(*args, *(["--tokenizer", folder] if folder else []))
        assert r.exit_code == 0, r.output
        m = json.loads((out / "manifest.json").read_text())
        assert m["task"] == "preference" and m["format"] == "preference"
        info = m["tokenizer"]
        text, marked = template_text(hf, info)
        assert marked
        prompt = prompt_ids(hf, text)
        records = [x.record for x in iter_records(str(data), ReadConfig())]
        docs = _sides(out)
        skipped = {s["source_index"] for s in m["skipped"]}
        assert m["preference"]["pairs"] + len(skipped) == len(records)
        for src, rec in enumerate(records):
            if src in skipped:
                assert (src, 0) not in docs and (src, 1) not in docs  # never one side alone
                continue
            pair = normalize(rec, "preference", ReadConfig())
            for side, key in ((0, "chosen"), (1, "rejected")):
                ex = pair[key]
                ids, labels = docs[src, side]
                if ex["kind"] == "prompt_completion":  # strings: no template, as TRL and SFT
                    head = hf(ex["prompt"])["input_ids"]
                    tail = hf(ex["completion"], add_special_tokens=False)["input_ids"]
                    assert ids == head + tail + [hf.eos_token_id], (data.name, src, key)
                    assert labels == [-100] * len(head) + tail + [hf.eos_token_id]
                    continue
                ref = hf.apply_chat_template(
                    template_messages(ex),
                    chat_template=text,
                    tokenize=True,
                    return_dict=True,
                    return_assistant_tokens_mask=True,
                )
                assert list(ref["input_ids"]) == ids, (data.name, src, key)
                want = expected_marked(hf, ids, ref["assistant_masks"], prompt, ex, "assistant")
                want[0] = -100  # every document's first label (pack's rule)
                assert np.array_equal(want, np.asarray(labels)), (data.name, src, key)
            c, r_ = docs[src, 0], docs[src, 1]
            p = next(i for i, v in enumerate(c[1]) if v != -100)
            assert c[0][:p] == r_[0][:p] and all(v == -100 for v in r_[1][:p])
        v = cli("verify", out, "--rows", "0")
        assert v.exit_code == 0, v.output


def test_a_pair_whose_sides_do_not_share_the_prompt_is_refused_whole(tmp_path):
    """Text pairs whose prompt ends mid-word: the boundary merges differently on each side."""
    recs = [
        {"prompt": "The colour of the sky is bl", "chosen": "ue.", "rejected": "ack at night."},
        {"prompt": "Say hi.", "chosen": " Hi!", "rejected": " No."},
    ]
    data = tmp_path / "t.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = cli("pack", data, "--len", "256", "--out", tmp_path / "o", "--no-cache")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert (
        m["counts"]["examples_read"] == 2 and m["preference"]["pairs"] + m["counts"]["skipped"] == 2
    )
    assert all(s["source_index"] in (0, 1) for s in m["skipped"])


def test_kto_and_mixtures_of_pairs_and_sft_are_refused(tmp_path):
    kto = tmp_path / "kto.jsonl"
    kto.write_text(json.dumps({"prompt": "a", "completion": "b", "label": True}) + "\n")
    r = cli("pack", kto, "--len", "64", "--out", tmp_path / "k")
    assert r.exit_code == 2 and "not KTO's unpaired answers" in " ".join(r.output.split())
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps(BUILT[0]) + "\n")
    (folder / "b.jsonl").write_text(
        json.dumps({"messages": [Q, {"role": "assistant", "content": "4"}]}) + "\n"
    )
    r = cli("pack", folder, "--len", "256", "--out", tmp_path / "m", "--no-cache")
    assert r.exit_code == 2 and "holds preference pairs but" in " ".join(r.output.split())


STRING_PAIRS = [
    {"prompt": "The sky is bl", "chosen": "ue.", "rejected": "ack."},  # a merge at the boundary
    {"prompt": "Say hi.", "chosen": " Hi!<|im_end|>", "rejected": " No."},  # ends in the EOS text
    {"prompt": "Name a colour.", "chosen": " Blue.", "rejected": " A car."},
]
CHAT_PAIRS = [
    {"prompt": [Q], "chosen": [{"role": "assistant", "content": "4."}],
     "rejected": [{"role": "assistant", "content": "Five."}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "The sky is bl"}],
     "chosen": [{"role": "assistant", "content": "ue<|im_end|>"}],
     "rejected": [{"role": "assistant", "content": "ack."}]},
]  # fmt: skip


def _trl_sequences(records: list[dict], hf, tmp_path: Path) -> list[tuple[list[int], list[int]]]:
    """TRL's own DPOTrainer._prepare_dataset on `records`: each pair's (prompt + chosen, prompt +
    rejected) ids."""
    import datasets
    from trl import DPOConfig
    from trl.trainer.dpo_trainer import DPOTrainer

    class Holder:  # what _prepare_dataset reads of the trainer
        _tokenizer = hf

    args = DPOConfig(
        output_dir=str(tmp_path / "trl"),
        dataset_num_proc=None,
        max_length=None,
        report_to=[],
        bf16=False,
        use_cpu=True,
    )
    ds = DPOTrainer._prepare_dataset(
        Holder(), datasets.Dataset.from_list(records), hf, args, "train"
    )
    return [(r["prompt_ids"] + r["chosen_ids"], r["prompt_ids"] + r["rejected_ids"]) for r in ds]


def test_the_manifest_counts_the_pairs_trl_tokenizes_otherwise(tmp_path):
    """preference.unlike_trl is the number of packed pairs whose ids differ from what TRL's own
    DPOTrainer._prepare_dataset gives on the same records: string pairs with a token merged across
    the boundary or an answer ending in the EOS text; chat pairs never. Fresh and from the cache."""
    data = tmp_path / "pairs.jsonl"
    records = STRING_PAIRS + CHAT_PAIRS
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "o"
    r = cli("pack", data, "--len", "256", "--out", out)
    assert r.exit_code == 0, r.output
    m = json.loads((out / "manifest.json").read_text())
    assert m["preference"]["pairs"] == len(records) and not m["skipped"]
    hf = _hf(None)
    hf.chat_template = template_text(hf, m["tokenizer"])[0]  # the template the run used
    theirs = _trl_sequences(STRING_PAIRS, hf, tmp_path) + _trl_sequences(CHAT_PAIRS, hf, tmp_path)
    docs = _sides(out)
    unlike = [
        src
        for src, (chosen, rejected) in enumerate(theirs)
        if docs[src, 0][0] != chosen or docs[src, 1][0] != rejected
    ]
    assert unlike == [0, 1]  # the merge and the EOS text; not the plain string pair nor chat
    assert m["preference"]["unlike_trl"] == len(unlike)
    again = cli("pack", data, "--len", "256", "--out", tmp_path / "o2")
    assert again.exit_code == 0 and "from cache" in again.output, again.output
    m2 = json.loads((tmp_path / "o2" / "manifest.json").read_text())
    assert m2["preference"]["unlike_trl"] == len(unlike)
