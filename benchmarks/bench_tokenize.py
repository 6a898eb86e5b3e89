"""Tokenization throughput: our batch path vs the ceiling and vs one apply_chat_template per example.

Same conversations, same tokenizer (built-in Qwen3) and template (chatml-train), one process, one run:
  ours      Encoder.encode: jinja render (with generation spans) + one batch tokenizer call with
            offsets + numpy span→token mapping, in batches of 256
  ceiling   tokenizer(texts) on texts rendered beforehand (tokenization alone; no labels)
  per-ex    tokenizer.apply_chat_template(msgs, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True), one call per example (what peers do)
  ours xN   the same Encoder in N forked worker processes (N = cores), batches of 256, as
            `--num-proc` runs it inside datasets.map (workers return int32 arrays to the parent)

    python benchmarks/bench_tokenize.py [--n 3000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return min(times), out


_ENCODER = None
_EXAMPLES = None


def _work(bounds):
    a, b = bounds
    enc = _ENCODER.encode(_EXAMPLES[a:b])
    return enc.input_ids, enc.labels


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    import numpy as np
    import tokenizers
    import transformers

    from packtool.sample import make_record
    from packtool.tokenization.encode import Encoder
    from packtool.tokenization.loading import load_tokenizer, resolve_template

    rng = np.random.default_rng(0)
    convs = [make_record(rng) for _ in range(args.n)]
    examples = [{"kind": "chat", "messages": c["messages"], "tools": c.get("tools")} for c in convs]
    loaded = load_tokenizer(None)
    tok = loaded.tokenizer
    tpl = resolve_template(loaded, None)
    enc = Encoder(tok, tpl)
    texts = [tok.apply_chat_template(c["messages"], tools=c.get("tools"), chat_template=tpl.source,
                                     tokenize=False) for c in convs]

    def ours():
        n = 0
        for i in range(0, len(examples), 256):
            n += sum(len(x) for x in enc.encode(examples[i:i + 256]).input_ids)
        return n

    def ceiling():
        n = 0
        for i in range(0, len(texts), 256):
            n += sum(len(x) for x in tok(texts[i:i + 256], add_special_tokens=False)["input_ids"])
        return n

    def per_example():
        n = 0
        for c in convs:
            out = tok.apply_chat_template(c["messages"], tools=c.get("tools"), chat_template=tpl.source,
                                          tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            n += len(out["input_ids"])
        return n

    def ours_procs():
        import multiprocessing as mp

        global _ENCODER, _EXAMPLES
        _ENCODER, _EXAMPLES = enc, examples
        bounds = [(i, min(i + 256, len(examples))) for i in range(0, len(examples), 256)]
        with mp.get_context("fork").Pool(os.cpu_count()) as pool:
            return sum(len(x) for ids, _ in pool.map(_work, bounds) for x in ids)

    t_ours, n_ours = best(ours, args.repeat)
    t_procs, n_procs = best(ours_procs, args.repeat)
    t_ceil, n_ceil = best(ceiling, args.repeat)
    t_pe, n_pe = best(per_example, max(1, args.repeat - 1))
    assert n_ours == n_ceil == n_pe == n_procs, (n_ours, n_ceil, n_pe, n_procs)
    print(f"{args.n} conversations, {n_ours} tokens, transformers {transformers.__version__}, "
          f"tokenizers {tokenizers.__version__}, {os.cpu_count()} cores")
    rows = (("ours, 1 process", t_ours), (f"ours, {os.cpu_count()} processes", t_procs),
            ("ceiling (tokenize only)", t_ceil), ("apply_chat_template/ex", t_pe))
    for name, t in rows:
        print(f"  {name:26s} {t:7.3f} s  {n_ours / t / 1e6:6.2f} M tokens/s")
    print(f"  ours 1 process / ceiling     = {t_ceil / t_ours:.2f}x   (goal >= 0.85)")
    print(f"  ours {os.cpu_count()} processes / ceiling   = {t_ceil / t_procs:.2f}x")
    print(f"  ours 1 process / per-example = {t_pe / t_ours:.2f}x   (goal >= 1.5)")


if __name__ == "__main__":
    main()
