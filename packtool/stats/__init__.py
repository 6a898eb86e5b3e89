"""The pure core of `packtool profile`: numpy (and the packer's numba kernels), nothing else.
No typer, rich, pyarrow, transformers or matplotlib here (docs/ARCHITECTURE.md, "Module map").

    --synthetic SPEC ─┐
    --lengths FILE ───┴─ synthetic.py ─▶ lengths int32[n] ◀─ a TokenizedData's lengths
                                            │
             ┌──────────────────────────────┼─────────────────────────────────┐
             ▼                              ▼                                 ▼
    lengths.py                     strategies.py                         flops.py
    describe, length_histogram     simulate                              ModelSpec, GpuSpec
    → percentiles, Histogram       → {name: StrategyResult}  ─(slots, ─▶ training_flops, gpu_hours
                                                                work)    → FLOPs, GPU-hours

    sweep.py        parse_lens (--len 2048,4096 | 1024-8192 | 1024:8192:1024), SweepPoint
    choice.py       the decision, in numbers: cuts_by_len, pick_len (--len, --overflow, the rule),
                    pick_strategy
    advice.py       the decision in words: choose_len (with reasons), recommend → Recommendation
                    (strategy, --len, --overflow, what is cut, the `packtool pack` command)

Each name lives in its own submodule (`stats.lengths.describe`, `stats.advice.recommend`).
"""
