"""`splash draft-data`, a block draft's training data (issue 14): each prompt rendered with the
model's chat template, its greedy reply (the tokens `splash eval --greedy` gives after the same
prompt), and every token's tapped hidden states (what `splash eval --hidden-out` gives for the
same tokens, stored as float16); a run started again goes on after the samples written; a
malformed prompt file is refused naming the line, writing nothing."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "reference"))
from compare import run_engine  # noqa: E402

LAYERS = [1, 10, 18, 27]
SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def draft_data(splash_binary, model_path, prompts: Path, out: Path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([splash_binary, "draft-data", "--model", model_path, "--prompts", str(prompts),
                           "--hidden-layers", ",".join(map(str, LAYERS)), "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300)


def test_samples_are_the_greedy_replies_and_their_taps(splash_binary, model_path, tmp_path):
    prompts = tmp_path / "prompts.jsonl"
    lines = [{"prompt": "Write a Python function that reverses a string."}, None,
             {"messages": [{"role": "system", "content": "You write Python."},
                           {"role": "user", "content": "Fix this: def add(a, b): return a - b"}]}]
    prompts.write_text("\n".join("" if line is None else json.dumps(line) for line in lines) + "\n")
    out = tmp_path / "data"
    proc = draft_data(splash_binary, model_path, prompts, out, "-n", "40")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2/2 prompts" in proc.stderr
    manifest = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert len({m["name"] for m in manifest}) == 2 and all(len(m["name"]) == 16 for m in manifest)
    chat = ["<|im_start|>system\n" + SMOLLM_SYSTEM + "<|im_end|>\n<|im_start|>user\n"
            "Write a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>system\nYou write Python.<|im_end|>\n<|im_start|>user\n"
            "Fix this: def add(a, b): return a - b<|im_end|>\n<|im_start|>assistant\n"]
    for entry, text in zip(manifest, chat):
        tokens = np.load(out / f"{entry['name']}.tokens.npy")
        hidden = np.load(out / f"{entry['name']}.hidden.npy")
        assert tokens.dtype == np.int32 and hidden.dtype == np.float16
        assert entry["tokens"] == len(tokens) == entry["prompt_tokens"] + entry["reply_tokens"]
        assert entry["layers"] == LAYERS and 0 < entry["reply_tokens"] <= 40
        prompt = tokens[:entry["prompt_tokens"]].tolist()
        want_prompt = json.loads(run_engine(splash_binary, ["tokenize", "--model", model_path, "--json", text]).stdout)
        assert prompt == want_prompt, "the prompt is not the chat template's rendering"
        greedy = json.loads(run_engine(splash_binary, [
            "eval", "--device", "cpu", "--model", model_path, "--tokens", ",".join(map(str, prompt)),
            "--greedy", str(entry["reply_tokens"]), "--draft", "none"]).stdout)["generated"]
        assert tokens[entry["prompt_tokens"]:].tolist() == greedy
        taps = tmp_path / "taps.f32"
        run_engine(splash_binary, ["eval", "--device", "cpu", "--model", model_path,
                                   "--tokens", ",".join(map(str, tokens.tolist())),
                                   "--hidden-layers", ",".join(map(str, LAYERS)), "--hidden-out", str(taps)])
        want = np.fromfile(taps, dtype="<f4").reshape(hidden.shape)
        # float16 keeps 11 significant bits: 2^-11 relative, plus a margin for values near 0.
        assert np.allclose(hidden.astype(np.float32), want, rtol=1e-3, atol=1e-3)

    # Started again: nothing rewritten, the samples there kept.
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = draft_data(splash_binary, model_path, prompts, out, "-n", "40")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 samples written" in again.stderr and "2 already there" in again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir() if p.name != "manifest.jsonl"} == \
        {k: v for k, v in before.items() if k != "manifest.jsonl"}
    assert len((out / "manifest.jsonl").read_text().splitlines()) == 2

    # A prompt edited since: its sample is made again, the stale one's entry moved aside (its files kept).
    lines[0]["prompt"] = "Write a Python function that reverses a list."
    prompts.write_text("\n".join("" if line is None else json.dumps(line) for line in lines) + "\n")
    edited = draft_data(splash_binary, model_path, prompts, out, "-n", "40")
    assert edited.returncode == 0, edited.stderr[-2000:]
    assert "1 samples written" in edited.stderr and "1 already there" in edited.stderr
    now = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert sorted(m["name"] for m in now) == sorted([manifest[1]["name"], now[-1]["name"]])
    assert now[-1]["name"] != manifest[0]["name"]
    stale = [json.loads(line) for line in (out / "manifest.stale.jsonl").read_text().splitlines()]
    assert [m["name"] for m in stale] == [manifest[0]["name"]]
    assert (out / f"{manifest[0]['name']}.hidden.npy").exists()


@pytest.mark.parametrize("line, why", [
    ("not json", "line 2: not a JSON object"),
    ("[1, 2]", "line 2: not a JSON object"),
    ('{"messages": []}', "line 2: needs \"messages\""),
    ('{"messages": "hi"}', "line 2: needs \"messages\""),
    ('{"messages": [{"role": "user"}]}', "line 2: each message needs"),
    ('{"messages": [{"role": "user", "content": 5}]}', "line 2: each message needs"),
    ('{"prompt": ["x"]}', "line 2: \"prompt\" must be a string"),
    ('{"other": 1}', "line 2: needs \"messages\""),
])
def test_malformed_prompt_files_are_refused_naming_the_line(splash_binary, model_path, tmp_path, line, why):
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "hello"}\n' + line + "\n")
    out = tmp_path / "data"
    proc = draft_data(splash_binary, model_path, prompts, out)
    assert proc.returncode != 0
    assert why in proc.stderr, proc.stderr[-1000:]
    assert not out.exists() or not any(out.glob("*.npy")), "nothing is written before every line is read"


def test_a_run_needs_layers_and_prompts(splash_binary, model_path, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    proc = draft_data(splash_binary, model_path, empty, tmp_path / "data")
    assert proc.returncode != 0 and "no prompts" in proc.stderr
    proc = subprocess.run([splash_binary, "draft-data", "--model", model_path, "--prompts", str(empty),
                           "--out", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--hidden-layers" in proc.stderr
