"""A built-in synthetic SFT set for demos and tests: multi-turn chats with a long-tailed length mix.

Every record is OpenAI chat JSONL, generated from a seed (no data is copied from anywhere):

    {"messages": [{"role": "system", "content": "..."},      # 40 % of records
                  {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "..."},   # 1-4 rounds (geometric)
                  ...],
     "tools": [...]}                                         # 8 % of records: one tool call round

Turn lengths are lognormal in words (answers: median 60 words, sigma 1.0; 2 % of answers are long
documents of about 1.5-4k words), so token lengths show the long right tail of real SFT data:
median of a few hundred tokens, p99 in the thousands.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

WORDS = (
    "the model data token batch packing length attention layer gradient loss training example "
    "question answer system user assistant document sequence position label mask kernel memory "
    "throughput latency shard parquet arrow numpy python compute padding waste budget schedule "
    "learning rate warmup decay epoch step optimizer adam weight bias norm residual head query key "
    "value cache prompt completion template chat turn reply explain why how what when which simple "
    "careful correct fast clear small large long short first last next every each because so and "
    "but or if then with without into over under about between"
).split()
TOPICS = [
    "sequence packing",
    "learning rates",
    "tokenizers",
    "attention masks",
    "data loaders",
    "mixed precision",
    "gradient accumulation",
    "evaluation",
    "fine-tuning",
    "checkpoints",
]
SYSTEMS = [
    "You are a helpful assistant.",
    "You are a concise expert in machine learning.",
    "Answer step by step and keep the final answer short.",
]
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_metric",
        "description": "Look up a training metric by run id and name.",
        "parameters": {
            "type": "object",
            "properties": {"run_id": {"type": "string"}, "metric": {"type": "string"}},
            "required": ["run_id", "metric"],
        },
    },
}


def _text(rng: np.random.Generator, n_words: int) -> str:
    words = rng.choice(WORDS, size=max(1, n_words))
    out, sentence = [], []
    for w in words:
        sentence.append(w)
        if len(sentence) >= rng.integers(6, 18):
            out.append(" ".join(sentence).capitalize() + ".")
            sentence = []
    if sentence:
        out.append(" ".join(sentence).capitalize() + ".")
    return " ".join(out)


def _words(rng, median: float, sigma: float, cap: int) -> int:
    return int(min(cap, max(1, rng.lognormal(np.log(median), sigma))))


def make_record(rng: np.random.Generator) -> dict:
    messages = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": str(rng.choice(SYSTEMS))})
    if rng.random() < 0.08:
        run = f"run-{rng.integers(100, 999)}"
        messages += [
            {"role": "user", "content": f"What was the final loss of {run}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "function": {
                            "name": "lookup_metric",
                            "arguments": {"run_id": run, "metric": "loss"},
                        },
                    }
                ],
            },
            {
                "role": "tool",
                "content": json.dumps({"run_id": run, "loss": round(float(rng.random() * 3), 4)}),
            },
            {"role": "assistant", "content": _text(rng, _words(rng, 25, 0.5, 200))},
        ]
        return {"messages": messages, "tools": [TOOL]}
    rounds = int(min(4, rng.geometric(0.55)))
    topic = str(rng.choice(TOPICS))
    for r in range(rounds):
        q = _text(rng, _words(rng, 18, 0.8, 400))
        messages.append({"role": "user", "content": (f"About {topic}: " if r == 0 else "") + q})
        long_doc = rng.random() < 0.02
        n = int(rng.integers(1500, 4000)) if long_doc else _words(rng, 60, 1.0, 1200)
        messages.append({"role": "assistant", "content": _text(rng, n)})
    return {"messages": messages}


def write_sample(path: str | Path, n: int = 600, seed: int = 0) -> Path:
    """Write `n` records to `path` (JSONL). Same n and seed → byte-identical file."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for _ in range(n):
            f.write(json.dumps(make_record(rng)) + "\n")
    return path
