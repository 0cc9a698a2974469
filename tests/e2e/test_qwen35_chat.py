"""Qwen3.5's chat format end to end: reasoning opened by the prompt, tool calls in the XML
syntax, the prompt token for token the real template's, through the official SDK.

The model: a random qwen35 (tools/make_random_llama.py: Gated DeltaNet and gated attention
layers) with the test model's tokenizer plus "<think>" and "</think>", Qwen3.5's chat
template (tests/golden/chat_qwen35.json: splash recognises it) and --favour-token "<think>":
whatever the input, it writes "<think>" every step. Qwen3.5's reply prompt already opens the
think block ("<think>\\n"), so with thinking on every token the model writes is reasoning
(each "<think>" is text inside the block) until the budget runs out and the engine closes the
block; with thinking off the prompt ends past an empty block and every "<think>" is reply
text. A named tool choice constrains the reply to an XML call of that tool (and turns
thinking off), which comes back as JSON arguments.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import openai
import pytest

from conftest import render_chat_template, start_server

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import make_random_llama as mrl  # noqa: E402

THINK = "<think>"
MODEL = "qwen35"
TEMPLATE = json.loads((REPO / "tests/golden/chat_qwen35.json").read_text())["template"]
WEATHER = {"type": "object",
           "properties": {"city": {"type": "string", "enum": ["Paris", "Zürich"]},
                          "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "days"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                           "parameters": WEATHER}}]
ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen35") / f"{MODEL}.gguf"
    tokenizer = mrl.with_tokens(mrl.read_tokenizer(model_path), [THINK, "</think>"], TEMPLATE)
    shape = mrl.QWEN_SHAPES["qwen35"]
    mrl.make_model(str(path), tokenizer, mrl.tensor_types("float", "F32", {}, shape.layers), shape,
                   name="random-qwen35", favour=THINK)
    srv = start_server(model=str(path))
    deadline = time.monotonic() + 10
    while "qwen3.5: ChatML with tools as JSON" not in srv.output():  # stderr may trail stdout's Ready
        assert time.monotonic() < deadline, srv.output()
        time.sleep(0.02)
    assert "recognised chat template" in srv.output()
    yield srv
    srv.stop()


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def test_every_token_is_reasoning_inside_the_block_the_prompt_opened(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, temperature=0)
    message = r.choices[0].message
    assert message.model_extra["reasoning_content"] == THINK * 10  # no opening markup of its own
    assert message.content == ""
    assert r.usage.completion_tokens_details.reasoning_tokens == 10


def test_thinking_off_makes_every_token_reply_text(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, temperature=0,
                                    extra_body={"reasoning_effort": "none"})
    assert r.choices[0].message.content == THINK * 5
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})


def test_budget_closes_the_block_then_the_reply_follows(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=530, temperature=0,
                                    reasoning_effort="minimal")  # 512 thinking tokens
    message = r.choices[0].message
    assert message.model_extra["reasoning_content"] == THINK * 512
    assert message.content and message.content == THINK * (len(message.content) // len(THINK))


def test_named_tool_is_an_xml_call_returned_as_json_arguments(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, max_tokens=200, temperature=0,
                                    tool_choice={"type": "function", "function": {"name": "get_weather"}})
    calls = r.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "get_weather", r.choices[0].message
    arguments = json.loads(calls[0].function.arguments)
    assert arguments["city"] in ("Paris", "Zürich") and 1 <= arguments["days"] <= 7, arguments


def test_prompt_is_the_templates_rendering(oai, server):
    """Token for token what the real template renders with jinja2 (as transformers does): the
    tools as JSON lines, an earlier call with its reasoning in the XML syntax, its result, and
    the reply opened inside a think block. (The server's tool schemas keep their keys sorted.)"""
    import requests

    history = ASK + [
        {"role": "assistant", "content": "Checking.", "reasoning_content": "Use the tool.", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    # A tool's keys in the order clients send them (type, then name, description, parameters).
    listed = [{"type": "function", "function": {**t["function"], "parameters": json.loads(
        json.dumps(t["function"]["parameters"], sort_keys=True))}} for t in TOOLS]
    text = render_chat_template(TEMPLATE, messages=history, tools=listed, add_generation_prompt=True)
    assert "<think>\nUse the tool.\n</think>\n\nChecking.\n\n<tool_call>\n<function=get_weather>" in text
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    tokens = requests.post(server.url + "/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    sent = [dict(m) for m in history]
    sent[1]["tool_calls"] = [{**sent[1]["tool_calls"][0], "function": {
        "name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 3})}}]
    r = oai.chat.completions.create(model=MODEL, messages=sent, tools=TOOLS, max_tokens=1, temperature=0)
    assert r.usage.prompt_tokens == len(tokens)
