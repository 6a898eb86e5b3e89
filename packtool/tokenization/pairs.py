"""A batch of encoded preference pairs checked side against side: each pair's shared prompt.

The encode step encodes a pair record as two examples, chosen then rejected, each the prompt +
its answer rendered whole (apply_chat_template(prompt + [answer])):

    example 2k      chosen     ids    p0 p1 p2 p3 a0 a1 a2        labels -100 ×4, a0 a1 a2
    example 2k+1    rejected   ids    p0 p1 p2 p3 b0 b1           labels -100 ×4, b0 b1
                                      └ prompt ┘ = the leading -100 run, 4 tokens on both sides

    check_pairs(ids, labels, offsets, errors) -> (prompt_lengths int32[2n], why[n])

A pair is kept only when both sides encoded, each trains a token, and both start with the same
prompt: the same number of untrained tokens, the same ids there. Otherwise `why` says which side
failed and how, and the whole pair is refused (one record: no side is ever packed alone).

    unlike_trl(encoder, pairs, enc, why) -> int     the kept pairs TRL's DPOTrainer tokenizes otherwise

TRL (1.16, DPOTrainer._prepare_dataset) tokenizes a string pair's side as one string, prompt +
answer + the EOS text (not added when the answer ends with it); ours is tok(prompt) + tok(answer)
+ [EOS], the boundary exact. They differ where a token merges across the boundary or the answer
already ends with the EOS text:

    prompt "The sky is bl"  chosen "ue."   ours  The sky is bl | ue . <eos>    TRL  The sky is blue . <eos>
    prompt "Hi"  chosen "Yo<|im_end|>"     ours  Hi | Yo <eos> <eos>           TRL  Hi Yo <eos>

Only string pairs pay for it: each side tokenized once more, as TRL does, and compared.
"""

from __future__ import annotations

import numpy as np

from packtool.data.labels import leading_untrained, prompts_differ
from packtool.schema import IGNORE_INDEX

SIDES = ("chosen", "rejected")


def check_pairs(
    ids: np.ndarray, labels: np.ndarray, offsets: np.ndarray, errors: list[str | None]
) -> tuple[np.ndarray, list[str | None]]:
    """Per example its prompt length (the leading untrained run), per pair None or why it is refused."""
    offsets = np.asarray(offsets, dtype=np.int64)
    start, length = offsets[:-1], np.diff(offsets)
    prompt = leading_untrained(labels != IGNORE_INDEX, start, length).astype(np.int32)
    suspect = prompts_differ(ids, start[0::2], start[1::2], prompt[0::2], prompt[1::2])
    suspect |= (prompt == length)[0::2] | (prompt == length)[1::2]
    failed = np.array([e is not None for e in errors], dtype=bool)
    suspect |= failed[0::2] | failed[1::2]
    why: list[str | None] = [None] * suspect.size
    for k in np.flatnonzero(suspect).tolist():
        why[k] = _pair_problem(ids, offsets, errors, prompt, 2 * k, 2 * k + 1)
    return prompt, why


def _pair_problem(ids, offsets, errors, prompt, c, r) -> str | None:
    for side, i in zip(SIDES, (c, r), strict=True):
        if errors[i] is not None:
            return f"{side}: {errors[i]}"
        if prompt[i] == offsets[i + 1] - offsets[i]:
            return f"'{side}' trains no token: its answer is empty or carries no loss"
    p_c, p_r = int(prompt[c]), int(prompt[r])
    a = ids[offsets[c] : offsets[c] + p_c]
    b = ids[offsets[r] : offsets[r] + p_r]
    if p_c == p_r and np.array_equal(a, b):
        return None
    m = min(p_c, p_r)
    diff = np.flatnonzero(a[:m] != b[:m])
    at = int(diff[0]) if diff.size else m
    return (
        f"chosen and rejected do not start with the same prompt tokens (untrained runs of {p_c} and "
        f"{p_r} tokens, first different at token {at}): a token merged across the prompt/answer "
        "boundary, or a template that renders the prompt by what follows it; the pair is not packed"
    )


def encode_pairs(encoder, pairs: list[dict], keep: list[int]):
    """Both sides of every pair (formats.normalize's {"kind": "pair", "chosen", "rejected"})
    encoded in one call, chosen at 2k and rejected at 2k+1, then checked side against side: a
    refused pair's two sides both carry its reason. Returns (Encoded, each side's record row,
    unlike_trl: how many of the kept pairs TRL would tokenize into other ids)."""
    sides = [side for p in pairs for side in (p["chosen"], p["rejected"])]
    enc = encoder.encode(sides)
    # the prompt lengths the pack uses are read off the entry's labels (TokenizedData.as_pairs)
    _, why = check_pairs(enc.ids, enc.label_values, enc.offsets, enc.errors)
    for k, reason in enumerate(why):
        if reason is not None:
            enc.errors[2 * k] = enc.errors[2 * k + 1] = reason
    return enc, [row for row in keep for _ in range(2)], unlike_trl(encoder, pairs, enc, why)


def unlike_trl(encoder, pairs: list[dict], enc, why: list[str | None]) -> int:
    """How many pairs kept by check_pairs (`why` None) have a side whose ids differ from TRL's
    DPOTrainer tokenization of the same pair (module docstring).

    Chat pairs count 0 by construction: TRL's ids for a conversational side are
    apply_chat_template(prompt + answer), the whole conversation rendered and tokenized at once,
    which is exactly what each side is here (tests/test_preference.py); TRL only looks for the
    prompt/answer split point in those ids, it does not change them. (The template is the one the
    run used: TRL gives the same ids when its tokenizer carries it.)"""
    ks = [
        k
        for k, p in enumerate(pairs)
        if why[k] is None and p["chosen"].get("kind") == "prompt_completion"
    ]
    if not ks:
        return 0
    eos = encoder.spec.eos_token or ""  # (no EOS token: we add none; TRL cannot add its text)
    texts = []
    for k in ks:
        for side in SIDES:
            ex = pairs[k][side]
            answer = ex["completion"]
            texts.append(ex["prompt"] + (answer if answer.endswith(eos) else answer + eos))
    encode = encoder.backend.encode
    theirs = encoder._each(lambda t: encode(t, add_special_tokens=True), texts)
    offsets = enc.offsets
    differ = set()
    for j, item in enumerate(theirs):
        i = 2 * ks[j // 2] + j % 2
        ours = enc.ids[offsets[i] : offsets[i + 1]]
        if isinstance(item, str) or not np.array_equal(item[0], ours):
            differ.add(j // 2)
    return len(differ)
