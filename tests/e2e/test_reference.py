"""The engine against the independent numpy reference (tests/reference/llama_ref.py).

For each CPU kernel path (SPLASH_CPU=avx2 and avx512) this checks
  * last-position logits on five prompts (chat, code, ~300-token prose, one token,
    numbers/unicode): max-abs difference, KL divergence, top-1 and top-10 agreement;
  * a 64-token greedy continuation, token for token, where a divergence is accepted
    only at a near tie of the reference (which then continues from the engine's token).

Environment: SPLASH_TEST_MODEL (the GGUF; the module is skipped when unset and fails
when it names a missing file), SPLASH_BIN (default <repo>/build/splash).

Why the engine cannot match the reference exactly, and how the tolerances were set
------------------------------------------------------------------------------------
The reference does exact float32 math on the dequantized weights. The engine, like
llama.cpp, rounds the input of every quantized matmul to int8 per 32-element block
(d = max|x|/127, q = round(x/d)) so that it can use integer dot products. That rounding
is the dominant difference; accumulation order and float16 KV storage are two orders of
magnitude smaller (measured: f16 K/V alone moves logits by <= 0.014), and the reference's
own float32 arithmetic is within 3e-5 of a float64 run.

To size it, the reference can run with that rounding simulated (llama_ref.load(...,
act_quant=True)). `python tests/e2e/test_reference.py --calibrate --model M` compares the
simulated reference with the exact one at every step of a teacher-forced 64-token greedy
continuation of the five prompts below (320 positions per variant). Measured on
SmolLM2-135M-Instruct Q4_1 (int8 activations / int8 activations + f16 K/V):

                                     median          p99            max
    max |logit difference|         0.60 / 0.63    1.27 / 1.47    1.74 / 1.86
    KL(ref || rounded), nats      .0011 / .0011   .013 / .021    .030 / .024
    change of the ref's top-2 gap  0.08 / 0.08    0.39 / 0.36    0.75 / 0.47
    top-10 swap depth (below)      0    / 0       0.30 / 0.30    0.63 / 0.51
    top-10 overlap                 min 7 (at 3 of 640 positions), 10 at two thirds
    top-1 flips                    7 of 640, all where the ref's top-2 gap was <= 0.26

Bugs injected into the reference, to see whether the tolerances separate them from
rounding (range over the prompts; position-dependent bugs are invisible on the 1-token
prompt, so it is left out of the ranges):
    RoPE base 10000 instead of 100000   max-abs 2.5 .. 4.1,  KL 0.048 .. 0.28
    attention scale off by sqrt(2)      max-abs 3.5 .. 9.5,  KL 0.053 .. 0.43
    NEOX instead of adjacent-pair RoPE  max-abs 9.6 .. 24,   KL 0.92 .. 2.6
    no causal mask                      max-abs 8.4 .. 18,   KL 0.45 .. 5.4
    wrong q-head -> kv-head mapping     max-abs 14 .. 38,    KL 1.0 .. 12
    last layer skipped                  max-abs 21 .. 33,    KL 0.86 .. 6.7
    int7 instead of int8 activations    max-abs 0.9 .. 1.5,  KL 0.006 .. 0.025 (not
        caught, and it should not be: it is the same kind of rounding, a bit coarser)
(Shifting every RoPE position by one, or eps 1e-6 instead of 1e-5, changes nothing
measurable: attention depends only on relative positions, and eps is tiny next to the
mean square of the hidden state.)

Hence, for each prompt and CPU path:
  MAX_ABS = 2.5   1.35x the worst rounding deviation seen (1.86); the engine's rounding
                  is not bit-identical to the simulation (float16 scales and block sums,
                  summation order), so it gets margin. Every injected structural bug
                  exceeds it on at least one prompt.
  MAX_KL = 0.06   2x the worst rounding KL seen (0.030). KL weighs the tokens that carry
                  probability, so it is the sharper check; every injected bug exceeds it
                  on at least one prompt (the closest, the RoPE base, reaches 0.28).
  NEAR_TIE = 1.0  for the rounding to flip two candidates it must move their gap by more
                  than the gap; the largest move seen was 0.75, so a choice the reference
                  prefers by >= 1.0 logit (2.7x in probability) must be kept. It bounds the
                  engine's top-1 "regret" (how much lower the reference rates the engine's
                  choice than its own) and the greedy divergence.
  TOP10: every token that enters or leaves the top 10 must lie within NEAR_TIE of the
                  10th-best logit ("swap depth"; at most 0.63 seen), and at least
                  TOP10_MIN_OVERLAP = 6 of the 10 must agree (one below the worst seen, 7;
                  a coarse backstop, the swap depth does the precise work).

Measured engine (build/splash, both paths): max-abs 0.40 .. 0.83, KL 0.0012 .. 0.0067,
same top-1 on all five prompts; avx2 and avx512 logits differ by < 1e-5.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reference"))
import llama_ref  # noqa: E402
from compare import check_greedy, kl_divergence, require_cpu, run_engine  # noqa: E402

MAX_ABS = 2.5
MAX_KL = 0.06
NEAR_TIE = 1.0
TOP10_MIN_OVERLAP = 6
GREEDY_STEPS = 64

CPU_PATHS = ["avx2", "avx512"]

PROMPTS = {
    "chat": (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
        "<|im_end|>\n<|im_start|>user\nGive me three tips for writing clear commit messages."
        "<|im_end|>\n<|im_start|>assistant\n"
    ),
    "code": (
        "import json\n\n\ndef load_config(path):\n    \"\"\"Read a JSON config file and return a dict.\"\"\"\n"
        "    with open(path, encoding=\"utf-8\") as f:\n        data = json.load(f)\n"
        "    if not isinstance(data, dict):\n        raise ValueError(f\"{path}: expected an object\")\n"
        "    return"
    ),
    "long": (
        "The river begins as a thin stream high in the mountains, fed by snow that melts a little "
        "more each spring. For the first few miles it runs fast and cold over smooth grey stones, "
        "and the only sounds are water and wind. Lower down, the valley widens and the river "
        "slows. Farmers have drawn water from it for centuries, cutting small channels that carry "
        "it across their fields of wheat and barley. Old stone bridges cross it at every village, "
        "each one built a little differently, because each village had its own masons and its own "
        "ideas about how a bridge should look. In the town at the bottom of the valley the river "
        "once turned the wheels of twelve mills. Most of them are gone now; two have become "
        "restaurants, one is a museum, and the rest are remembered only by the names of streets. "
        "Every autumn the town holds a festival on the riverbank. Children race paper boats from "
        "the upper bridge to the lower one, and the winner is given a loaf of bread shaped like a "
        "fish. Visitors often ask why a fish, and the townspeople give a different answer every "
        "time. Beyond the town the river meets the plain and turns wide and brown. It wanders in "
        "long loops between fields and marshes, where herons stand perfectly still for hours. "
        "Finally, after a journey of more than two hundred miles, it reaches the sea, where the "
        "fresh water and the salt water mix in a broad, quiet estuary full of birds. Scientists "
        "who study the estuary say that"
    ),
    "one": "Hello",  # only its first token is used
    "numbers_unicode": (
        "Prices: 3.14159, 2,718 and 1e-9; 100% of 256 = 256. Naïve café, Straße, 東京タワー, "
        "Ελληνικά, русский, emoji 🚀🎉, math ∑ x² ≤ ∞ →"
    ),
}
GREEDY_PROMPTS = ["chat", "code"]


# --- fixtures -------------------------------------------------------------------------




@pytest.fixture(scope="module")
def ref(model_path):
    return llama_ref.load(model_path)


@pytest.fixture(scope="module")
def prompt_ids(splash_binary, model_path) -> dict[str, list[int]]:
    """Prompts tokenized by the engine: the comparison is of the forward pass on the same
    ids, so tokenizer differences cannot hide or fake a forward-pass difference."""
    ids = {name: tokenize(splash_binary, model_path, text) for name, text in PROMPTS.items()}
    ids["one"] = ids["one"][:1]
    assert 250 <= len(ids["long"]) <= 400, f"long prompt has {len(ids['long'])} tokens"
    return ids


@pytest.fixture(scope="module")
def ref_logits(ref, prompt_ids) -> dict[str, np.ndarray]:
    return {name: ref.logits(ids) for name, ids in prompt_ids.items()}


@pytest.fixture(scope="module")
def ref_continuation(ref):
    """The reference's greedy continuation (tokens, margins, per-step logits) of a context,
    memoised: both CPU paths usually ask for the same ones."""
    memo = {}

    def continuation(context: list[int], n: int):
        key = (tuple(context), n)
        if key not in memo:
            memo[key] = ref.greedy(list(context), n, keep_logits=True)
        return memo[key]

    return continuation




# --- engine calls ---------------------------------------------------------------------
def tokenize(splash_binary: str, model: str, text: str) -> list[int]:
    return json.loads(run_engine(splash_binary, ["tokenize", "--model", model, "--json", text]).stdout)


def engine_logits(splash_binary, model, ids, cpu, tmp_path) -> np.ndarray:
    out = tmp_path / "logits.f32"
    run_engine(splash_binary, ["eval", "--model", model, "--tokens", ",".join(map(str, ids)),
                            "--logits-out", str(out)], cpu)
    return np.fromfile(out, dtype="<f4")


def engine_greedy(splash_binary, model, ids, n, cpu) -> list[int]:
    out = run_engine(splash_binary, ["eval", "--model", model, "--tokens", ",".join(map(str, ids)),
                                  "--greedy", str(n)], cpu).stdout
    return json.loads(out)["generated"]


# --- comparison helpers (shared with --calibrate) -------------------------------------
def compare(ref: np.ndarray, eng: np.ndarray) -> dict:
    r_order, e_order = np.argsort(-ref), np.argsort(-eng)
    r10, e10 = set(r_order[:10].tolist()), set(e_order[:10].tolist())
    # How far outside the other side's top 10 a swapped-in token sits (0 if none):
    # a token that truly belongs in the top 10 sits just below the 10th-best logit.
    entered = [ref[r_order[9]] - ref[t] for t in e10 - r10]
    left = [eng[e_order[9]] - eng[t] for t in r10 - e10]
    return {
        "max_abs": float(np.abs(ref - eng).max()),
        "kl": kl_divergence(ref, eng),
        "ref_top2_gap": float(ref[r_order[0]] - ref[r_order[1]]),
        # What the engine's choice costs by the reference's judgement (0 when they agree).
        "top1_regret": float(ref[r_order[0]] - ref[e_order[0]]),
        "top10_overlap": len(r10 & e10),
        "top10_swap_depth": float(max(entered + left, default=0.0)),
    }


# --- tests ----------------------------------------------------------------------------
@pytest.mark.parametrize("cpu", CPU_PATHS)
@pytest.mark.parametrize("prompt", list(PROMPTS))
def test_logits_match_reference(splash_binary, model_path, prompt_ids, ref_logits, prompt, cpu,
                                tmp_path):
    require_cpu(cpu)
    ref = ref_logits[prompt]
    eng = engine_logits(splash_binary, model_path, prompt_ids[prompt], cpu, tmp_path)
    assert eng.shape == ref.shape, f"engine wrote {eng.size} logits, expected {ref.size}"
    assert np.isfinite(eng).all(), "engine logits contain NaN/inf"
    c = compare(ref, eng)
    print(f"[{cpu}] {prompt} ({len(prompt_ids[prompt])} tokens): " +
          ", ".join(f"{k}={v:.4g}" for k, v in c.items()))
    assert c["max_abs"] <= MAX_ABS, c
    assert c["kl"] <= MAX_KL, c
    # The engine may pick another top-1 only where the reference itself nearly ties.
    assert c["top1_regret"] < NEAR_TIE, c
    assert c["top10_overlap"] >= TOP10_MIN_OVERLAP, c
    assert c["top10_swap_depth"] < NEAR_TIE, c


@pytest.mark.parametrize("cpu", CPU_PATHS)
@pytest.mark.parametrize("prompt", GREEDY_PROMPTS)
def test_greedy_matches_reference(splash_binary, model_path, ref_continuation, prompt_ids, prompt,
                                  cpu):
    require_cpu(cpu)
    ids = prompt_ids[prompt]
    eng = engine_greedy(splash_binary, model_path, ids, GREEDY_STEPS, cpu)
    assert len(eng) == GREEDY_STEPS, f"engine generated {len(eng)} tokens"
    check_greedy(eng, ids, ref_continuation, NEAR_TIE, f"[{cpu}] {prompt}")


# Hidden-state taps (a block draft's conditioning and its training data): the outputs of the
# first, a middle and the last layer for every token of a prompt that spans two prefill chunks.
# Measured (int8 activations, 8-bit KV, against the exact reference, 600 tokens): a row's
# relative error at most 1.5% / 4.6% / 17.9% at layers 0 / 9 / 29 (the last layers' few
# outlier rows; mean 0.9% / 1.5% / 3.6%). A layer's neighbour's rows are 29-93% away
# (median; 79-183% at worst), so a tap one layer off fails both bounds.
TAP_LAYERS = [0, 9, 29]
TAP_ROW_MAX = 0.30
TAP_MEAN_MAX = 0.06


def test_hidden_taps_match_reference(splash_binary, model_path, prompt_ids, ref, tmp_path):
    ids = prompt_ids["long"] + prompt_ids["long"]  # past one 512-token chunk
    out = tmp_path / "hidden.f32"
    run_engine(splash_binary, ["eval", "--device", "cpu", "--model", model_path, "--tokens", ",".join(map(str, ids)),
                               "--hidden-layers", ",".join(map(str, TAP_LAYERS)), "--hidden-out", str(out)])
    eng = np.fromfile(out, dtype="<f4")
    d_model = ref.tok_embd.shape[1]
    assert eng.size == len(ids) * len(TAP_LAYERS) * d_model, f"engine wrote {eng.size} floats"
    eng = eng.reshape(len(ids), len(TAP_LAYERS), d_model)
    hidden: dict = {}
    ref.forward(ids, llama_ref.KVCache(ref.cfg.n_layer), hidden=hidden)
    for k, layer in enumerate(TAP_LAYERS):
        want = hidden[layer]
        rel = np.linalg.norm(eng[:, k] - want, axis=1) / np.linalg.norm(want, axis=1)
        print(f"layer {layer}: row relative error max {rel.max():.4f} mean {rel.mean():.4f}")
        assert rel.max() <= TAP_ROW_MAX, (layer, int(rel.argmax()), float(rel.max()))
        assert rel.mean() <= TAP_MEAN_MAX, (layer, float(rel.mean()))


def test_hidden_taps_refused_on_bad_layers(splash_binary, model_path):
    for layers in ["30", "-1", "3,3"]:
        proc = subprocess.run([splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", "1,2",
                               "--hidden-layers", layers, "--hidden-out", "/dev/null"],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0 and "hidden tap" in proc.stderr, (layers, proc.stderr[-500:])


# --- calibration (manual): python tests/e2e/test_reference.py --calibrate --model M ----
def calibrate(model_path: str) -> None:
    """Measures what int8 activation rounding alone does to the reference (the numbers in
    the module docstring). Uses the reference's own sanity tokenizer: no engine needed."""
    tok = llama_ref.sanity_tokenizer(model_path)
    exact = llama_ref.load(model_path)
    variants = {"int8 act": llama_ref.with_rounding(exact, True, False),
                "int8 act + f16 kv": llama_ref.with_rounding(exact, True, True)}
    for label, rounded in variants.items():
        rows, flips = [], []
        for name, text in PROMPTS.items():
            ids = tok.encode(text).ids[:1] if name == "one" else tok.encode(text).ids
            generated, _ = exact.greedy(ids, GREEDY_STEPS)
            # Teacher-forced: both see the exact reference's continuation.
            c_exact, c_round = llama_ref.KVCache(exact.cfg.n_layer), llama_ref.KVCache(exact.cfg.n_layer)
            a, b = exact.forward(ids, c_exact), rounded.forward(ids, c_round)
            for step in range(GREEDY_STEPS):
                c = compare(a, b)
                order = np.argsort(-a)[:2]
                c["gap_change"] = abs(float((a[order[0]] - a[order[1]]) - (b[order[0]] - b[order[1]])))
                rows.append(c)
                if c["top1_regret"] > 0:
                    flips.append((name, step, round(c["ref_top2_gap"], 3)))
                a = exact.forward([generated[step]], c_exact)
                b = rounded.forward([generated[step]], c_round)
        print(f"== {label}: {len(rows)} positions")
        for key in ["max_abs", "kl", "gap_change", "top10_swap_depth", "top1_regret"]:
            v = np.array([r[key] for r in rows])
            print(f"  {key:17s} median {np.median(v):.4f}  p99 {np.percentile(v, 99):.4f}  max {v.max():.4f}")
        print("  top10_overlap histogram (7..10):",
              np.bincount([r["top10_overlap"] for r in rows], minlength=11)[7:].tolist())
        print("  top-1 flips (prompt, step, ref top-2 gap):", flips)


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrate", action="store_true", required=True)
    ap.add_argument("--model", required=True)
    calibrate(ap.parse_args().model)
