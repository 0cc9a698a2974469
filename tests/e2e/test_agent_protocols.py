"""The three agent protocols end to end, driven by the official SDKs: Anthropic Messages
(anthropic), OpenAI Responses and OpenAI Chat Completions (openai) — tool calls forced and
round-tripped, multi-turn tool loops, structured output, streaming event shapes, token counting,
PDF input, errors in each protocol's own shape.

Environment: SPLASH_BIN, SPLASH_TEST_MODEL (fixtures: conftest.py). The model is SmolLM2-135M:
nothing here depends on what it says, only on the shape of what comes back. Tool calls are
forced (tool_choice required / named), schemas are small and bounded (enums, integer ranges,
maxLength) so a forced call finishes within the few tokens each request asks for, and
everything runs at temperature 0 unless a test samples on purpose.
"""
from __future__ import annotations

import base64
import json
import threading
import time

import pytest
import requests

from agent_checks import (apply_patch_errors, apply_patch_grammar, assert_valid, check_anthropic_stream,
                          check_chat_stream, check_responses_stream, make_pdf, parse_json_object,
                          raw_error_type, sse_events)
from conftest import env_model_path

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

pytestmark = pytest.mark.skipif(env_model_path() is None, reason="SPLASH_TEST_MODEL is not set")

TIMEOUT = 120

WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 16},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "days", "unit"],
    "additionalProperties": False,
}
FILE_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 24}},
    "required": ["path"],
    "additionalProperties": False,
}
PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "member": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 3},
    },
    "required": ["name", "age", "member"],
    "additionalProperties": False,
}
WEATHER_Q = "What is the weather in Paris for the next 3 days?"
# The anthropic SDK has no sampling parameters: they go in the body.
T0 = {"temperature": 0}
SCHEMAS = {"get_weather": WEATHER_SCHEMA, "read_file": FILE_SCHEMA}


# --- fixtures ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(splash_server_module):
    return splash_server_module()


@pytest.fixture(scope="module")
def keyed_server(splash_server_module):
    return splash_server_module("--api-key", "sekrit-key")


@pytest.fixture(scope="module")
def served_id(server) -> str:
    return requests.get(f"{server}/v1/models", timeout=10).json()["data"][0]["id"]


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=str(server), api_key="x", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="x", max_retries=0, timeout=TIMEOUT)


@pytest.fixture(scope="module")
def no_eos_bias(model_path) -> dict[str, int]:
    """logit_bias banning every control token, so a generation runs until max_tokens."""
    from gguf import GGUFReader

    fields = GGUFReader(model_path).fields
    types = fields["tokenizer.ggml.token_type"].contents()
    banned = {str(i): -100 for i, t in enumerate(types) if t == 3}
    banned[str(fields["tokenizer.ggml.eos_token_id"].contents())] = -100
    return banned


def anthropic_tools():
    return [{"name": "get_weather", "description": "Get the weather forecast for a city",
             "input_schema": WEATHER_SCHEMA},
            {"name": "read_file", "description": "Read a file", "input_schema": FILE_SCHEMA}]


def responses_tools():
    return [{"type": "function", "name": "get_weather", "description": "Get the weather forecast for a city",
             "parameters": WEATHER_SCHEMA, "strict": True},
            {"type": "function", "name": "read_file", "description": "Read a file", "parameters": FILE_SCHEMA}]


def chat_tools():
    return [{"type": "function", "function": {"name": "get_weather", "description": "Get the weather forecast",
                                              "parameters": WEATHER_SCHEMA}},
            {"type": "function", "function": {"name": "read_file", "description": "Read a file",
                                              "parameters": FILE_SCHEMA}}]


def apply_patch_tool():
    return {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch",
            "format": {"type": "grammar", "syntax": "lark", "definition": apply_patch_grammar()}}


def assert_anthropic_error(resp, status: int, *needles: str) -> dict:
    where = f"{resp.request.method} {resp.request.url} -> {resp.status_code} {resp.text[:400]!r}"
    assert resp.status_code == status, where
    body = resp.json()
    assert set(body) >= {"type", "error"}, where
    kind = raw_error_type(body)
    for needle in needles:
        assert needle.lower() in body["error"]["message"].lower(), f"{needle!r} not named: {where}"
    return {"type": kind, "message": body["error"]["message"]}


# === Anthropic Messages ========================================================================

def test_messages_non_stream(claude):
    msg = claude.messages.create(model="claude-test-model", max_tokens=24, extra_body=T0,
                                 messages=[{"role": "user", "content": "Say hello."}])
    assert msg.type == "message" and msg.role == "assistant" and msg.id.startswith("msg_"), msg
    assert msg.model == "claude-test-model", "the requested model name is echoed"
    assert [b.type for b in msg.content] == ["text"] and msg.content[0].text, msg.content
    assert msg.stop_reason in ("end_turn", "max_tokens"), msg.stop_reason
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) > 5, msg.usage
    assert 0 < msg.usage.output_tokens <= 24, msg.usage


def test_messages_stream_events_and_final_message(claude):
    kwargs = dict(model="any-name", max_tokens=24, extra_body=T0, system="You are terse.",
                  messages=[{"role": "user", "content": "Write a short poem about the sea."}])
    full = claude.messages.create(**kwargs)
    raw_types, text = [], ""
    with claude.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type in ("message_start", "content_block_start", "content_block_delta",
                              "content_block_stop", "message_delta", "message_stop"):
                raw_types.append(event.type)
            if event.type == "message_start":
                start_usage = event.message.usage
            if event.type == "content_block_delta":
                text += event.delta.text
        final = stream.get_final_message()
    assert raw_types[0] == "message_start" and raw_types[-2:] == ["message_delta", "message_stop"], raw_types
    assert raw_types[1] == "content_block_start" and raw_types[-3] == "content_block_stop", raw_types
    assert set(raw_types[2:-3]) == {"content_block_delta"}, raw_types
    assert start_usage.input_tokens + (start_usage.cache_read_input_tokens or 0) > 5, start_usage
    assert start_usage.input_tokens > 0, "message_start must report real input tokens"
    assert final.content[0].text == text == full.content[0].text
    assert final.stop_reason == full.stop_reason
    assert final.usage.output_tokens == full.usage.output_tokens


def test_messages_stream_raw_sse(server):
    body = {"model": "m", "max_tokens": 16, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": "Hi"}]}
    resp = requests.post(f"{server}/v1/messages?beta=true", json=body, timeout=TIMEOUT,
                         headers={"anthropic-version": "2023-06-01", "anthropic-beta": "x,y"})
    assert resp.status_code == 200, resp.text
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    result = check_anthropic_stream(resp.content)
    assert "ping" in result["types"], result["types"]
    assert result["message_start"]["usage"]["input_tokens"] > 0
    assert [b["type"] for b in result["blocks"]] == ["text"], result["blocks"]
    assert result["usage"]["output_tokens"] > 0


def test_messages_tool_use_round_trip(claude):
    messages = [{"role": "user", "content": WEATHER_Q}]
    first = claude.messages.create(model="m", max_tokens=80, extra_body=T0, messages=messages,
                                   tools=anthropic_tools(), tool_choice={"type": "tool", "name": "get_weather"})
    assert first.stop_reason == "tool_use", first
    uses = [b for b in first.content if b.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and uses[0].id, first.content
    assert isinstance(uses[0].input, dict)
    assert_valid(uses[0].input, WEATHER_SCHEMA, "tool_use input")
    history = messages + [{"role": "assistant", "content": first.content}]
    results = [
        [{"type": "tool_result", "tool_use_id": uses[0].id, "content": "Sunny, 21 C"}],
        [{"type": "tool_result", "tool_use_id": uses[0].id, "is_error": True,
          "content": [{"type": "text", "text": "error: the weather service is down"}]}],
    ]
    for result in results:
        reply = claude.messages.create(model="m", max_tokens=24, extra_body=T0,
                                       messages=history + [{"role": "user", "content": result}],
                                       tools=anthropic_tools(), tool_choice={"type": "none"})
        assert reply.stop_reason in ("end_turn", "max_tokens"), reply
        assert [b.type for b in reply.content] == ["text"], reply.content


def test_messages_tool_use_streamed_input(claude):
    kwargs = dict(model="m", max_tokens=80, extra_body=T0, messages=[{"role": "user", "content": WEATHER_Q}],
                  tools=anthropic_tools(), tool_choice={"type": "tool", "name": "get_weather"})
    full = claude.messages.create(**kwargs)
    partial = ""
    with claude.messages.stream(**kwargs) as stream:
        for event in stream:
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial += event.delta.partial_json
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    use = [b for b in final.content if b.type == "tool_use"][0]
    assert json.loads(partial) == use.input == [b for b in full.content if b.type == "tool_use"][0].input


def test_messages_tool_loop_three_turns(claude):
    messages = [{"role": "user", "content": "Read the files a.txt, b.txt and c.txt one by one."}]
    ids = []
    for turn in range(3):
        msg = claude.messages.create(model="m", max_tokens=60, extra_body=T0, messages=messages,
                                     tools=anthropic_tools(), tool_choice={"type": "tool", "name": "read_file",
                                                                           "disable_parallel_tool_use": True})
        uses = [b for b in msg.content if b.type == "tool_use"]
        assert msg.stop_reason == "tool_use" and len(uses) == 1, (turn, msg)
        assert_valid(uses[0].input, FILE_SCHEMA, f"turn {turn} input")
        ids.append(uses[0].id)
        messages += [{"role": "assistant", "content": msg.content},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                                   "content": f"contents of file {turn}"}]}]
    assert len(set(ids)) == 3, f"tool_use ids repeat: {ids}"
    final = claude.messages.create(model="m", max_tokens=24, extra_body=T0, messages=messages,
                                   tools=anthropic_tools(), tool_choice={"type": "none"})
    assert final.stop_reason in ("end_turn", "max_tokens") and final.content[0].type == "text", final


def test_count_tokens(claude):
    base = dict(model="m", messages=[{"role": "user", "content": WEATHER_Q}])
    plain = claude.messages.count_tokens(**base).input_tokens
    # (without a system prompt the chat template adds the model's default one: use a longer one)
    with_system = claude.messages.count_tokens(system="You are a weather bot. " * 20, **base).input_tokens
    with_tools = claude.messages.count_tokens(tools=anthropic_tools(), **base).input_tokens
    assert 0 < plain < with_system, (plain, with_system)
    assert with_tools > plain + 20, (plain, with_tools)
    # The count is the prompt the model would see: the same as the usage of a real request.
    msg = claude.messages.create(max_tokens=1, **base)
    seen = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) + \
        (msg.usage.cache_creation_input_tokens or 0)
    assert seen == plain, (msg.usage, plain)


def test_count_tokens_is_not_queued_behind_generation(server, served_id, no_eos_bias, claude):
    """A long generation is running; count_tokens answers before it finishes."""
    state = {"chunks": 0, "done": False, "first": threading.Event()}
    body = {"model": served_id, "messages": [{"role": "user", "content": "Count to 1000."}], "stream": True,
            "max_tokens": 1500, "temperature": 0, "logit_bias": no_eos_bias}
    resp = requests.post(f"{server}/v1/chat/completions", json=body, stream=True, timeout=TIMEOUT)
    assert resp.status_code == 200

    def reader():
        try:
            for line in resp.iter_lines():
                if line.startswith(b"data: "):
                    state["chunks"] += 1
                    state["first"].set()
                    if line == b"data: [DONE]":
                        state["done"] = True
        except (requests.exceptions.RequestException, AttributeError, ValueError):
            pass
        state["first"].set()

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    assert state["first"].wait(TIMEOUT), "the generation never started"
    count = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": WEATHER_Q}],
                                         tools=anthropic_tools()).input_tokens
    done_when_counted = state["done"]
    chunks_when_counted = state["chunks"]
    resp.close()  # disconnect: cancels the generation
    thread.join(timeout=30)
    assert count > 0
    assert not done_when_counted, (f"count_tokens only answered after the generation finished "
                                   f"({chunks_when_counted} chunks)")


def test_stop_sequences(claude):
    kwargs = dict(model="m", max_tokens=40, extra_body=T0,
                  messages=[{"role": "user", "content": "Write a short poem about the sea."}])
    full = claude.messages.create(**kwargs).content[0].text
    words = full.split()
    assert len(words) >= 4, f"answer too short to pick a stop word from: {full!r}"
    stop = words[len(words) // 2]
    cut = claude.messages.create(stop_sequences=["NEVER-APPEARS", stop], **kwargs)
    assert cut.stop_reason == "stop_sequence", cut
    assert cut.stop_sequence == stop
    assert cut.content[0].text == full[: full.index(stop)]
    with claude.messages.stream(stop_sequences=[stop], **kwargs) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "stop_sequence" and final.stop_sequence == stop, final
    assert final.content[0].text == cut.content[0].text


def test_max_tokens_stop_reason(claude):
    msg = claude.messages.create(model="m", max_tokens=3, extra_body=T0,
                                 messages=[{"role": "user", "content": "Write a long story."}])
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3, msg


def test_max_tokens_over_the_context_is_clamped(server):
    resp = requests.post(f"{server}/v1/messages", timeout=TIMEOUT, json={
        "model": "m", "max_tokens": 10_000_000, "stop_sequences": ["\n", "."],
        "messages": [{"role": "user", "content": "Hi"}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["stop_reason"] in ("end_turn", "stop_sequence", "max_tokens"), resp.text


def test_messages_errors_have_anthropic_shape(server):
    url = f"{server}/v1/messages"
    err = assert_anthropic_error(requests.post(url, json={"model": "m", "messages": [
        {"role": "user", "content": "Hi"}]}, timeout=30), 400, "max_tokens")
    assert err["type"] == "invalid_request_error"
    err = assert_anthropic_error(requests.post(url, data=b'{"model": ', timeout=30,
                                               headers={"Content-Type": "application/json"}), 400)
    assert err["type"] == "invalid_request_error"
    for bad in ({"model": "m", "max_tokens": 5, "messages": []},
                {"model": "m", "max_tokens": 5, "messages": [{"role": "wizard", "content": "x"}]},
                {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
                 "tool_choice": {"type": "tool", "name": "nope"}, "tools": anthropic_tools()}):
        assert_anthropic_error(requests.post(url, json=bad, timeout=30), 400)
    assert requests.get(f"{server}/health", timeout=10).status_code == 200


def test_messages_image_block_is_400(claude):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model="m", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
            {"type": "text", "text": "What is this?"}]}])
    assert "vision" in str(info.value).lower(), info.value
    assert info.value.body["type"] == "error" if isinstance(info.value.body, dict) and "type" in info.value.body \
        else True


def test_messages_api_key(keyed_server):
    good = anthropic.Anthropic(base_url=str(keyed_server), api_key="sekrit-key", max_retries=0, timeout=TIMEOUT)
    bearer = anthropic.Anthropic(base_url=str(keyed_server), auth_token="sekrit-key", max_retries=0, timeout=TIMEOUT)
    bad = anthropic.Anthropic(base_url=str(keyed_server), api_key="wrong", max_retries=0, timeout=TIMEOUT)
    args = dict(model="m", max_tokens=2, messages=[{"role": "user", "content": "Hi"}])
    assert good.messages.create(**args).content
    assert bearer.messages.create(**args).content
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(**args)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.count_tokens(model="m", messages=args["messages"])
    raw = requests.post(f"{keyed_server}/v1/messages", json=args, timeout=30, headers={"x-api-key": "wrong"})
    assert raw.status_code == 401 and raw.json()["type"] == "error", raw.text


@pytest.mark.parametrize("where", ["output_config", "output_format"])
def test_messages_structured_output(claude, where):
    fmt = {"type": "json_schema", "schema": PERSON_SCHEMA}
    extra = {"output_config": {"format": fmt}} if where == "output_config" else {"output_format": fmt}
    for seed_prompt in ("Describe a person as JSON.", "Invent a club member."):
        msg = claude.messages.create(model="m", max_tokens=200, extra_body={"temperature": 0, **extra},
                                     messages=[{"role": "user", "content": seed_prompt}])
        assert msg.stop_reason == "end_turn", msg
        assert_valid(parse_json_object(msg.content[0].text), PERSON_SCHEMA, "structured output")


def pdf_document(data: bytes) -> dict:
    return {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                           "data": base64.b64encode(data).decode()}}


def test_messages_pdf_document(server, claude):
    pdf = make_pdf(["Hello PDF", "Second page of the file"])
    question = {"type": "text", "text": "What does the document say?"}
    without = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": [question]}])
    with_pdf = claude.messages.count_tokens(model="m", messages=[
        {"role": "user", "content": [pdf_document(pdf), question]}])
    one_page = claude.messages.count_tokens(model="m", messages=[
        {"role": "user", "content": [pdf_document(make_pdf(["Hello PDF"])), question]}])
    assert without.input_tokens < one_page.input_tokens < with_pdf.input_tokens, (without, one_page, with_pdf)
    msg = claude.messages.create(model="m", max_tokens=8, extra_body=T0,
                                 messages=[{"role": "user", "content": [pdf_document(pdf), question]}])
    assert msg.content and msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) \
        == with_pdf.input_tokens
    # The text reached the prompt, with page markers (the Chat Completions file part is the
    # same conversion; /apply-template shows the rendered prompt).
    url = "data:application/pdf;base64," + base64.b64encode(pdf).decode()
    prompt = requests.post(f"{server}/apply-template", timeout=30, json={"messages": [{"role": "user", "content": [
        {"type": "text", "text": "Summarize"}, {"type": "file", "file": {"filename": "a.pdf", "file_data": url}}]}]})
    assert prompt.status_code == 200, prompt.text
    text = prompt.json()["prompt"]
    assert "--- Page 1 ---" in text and "Hello PDF" in text and "--- Page 2 ---" in text, text
    assert text.index("Hello PDF") < text.index("--- Page 2 ---") < text.index("Second page of the file")
    # A text document source works too.
    txt = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "Hello text doc"}},
        question]}])
    assert txt.input_tokens > without.input_tokens
    # A damaged PDF is refused in the protocol's error shape.
    damaged = pdf[:70] + b"garbage" + pdf[-40:]
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        resp = requests.post(f"{server}{path}", timeout=30, json={"model": "m", "max_tokens": 4, "messages": [
            {"role": "user", "content": [pdf_document(damaged), question]}]})
        assert_anthropic_error(resp, 400, "pdf")


def test_messages_system_blocks_and_billing_header(server):
    """A system block starting with x-anthropic-billing-header is metadata, not prompt."""
    def count(system):
        resp = requests.post(f"{server}/v1/messages/count_tokens", timeout=30, json={
            "model": "m", "system": system, "messages": [{"role": "user", "content": "Hi"}]})
        assert resp.status_code == 200, resp.text
        return resp.json()["input_tokens"]

    plain = count([{"type": "text", "text": "You are terse."}])
    assert count("You are terse.") == plain
    billed = count([{"type": "text", "text": "x-anthropic-billing-header: cc_version=1.2.3; cc_entrypoint=cli;"},
                    {"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}])
    assert billed == plain, (billed, plain)


def test_messages_accepts_claude_code_fields(server):
    resp = requests.post(f"{server}/v1/messages?beta=true", timeout=TIMEOUT, json={
        "model": "claude-x", "max_tokens": 32000, "temperature": 0, "top_p": 0.9, "top_k": 40,
        "metadata": {"user_id": "u"}, "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "stop_sequences": ["."],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig"},
                                              {"type": "text", "text": "Hello."}]},
            {"role": "user", "content": "Bye"}]})
    assert resp.status_code == 200, resp.text
    assert resp.json()["model"] == "claude-x"


# === OpenAI Responses ==========================================================================

def test_responses_non_stream(oai):
    r = oai.responses.create(model="gpt-5.5", input="Say hello.", max_output_tokens=24, temperature=0,
                             instructions="You are terse.")
    assert r.object == "response" and r.status in ("completed", "incomplete"), r
    assert r.model == "gpt-5.5"
    assert r.output and r.output[-1].type == "message" and r.output_text, r.output
    assert r.usage.input_tokens > 0 and 0 < r.usage.output_tokens <= 24, r.usage
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert 0 <= r.usage.input_tokens_details.cached_tokens <= r.usage.input_tokens


def test_responses_stream_events(oai):
    kwargs = dict(model="m", input=[{"role": "developer", "content": "You are terse."},
                                    {"role": "user", "content": [{"type": "input_text", "text": "Write a poem."}]}],
                  max_output_tokens=24, temperature=0)
    full = oai.responses.create(**kwargs)
    events = [e.model_dump(mode="json") for e in oai.responses.create(stream=True, **kwargs)]
    final = check_responses_stream(events)
    types = [e["type"] for e in events]
    expected_head = ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added"]
    assert types[:4] == expected_head, types
    tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"]
    assert types[-4:-1] == tail, types
    assert set(types[4:-4]) == {"response.output_text.delta"}, types
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == full.output_text
    assert final["usage"]["output_tokens"] == full.usage.output_tokens
    if full.status == "incomplete":
        assert types[-1] == "response.incomplete" and final["incomplete_details"]["reason"] == "max_output_tokens"


def test_responses_max_output_tokens_incomplete(oai):
    r = oai.responses.create(model="m", input="Write a long story.", max_output_tokens=3, temperature=0)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens", r
    assert r.usage.output_tokens == 3


def test_responses_function_call_round_trip(oai):
    first = oai.responses.create(model="m", input=WEATHER_Q, tools=responses_tools(), temperature=0,
                                 tool_choice={"type": "function", "name": "get_weather"}, max_output_tokens=80)
    calls = [o for o in first.output if o.type == "function_call"]
    assert first.status == "completed" and len(calls) >= 1, first.output
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and call.id, call
    assert_valid(parse_json_object(call.arguments, "arguments"), WEATHER_SCHEMA, "function_call arguments")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}
    # (a) chained through the stored response
    chained = oai.responses.create(model="m", previous_response_id=first.id, input=[output],
                                   tools=responses_tools(), tool_choice="none", max_output_tokens=16, temperature=0)
    assert chained.previous_response_id == first.id
    assert chained.output[-1].type == "message" and chained.output_text, chained.output
    # The chained prompt holds the first turn: it is longer than the output item alone.
    assert chained.usage.input_tokens > first.usage.input_tokens, (chained.usage, first.usage)
    # (b) stateless: the whole history sent again, nothing stored
    items = [{"role": "user", "content": WEATHER_Q}] + [o.model_dump(exclude_none=True) for o in first.output]
    stateless = oai.responses.create(model="m", input=items + [output], store=False, tools=responses_tools(),
                                     tool_choice="none", max_output_tokens=16, temperature=0)
    assert stateless.output[-1].type == "message"
    assert stateless.usage.input_tokens == chained.usage.input_tokens, (stateless.usage, chained.usage)
    assert stateless.output_text == chained.output_text
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(stateless.id)


def test_responses_retrieve_and_delete(oai):
    r = oai.responses.create(model="m", input="Hi", max_output_tokens=8, temperature=0)
    got = oai.responses.retrieve(r.id)
    assert got.id == r.id and got.output_text == r.output_text and got.status == r.status
    oai.responses.delete(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(r.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="m", input="Hi", previous_response_id=r.id, max_output_tokens=4)


def test_responses_unknown_previous_id_is_404(oai):
    with pytest.raises(openai.NotFoundError):
        oai.responses.create(model="m", input="Hi", previous_response_id="resp_doesnotexist", max_output_tokens=4)


def test_responses_custom_tool_apply_patch(oai):
    kwargs = dict(model="m", input="Create a file hello.txt containing hello", tools=[apply_patch_tool()],
                  tool_choice={"type": "custom", "name": "apply_patch"}, max_output_tokens=200, temperature=0)
    r = oai.responses.create(**kwargs)
    calls = [o for o in r.output if o.type == "custom_tool_call"]
    assert calls, r.output
    assert not [o for o in r.output if o.type == "function_call"], "apply_patch must not be a function_call"
    call = calls[0]
    assert call.name == "apply_patch" and call.call_id, call
    assert call.input.startswith("*** Begin Patch\n"), call.input
    errors = apply_patch_errors(call.input, complete=r.status == "completed")
    assert not errors, errors
    events = [e.model_dump(mode="json") for e in oai.responses.create(stream=True, **kwargs)]
    final = check_responses_stream(events)
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    done = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    streamed_call = [o for o in final["output"] if o["type"] == "custom_tool_call"][0]
    assert streamed_call["input"] == deltas == call.input
    if final["status"] == "completed":
        assert len(done) == 1 and done[0]["input"] == deltas, done
    else:  # cut by max_output_tokens: the call never completes, and says so
        assert not done and streamed_call["status"] == "incomplete", (done, streamed_call)
    # Round trip: the call and its output go back as items.
    back = oai.responses.create(model="m", store=False, tools=[apply_patch_tool()], max_output_tokens=16,
                                temperature=0, tool_choice="none", input=[
                                    {"role": "user", "content": "Create a file hello.txt containing hello"},
                                    call.model_dump(exclude_none=True),
                                    {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done."}])
    assert back.output[-1].type == "message", back.output


def test_responses_structured_output(oai):
    for fmt in ({"type": "json_schema", "name": "person", "schema": PERSON_SCHEMA, "strict": True},):
        r = oai.responses.create(model="m", input="Describe a person as JSON.", text={"format": fmt},
                                 max_output_tokens=80, temperature=0)
        assert r.status == "completed", r
        assert_valid(parse_json_object(r.output_text), PERSON_SCHEMA, "output_text")
    r = oai.responses.create(model="m", input="Give me a JSON object.", text={"format": {"type": "json_object"}},
                             max_output_tokens=60, temperature=0)
    if r.status == "completed":
        parse_json_object(r.output_text)
    else:
        assert r.output_text.lstrip().startswith("{"), r.output_text


def test_responses_tool_loop_three_turns(oai):
    items: list = [{"role": "user", "content": "Read the files a.txt, b.txt and c.txt one by one."}]
    call_ids = []
    for turn in range(3):
        r = oai.responses.create(model="m", input=items, tools=responses_tools(), store=False,
                                 parallel_tool_calls=False, tool_choice={"type": "function", "name": "read_file"},
                                 max_output_tokens=60, temperature=0)
        calls = [o for o in r.output if o.type == "function_call"]
        assert r.status == "completed" and len(calls) == 1, (turn, r.output)
        assert_valid(parse_json_object(calls[0].arguments), FILE_SCHEMA, f"turn {turn}")
        call_ids.append(calls[0].call_id)
        items += [o.model_dump(exclude_none=True) for o in r.output]
        items.append({"type": "function_call_output", "call_id": calls[0].call_id, "output": f"file {turn}"})
    assert len(set(call_ids)) == 3, call_ids
    final = oai.responses.create(model="m", input=items, tools=responses_tools(), store=False, tool_choice="none",
                                 max_output_tokens=16, temperature=0)
    assert final.output[-1].type == "message" and not [o for o in final.output if o.type == "function_call"]


def test_responses_namespace_and_hosted_tools(oai):
    tools = [{"type": "namespace", "name": "files", "description": "file tools",
              "tools": [{"type": "function", "name": "read_file", "description": "Read a file",
                         "parameters": FILE_SCHEMA}]},
             {"type": "web_search"}, {"type": "tool_search", "execution": "client", "description": "find tools"}]
    r = oai.responses.create(model="m", input="Read a.txt", tools=tools, max_output_tokens=40, temperature=0,
                             tool_choice={"type": "function", "name": "read_file"}, reasoning={"effort": "medium"},
                             include=["reasoning.encrypted_content"], store=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert calls and calls[0].name == "read_file", r.output
    assert_valid(parse_json_object(calls[0].arguments), FILE_SCHEMA)


def test_responses_pdf_input_file(server):
    pdf = make_pdf(["Hello PDF"])
    url = "data:application/pdf;base64," + base64.b64encode(pdf).decode()

    def usage(content):
        resp = requests.post(f"{server}/v1/responses", timeout=TIMEOUT, json={
            "model": "m", "max_output_tokens": 1, "input": [{"role": "user", "content": content}]})
        assert resp.status_code == 200, resp.text
        return resp.json()["usage"]["input_tokens"]

    q = {"type": "input_text", "text": "Summarize"}
    assert usage([q, {"type": "input_file", "filename": "a.pdf", "file_data": url}]) > usage([q])


# === OpenAI Chat Completions ====================================================================

def test_chat_tool_calls_required(oai, served_id):
    kwargs = dict(model=served_id, messages=[{"role": "user", "content": WEATHER_Q}], tools=chat_tools(),
                  tool_choice="required", parallel_tool_calls=False, max_tokens=80, temperature=0, seed=7)
    full = oai.chat.completions.create(**kwargs)
    choice = full.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = choice.message.tool_calls
    assert len(calls) == 1 and calls[0].type == "function" and calls[0].id, calls
    assert calls[0].function.name in SCHEMAS
    args = parse_json_object(calls[0].function.arguments, "arguments")
    assert_valid(args, SCHEMAS[calls[0].function.name], "arguments")
    # Streamed: the deltas reassemble to the same call.
    chunks = list(oai.chat.completions.create(stream=True, **kwargs))
    first_tc = [c.choices[0].delta.tool_calls[0] for c in chunks if c.choices and c.choices[0].delta.tool_calls]
    assert first_tc[0].id and first_tc[0].type == "function" and first_tc[0].function.name, first_tc[0]
    assert all(tc.index == 0 for tc in first_tc)
    streamed_args = "".join(tc.function.arguments or "" for tc in first_tc)
    assert first_tc[0].function.name == calls[0].function.name
    assert json.loads(streamed_args) == args
    assert streamed_args == calls[0].function.arguments
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]


def test_chat_named_tool_choice_raw_stream(server, served_id):
    body = {"model": served_id, "messages": [{"role": "user", "content": "Open a.txt"}], "tools": chat_tools(),
            "tool_choice": {"type": "function", "function": {"name": "read_file"}}, "max_tokens": 60,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    resp = requests.post(f"{server}/v1/chat/completions", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    result = check_chat_stream(resp.content)
    assert result["finish_reason"] == "tool_calls", result
    assert [tc["name"] for tc in result["tool_calls"]][:1] == ["read_file"], result["tool_calls"]
    for tc in result["tool_calls"]:
        assert_valid(parse_json_object(tc["arguments"]), FILE_SCHEMA)
    assert result["usage"]["completion_tokens"] > 0


def test_chat_tool_messages_round_trip(oai, served_id):
    first = oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": WEATHER_Q}],
                                        tools=chat_tools(), tool_choice={"type": "function",
                                                                         "function": {"name": "get_weather"}},
                                        parallel_tool_calls=False, max_tokens=80, temperature=0)
    msg = first.choices[0].message
    assert msg.tool_calls and msg.tool_calls[0].function.name == "get_weather", msg
    history = [{"role": "user", "content": WEATHER_Q}, msg.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "Sunny, 21 C"}]
    reply = oai.chat.completions.create(model=served_id, messages=history, tools=chat_tools(), tool_choice="none",
                                        max_tokens=16, temperature=0)
    assert reply.choices[0].message.content and not reply.choices[0].message.tool_calls, reply
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.usage.prompt_tokens > first.usage.prompt_tokens


def test_chat_tool_loop_three_turns(oai, served_id):
    messages: list = [{"role": "user", "content": "Read the files a.txt, b.txt and c.txt one by one."}]
    ids = []
    for turn in range(3):
        r = oai.chat.completions.create(model="splash-model", messages=messages, tools=chat_tools(),
                                        tool_choice="required", parallel_tool_calls=False, max_tokens=80,
                                        temperature=0)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and len(msg.tool_calls) == 1, (turn, r)
        tc = msg.tool_calls[0]
        assert_valid(parse_json_object(tc.function.arguments), SCHEMAS[tc.function.name], f"turn {turn}")
        ids.append(tc.id)
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": tc.id, "content": f"result {turn}"}]
    assert len(set(ids)) == 3, ids
    final = oai.chat.completions.create(model=served_id, messages=messages, tools=chat_tools(), tool_choice="none",
                                        max_tokens=16, temperature=0)
    assert final.choices[0].message.content and not final.choices[0].message.tool_calls


def test_chat_json_schema_over_seeds(oai, served_id):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True}}
    # Sampled at 0.8, the 135M model sometimes pretty-prints its way past the token limit (~10-20%
    # of seeds at 80 tokens, whatever the KV precision: q8 4/40, f16 8/40, f32 4/40): every reply
    # that completes must be valid, and most must complete.
    complete = 0
    for seed in range(1, 11):
        r = oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": "Describe a person."}],
                                        response_format=fmt, max_tokens=120, temperature=0.8, seed=seed)
        choice = r.choices[0]
        assert choice.finish_reason in ("stop", "length"), (seed, choice)
        if choice.finish_reason == "stop":
            complete += 1
            assert_valid(parse_json_object(choice.message.content, f"seed {seed}"), PERSON_SCHEMA, f"seed {seed}")
    assert complete >= 8, f"only {complete} of 10 seeds completed their JSON"


def test_chat_json_object(oai, served_id):
    r = oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": "A JSON object please."}],
                                    response_format={"type": "json_object"}, max_tokens=60, temperature=0)
    if r.choices[0].finish_reason == "stop":
        parse_json_object(r.choices[0].message.content)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")


@pytest.mark.parametrize("keyword, schema", [
    ("patternProperties", {"type": "object", "patternProperties": {"^a": {"type": "string"}}}),
    ("if", {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}),
])
def test_chat_unsupported_schema_keyword_is_400(oai, served_id, keyword, schema):
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "s", "schema": schema}})
    assert f"'{keyword}'" in str(info.value), info.value


def assert_schema_refused_in_every_protocol(oai, claude, server, served_id, *, text_schema, tool_schema, says):
    """text_schema as Chat Completions' response_format, tool_schema as a forced Anthropic
    tool's input and as the Responses API's text format: each a 400 whose message contains
    `says` (in Chat Completions: says[0], elsewhere says[1]), and the server keeps serving."""
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                    response_format={"type": "json_schema",
                                                     "json_schema": {"name": "s", "schema": text_schema}})
    assert says[0] in str(info.value), info.value
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=served_id, max_tokens=16, messages=[{"role": "user", "content": "x"}],
                               tools=[{"name": "get_weather", "input_schema": tool_schema}],
                               tool_choice={"type": "tool", "name": "get_weather"})
    assert says[1] in str(info.value), info.value
    r = requests.post(f"{server}/v1/responses", timeout=TIMEOUT, json={
        "model": served_id, "input": "x", "max_output_tokens": 8,
        "text": {"format": {"type": "json_schema", "name": "s", "schema": tool_schema}}})
    assert r.status_code == 400, r.text
    assert says[1] in r.json()["error"]["message"], r.text
    assert requests.get(f"{server}/health", timeout=10).status_code == 200


def test_a_schema_nothing_satisfies_is_400_in_every_protocol(oai, claude, server, served_id):
    """A `false` schema where a value must be: refused, naming the place, not answered with
    an empty reply that pretends to be one."""
    assert_schema_refused_in_every_protocol(
        oai, claude, server, served_id, text_schema=False,
        tool_schema={"type": "object", "properties": {"city": False}, "required": ["city"]},
        says=("no output can satisfy", "/properties/city"))


def test_a_schema_too_ambiguous_to_follow_is_400_in_every_protocol(oai, claude, server, served_id):
    """A schema the engine cannot follow within its bound of parse states (here a pattern of
    5,000 optional parts) is refused with what to simplify, not answered with a reply that
    only follows part of it."""
    ambiguous = {"type": "string", "pattern": "^(a?){5000}b$"}
    assert_schema_refused_in_every_protocol(
        oai, claude, server, served_id, text_schema=ambiguous,
        tool_schema={"type": "object", "properties": {"word": ambiguous}, "required": ["word"]},
        says=("too ambiguous", "too ambiguous"))


def test_chat_unknown_tool_choice_is_400(oai, served_id):
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=served_id, messages=[{"role": "user", "content": "x"}], max_tokens=4,
                                    tools=chat_tools(), tool_choice={"type": "function", "function": {"name": "nope"}})
    assert "nope" in str(info.value)


def test_chat_image_part_is_400(oai, served_id):
    with pytest.raises(openai.BadRequestError) as info:
        oai.chat.completions.create(model=served_id, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}])
    assert "vision" in str(info.value).lower(), info.value


def test_chat_model_alias_and_unknown_model(oai, served_id):
    assert oai.chat.completions.create(model="splash-model", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=2).choices
    with pytest.raises(openai.NotFoundError):
        oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}], max_tokens=2)


# === probes ======================================================================================

def test_head_root_is_200(server, splash_server_module):
    for srv in (server, splash_server_module("--no-webui")):
        resp = requests.head(f"{srv}/", timeout=10, headers={"User-Agent": "Bun/1.4.0"})
        assert resp.status_code == 200, (srv.args, resp.status_code)
        assert resp.content == b""


# === Hostile bodies: every route answers, the server keeps serving ================================

@pytest.mark.parametrize("depth", [600, 100_000, 1_000_000])
def test_deeply_nested_bodies_are_refused(server, depth):
    nested = "[" * depth + "]" * depth
    bodies = {
        "/v1/chat/completions": '{"model":"splash-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}],'
                                '"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":'
                                '{"enum":' + nested + '}}}}',
        "/v1/messages": '{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hi"}],"metadata":'
                        + nested + '}',
        "/v1/messages/count_tokens": '{"model":"m","messages":[{"role":"assistant","content":[{"type":"tool_use",'
                                     '"id":"t","name":"f","input":{"a":' + nested + '}}]}]}',
        "/v1/responses": '{"model":"m","input":"hi","metadata":' + nested + '}',
        "/apply-template": '{"messages":[{"role":"user","content":"hi"}],"x":' + nested + '}',
        "/tokenize": '{"content":"hi","x":' + nested + '}',
    }
    for path, body in bodies.items():
        resp = requests.post(f"{server}{path}", data=body, headers={"Content-Type": "application/json"},
                             timeout=TIMEOUT)
        assert resp.status_code == 400, (path, resp.status_code, resp.text[:200])
        assert "deep" in resp.text, (path, resp.text[:200])
    assert requests.get(f"{server}/health", timeout=10).status_code == 200


def test_tool_call_arguments_echoed_back_deeply_nested_are_harmless(server):
    # Arguments are a string inside the body: the body is shallow, the string is not (deeper
    # than the server ever parses, so it is kept as text).
    nested = "[" * 600 + "]" * 600
    resp = requests.post(f"{server}/v1/chat/completions", timeout=TIMEOUT, json={
        "model": "splash-model", "max_tokens": 2, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                  "function": {"name": "f", "arguments": nested}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]})
    assert resp.status_code == 200, resp.text[:300]
    assert requests.get(f"{server}/health", timeout=10).status_code == 200


# === Keep-alive while a long prompt is read ========================================================

@pytest.fixture(scope="module")
def eager_keep_alive_server(splash_server_module):
    return splash_server_module("--sse-keep-alive", "1")


def timed_sse_lines(resp) -> list[tuple[float, str]]:
    start = time.monotonic()
    return [(time.monotonic() - start, line.decode()) for line in resp.iter_lines() if line]


LONG_PROMPT = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(450))  # ~7K tokens


def test_silent_prefill_gets_keep_alives(eager_keep_alive_server):
    server = eager_keep_alive_server
    with requests.post(f"{server}/v1/messages", stream=True, timeout=TIMEOUT, json={
            "model": "m", "max_tokens": 2, "stream": True,
            "messages": [{"role": "user", "content": LONG_PROMPT}]}) as resp:
        assert resp.status_code == 200, resp.text
        lines = timed_sse_lines(resp)
    events = [(t, line.split(": ", 1)[1]) for t, line in lines if line.startswith("event: ")]
    first_content = next(t for t, name in events if name in ("content_block_start", "message_delta"))
    pings = [t for t, name in events if name == "ping" and t < first_content]
    # A prompt this long takes seconds to read on these machines: Anthropic pings fill the gap.
    assert first_content < 2.5 or len(pings) >= 2, (first_content, events[:12])
    # Chat Completions and Responses streams get SSE comments, which their SDKs skip.
    for path, body in (("/v1/chat/completions", {"model": "splash-model", "max_tokens": 2, "stream": True,
                                                 "messages": [{"role": "user", "content": LONG_PROMPT + " x"}]}),
                       ("/v1/responses", {"model": "m", "max_output_tokens": 2, "stream": True,
                                          "input": LONG_PROMPT + " y"})):
        with requests.post(f"{server}{path}", stream=True, timeout=TIMEOUT, json=body) as resp:
            lines = timed_sse_lines(resp)
        data_times = [t for t, line in lines if line.startswith("data: ")]
        gap = max(b - a for a, b in zip(data_times, data_times[1:]))
        comments = [line for _, line in lines if line.startswith(":")]
        assert gap < 2.5 or comments, (path, gap, lines[:6])
        assert all(line == ": keep-alive" for line in comments), comments
