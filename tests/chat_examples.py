"""Chat examples the renderers are compared on: a few hand-written conversations, 300 generated
(packtool.demo_data), shapes a renderer must get right or hand back, and every chat record of the
shared data (`../shared/data/`, where it is checked out)."""

from __future__ import annotations

import numpy as np
from paths import SHARED_DATA

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather by city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3? Explain ünïcödé 🙂 too."},
        {"role": "assistant", "content": "6 — ünïcödé 🙂", "reasoning_content": "3+3 is six."},
    ],
    [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
                }
            ],
        },
        {"role": "tool", "content": '{"temp": 21}'},
        {"role": "tool", "content": '{"wind": 3}'},
        {"role": "assistant", "content": "21 degrees and calm."},
    ],
]


def chat(messages, tools=None):
    return {"kind": "chat", "messages": messages, "tools": tools}


def chat_examples():
    from packtool.config import ReadConfig
    from packtool.demo_data import make_record
    from packtool.formats import FormatError
    from packtool.formats.detect import detect_format
    from packtool.formats.normalize import normalize
    from packtool.io.readers import iter_records

    rng = np.random.default_rng(7)
    out = [chat(m, TOOLS if k == 2 else None) for k, m in enumerate(CONVERSATIONS)]
    for _ in range(300):
        r = make_record(rng)
        out.append(chat(r["messages"], r.get("tools")))
    odd = [  # shapes the renderer must get right or hand to jinja
        [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"function": {"name": "f", "arguments": "{}"}},
                    {"name": "g", "arguments": {"a": [1, "é"]}},
                ],
            }
        ],
        [
            {"role": "system", "content": "s"},
            {"role": "system", "content": "again"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "thinking": "\nhmm\n"},
        ],
        [
            {"role": "tool", "content": "t1"},
            {"role": "tool", "content": "t2"},
            {"role": "assistant", "content": "x"},
        ],
        [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "reasoning_content": "", "reasoning": "r"},
        ],
        [
            {"role": "user", "content": ["not", "a", "string"]},
            {"role": "assistant", "content": "x"},
        ],
        [
            {
                "role": "assistant",
                "content": "x",
                "tool_calls": [{"function": {"name": None, "arguments": "{}"}}],
            }
        ],
    ]
    out += [chat(m, TOOLS if k == 0 else None) for k, m in enumerate(odd)]
    if SHARED_DATA.is_dir():
        cfg = ReadConfig()
        for f in sorted(SHARED_DATA.glob("*.json*")):
            fmt = None
            for rec in iter_records(str(f), cfg):
                try:
                    fmt = fmt or detect_format(rec.record, cfg)[0]
                    ex = normalize(rec.record, fmt, cfg)
                except FormatError:
                    continue
                if ex["kind"] == "chat" and ex["messages"]:
                    out.append(ex)
    return out
