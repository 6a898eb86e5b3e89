"""The manifest's counts and lists against the records tokenized again (the ACCOUNT check).

    manifest.json                         from the sources (TokenizedData, Expected.pieces)
      counts.examples_read        ==        num_read
      counts.skipped, skipped[]   ==        the records the tokenizer skipped (their source_index)
      counts.tokenized            ==        records tokenized
      counts.truncated, .split,   ==        what apply_overflow made of them at pack_len, overflow
        .split_parts, .dropped
      dropped[], truncated[],     ==        the same records (source_index), each with its length
        split[]  {source_index, length}
      tokens.in, tokens.loss_in   ==        sum of lengths, of loss tokens
      tokens.loss_first_token     ==        first labels that carried loss before the packer masked
                                            them to schema.IGNORE_INDEX (known only when every
                                            piece was compared: not under --sample)

Integrity checks the manifest's own arithmetic and the rows (accounting.py; docs/ARCHITECTURE.md,
"Semantics"); this check adds where the numbers come from: the data itself.
"""

from __future__ import annotations

import numpy as np

from packtool.verify import Check
from packtool.verify.accounting import listed
from packtool.verify.sources.compare import Compare
from packtool.verify.sources.load import Provenance
from packtool.verify.sources.names import ACCOUNT
from packtool.verify.sources.pieces import Expected


def account_check(
    manifest: dict, tokenized, exp: Expected, cmp: Compare | None, where: Provenance
) -> Check:
    """Check ACCOUNT; `cmp` is None under --sample (first-token loss is then not known)."""
    pieces = exp.pieces
    counts = manifest.get("counts") if isinstance(manifest.get("counts"), dict) else {}
    tokens = manifest.get("tokens") if isinstance(manifest.get("tokens"), dict) else {}
    problems = []
    # an example: a record's document(s), or a preference pair (its two sides, keyed
    # 2 * source_index + side in exp: pieces.pair_keys), listed by its record's source_index
    if manifest.get("task") == "preference":
        from packtool.pack.pairs import pair_outcomes

        oc = pair_outcomes(exp.lengths, exp.src // 2, pieces)
        src, lengths, where = oc.source, oc.length, getattr(where, "records", where)
        rec_rows = {"dropped": oc.dropped, "truncated": oc.truncated, "split": oc.split}
        record_of = lambda keys: exp.record_of(2 * keys) // 2  # noqa: E731
    else:
        src, lengths, record_of = exp.src, exp.lengths, exp.record_of
        rec_rows = {"dropped": pieces.dropped, "truncated": pieces.truncated, "split": pieces.split}
    have = {
        "examples_read": int(tokenized.num_read),
        "skipped": len(tokenized.skipped),
        "tokenized": len(src),
        "truncated": int(rec_rows["truncated"].size),
        "split": int(rec_rows["split"].size),
        "split_parts": int(pieces.split_parts.sum()),
        "dropped": int(rec_rows["dropped"].size),
    }
    for key, v in have.items():
        if key in counts and counts[key] != v:
            problems.append(f"counts.{key} is {counts[key]} in the manifest, {v} from the sources")
    t_have = {
        "in": int(exp.lengths.sum()),
        "loss_in": int(np.asarray(tokenized.loss_counts, np.int64).sum()),
    }
    if cmp is not None:  # every piece compared: first-token loss is known exactly
        t_have["loss_first_token"] = cmp.first_token_loss
    for key, v in t_have.items():
        if key in tokens and tokens[key] != v:
            problems.append(f"tokens.{key} is {tokens[key]} in the manifest, {v} from the sources")

    for key, rows in rec_rows.items():
        if not isinstance(manifest.get(key), list):
            continue
        lst = {int(x.get("source_index", -1)): x for x in listed(manifest, key)}
        now = {int(src[r]): int(lengths[r]) for r in rows.tolist()}
        extra, absent = sorted(set(lst) - set(now)), sorted(set(now) - set(lst))
        where.resolve(extra[:1] + absent[:1])
        if absent:
            i = absent[0]
            problems.append(
                f"{where(i)} (source_index {i}, {now[i]} tokens) is {key} at --len {exp.pack_len} "
                f"(--overflow {exp.overflow}) but not listed under {key} in the manifest"
            )
        if extra:
            i = extra[0]
            r = record_of(np.array([i]))[0]
            has = f"{where(i)} has {int(lengths[r])} tokens when tokenized again"
            has = has if r >= 0 else "is no tokenized record"
            problems.append(f"source_index {i} is listed under {key} in the manifest, but {has}")
        for i in sorted(set(lst) & set(now)):
            if lst[i].get("length") != now[i]:
                problems.append(
                    f"{where(i)} (source_index {i}) is listed under {key} with {lst[i].get('length')} "
                    f"tokens; tokenized again it has {now[i]}"
                )
                break
    sk = manifest.get("skipped")
    if isinstance(sk, list):
        rec = sorted(int(x.get("source_index", -1)) for x in sk if isinstance(x, dict))
        now = sorted(int(s.source_index) for s in tokenized.skipped)
        if rec != now:
            problems.append(
                f"skipped records differ: the manifest lists source indices {rec[:5]}, the sources give "
                f"{now[:5]}"
            )
    return Check(
        ACCOUNT,
        not problems,
        "; ".join(problems)
        or (
            f"{have['tokenized']} records tokenized again: counts, dropped, truncated, split and skipped agree with "
            "the manifest"
        ),
        dict(have),
    )
