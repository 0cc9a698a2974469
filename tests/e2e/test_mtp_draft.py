"""Qwen3.5's multi-token-prediction block (MTP, issue 14's draft the model brings itself) run
by splash as the draft of speculative decoding: its chained guesses' logits against the
independent numpy reference (tests/reference/llama_ref.py, Model.mtp_guesses) reading the same
GGUF in llama.cpp's nextn layout, the output with it identical to plain decoding, served with
it, and the cases it cannot run refused clearly.

The models are random-weight qwen35 (dense FFN) and qwen35moe (experts and a shared expert)
with an MTP block (tools/make_random_llama.py --mtp). What is checked is the arithmetic: the
entry of position q reads x_q beside the trunk's output-normed row of q - 1, attends causally
to the entries before it, and chains on its own normed output; not guessing skill. Both sides
read the engine's own trunk rows (eval --hidden-out), so only the block is compared. Tolerance:
every matmul of a quantized weight rounds its input to int8 in both (the reference's
act_quant), so each step's logits are within 3% (relative L2); measured 0.6-1.9%. Steps are
compared while both chains took the same guesses (a near tie may send them apart); the
reference without the entries before the last token is far off (the check sees them)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import llama_ref  # noqa: E402

STEPS = 8  # the guesses of one proposal (MtpHead::kMostGuesses), each a row of --draft-logits-out
ROW_REL_MAX = 0.03


def run(splash_binary, *args, check=True):
    proc = subprocess.run([splash_binary, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


@pytest.fixture(scope="module")
def mtp_models(tmp_path_factory, model_path) -> dict[str, str]:
    """A qwen35 and a qwen35moe with an MTP block, and a qwen35 without one."""
    directory = tmp_path_factory.mktemp("mtp")
    out = {}
    for name, args in {"qwen35": ["--arch", "qwen35", "--mtp"], "qwen35moe": ["--arch", "qwen35moe", "--mtp"],
                       "plain": ["--arch", "qwen35"]}.items():
        path = directory / f"{name}.gguf"
        subprocess.run([sys.executable, "tools/make_random_llama.py", "--tokenizer-from", model_path, *args,
                        "--out", str(path)], check=True, capture_output=True,
                       cwd=Path(__file__).resolve().parents[2])
        out[name] = str(path)
    return out


def guesses_after(splash_binary, path: str, ids: list[int], tmp_path):
    """The MTP block's logits of its chained guesses after `ids` (eval --draft-logits-out), the
    trunk's last-layer rows of every position (the block's input), and the reference model."""
    reference = llama_ref.load(path, act_quant=True)
    hidden, logits = tmp_path / "hidden.f32", tmp_path / "mtp.f32"
    run(splash_binary, "eval", "--device", "cpu", "--model", path, "--tokens", ",".join(map(str, ids)),
        "--hidden-layers", str(reference.cfg.n_layer - 1), "--hidden-out", str(hidden),
        "--draft-logits-out", str(logits))
    rows = np.fromfile(hidden, dtype="<f4").reshape(len(ids), reference.cfg.d_model)
    return np.fromfile(logits, dtype="<f4").reshape(STEPS, reference.cfg.vocab), rows, reference


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_mtp_guesses_match_reference(splash_binary, mtp_models, arch, tmp_path):
    ids = np.random.default_rng(7).integers(2, 49152, 60).tolist()
    eng, rows, reference = guesses_after(splash_binary, mtp_models[arch], ids, tmp_path)
    want = reference.mtp_guesses(ids, rows[:-1], STEPS)
    rel = np.linalg.norm(eng - want, axis=1) / np.linalg.norm(want, axis=1)
    # (each step reads the one before's guess: compared while both chains guessed alike)
    same = int(np.argmax(np.append(eng.argmax(1) != want.argmax(1), True)))
    print("steps' relative error:", np.round(rel, 4), "chains agree for", same + 1, "steps")
    assert same >= 2 and rel[: same + 1].max() <= ROW_REL_MAX, (rel, eng.argmax(1), want.argmax(1))
    blind = reference.mtp_guesses(ids, rows[:-1], 1, context=False)
    assert np.linalg.norm(eng[0] - blind[0]) / np.linalg.norm(blind[0]) > 3 * ROW_REL_MAX


@pytest.mark.parametrize("arch", ["qwen35", "qwen35moe"])
def test_output_identical_with_the_mtp_block(splash_binary, mtp_models, arch):
    ids = ",".join(str(i) for i in np.random.default_rng(3).integers(2, 49152, 40).tolist())
    replies = {}
    for mode in ["none", "lookup", "model", "auto"]:
        out = run(splash_binary, "eval", "--device", "cpu", "--model", mtp_models[arch], "--tokens", ids,
                  "--greedy", "48", "--draft", mode).stdout
        replies[mode] = json.loads(out.strip().splitlines()[-1])
    assert replies["model"]["generated"] == replies["none"]["generated"] == replies["auto"]["generated"] \
        == replies["lookup"]["generated"]
    assert replies["none"]["drafted"] == 0
    # The block guesses where lookup has nothing (random weights: refused, never a wrong output;
    # after its first proposals it is only asked now and then), so it ran, fed with the trunk's rows.
    assert replies["model"]["drafted"] > replies["lookup"]["drafted"] + 8, replies
    assert replies["auto"]["drafted"] == replies["model"]["drafted"]


def test_served_with_the_mtp_block(splash_server, mtp_models):
    """`--draft auto` (the default) on a model with an MTP block drafts with it: /status says so
    and the memory plan counts its contexts; the replies are those of a server drafting by lookup."""
    path = mtp_models["qwen35"]
    with_mtp = splash_server("--model", path, "--device", "cpu", with_model=False)
    plain = splash_server("--model", path, "--device", "cpu", "--draft", "lookup", with_model=False)
    body = {"messages": [{"role": "user", "content": "Write a short function that adds two numbers."}],
            "max_tokens": 40, "temperature": 0}
    replies = [requests.post(f"{s.url}/v1/chat/completions", json=body, timeout=120).json() for s in (with_mtp, plain)]
    assert replies[0]["choices"][0]["message"]["content"] == replies[1]["choices"][0]["message"]["content"]
    status = [requests.get(f"{s.url}/status", timeout=10).json() for s in (with_mtp, plain)]
    assert "MTP block after lookup" in json.dumps(status[0]["speculative_decoding"]), status[0]
    drafted = [s["speculative_decoding"]["draft_tokens"] for s in status]
    assert drafted[0] > drafted[1], drafted
    caches = [{c["name"]: c["budget_bytes"] for c in s["memory"]["caches"]} for s in status]
    assert "MTP block contexts" in caches[0] and "MTP block contexts" not in caches[1]
    # 64 running sequences, each 2048 + 256 entries of a key and a value (2 KV heads of 256,
    # float32) and 2049 trunk rows of 256 floats.
    assert caches[0]["MTP block contexts"] == 64 * (2304 * (4 + 2 * 512 * 4) + 2049 * 256 * 4), caches[0]


def test_mtp_drafts_that_cannot_run_are_refused(splash_binary, mtp_models):
    base = ["eval", "--model", mtp_models["plain"], "--tokens", "1,2,3", "--greedy", "4"]
    proc = run(splash_binary, *base, "--device", "cpu", "--draft", "model", check=False)
    assert proc.returncode != 0 and "MTP block" in proc.stderr and "--draft-model" in proc.stderr, proc.stderr[-800:]
    proc = run(splash_binary, *base[:2], mtp_models["qwen35"], *base[3:], "--device", "cuda", "--draft", "model",
               check=False)
    assert proc.returncode != 0 and "CPU" in proc.stderr, proc.stderr[-800:]
    # Other --hidden-layers asked for: --draft model is refused; auto decodes without the block.
    others = [*base[:2], mtp_models["qwen35"], *base[3:], "--device", "cpu", "--hidden-layers", "0",
              "--hidden-out", "/dev/null"]
    proc = run(splash_binary, *others, "--draft", "model", check=False)
    assert proc.returncode != 0 and "other layers" in proc.stderr, proc.stderr[-800:]
    run(splash_binary, *others)
