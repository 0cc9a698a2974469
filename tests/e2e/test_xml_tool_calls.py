"""Tool calls in the qwen3_coder XML syntax (Qwen3-Coder's template), through the official SDKs.

The model: a one-layer random qwen3 (tools/make_random_llama.py) with the default model's
tokenizer and Qwen3-Coder's chat template (tests/golden/chat_qwen3_coder.json: splash
recognises it, lists the tools as XML and writes calls as <function=...><parameter=...>).
Its choices are random; constrained decoding makes every call it writes a call of a known
tool, in the XML layout, with the parameters the schema asks for, and the engine turns the
XML back into each protocol's JSON arguments (a string parameter's raw text as a JSON string,
an integer as a number), streamed and not. A tool result sent back renders and is answered.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anthropic
import openai
import pytest

from conftest import render_chat_template, start_server

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import make_random_llama as mrl  # noqa: E402

MODEL = "coder"
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "enum": ["Paris", "Zürich", "New York"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "detail": {"enum": ["short", "long"]},
    },
    "required": ["city", "days"],
}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "The time",
                                           "parameters": {"type": "object", "properties": {}}}}]
ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def coder(model_path, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("coder") / f"{MODEL}.gguf"
    template = json.loads((REPO / "tests/golden/chat_qwen3_coder.json").read_text())["template"]
    tokenizer = mrl.with_tokens(mrl.read_tokenizer(model_path), [], template)
    shape = mrl.Shape(**{**mrl.QWEN_SHAPES["qwen3"].__dict__, "layers": 1})
    mrl.make_model(str(path), tokenizer, mrl.tensor_types("float", "F32", {}, shape.layers), shape,
                   name="random-coder")
    return str(path)


@pytest.fixture(scope="module")
def server(coder):
    srv = start_server("--draft", "none", model=coder)
    deadline = time.monotonic() + 10
    while "qwen3-coder: ChatML with the qwen3_coder XML tool-call format" not in srv.output():
        assert time.monotonic() < deadline, srv.output()
        time.sleep(0.02)
    yield srv
    srv.stop()


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def check_weather(arguments: dict) -> None:
    assert arguments["city"] in WEATHER["properties"]["city"]["enum"], arguments
    assert isinstance(arguments["days"], int) and 1 <= arguments["days"] <= 7, arguments
    assert set(arguments) <= {"city", "days", "detail"}, arguments
    if "detail" in arguments:
        assert arguments["detail"] in ("short", "long"), arguments


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_chat_named_tool_gives_json_arguments(oai, seed):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=200, temperature=1.0,
                                    seed=seed, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    check_weather(json.loads(calls[0].function.arguments))


def test_chat_streamed_arguments_are_the_call(oai):
    names, arguments = {}, {}
    finish = None
    for chunk in oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=300, temperature=1.0,
                                             seed=5, tool_choice="required", stream=True):
        if not chunk.choices:
            continue
        finish = chunk.choices[0].finish_reason or finish
        for call in chunk.choices[0].delta.tool_calls or []:
            if call.function and call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + ((call.function and call.function.arguments) or "")
    assert finish in ("tool_calls", "length")
    assert names, "no call streamed"
    finished = range(len(names) - (finish == "length"))  # a last call may be cut short
    for index in finished:
        parsed = json.loads(arguments[index])
        if names[index] == "get_weather":
            check_weather(parsed)
        else:
            assert names[index] == "get_time" and parsed == {}


def test_chat_tool_result_round_trip(oai):
    history = ASK + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = oai.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, max_tokens=5, temperature=0,
                                    tool_choice="none")
    assert r.choices[0].finish_reason == "length"
    assert not r.choices[0].message.tool_calls


def test_messages_tool_use_blocks(server):
    claude = anthropic.Anthropic(base_url=server.url, api_key="none")
    r = claude.messages.create(model=MODEL, max_tokens=200, messages=ASK,
                               tools=[{"name": "get_weather", "description": "Weather forecast",
                                       "input_schema": WEATHER}],
                               tool_choice={"type": "tool", "name": "get_weather"})
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and len(uses) == 1
    check_weather(uses[0].input)


def test_responses_function_call(oai):
    r = oai.responses.create(model=MODEL, input="Weather in Paris?", max_output_tokens=200, temperature=1.0,
                             tools=[{"type": "function", "name": "get_weather", "parameters": WEATHER}],
                             tool_choice={"type": "function", "name": "get_weather"})
    calls = [item for item in r.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    check_weather(json.loads(calls[0].arguments))


def test_prompt_is_the_templates_rendering(oai, server):
    """The prompt splash builds is, token for token, what the real template renders (with
    jinja2, as transformers does): the tools as XML, an earlier call in the XML syntax and its
    result. (The server's tool schemas keep their keys sorted, as the golden file's do.)"""
    import requests

    template = json.loads((REPO / "tests/golden/chat_qwen3_coder.json").read_text())["template"]
    history = ASK + [
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    text = render_chat_template(template, messages=history, tools=json.loads(json.dumps(TOOLS, sort_keys=True)),
                                add_generation_prompt=True)
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in text
    tokens = requests.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    sent = [dict(m) for m in history]
    sent[1]["tool_calls"] = [{**sent[1]["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}}]
    r = oai.chat.completions.create(model=MODEL, messages=sent, tools=TOOLS, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == len(tokens)
