"""Tokenization alone: ours (render + tokenize + labels) against the raw `tokenizers` ceiling.

Same conversations (`packtool sample`'s generator, seed 0), same tokenizer (built-in Qwen3) and
template (chatml-train), one process, one run, best of --repeat:

  ours fast      Encoder(backend="fastokens", renderer="native"): the default path of a run whose
                 start-up check passed — native chatml-train render with generation spans,
                 fastokens batch encode, spans → tokens through per-token byte lengths
  ours fast/j2   the same with transformers' jinja renderer (what any other template gets)
  ours hf        Encoder(backend="hf", renderer="jinja"): the reference path (tokenizers, offsets)
  ceiling        tokenizers.Tokenizer.encode_batch(texts) on texts rendered beforehand: tokenization
                 alone, no rendering, no labels (the Rust tokenizer transformers uses, same JSON)
  per-example    tokenizer.apply_chat_template(..., return_assistant_tokens_mask=True), one call per
                 example (what peers do)

Every path must give the same total token count, and ours fast must give ids and labels identical
to ours hf (asserted). Goal: ours fast >= 5x the ceiling.

    python benchmarks/bench_tokenize.py [--n 5000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def best(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from importlib.metadata import version

    import numpy as np
    import tokenizers

    from packtool.demo_data import make_record
    from packtool.tokenization.encode import Encoder
    from packtool.tokenization.loading import TokenizerSpec, load_tokenizer
    from packtool.tokenization.template_probe import choose

    rng = np.random.default_rng(0)
    convs = [make_record(rng) for _ in range(args.n)]
    examples = [{"kind": "chat", "messages": c["messages"], "tools": c.get("tools")} for c in convs]
    loaded = load_tokenizer(None)
    tok = loaded.tokenizer
    spec = TokenizerSpec.from_loaded(loaded)
    tpl = choose(spec, None)  # the run's template and mode, as pack picks them
    texts = [
        tok.apply_chat_template(
            c["messages"], tools=c.get("tools"), chat_template=tpl.source, tokenize=False
        )
        for c in convs
    ]
    raw = tokenizers.Tokenizer.from_str(spec.backend_json)
    encoders = {
        "ours fast (fastokens, native render)": Encoder(
            spec, tpl, backend="fastokens", renderer="native"
        ),
        "ours fast/j2 (fastokens, jinja render)": Encoder(
            spec, tpl, backend="fastokens", renderer="jinja"
        ),
        "ours hf (tokenizers, jinja render)": Encoder(spec, tpl, backend="hf", renderer="jinja"),
    }
    for enc in encoders.values():  # build the Rust tokenizers outside the timings
        enc.encode(examples[:2])

    def run(enc):
        return lambda: [enc.encode(examples[i : i + 1024]) for i in range(0, len(examples), 1024)]

    def ceiling():
        return sum(
            len(e.ids)
            for i in range(0, len(texts), 1024)
            for e in raw.encode_batch(texts[i : i + 1024], add_special_tokens=False)
        )

    def per_example():
        n = 0
        for c in convs:
            out = tok.apply_chat_template(
                c["messages"],
                tools=c.get("tools"),
                chat_template=tpl.source,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
            n += len(out["input_ids"])
        return n

    results = {name: best(run(enc), args.repeat) for name, enc in encoders.items()}
    t_ceil, n_ceil = best(ceiling, args.repeat)
    t_pe, n_pe = best(per_example, 1)
    outs = {name: r[1] for name, r in results.items()}
    counts = {name: sum(len(e.ids) for e in out) for name, out in outs.items()}
    assert len(set(counts.values()) | {n_ceil, n_pe}) == 1, (counts, n_ceil, n_pe)
    fast, ref = (
        outs["ours fast (fastokens, native render)"],
        outs["ours hf (tokenizers, jinja render)"],
    )
    for a, b in zip(fast, ref, strict=True):
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.label_values, b.label_values)
    print(
        f"{args.n} conversations, {n_ceil:,} tokens; transformers {version('transformers')}, tokenizers "
        f"{version('tokenizers')}, fastokens {version('fastokens')}, {os.cpu_count()} cores, 1 process"
    )
    rows = [(name, t) for name, (t, _) in results.items()] + [
        ("ceiling: tokenizers encode_batch, pre-rendered", t_ceil),
        ("apply_chat_template per example", t_pe),
    ]
    for name, t in rows:
        print(
            f"  {name:48s} {t:7.3f} s  {n_ceil / t / 1e6:6.2f} M tokens/s  {t_ceil / t:5.2f}x ceiling"
        )
    print("  ids and labels: ours fast == ours hf (identical)")
    t_fast = results["ours fast (fastokens, native render)"][0]
    print(f"  ours fast / ceiling = {t_ceil / t_fast:.2f}x   (goal >= 5x)")


if __name__ == "__main__":
    main()
