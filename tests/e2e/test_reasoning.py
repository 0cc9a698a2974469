"""A thinking model's reasoning in every protocol, through the official SDKs.

The model: a one-layer random qwen3 (tools/make_random_llama.py) with the default model's
tokenizer plus "<think>" and "</think>" (user-defined tokens, as Qwen3's vocabulary has them),
Qwen3's chat template (tests/golden/chat_qwen3.json: splash recognises it and renders it
exactly) and --favour-token "<think>": whatever the input, it writes "<think>" every step.
So a reply with thinking on opens a think block it never closes on its own: all reasoning
until the budget runs out and the engine closes the block for it ("\\n</think>\\n\\n",
forced), then "<think>" as plain text; with thinking off the prompt ends with Qwen3's empty
block and every "<think>" is text. That separates what each switch and budget does without
depending on what a real model chooses to write.

Checked: reasoning_content (Chat Completions, streamed and not), reasoning items and
response.reasoning_text.delta events (Responses), thinking blocks with signature_delta
(Messages); reasoning_effort none / chat_template_kwargs enable_thinking false / thinking
disabled switch it off; a budget (thinking.budget_tokens, reasoning_effort minimal) is the
number of thinking tokens, then the reply follows; usage counts reasoning tokens; reasoning
sent back is accepted in each protocol's shape; a response format turns thinking off;
`serve --reasoning-budget` sets what a request that says nothing gets.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import anthropic
import openai
import pytest

from conftest import start_server

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import make_random_llama as mrl  # noqa: E402

THINK = "<think>"
MODEL = "thinker"


@pytest.fixture(scope="module")
def thinker(model_path, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("thinker") / f"{MODEL}.gguf"
    template = json.loads((REPO / "tests/golden/chat_qwen3.json").read_text())["template"]
    tokenizer = mrl.with_tokens(mrl.read_tokenizer(model_path), [THINK, "</think>"], template)
    shape = mrl.Shape(**{**mrl.QWEN_SHAPES["qwen3"].__dict__, "layers": 1})
    mrl.make_model(str(path), tokenizer, mrl.tensor_types("float", "F32", {}, shape.layers), shape,
                   name="random-thinker", favour=THINK)
    return str(path)


def wait_for_line(srv, text: str, timeout: float = 10.0) -> None:
    """The server's start-up summary goes to stderr and Ready to stdout: two pipes read by two
    threads, so the summary may still be on its way when Ready has arrived."""
    deadline = time.monotonic() + timeout
    while text not in srv.output():
        assert time.monotonic() < deadline, f"no line with {text!r} in\n{srv.output()}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def server(thinker):
    srv = start_server("--draft", "none", model=thinker)
    wait_for_line(srv, "qwen3: ChatML with Qwen's tool format and <think> reasoning")
    yield srv
    srv.stop()


@pytest.fixture
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


@pytest.fixture
def claude(server):
    return anthropic.Anthropic(base_url=server.url, api_key="none")


ASK = [{"role": "user", "content": "What is 2+2?"}]


def thinks(text: str, count: int) -> bool:
    return text == THINK * count


def test_chat_reasoning_content_until_max_tokens(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=10, temperature=0)
    message = r.choices[0].message
    # The opening <think> is the block's markup; the 9 after it are its text.
    assert thinks(message.model_extra["reasoning_content"], 9)
    assert message.content == ""
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 10
    assert r.usage.completion_tokens_details.reasoning_tokens == 10


def test_chat_streams_reasoning_content(oai):
    reasoning, content = "", ""
    for chunk in oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=6, temperature=0, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            content += delta.content or ""
    assert thinks(reasoning, 5) and content == ""


@pytest.mark.parametrize("switch", [{"reasoning_effort": "none"}, {"chat_template_kwargs": {"enable_thinking": False}}])
def test_chat_thinking_off(oai, switch):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5, temperature=0, extra_body=switch)
    message = r.choices[0].message
    assert thinks(message.content, 5)  # the model's "<think>" is plain text after Qwen3's empty block
    assert "reasoning_content" not in (message.model_extra or {})
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_chat_effort_budget_closes_the_block_then_the_reply_follows(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=530, temperature=0,
                                    reasoning_effort="minimal")  # 512 thinking tokens
    message = r.choices[0].message
    assert thinks(message.model_extra["reasoning_content"], 512)
    assert message.content.startswith(THINK) and thinks(message.content, len(message.content) // len(THINK))
    assert r.usage.completion_tokens == 530
    reasoning_tokens = r.usage.completion_tokens_details.reasoning_tokens
    assert 1 + 512 < reasoning_tokens <= 1 + 512 + 4  # the opening, the budget, the close up to "</think>"


def test_chat_response_format_does_not_think(oai):
    r = oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0,
                                    response_format={"type": "json_object"})
    assert "reasoning_content" not in (r.choices[0].message.model_extra or {})
    assert r.usage.completion_tokens_details.reasoning_tokens == 0


def test_chat_accepts_reasoning_sent_back(oai):
    history = ASK + [{"role": "assistant", "content": "4", "reasoning_content": "Two and two."},
                     {"role": "user", "content": "And 3+3?"}]
    r = oai.chat.completions.create(model=MODEL, messages=history, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError, match="reasoning_effort"):
        oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3, extra_body={"reasoning_effort": "lots"})
    with pytest.raises(openai.BadRequestError, match="chat_template_kwargs"):
        oai.chat.completions.create(model=MODEL, messages=ASK, max_tokens=3,
                                    extra_body={"chat_template_kwargs": {"tools_in_user": True}})


def test_responses_reasoning_item_then_message(oai):
    r = oai.responses.create(model=MODEL, input="What is 2+2?", max_output_tokens=530, temperature=0,
                             reasoning={"effort": "minimal"})
    kinds = [item.type for item in r.output]
    assert kinds == ["reasoning", "message"]
    assert thinks(r.output[0].content[0].text, 512)
    assert r.output[0].content[0].type == "reasoning_text"
    assert thinks(r.output_text, len(r.output_text) // len(THINK)) and r.output_text
    assert r.usage.output_tokens_details.reasoning_tokens > 512
    # The stored response continues with its reasoning; a reasoning input item is accepted.
    follow = oai.responses.create(model=MODEL, previous_response_id=r.id, input="And 3+3?", max_output_tokens=3,
                                  temperature=0)
    assert follow.status == "incomplete"
    again = oai.responses.create(model=MODEL, max_output_tokens=3, temperature=0, input=[
        {"role": "user", "content": "What is 2+2?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Add."}]},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"}])
    assert again.output[0].type == "reasoning"


def test_responses_stream_reasoning_events(oai):
    events = list(oai.responses.create(model=MODEL, input="hi", max_output_tokens=4, temperature=0, stream=True))
    deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thinks(deltas, 3)
    done = [e for e in events if e.type == "response.reasoning_text.done"]
    assert len(done) == 1 and done[0].text == deltas
    completed = [e for e in events if e.type in ("response.completed", "response.incomplete")][-1]
    assert completed.response.output[0].type == "reasoning"


def test_responses_effort_none_does_not_think(oai):
    r = oai.responses.create(model=MODEL, input="hi", max_output_tokens=4, temperature=0, reasoning={"effort": "none"})
    assert [item.type for item in r.output] == ["message"]


def test_messages_thinking_block_with_budget(claude):
    m = claude.messages.create(model=MODEL, max_tokens=20, messages=ASK,
                               thinking={"type": "enabled", "budget_tokens": 4})
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert thinks(m.content[0].thinking, 4) and m.content[0].signature
    assert thinks(m.content[1].text, len(m.content[1].text) // len(THINK)) and m.content[1].text
    assert m.stop_reason == "max_tokens"


def test_messages_stream_thinking_then_text(claude):
    with claude.messages.stream(model=MODEL, max_tokens=12, messages=ASK,
                                thinking={"type": "enabled", "budget_tokens": 3}) as stream:
        kinds = [e.delta.type for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    assert kinds[:3] == ["thinking_delta"] * 3 and "signature_delta" in kinds and kinds[-1] == "text_delta"
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert thinks(final.content[0].thinking, 3)


def test_messages_thinking_disabled_and_sent_back(claude):
    m = claude.messages.create(model=MODEL, max_tokens=3, messages=ASK, thinking={"type": "disabled"})
    assert [b.type for b in m.content] == ["text"] and thinks(m.content[0].text, 3)
    history = ASK + [{"role": "assistant", "content": [
        {"type": "thinking", "thinking": "Add them.", "signature": "splash-unsigned"},
        {"type": "text", "text": "4"}]}, {"role": "user", "content": "And 3+3?"}]
    again = claude.messages.create(model=MODEL, max_tokens=3, messages=history)
    assert again.content[0].type == "thinking"
    with pytest.raises(anthropic.BadRequestError, match="budget_tokens"):
        claude.messages.create(model=MODEL, max_tokens=3, messages=ASK, thinking={"type": "enabled"})


@pytest.mark.parametrize("budget,reasoning,says", [("0", 0, "off"), ("3", 3, "at most 3 thinking tokens")])
def test_server_default_applies_to_requests_that_set_none(thinker, budget, reasoning, says):
    srv = start_server("--draft", "none", "--reasoning-budget", budget, model=thinker)
    try:
        wait_for_line(srv, f"reasoning    {says} for every request that sets none")
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0)
        assert thinks((r.choices[0].message.model_extra or {}).get("reasoning_content") or "", reasoning)
        # A request that says wins over the default.
        r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=8, temperature=0,
                                           extra_body={"chat_template_kwargs": {"enable_thinking": budget == "0"}})
        assert bool(r.choices[0].message.model_extra.get("reasoning_content")) == (budget == "0")
        m = anthropic.Anthropic(base_url=srv.url, api_key="none").messages.create(
            model=MODEL, max_tokens=8, messages=ASK, thinking={"type": "enabled", "budget_tokens": 5})
        assert thinks(m.content[0].thinking, 5)
    finally:
        srv.stop()
