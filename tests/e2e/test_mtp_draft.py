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

from draft_checks import greedy_reply_in_every_draft_mode, run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reference"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import llama_ref  # noqa: E402

STEPS = 8  # the guesses of one proposal (MtpHead::kMostGuesses), each a row of --draft-logits-out
ROW_REL_MAX = 0.03


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
    replies = greedy_reply_in_every_draft_mode(splash_binary, mtp_models[arch], 48)
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
    # Sampled too: the random stream is keyed by position, so speculative sampling emits what plain
    # sampling does (against a server that does not draft at all).
    none = splash_server("--model", path, "--device", "cpu", "--draft", "none", with_model=False)
    sampled = {**body, "temperature": 0.9, "seed": 42}
    texts = [requests.post(f"{s.url}/v1/chat/completions", json=sampled, timeout=120).json()
             for s in (with_mtp, none)]
    assert texts[0]["choices"][0]["message"]["content"] == texts[1]["choices"][0]["message"]["content"]
    assert texts[0]["usage"]["completion_tokens_details"]["rejected_prediction_tokens"] > 0, texts[0]["usage"]
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


@pytest.mark.parametrize("change, says", [
    ("drop blk.4.nextn.enorm.weight", "blk.4.nextn.enorm.weight"),
    ("narrow blk.4.nextn.eh_proj.weight", "blk.4.nextn.eh_proj.weight"),
])
def test_a_broken_mtp_block_is_refused_clearly(splash_binary, model_path, tmp_path, change, says):
    """A file whose MTP block is missing a tensor or has one of the wrong shape: one line naming
    it, before any work (the default --draft auto reads the block)."""
    import make_random_llama as mrl
    shape = mrl.Shape(**{**mrl.QWEN_SHAPES["qwen35"].__dict__, "mtp": True})
    tensors = mrl.make_tensors(mrl.tensor_types("float", layers=shape.layers + 1), 49152, shape, 1)
    action, name = change.split(" ")
    if action == "drop":
        tensors = [t for t in tensors if t[0] != name]
    else:  # eh_proj reading d_model columns instead of [embedding | hidden]'s 2 d_model
        tensors = [(n, data[:, : data.shape[1] // 2].copy(), raw) if n == name else (n, data, raw)
                   for n, data, raw in tensors]
    path = tmp_path / "broken.gguf"
    mrl.write_gguf(str(path), tensors, shape, mrl.read_tokenizer(model_path), "broken-mtp", 49152)
    proc = subprocess.run([splash_binary, "run", "--device", "cpu", "--model", str(path), "-n", "1", "hi"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and says in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # (plain decoding needs no block: the same file runs)
    ok = subprocess.run([splash_binary, "run", "--device", "cpu", "--model", str(path), "--draft", "none", "-n", "1",
                         "hi"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr[-800:]


def test_a_cached_prefix_brings_the_mtp_entries_back(splash_server, mtp_models):
    """The second request reuses the first one's cached system prompt (and the recurrent state's
    snapshot at its end): the MTP block's entries of those positions come back from what the
    first request's block computed, kept beside the prefix cache, and it drafts on from there.
    The entry of the first position after the cached part reads the model's row of the last
    cached one, which a cached prefix does not compute: that one entry is missing, so the
    guesses may differ from a fresh server's (never the reply)."""
    path = mtp_models["qwen35"]
    system = "You are a careful Python reviewer. " + " ".join(f"Rule {i}: keep functions short." for i in range(40))

    def ask(server, question):
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                "max_tokens": 32, "temperature": 0}
        return requests.post(f"{server.url}/v1/chat/completions", json=body, timeout=120).json()

    warm = splash_server("--model", path, "--device", "cpu", with_model=False)
    ask(warm, "Is `def f(): pass` fine?")
    reused = ask(warm, "Write a function that adds two numbers.")
    fresh = ask(splash_server("--model", path, "--device", "cpu", with_model=False),
                "Write a function that adds two numbers.")
    assert reused["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256, reused["usage"]
    assert fresh["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert reused["choices"][0]["message"]["content"] == fresh["choices"][0]["message"]["content"]
    # (its drafter took the entries back and guessed: a failure there would have dropped it)
    details = reused["usage"]["completion_tokens_details"]
    assert details["accepted_prediction_tokens"] + details["rejected_prediction_tokens"] > 0, details
