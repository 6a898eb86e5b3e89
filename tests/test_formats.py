"""Format detection and normalization: every format and variant, every bad-record error."""

from __future__ import annotations

import json

import pytest
from paths import SHARED_DATA

from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import AUTO, FORMATS, FormatError
from packtool.formats.detect import detect_format
from packtool.formats.normalize import normalize, template_messages

CFG = ReadConfig()
EXAMPLE_KEYS = ["kind", "messages", "tools", "text", "prompt", "completion"]
MESSAGE_KEYS = ["role", "content", "tool_calls", "reasoning_content", "weight", "name"]


def norm(record: dict, cfg: ReadConfig = CFG) -> dict:
    fmt, _ = detect_format(record, cfg)
    ex = normalize(record, fmt, cfg)
    assert list(ex) == EXAMPLE_KEYS
    for m in ex["messages"] or ():
        assert list(m) == MESSAGE_KEYS
    json.dumps(ex)  # plain, JSON-serializable
    return ex


def roles(ex: dict) -> list[str]:
    return [m["role"] for m in ex["messages"]]


def call(name: str, **args) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": args}}


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    "record, fmt, reason",
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "messages", "has 'messages' with role/content turns"),
        ({"conversations": [{"from": "human", "value": "x"}]}, "sharegpt", "has 'conversations' with from/value turns"),
        ({"prompt": "a", "completion": "b"}, "prompt-completion", "has 'prompt' and 'completion' as strings"),
        ({"prompt": [], "completion": []}, "prompt-completion", "as lists of messages"),
        ({"instruction": "a", "input": "", "output": "b"}, "alpaca", "has 'instruction' and 'output' (with 'input')"),
        ({"text": "hello"}, "text", "has 'text'"),
        ({"messages": [], "text": "rendered"}, "messages", "has 'messages'"),
    ],
)  # fmt: skip
def test_detect(record, fmt, reason):
    got, why = detect_format(record, CFG)
    assert got == fmt
    assert reason in why


def test_detect_forced_and_unknown_format():
    assert detect_format({"text": "x"}, ReadConfig(format="alpaca")) == (
        "alpaca",
        "forced by --format alpaca",
    )
    with pytest.raises(
        UsageError, match=r"--format 'chatml' is not one of messages\|prompt-completion"
    ):
        detect_format({"text": "x"}, ReadConfig(format="chatml"))
    with pytest.raises(UsageError, match="unknown format 'nope'"):
        normalize({"text": "x"}, "nope", CFG)
    assert set(FORMATS) == {
        "messages",
        "prompt-completion",
        "text",
        "alpaca",
        "sharegpt",
        "firefly",
        "preference",
        "chosen-sft",
    }


def test_detect_nothing_fits_lists_keys_and_formats():
    with pytest.raises(
        FormatError,
        match=r"fits no known format: it has keys 'question', 'answer'; known formats: messages",
    ):
        detect_format({"question": "q", "answer": "a"}, CFG)
    with pytest.raises(FormatError, match="prompt-completion needs both 'prompt' and 'completion'"):
        detect_format({"prompt": "q"}, CFG)
    with pytest.raises(FormatError, match="alpaca needs both 'instruction' and 'output'"):
        detect_format({"instruction": "q"}, CFG)
    with pytest.raises(FormatError, match="record is a list"):
        detect_format([1], CFG)  # type: ignore[arg-type]


def test_auto_detects_each_record_and_pretokenized_records_say_so():
    alpaca = {"instruction": "q", "output": "a"}
    assert normalize(alpaca, AUTO, CFG) == normalize(alpaca, "alpaca", CFG)
    assert normalize({"text": "t"}, AUTO, CFG)["kind"] == "text"
    with pytest.raises(FormatError, match="fits no known format: it has keys 'question'"):
        normalize({"question": "q"}, AUTO, CFG)
    with pytest.raises(
        FormatError,
        match=r"keys 'input_ids'; it is pre-tokenized \(input_ids\), and pre-tokenized "
        "and chat files cannot be mixed",
    ):
        detect_format({"input_ids": [1, 2]}, CFG)


# --------------------------------------------------------------------------- messages


def test_messages_openai_tools_and_weights():
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    rec = {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "2+3?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'},
                    }
                ],
                "weight": 0,
            },
            {"role": "tool", "content": "5", "name": "add"},
            {"role": "assistant", "content": "5", "weight": 1},
        ],
        "tools": tools,
    }
    ex = norm(rec)
    assert ex["kind"] == "chat" and ex["tools"] == tools
    assert roles(ex) == ["system", "user", "assistant", "tool", "assistant"]
    a = ex["messages"][2]
    assert a["content"] == "" and a["tool_calls"] == [call("add", a=2, b=3)] and a["weight"] == 0.0
    assert isinstance(a["weight"], float) and ex["messages"][4]["weight"] == 1.0
    assert ex["messages"][3]["name"] == "add" and ex["messages"][1]["weight"] is None


def test_messages_typed_parts_reasoning_tool_call_and_loss_weight():
    rec = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "Weather "}, {"type": "text", "text": "in Oslo?"}], "loss_weight": 0.0},
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "value": "Need the tool."},
                    {"type": "tool_call", "value": '{"name": "weather", "arguments": {"city": "Oslo"}}'},
                    {"type": "tool_call", "value": {"name": "time", "arguments": '{"tz": "CET"}'}},
                ],
                "loss_weight": 1.0,
            },
            {"role": "tool", "content": [{"type": "text", "value": "-3C"}]},
            {"role": "assistant", "content": [{"type": "reasoning", "value": "Cold."}, {"type": "text", "value": "It is -3C."}]},
        ],
        "tools": '[{"type": "function", "function": {"name": "weather", "parameters": {}}}]',
    }  # fmt: skip
    ex = norm(rec)
    u, a1, t, a2 = ex["messages"]
    assert u["content"] == "Weather in Oslo?" and u["weight"] == 0.0
    assert (
        a1["content"] == "" and a1["reasoning_content"] == "Need the tool." and a1["weight"] == 1.0
    )
    assert a1["tool_calls"] == [call("weather", city="Oslo"), call("time", tz="CET")]
    assert t["content"] == "-3C" and t["role"] == "tool"
    assert a2["content"] == "It is -3C." and a2["reasoning_content"] == "Cold."
    assert ex["tools"][0]["function"]["name"] == "weather"


def test_messages_reasoning_field_flat_tool_call_and_case_insensitive_roles():
    rec = {
        "messages": [
            {"role": "User", "content": "hi"},
            {"role": "ASSISTANT", "content": "", "reasoning_content": "think", "tool_calls": [{"name": "f", "arguments": {}}]},
        ]
    }  # fmt: skip
    ex = norm(rec)
    assert roles(ex) == ["user", "assistant"]
    assert ex["messages"][1]["reasoning_content"] == "think"
    assert ex["messages"][1]["tool_calls"] == [call("f")]


def test_arrow_style_none_fields_are_absent():
    # Parquet/Arrow gives every struct every key, filled with None.
    rec = {
        "messages": [
            {"role": "user", "content": "q", "tool_calls": None, "weight": None, "name": None},
            {"role": "assistant", "content": [{"type": "text", "text": None, "value": "a"}], "tool_calls": None, "weight": None, "name": None},
        ],
        "tools": None,
    }  # fmt: skip
    ex = norm(rec)
    assert [m["content"] for m in ex["messages"]] == ["q", "a"] and ex["tools"] is None


def test_no_assistant_turn_is_valid():
    ex = norm({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]})
    assert roles(ex) == ["system", "user"]


def test_template_messages_drops_none_and_weight():
    ex = norm(
        {
            "messages": [
                {"role": "user", "content": "q", "weight": 0},
                {"role": "assistant", "content": "a"},
            ]
        }
    )
    assert template_messages(ex) == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]


# --------------------------------------------------------------------------- prompt-completion, text, alpaca


def test_prompt_completion_strings():
    ex = norm({"prompt": "The sky is", "completion": " blue."})
    assert ex["kind"] == "prompt_completion" and ex["messages"] is None
    assert (ex["prompt"], ex["completion"]) == ("The sky is", " blue.")


def test_prompt_completion_conversational():
    rec = {
        "prompt": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "a"}],
    }
    ex = norm(rec)
    assert ex["kind"] == "chat" and roles(ex) == ["system", "user", "assistant"]
    assert [m["weight"] for m in ex["messages"]] == [0.0, 0.0, None]


def test_prompt_completion_errors():
    with pytest.raises(
        FormatError,
        match="'prompt' is a str and 'completion' a list; both must be strings or both lists",
    ):
        norm({"prompt": "q", "completion": [{"role": "assistant", "content": "a"}]})
    with pytest.raises(
        FormatError, match="prompt-completion record has no 'completion'; it has keys 'prompt'"
    ):
        normalize({"prompt": "q"}, "prompt-completion", CFG)
    with pytest.raises(FormatError, match="'completion' is empty"):
        norm({"prompt": "q", "completion": ""})
    with pytest.raises(FormatError, match="'completion' is an empty list"):
        norm({"prompt": [], "completion": []})


def test_text():
    ex = norm({"text": "Once upon a time"})
    assert ex["kind"] == "text" and ex["text"] == "Once upon a time" and ex["messages"] is None
    with pytest.raises(FormatError, match="'text' is a int, expected a string"):
        norm({"text": 3})
    with pytest.raises(FormatError, match="'text' is empty"):
        norm({"text": ""})


def test_alpaca_input_system_history():
    rec = {
        "system": "You translate.",
        "history": [["Hello?", "Bonjour ?"], ["Bye", "Au revoir"]],
        "instruction": "Translate to French.",
        "input": "Good night",
        "output": "Bonne nuit",
    }
    ex = norm(rec)
    assert roles(ex) == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert ex["messages"][1]["content"] == "Hello?" and ex["messages"][4]["content"] == "Au revoir"
    assert ex["messages"][5]["content"] == "Translate to French.\n\nGood night"
    assert ex["messages"][6]["content"] == "Bonne nuit"


def test_alpaca_empty_input_and_errors():
    ex = norm({"instruction": "hi", "input": "", "output": "hello"})
    assert [(m["role"], m["content"]) for m in ex["messages"]] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    with pytest.raises(
        FormatError, match="alpaca record has no 'output'; it has keys 'instruction'"
    ):
        normalize({"instruction": "hi"}, "alpaca", CFG)
    with pytest.raises(FormatError, match="'history' item 0 is not a \\[question, answer\\] pair"):
        norm({"instruction": "a", "output": "b", "history": [["only one"]]})
    with pytest.raises(FormatError, match="'output' is a list, expected a string"):
        norm({"instruction": "a", "output": ["b"]})


# --------------------------------------------------------------------------- sharegpt


def test_sharegpt_tags_function_call_observation_tools_string_system_column():
    tools = '[{"name": "search", "description": "d", "parameters": {"type": "object"}}]'
    rec = {
        "system": "sys prompt",
        "tools": tools,
        "conversations": [
            {"from": "human", "value": "find x"},
            {"from": "function_call", "value": '{"name": "search", "arguments": {"q": "x"}}'},
            {"from": "observation", "value": "found"},
            {"from": "gpt", "value": "here"},
            {"from": "user", "value": "again, twice"},
            {"from": "function_call", "value": '[{"name": "search", "arguments": "{\\"q\\": \\"y\\"}"}, {"name": "search", "arguments": {"q": "z"}}]'},
            {"from": "tool", "value": "ok"},
            {"from": "assistant", "value": "done"},
        ],
    }  # fmt: skip
    ex = norm(rec)
    assert roles(ex) == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert ex["messages"][0]["content"] == "sys prompt"
    assert ex["messages"][2]["content"] == "" and ex["messages"][2]["tool_calls"] == [
        call("search", q="x")
    ]
    assert ex["messages"][6]["tool_calls"] == [call("search", q="y"), call("search", q="z")]
    # bare function schemas are wrapped OpenAI style
    assert ex["tools"] == [{"type": "function", "function": json.loads(tools)[0]}]


def test_sharegpt_system_turn_and_column():
    turns = [
        {"from": "system", "value": "S"},
        {"from": "human", "value": "q"},
        {"from": "gpt", "value": "a"},
    ]
    assert roles(norm({"conversations": turns, "system": "S"})) == ["system", "user", "assistant"]
    assert roles(norm({"conversations": turns[1:], "system": ""})) == ["user", "assistant"]
    assert norm({"conversations": turns, "tools": "[]"})["tools"] is None
    with pytest.raises(FormatError, match="both a 'system' column and a different system turn"):
        norm({"conversations": turns, "system": "other"})


def test_sharegpt_bad_function_call():
    turns = [{"from": "human", "value": "q"}, {"from": "function_call", "value": "{not json"}]
    with pytest.raises(FormatError, match=r"message 1 tool call is not valid JSON: .*\(col 2\)"):
        norm({"conversations": turns})
    turns[1]["value"] = '{"arguments": {}}'
    with pytest.raises(
        FormatError, match="message 1 tool call has no 'name'; it has keys 'arguments'"
    ):
        norm({"conversations": turns})
    turns[1]["value"] = '{"name": "f", "arguments": "[1, 2]"}'
    with pytest.raises(
        FormatError, match="message 1 tool call 'f' arguments are a list, expected an object"
    ):
        norm({"conversations": turns})
    turns[1]["value"] = '{"name": "f", "arguments": "{oops"}'
    with pytest.raises(FormatError, match="message 1 tool call 'f' arguments are not valid JSON"):
        norm({"conversations": turns})


# --------------------------------------------------------------------------- mapping


def test_role_mapping():
    rec = {
        "messages": [{"role": "human_speaker", "content": "hi"}, {"role": "bot", "content": "yo"}]
    }
    with pytest.raises(
        FormatError,
        match=r"message 0 has unknown role 'human_speaker'; known: system, user, assistant, tool .*--role human_speaker=OURS",
    ):
        norm(rec)
    cfg = ReadConfig(roles=(("human_speaker", "human"), ("bot", "assistant")))
    assert roles(norm(rec, cfg)) == ["user", "assistant"]
    # a role mapped onto a ShareGPT tag keeps the tag's meaning
    cfg = ReadConfig(roles=(("call", "function_call"),))
    ex = norm(
        {
            "conversations": [
                {"from": "human", "value": "q"},
                {"from": "call", "value": '{"name": "f"}'},
            ]
        },
        cfg,
    )
    assert ex["messages"][1]["tool_calls"] == [call("f")]
    with pytest.raises(UsageError, match="--role bot=robot: 'robot' is not a role"):
        norm(rec, ReadConfig(roles=(("bot", "robot"),)))


def test_column_mapping_top_level_and_turn_keys():
    rec = {
        "id": 7,
        "dialog": [{"speaker": "usr", "utterance": "hi"}, {"speaker": "bot", "utterance": "hello"}],
    }
    cfg = ReadConfig(
        columns=(("messages", "dialog"), ("role", "speaker"), ("content", "utterance")),
        roles=(("usr", "user"), ("bot", "assistant")),
    )
    fmt, why = detect_format(rec, cfg)
    assert (
        fmt == "messages" and why == "has 'messages' (column 'dialog') with speaker/utterance turns"
    )
    ex = norm(rec, cfg)
    assert [(m["role"], m["content"]) for m in ex["messages"]] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    # alpaca with renamed columns; the mapped column wins over one that already has our name
    cfg = ReadConfig(columns=(("instruction", "question"), ("output", "answer")))
    ex = norm({"question": "q", "answer": "a", "output": "ignored"}, cfg)
    assert [m["content"] for m in ex["messages"]] == ["q", "a"]
    with pytest.raises(UsageError, match="--column dialogue=x: 'dialogue' is not one of our names"):
        detect_format(rec, ReadConfig(columns=(("dialogue", "x"),)))


def test_turn_key_mapping_names_missing_key():
    cfg = ReadConfig(columns=(("role", "speaker"),))
    with pytest.raises(
        FormatError, match="message 0 has no 'speaker'; it has keys 'role', 'content'"
    ):
        norm({"messages": [{"role": "user", "content": "x"}]}, cfg)


# --------------------------------------------------------------------------- bad records


@pytest.mark.parametrize(
    "record, match",
    [
        ({"messages": []}, "empty conversation: 'messages' has no messages"),
        ({"conversations": []}, "empty conversation: 'conversations' has no messages"),
        ({"messages": "hi"}, "'messages' is a str, expected a list of messages"),
        ({"messages": ["hi"]}, "message 0 is a str, expected an object with a role"),
        ({"messages": [{"content": "x"}]}, "message 0 has no 'role' or 'from'; it has keys 'content'"),
        ({"messages": [{"role": 1, "content": "x"}]}, "message 0 role is a int, expected a string"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": 42}]},
         r"message 1 \(assistant\) content is int, expected a string or a list of typed parts"),
        ({"messages": [{"role": "user", "content": {"text": "a"}}]}, r"message 0 \(user\) content is dict"),
        ({"messages": [{"role": "user"}]}, r"message 0 \(user\) content is NoneType"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]},
         r"message 0 \(user\) has a content part of type 'image_url'; only text, reasoning and tool_call"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "value": 3}]}]},
         r"message 0 \(user\) text part 0 is int, expected a string"),
        ({"messages": [{"role": "user", "content": [7]}]}, r"message 0 \(user\) content part 0 is a int"),
        ({"messages": [{"role": "assistant", "content": "a", "weight": "high"}]},
         r"message 0 \(assistant\) weight is 'high'; .*must be 0 or 1"),
        ({"messages": [{"role": "assistant", "content": "a", "weight": True}]}, "weight is True"),
        ({"messages": [{"role": "assistant", "content": "a", "loss_weight": 0.5}]}, r"weight is 0\.5; .*0 or 1"),
        ({"messages": [{"role": "assistant", "content": "a", "reasoning_content": 1}]}, "reasoning is a int"),
        ({"messages": [{"role": "tool", "content": "a", "name": 5}]}, r"message 0 \(tool\) name is a int"),
        ({"messages": [{"role": "user", "content": "a"}], "tools": "[oops"}, "'tools' is not valid JSON"),
        ({"messages": [{"role": "user", "content": "a"}], "tools": 3}, "'tools' is a int, expected a list"),
        ({"messages": [{"role": "user", "content": "a"}], "tools": [1]}, "'tools' item 0 is a int"),
        ({"messages": [{"role": "assistant", "content": "", "tool_calls": 5}]}, "message 0 tool calls are a int"),
        ({"conversations": [{"from": "function_call"}]}, r"message 0 \(function_call\) has no content"),
        ({"conversations": [{"from": "human", "value": "q"}], "system": 1}, "'system' is a int"),
        ({"instruction": "a", "output": "b", "history": "x"}, r"'history' is a str, expected \[\[q, a\], ...\]"),
    ],
)  # fmt: skip
def test_bad_records(record, match):
    with pytest.raises(FormatError, match=match):
        norm(record)


def test_format_error_is_a_packtool_error_with_exit_code_1():
    from packtool.errors import PacktoolError

    with pytest.raises(PacktoolError) as info:
        norm({"messages": []})
    assert info.value.exit_code == 1 and "\n" not in str(info.value)


# --------------------------------------------------------------------------- real data


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="../shared/data not present")
def test_every_shared_file_normalizes():
    from packtool.io.readers import iter_records

    expected = {
        "axolotl_conversation.json": "sharegpt",
        "dummy_conversation.json": "sharegpt",
        "glaive_toolcall_en_demo.json": "sharegpt",
        "identity.json": "alpaca",
        "reason_tool_use_demo_50.jsonl": "messages",
        "toy_chat_fine_tuning.jsonl": "messages",
        "v1_sft_demo.jsonl": "messages",
    }
    files = sorted(p for p in SHARED_DATA.iterdir() if p.suffix in (".json", ".jsonl"))
    assert files
    for path in files:
        fmt = None
        count = 0
        for raw in iter_records(str(path), CFG):
            assert raw.error is None, raw.where
            if fmt is None:
                fmt, _ = detect_format(raw.record, CFG)
            ex = normalize(raw.record, fmt, CFG)
            assert ex["kind"] == "chat" and ex["messages"]
            count += 1
        assert count > 0
        if path.name in expected:
            assert fmt == expected[path.name], path.name


TURNS = [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": ""},
    {"role": "system", "content": "s"},
    {"role": "tool", "content": "42"},
    {"role": "human", "content": "sharegpt tag"},
    {"role": "gpt", "content": "sharegpt tag"},
    {"role": "observation", "content": "x"},
    {"role": "User", "content": "capitalized"},
    {"role": "function_call", "content": '{"name": "f", "arguments": {}}'},
    {"role": "user", "content": ["a ", {"type": "text", "text": "b"}]},
    {"role": "user", "content": None},
    {"role": "user", "content": 3},
    {"role": 3, "content": "x"},
    {"role": "wizard", "content": "x"},
    {"role": "assistant", "content": "x", "weight": 0},
    {"role": "assistant", "content": "x", "name": "bob"},
    {"from": "gpt", "value": "x"},
    {"role": "user", "value": "x"},
    {"content": "x", "value": "y"},
]


@pytest.mark.parametrize("turn", TURNS, ids=range(len(TURNS)))
@pytest.mark.parametrize("roles", [(), (("user", "assistant"),)])
def test_a_plain_turn_is_read_as_the_general_path_reads_it(turn, roles):
    """_turn's shortcut for {"role", "content"} turns gives what _read_turn gives (or the same
    error), with and without a --role map (which turns the shortcut off)."""
    from packtool.config import ReadConfig
    from packtool.formats import FormatError
    from packtool.formats.detect import read_plan
    from packtool.formats.turns import _read_turn, _turn

    plan = read_plan(ReadConfig(roles=roles))
    assert plan.plain == (not roles)

    def outcome(fn):
        try:
            return fn(dict(turn), 3, plan)
        except FormatError as e:
            return str(e)

    assert outcome(_turn) == outcome(_read_turn)
