"""Tokenization alone: ours (render + tokenize + labels) against the raw `tokenizers` ceiling and
TRL's per-example apply_chat_template, for each tokenizer under test.

Same conversations (`packtool sample`'s generator, seed 0), one process, one run, best of --repeat;
the packtool of this tree (not the installed one). Wall time, and for ours the CPU time of the
process beside it (one thread: on a shared box the CPU time is what the code costs, wall time
also counts the waits for a core).
Tokenizers: --tokenizer FOLDER (repeatable; "built-in" = the built-in Qwen3 one, the default) or
--tokenizers all (the built-in one and every folder of ../shared/tokenizers). The template is the
one `packtool pack` picks: chatml-train for the built-in tokenizer, `trl:X_training` (TRL's
training version of the folder's own template X, see families.folder_tok) for a folder:

  ours fast      Encoder(backend="fastokens", renderer=<the run's>): the default path of a run whose
                 start-up check passed — the renderer chain of packtool.tokenization.render from
                 its top: built-in: native chatml-train render with generation spans; TRL's
                 gptoss_training: rendered natively (render/native.py); any other
                 template: the compiled renderer (MiniJinja); then fastokens batch encode, spans →
                 tokens through per-token byte lengths
  ours fast/mj   built-in and TRL's templates above: the same with MiniJinja alone (what any other
                 template gets)
  ours fast/j2   the same with transformers' jinja renderer (a template MiniJinja cannot compile)
  ours hf        Encoder(backend="hf", renderer="jinja"): the reference path (tokenizers, offsets)
  ceiling        tokenizers.Tokenizer.encode_batch(texts) on texts rendered beforehand: tokenization
                 alone, no rendering, no labels (the Rust tokenizer transformers uses, same JSON)
  per-example    tokenizer.apply_chat_template(..., chat_template=<TRL's template file>,
                 return_assistant_tokens_mask=True), one call per example (the TRL path)

Templates that write today's date (gpt-oss: strftime_now) get it fixed to packtool's date
(chat_template.DEFAULT_DATE) in the ceiling and per-example paths, as packtool fixes it, so that the
texts compare. Every path must give the same total token count, and ours fast must give ids and
labels identical to ours hf (asserted); ours fast against per-example (ids, and labels == where(
assistant_masks, ids, -100)) is counted and printed.

    python benchmarks/bench_tokenize.py [--n 5000] [--repeat 3] [--tokenizers all]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
from families import (  # noqa: E402
    Tok,
    has_tools,
    prompt_ids,
    reference_labels,
    reference_template,
    tokenizers_under_test,
)


def best(fn, repeat):
    """(best wall s, best CPU s of this process, the last result) of `repeat` runs."""
    walls, cpus = [], []
    out = None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus), out


def bench_one(tk: Tok, convs: list[dict], repeat: int) -> dict:
    import numpy as np
    import tokenizers

    from packtool.tokenization.chat_template import choose
    from packtool.tokenization.encode import Encoder
    from packtool.tokenization.loading import TokenizerSpec, load_tokenizer
    from packtool.tokenization.render import best, native_for

    if not tk.tools:  # Llama 3's template renders no tools: both paths get the records without
        convs = [c for c in convs if not has_tools(c)]
    examples = [{"kind": "chat", "messages": c["messages"], "tools": c.get("tools")} for c in convs]
    loaded = load_tokenizer(tk.folder)
    tok = loaded.tokenizer
    spec = TokenizerSpec.from_loaded(loaded)
    choice = tk.flags[tk.flags.index("--chat-template") + 1] if tk.flags else None
    tpl = choose(spec, choice)  # the run's template and mode, as pack picks them
    ref_template = reference_template(tk)
    texts = [
        tok.apply_chat_template(
            c["messages"], tools=c.get("tools"), chat_template=ref_template, tokenize=False
        )
        for c in convs
    ]
    raw = tokenizers.Tokenizer.from_str(spec.backend_json)
    renderer = best(tpl)[0]  # the run's: native (chatml-train), compiled, or jinja
    trl = renderer == "compiled" and native_for(tpl.text) is not None  # TRL's, natively
    fast = f"ours fast (fastokens, {'native' if trl else renderer} render)"
    hf = "ours hf (tokenizers, jinja render)"
    encoders = {fast: Encoder(spec, tpl, backend="fastokens", renderer=renderer)}
    if renderer == "native" or trl:
        mj = Encoder(spec, tpl, backend="fastokens", renderer="compiled")
        mj.render._own = False  # MiniJinja alone: no native renderer in front
        encoders["ours fast/mj (fastokens, compiled render)"] = mj
    if renderer != "jinja":
        encoders["ours fast/j2 (fastokens, jinja render)"] = Encoder(
            spec, tpl, backend="fastokens", renderer="jinja"
        )
    encoders[hf] = Encoder(spec, tpl, backend="hf", renderer="jinja")
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
        return [
            tok.apply_chat_template(
                c["messages"],
                tools=c.get("tools"),
                chat_template=ref_template,
                tokenize=True,
                return_dict=True,
                return_assistant_tokens_mask=True,
            )
            for c in convs
        ]

    results = {name: best(run(enc), repeat) for name, enc in encoders.items()}
    t_ceil, _, n_ceil = best(ceiling, repeat)
    t_pe, _, pe = best(per_example, 1)
    n_pe = sum(len(o["input_ids"]) for o in pe)
    outs = {name: r[2] for name, r in results.items()}
    counts = {name: sum(len(e.ids) for e in out) for name, out in outs.items()}
    assert len(set(counts.values()) | {n_ceil, n_pe}) == 1, (counts, n_ceil, n_pe)
    for a, b in zip(outs[fast], outs[hf], strict=True):
        assert np.array_equal(a.ids, b.ids) and np.array_equal(a.label_values, b.label_values)
    ours = [p for e in outs[fast] for p in zip(e.input_ids, e.labels, strict=True)]
    prompt = prompt_ids(tok, ref_template)
    same = same_less_prompt = 0
    for (ids, lab), o in zip(ours, pe, strict=True):
        rid = np.asarray(o["input_ids"])
        full = reference_labels(rid, o["assistant_masks"], prompt, False)
        less = reference_labels(rid, o["assistant_masks"], prompt, True)
        if np.array_equal(ids, rid) and np.array_equal(lab, full):
            same += 1
        elif np.array_equal(ids, rid) and np.array_equal(lab, less):
            same_less_prompt += 1
    rows = [(name, t, c) for name, (t, c, _) in results.items()] + [
        ("ceiling: tokenizers encode_batch, pre-rendered", t_ceil, None),
        ("apply_chat_template per example (TRL)", t_pe, None),
    ]
    print(
        f"\n{tk.name} tokenizer, template {tpl.name}: {len(convs)} conversations, {n_ceil:,} tokens"
    )
    for name, t, c in rows:
        cpu = f"  (CPU {c:6.3f} s, {n_ceil / c / 1e6:6.2f} M/s)" if c else ""
        print(
            f"  {name:48s} {t:7.3f} s  {n_ceil / t / 1e6:6.2f} M tokens/s  {t_ceil / t:5.2f}x ceiling"
            f"  {t_pe / t:6.2f}x per-example{cpu}"
        )
    date = " (date fixed to packtool's for both)" if tk.dated else ""
    print(
        f"  ids and labels: ours fast == ours hf (identical); == per-example: {same}/{len(pe)}{date}"
        + (
            f"; {same_less_prompt} more once the generation prompt {tok.decode(prompt)!r} TRL's "
            "template masks in at each assistant turn is left out (packtool trains what follows it)"
            if same_less_prompt
            else ""
        )
    )
    t_fast, c_fast = results[fast][:2]
    j2 = results.get("ours fast/j2 (fastokens, jinja render)")
    print(
        f"  ours fast / ceiling = {t_ceil / t_fast:.2f}x, per-example / ours fast = {t_pe / t_fast:.2f}x"
        + (f", ours fast / fast with jinja = {j2[0] / t_fast:.2f}x" if j2 else "")
    )
    return {
        "tokenizer": tk.name,
        "tokens": n_ceil,
        "fast_s": t_fast,
        "fast_cpu_s": c_fast,
        "per_example_s": t_pe,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokenizer", action="append", default=None, metavar="FOLDER")
    ap.add_argument("--tokenizers", choices=["all"], default=None)
    args = ap.parse_args()

    from importlib.metadata import version

    import numpy as np

    from packtool.demo_data import make_record

    rng = np.random.default_rng(0)
    convs = [make_record(rng) for _ in range(args.n)]
    print(
        f"transformers {version('transformers')}, tokenizers {version('tokenizers')}, fastokens "
        f"{version('fastokens')}, trl {version('trl')}, {os.cpu_count()} cores, 1 process, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    done = [
        bench_one(tk, convs, args.repeat)
        for tk in tokenizers_under_test(args.tokenizer, args.tokenizers)
    ]
    print(
        f"\n{'tokenizer':10s} {'tokens':>11s} {'ours fast M tok/s':>18s} {'(CPU)':>7s} "
        f"{'TRL per-example M tok/s':>24s} {'ratio':>7s}"
    )
    for d in done:
        print(
            f"{d['tokenizer']:10s} {d['tokens']:>11,} {d['tokens'] / d['fast_s'] / 1e6:18.2f} "
            f"{d['tokens'] / d['fast_cpu_s'] / 1e6:7.2f} "
            f"{d['tokens'] / d['per_example_s'] / 1e6:24.2f} {d['per_example_s'] / d['fast_s']:6.2f}x"
        )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
