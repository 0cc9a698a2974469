"""Speculative decoding through the server: `splash serve` with prompt-lookup drafts (the
default) answers exactly what a server with `--draft none` answers, through the official
OpenAI SDK, streamed and not; the reply's usage says how many guessed tokens were kept
(OpenAI's accepted/rejected prediction token fields), /status and /metrics count them, and
`splash run` reports them."""
from __future__ import annotations

import subprocess

import openai
import pytest
import requests

CODE = """def word_counts(lines):
    counts = {}
    for line in lines:
        for word in line.split():
            word = word.strip(".,;:!?").lower()
            if word:
                counts[word] = counts.get(word, 0) + 1
    return counts
"""
PROMPTS = [
    "Repeat this code exactly, then stop:\n" + CODE,
    "Rename the variable counts to tally in this code and show all of it:\n" + CODE,
    "Name three colors.",
]


def client_of(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0, timeout=120)


def reply(client: openai.OpenAI, prompt: str, stream: bool) -> tuple[str, object]:
    args = dict(model="splash-model", messages=[{"role": "user", "content": prompt}], max_tokens=120, temperature=0,
                seed=7)
    if not stream:
        completion = client.chat.completions.create(**args)
        return completion.choices[0].message.content or "", completion.usage
    text, usage = "", None
    for chunk in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    return text, usage


def test_drafted_replies_equal_plain_ones_and_say_what_was_kept(splash_server):
    plain_server, drafting_server = splash_server("--draft", "none"), splash_server()
    plain, drafting = client_of(plain_server), client_of(drafting_server)
    kept = 0
    for prompt in PROMPTS:
        for stream in (False, True):
            expected, plain_usage = reply(plain, prompt, stream)
            got, usage = reply(drafting, prompt, stream)
            assert got == expected, (prompt, stream)
            assert usage.completion_tokens == plain_usage.completion_tokens
            details = usage.completion_tokens_details
            assert details.accepted_prediction_tokens >= 0 and details.rejected_prediction_tokens >= 0
            assert plain_usage.completion_tokens_details.accepted_prediction_tokens == 0
            kept += details.accepted_prediction_tokens
    assert kept > 0, "no guessed token was kept: the test exercised nothing"

    status = requests.get(f"{drafting_server}/status", timeout=10).json()["speculative_decoding"]
    assert status["draft"] == "auto" and status["drafter"] == "lookup" and status["max_draft_tokens"] >= 1
    assert status["accepted_draft_tokens"] == kept
    assert 0 < status["accepted_draft_tokens"] <= status["draft_tokens"]
    assert status["tokens_per_verify_step"] > 1.0
    plain_status = requests.get(f"{plain_server}/status", timeout=10).json()["speculative_decoding"]
    assert plain_status["drafter"] == "none" and plain_status["verify_steps"] == 0
    metrics = requests.get(f"{drafting_server}/metrics", timeout=10).text
    assert f"splash_accepted_draft_tokens_total {kept}" in metrics


@pytest.mark.parametrize("mode", ["lookup", "none"])
def test_run_reports_the_kept_guesses(splash_binary, model_path, mode):
    out = subprocess.run([splash_binary, "run", "-m", model_path, "--temperature", "0", "-n", "80", "--draft", mode,
                          "Repeat this code exactly:\n" + CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("guessed tokens kept" in out.stderr) == (mode == "lookup"), out.stderr


def test_an_unknown_draft_mode_is_refused(splash_binary, model_path):
    out = subprocess.run([splash_binary, "run", "-m", model_path, "--draft", "mtp", "hi"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0
    assert "--draft" in out.stderr and "auto" in out.stderr
    out = subprocess.run([splash_binary, "run", "-m", model_path, "--draft", "model", "hi"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "--draft-model" in out.stderr, out.stderr
