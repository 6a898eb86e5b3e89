"""Preference records of every stored shape read as two Examples that share their prompt
(formats/pairs.py); pairs that cannot be preferred are refused in one line."""

from __future__ import annotations

import json

import pytest
from paths import SHARED_DATA

from packtool.config import ReadConfig
from packtool.formats import FormatError
from packtool.formats.detect import read_plan
from packtool.formats.pairs import read_pair

PLAN = read_plan(ReadConfig())
Q = {"role": "user", "content": "2+2?"}
A, B = {"role": "assistant", "content": "4"}, {"role": "assistant", "content": "5"}


def _roles(example):
    return [(m["role"], m["content"], m["weight"]) for m in example["messages"]]


def test_explicit_prompt_with_message_lists():
    p = read_pair({"prompt": [Q], "chosen": [A], "rejected": [B]}, PLAN)
    assert _roles(p["chosen"]) == [("user", "2+2?", 0.0), ("assistant", "4", None)]
    assert _roles(p["rejected"]) == [("user", "2+2?", 0.0), ("assistant", "5", None)]


def test_explicit_prompt_as_a_string_with_string_answers_under_a_chat_prompt():
    p = read_pair({"prompt": [Q], "chosen": "4", "rejected": "5"}, PLAN)
    assert _roles(p["chosen"])[-1] == ("assistant", "4", None)


def test_plain_text_pairs_are_prompt_completion():
    p = read_pair({"prompt": "Q: 2+2? A:", "chosen": " 4", "rejected": " 5"}, PLAN)
    assert (p["chosen"]["kind"], p["chosen"]["prompt"], p["chosen"]["completion"]) == (
        "prompt_completion", "Q: 2+2? A:", " 4",
    )  # fmt: skip


def test_implicit_prompt_is_the_shared_turns():
    earlier = [Q, {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}]
    p = read_pair({"chosen": [*earlier, {"role": "assistant", "content": "6"}],
                   "rejected": [*earlier, {"role": "assistant", "content": "7"}]}, PLAN)  # fmt: skip
    weights = [m["weight"] for m in p["chosen"]["messages"]]
    assert weights == [0.0, 0.0, 0.0, None]  # the earlier assistant turn is prompt: no loss


def test_implicit_text_prompt_follows_trl_extract_prompt():
    p = read_pair(
        {"chosen": "\n\nHuman: hi\n\nAssistant: yes", "rejected": "\n\nHuman: hi\n\nAssistant: no"},
        PLAN,
    )
    assert p["chosen"]["prompt"] == "\n\nHuman: hi\n\nAssistant:"
    assert (p["chosen"]["completion"], p["rejected"]["completion"]) == (" yes", " no")


def test_llama_factory_pairwise_sharegpt_and_margin_from_scores():
    rec = {"conversations": [{"from": "human", "value": "hi"}], "chosen": {"from": "gpt", "value": "hello"},
           "rejected": {"from": "gpt", "value": "go away"}, "score_chosen": 8.5, "score_rejected": 2}  # fmt: skip
    p = read_pair(rec, PLAN)
    assert _roles(p["rejected"]) == [("user", "hi", 0.0), ("assistant", "go away", None)]
    assert p["margin"] == 6.5


def test_role_mapping_applies_to_pairs():
    plan = read_plan(ReadConfig(roles=(("bot", "assistant"),)))
    p = read_pair({"prompt": [Q], "chosen": [{"role": "bot", "content": "4"}],
                   "rejected": [{"role": "bot", "content": "5"}]}, plan)  # fmt: skip
    assert p["chosen"]["messages"][-1]["role"] == "assistant"


@pytest.mark.parametrize(
    "record,match",
    [
        ({"prompt": [Q], "chosen": [A], "rejected": [A]}, "are the same"),
        ({"chosen": [Q, A], "rejected": [Q]}, "'rejected' has no turns after the prompt"),
        ({"chosen": "same", "rejected": "same"}, "empty after the prompt"),
        ({"prompt": [Q], "chosen": 4, "rejected": [B]}, "'chosen' is a int"),
        ({"prompt": [Q], "chosen": [A], "rejected": [B], "margin": "big"}, "'margin' is 'big'"),
    ],
)
def test_pairs_that_cannot_be_preferred_are_refused(record, match):
    with pytest.raises(FormatError, match=match):
        read_pair(record, PLAN)


@pytest.mark.skipif(
    not (SHARED_DATA / "preference").is_dir(), reason="needs ../shared/data/preference"
)
def test_the_shared_preference_files_read_as_pairs():
    records = json.loads((SHARED_DATA / "preference" / "dpo_zh_demo.json").read_text())
    lines = (SHARED_DATA / "preference" / "v1_dpo_demo.jsonl").read_text().splitlines()
    records += [json.loads(line) for line in lines]
    for rec in records:
        p = read_pair(rec, PLAN)
        c, r = p["chosen"]["messages"], p["rejected"]["messages"]
        n = sum(1 for m in c if m["weight"] == 0.0)
        assert n >= 1 and c[:n] == r[:n] and c[n:] != r[n:]
