"""The run-time-shape kernels and every weight type against the numpy reference.

The default model runs on kernels instantiated for its exact shapes; any other llama GGUF runs
the same kernel code with run-time shapes. This module generates small random llama models
(tools/make_random_llama.py: d_model 256, 4 heads / 2 kv heads of 64, ffn 768, 3 layers, rope
base 10000, untied output head, SmolLM2's tokenizer so vocab 49152) and checks, for each CPU
path (SPLASH_CPU=avx2 and avx512):
  * the start-up summary says "run-time shapes" and lists the file's weight types;
  * last-position logits of three token sequences (8, 100 and 600 tokens: the last crosses the
    engine's 512-token prefill chunk) against tests/reference/llama_ref.py with act_quant=True;
  * a 16-token greedy continuation, token for token, where a divergence is accepted only at a
    near tie of the reference (as in test_reference.py).

Environment: SPLASH_TEST_MODEL (a GGUF whose tokenizer and chat template are copied; the
module is skipped when unset), SPLASH_BIN (default <repo>/build/splash).

The models
----------
  mix_a, mix_b    every matrix quantized or float, each of F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q4_K
                  Q6_K in several roles (MIXES in the tool): the realistic case.
  probe_<TYPE>    one integer type in token_embd, blk.0.attn_q/k/v (stacked) and output, every
                  other matrix one float type (BF16, F16 or F32): a sharp check of that type.

Why the two kinds get different tolerances, and why act_quant=True is not much closer than the
exact reference on the mixes
-----------------------------------------------------------------------------------------------
The engine rounds the input of every integer-weight matmul to int8 per 32 values. Rounding is
discontinuous: a difference of one float32 ulp upstream (summation order, float vs double in
RMSNorm, exp approximation in softmax) moves a few values across a rounding boundary, each such
flip moves the matmul output by a full quantization step, and that in turn flips many more
values at the next int8 stage. After three or four integer stages in series the engine and the
simulated reference carry independent draws of the same rounding noise. The simulation also
differs from the engine in detail (scale kept as float16 and ties rounded away from zero in the
reference; float32 scale and ties to even in the engine), which alone starts the cascade.
Measured (`python tests/e2e/test_random_model.py --calibrate`): perturbing the reference's
embedding by a relative 1e-6 (a float32 ulp) changes mix logits as much as the exact reference
differs from the simulated one. So on the mixes act_quant=True and act_quant=False are about
equally far from the engine, and the tolerance is this rounding-noise floor.
A probe has only two int8 stages in series (q/k/v, then the output head): no cascade, so its
floor is 4-10x lower and the check is sharp enough to see a 1% error in one tensor.

Measured (this seed, build/splash; max |logit difference| / KL(ref || engine) in nats; the
logits have a standard deviation of ~2.1 and a maximum of ~10):
                 engine vs act_quant ref     engine vs exact ref (info)   noise floor*     greedy**
  mix_a          0.090 .. 0.118 / 2.3e-4 .. 3.5e-4   0.100 .. 0.120 / 3.0e-4 .. 3.3e-4   0.146 / 5.1e-4   0.123
  mix_b          0.074 .. 0.089 / 1.9e-4 .. 2.3e-4   0.091 .. 0.114 / 2.3e-4 .. 3.3e-4   0.104 / 2.8e-4   0.091
  probe_Q8_0     0.0014 .. 0.021 / 5e-8 .. 1.4e-5   0.048 .. 0.060 / 5.9e-5 .. 1.2e-4   0.034 / 3.2e-5   0.027
  probe_Q4_0     0.0078 .. 0.0097 / 1.7e-6 .. 2.5e-6 0.044 .. 0.072 / 5.9e-5 .. 1.5e-4   0.023 / 1.4e-5   0.014
  probe_Q4_1     0.0019 .. 0.018 / 1e-7 .. 9.5e-6    0.044 .. 0.065 / 6.8e-5 .. 1.2e-4   0.020 / 1.1e-5   0.010
  probe_Q4_K     0.0023 .. 0.010 / 1.6e-7 .. 3.6e-6  0.048 .. 0.062 / 6.0e-5 .. 1.2e-4   0.021 / 1.3e-5   0.015
  probe_Q6_K     0.0022 .. 0.014 / 1.3e-7 .. 7.3e-6  0.053 .. 0.063 / 7.3e-5 .. 1.2e-4   0.033 / 2.6e-5   0.020
  (ranges over the three sequences; avx2 and avx512 agree to 4 digits except mix_a mid/long,
  where their own summation orders start slightly different cascades: 0.1168 vs 0.1148.)
  * the largest difference between the act_quant reference and 12 copies of it whose
    embedding was perturbed by a relative 1e-6 or 1e-5, over the three sequences.
  ** the largest change of the reference's top-2 gap under those perturbations, teacher-forced
    along its 16-token greedy continuations of short and long.
  Models with every matrix of one float type (F32, F16 or BF16) match the reference to 1e-5.
  An earlier, different 7-token sequence gave mix_a 0.170 / 5.7e-4: the floor has a tail.

Tolerances (TOL below):
  mix    max_abs 0.25  1.7x the floor (0.146), 2.1x the engine's worst (0.118)
         kl 8e-4       1.6x the floor (5.1e-4), 2.3x the engine's worst (3.5e-4)
         near_tie 0.3  2.4x the largest top-2 gap change (0.123)
  probe  max_abs 0.05  1.5x the floor (0.034), 2.3x the engine's worst (0.021)
         kl 5e-5       1.6x the floor (3.2e-5), 3.4x the engine's worst (1.45e-5)
         near_tie 0.06 2.2x the largest top-2 gap change (0.027)

Bugs injected into the reference, one tensor at a time, the engine left as is (a bug is
caught when at least one sequence fails; 170 single-tensor bugs on the probes, 63 on mix_a):
  probes  every one caught: each tensor of the probe type (token_embd, attn_q, attn_v, output)
          and of the float type (blk.1.ffn_up, blk.2.ffn_down) scaled by 1.01 (max-abs
          0.057 .. 0.11, KL 8e-5 .. 2.8e-4 on the most affected sequence), 1.03, 1.10; rows 0
          and 1 swapped; the two halves of every 32-block swapped (nibble order); and a
          dequantization bug of the type itself: Q4_1/Q4_K min dropped, Q4_0 offset 7 for 8,
          Q6_K offset 31 for 32, Q8_0 the neighbouring block's scale (max-abs 0.2 .. 14).
  mix_a   caught: every nibble-order and type-specific bug (max-abs 0.35 .. 14), every 1.10
          scaling, 1.03 on the embedding, output, Q4_K gate, Q6_K down and (one sequence)
          Q8_0 attn_output, and 8 of 11 row swaps. Missed: every 1.01 scaling, 1.03 on
          attn_q (Q4_0, F16), attn_k (BF16), attn_v (F32), attn_output (Q4_1), ffn_up (Q8_0),
          and a row swap in ffn_gate (Q4_K), ffn_up (Q8_0), attn_q (F16): on a model where
          every matmul is int8-rounded these are inside the rounding noise, which is why the
          probes exist.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reference"))
sys.path.insert(0, str(REPO / "tools"))
import llama_ref  # noqa: E402
from compare import check_greedy, kl_divergence, require_cpu, run_engine  # noqa: E402
from gguf import GGUFReader  # noqa: E402
import make_random_llama as mrl  # noqa: E402

CPU_PATHS = ["avx2", "avx512"]
MAX_CONTEXT = 1024
# The tolerances below are the weights' and activations' rounding noise: the KV cache is kept
# exact (f32) so they measure the kernels, not the 8-bit cache (tested on its own in
# tests/unit/test_llama_model.cpp and by test_reference.py on the real model).
EXACT_KV = ["--kv-cache-type", "f32"]
GREEDY_STEPS = 16
SEED = mrl.DEFAULT_SEED


@dataclass(frozen=True)
class Tolerance:
    max_abs: float    # max |logit difference| over the vocabulary
    kl: float         # KL(softmax(ref) || softmax(engine)), nats
    near_tie: float   # how much lower the reference may rate the engine's top-1 than its own


# Margins over the measured noise floor / the engine's worst (module docstring):
TOL = {
    # floor 0.146 / 5.1e-4, engine <= 0.118 / 3.5e-4, top-2 gap moves <= 0.123:
    # 1.7x / 1.6x / 2.4x the floor. Catches structural and dequantization bugs, not 1% scales.
    "mix": Tolerance(max_abs=0.25, kl=8e-4, near_tie=0.3),
    # floor 0.034 / 3.2e-5, engine <= 0.021 / 1.45e-5, top-2 gap moves <= 0.027:
    # 1.5x / 1.6x / 2.2x the floor. Catches one tensor scaled by 1.01.
    "probe": Tolerance(max_abs=0.05, kl=5e-5, near_tie=0.06),
}

# The integer type of each probe, and the float type of its other matrices.
PROBE_REST = {"Q8_0": "BF16", "Q5_0": "F32", "Q5_1": "F16", "Q4_0": "F16", "Q4_1": "F32", "Q4_K": "BF16",
              "Q6_K": "F16"}
PROBE_TENSORS = ["token_embd", "blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v", "output"]
MODELS = ["mix_a", "mix_b", *[f"probe_{t}" for t in PROBE_REST]]


def kind(model: str) -> str:
    return model.split("_")[0]


def model_types(model: str) -> dict[str, str]:
    if kind(model) == "mix":
        return mrl.tensor_types(mix=model.split("_")[1])
    t = model.split("_", 1)[1]
    return mrl.tensor_types(all_type=PROBE_REST[t], overrides={name: t for name in PROBE_TENSORS})


def sequences() -> dict[str, list[int]]:
    """Token ids: random over the whole vocabulary (the first and last rows included)."""
    rng = np.random.default_rng(SEED)
    return {
        "short": [1, 0, 49151, 17, 2000, 9, 31000, 4],
        "mid": rng.integers(0, 49152, 100).tolist(),
        "long": rng.integers(0, 49152, 600).tolist(),  # > 512: two prefill chunks
    }


SEQUENCES = sequences()
GREEDY_SEQUENCES = ["short", "long"]


# --- fixtures -------------------------------------------------------------------------




class Models:
    """The generated models (engine file + tokenizer-less twin for the reference), and the
    reference's results, each computed once and shared by both CPU paths."""

    def __init__(self, model_path: str, directory: Path):
        self.tokenizer = mrl.read_tokenizer(model_path)
        self.directory = directory
        self.paths: dict[str, Path] = {}
        self.refs: dict[str, llama_ref.Model] = {}
        self.memo: dict = {}

    def path(self, model: str) -> str:
        if model not in self.paths:
            path, twin = self.directory / f"{model}.gguf", self.directory / f"{model}.ref.gguf"
            mrl.make_model(str(path), self.tokenizer, model_types(model), seed=SEED, name=f"random-{model}",
                           reference_twin=str(twin))
            self.paths[model] = path
        return str(self.paths[model])

    def ref(self, model: str, act_quant: bool = True) -> llama_ref.Model:
        if model not in self.refs:
            self.path(model)
            self.refs[model] = llama_ref.load(str(self.directory / f"{model}.ref.gguf"))
        return llama_ref.with_rounding(self.refs[model], act_quant)

    def logits(self, model: str, seq: str, act_quant: bool = True) -> np.ndarray:
        key = ("logits", model, seq, act_quant)
        if key not in self.memo:
            self.memo[key] = self.ref(model, act_quant).logits(SEQUENCES[seq])
        return self.memo[key]

    def continuation(self, model: str, context: list[int], n: int):
        key = ("greedy", model, tuple(context), n)
        if key not in self.memo:
            self.memo[key] = self.ref(model).greedy(list(context), n, keep_logits=True)
        return self.memo[key]


@pytest.fixture(scope="module")
def models(model_path, tmp_path_factory) -> Models:
    return Models(model_path, tmp_path_factory.mktemp("random_models"))




# --- engine calls ---------------------------------------------------------------------


def engine_logits(splash_binary, model_path, ids, cpu, tmp_path) -> np.ndarray:
    out = tmp_path / "logits.f32"
    run_engine(splash_binary, ["eval", "--model", model_path, "--max-context", str(MAX_CONTEXT), *EXACT_KV,
                            "--tokens", ",".join(map(str, ids)), "--logits-out", str(out)], cpu)
    return np.fromfile(out, dtype="<f4")


def engine_greedy(splash_binary, model_path, ids, n, cpu) -> list[int]:
    proc = run_engine(splash_binary, ["eval", "--model", model_path, "--max-context", str(MAX_CONTEXT), *EXACT_KV,
                                   "--tokens", ",".join(map(str, ids)), "--greedy", str(n)], cpu)
    return json.loads(proc.stdout)["generated"]


# --- comparison -----------------------------------------------------------------------
def compare(ref: np.ndarray, eng: np.ndarray) -> dict:
    return {
        "max_abs": float(np.abs(ref - eng).max()),
        "kl": kl_divergence(ref, eng),
        # What the engine's choice costs by the reference's judgement (0 when they agree).
        "top1_regret": float(ref.max() - ref[int(np.argmax(eng))]),
    }


def logits_failures(ref: np.ndarray, eng: np.ndarray, tol: Tolerance) -> list[str]:
    c = compare(ref, eng)
    failures = []
    if c["max_abs"] > tol.max_abs:
        failures.append(f"max |diff| {c['max_abs']:.4f} > {tol.max_abs}")
    if c["kl"] > tol.kl:
        failures.append(f"KL {c['kl']:.3g} > {tol.kl}")
    if c["top1_regret"] >= tol.near_tie:
        failures.append(f"top-1 regret {c['top1_regret']:.3f} >= {tol.near_tie}")
    return failures


# --- tests ----------------------------------------------------------------------------
SUMMARY_TYPES = re.compile(r"^weights .*; types (.*)$", re.M)


@pytest.mark.parametrize("cpu", CPU_PATHS)
@pytest.mark.parametrize("model", MODELS)
def test_summary_says_run_time_shapes(splash_binary, models, model, cpu):
    require_cpu(cpu)
    path = models.path(model)
    proc = run_engine(splash_binary, ["run", "--model", path, "--max-context", "64", "-n", "1",
                                   "--temperature", "0", "Hi"], cpu)
    summary = proc.stderr
    assert re.search(rf"^kernels +{cpu} path, run-time shapes", summary, re.M), summary
    assert ("architecture llama: 3 layers, d_model 256, 4 heads / 2 kv heads of 64, ffn 768, vocab 49152"
            in summary), summary
    listed = SUMMARY_TYPES.search(summary)
    assert listed, summary
    got = {name: int(count) for name, count in re.findall(r"(\w+) \((\d+)\)", listed.group(1))}
    want: dict[str, int] = {}
    for t in GGUFReader(str(models.directory / f"{model}.ref.gguf")).tensors:
        want[t.tensor_type.name] = want.get(t.tensor_type.name, 0) + 1
    assert got == want, f"summary lists types {got}, the file holds {want}"


@pytest.mark.parametrize("cpu", CPU_PATHS)
@pytest.mark.parametrize("seq", list(SEQUENCES))
@pytest.mark.parametrize("model", MODELS)
def test_logits_match_reference(splash_binary, models, model, seq, cpu, tmp_path):
    require_cpu(cpu)
    ids = SEQUENCES[seq]
    eng = engine_logits(splash_binary, models.path(model), ids, cpu, tmp_path)
    ref = models.logits(model, seq)
    assert eng.shape == ref.shape, f"engine wrote {eng.size} logits, expected {ref.size}"
    assert np.isfinite(eng).all(), "engine logits contain NaN/inf"
    exact = compare(models.logits(model, seq, act_quant=False), eng)
    print(f"[{cpu}] {model} {seq} ({len(ids)} tokens): vs act_quant ref " +
          ", ".join(f"{k}={v:.4g}" for k, v in compare(ref, eng).items()) +
          f"; (information) vs exact ref max_abs={exact['max_abs']:.4g} kl={exact['kl']:.4g}")
    failures = logits_failures(ref, eng, TOL[kind(model)])
    assert not failures, f"[{cpu}] {model} {seq}: " + "; ".join(failures)


# Greedy continuations of both sequences on the mixes; on the probes only after the 600-token
# prompt (decoding on top of a two-chunk prefill), to keep the module under a minute.
GREEDY_CASES = [(m, s) for m in MODELS for s in (GREEDY_SEQUENCES if kind(m) == "mix" else ["long"])]


@pytest.mark.parametrize("cpu", CPU_PATHS)
@pytest.mark.parametrize("model,seq", GREEDY_CASES)
def test_greedy_matches_reference(splash_binary, models, model, seq, cpu):
    require_cpu(cpu)
    ids = SEQUENCES[seq]
    near_tie = TOL[kind(model)].near_tie
    eng = engine_greedy(splash_binary, models.path(model), ids, GREEDY_STEPS, cpu)
    assert len(eng) == GREEDY_STEPS, f"engine generated {len(eng)} tokens"
    check_greedy(eng, ids, lambda context, n: models.continuation(model, context, n), near_tie,
                 f"[{cpu}] {model} {seq}")


# --- calibration (manual) -------------------------------------------------------------
def calibrate(model_path: str, splash_binary: str, directory: Path) -> None:
    """The numbers in the module docstring: for each model and sequence, the engine (both
    paths) and the exact reference against the act_quant reference, and the noise floor:
    the act_quant reference against copies of itself with the embedding perturbed by a
    relative 1e-6 / 1e-5 (what a float32-ulp difference upstream of the int8 rounding does).
    Also, teacher-forced along the reference's greedy path, how far those copies move the
    reference's top-2 gap (what near_tie must allow)."""
    m = Models(model_path, directory)
    for model in MODELS:
        path = m.path(model)
        base = m.ref(model)

        def perturbed(seed: int, eps: float) -> llama_ref.Model:
            r = np.random.default_rng(seed)
            noise = 1 + eps * r.standard_normal(base.tok_embd.shape[1]).astype(np.float32)
            return llama_ref.Model(base.cfg, (base.tok_embd * noise).astype(np.float32), base.layers,
                                   base.out_norm, base.output, True, False)

        copies = [perturbed(s, e) for s in range(6) for e in (1e-6, 1e-5)]
        print(f"== {model}")
        for seq, ids in SEQUENCES.items():
            ref = m.logits(model, seq)
            row = [f"{seq:5s}"]
            for cpu in CPU_PATHS:
                out = directory / "calibrate.f32"
                subprocess.run([splash_binary, "eval", "--model", path, "--max-context", str(MAX_CONTEXT), *EXACT_KV, "--tokens",
                                ",".join(map(str, ids)), "--logits-out", str(out)],
                               env=dict(os.environ, SPLASH_CPU=cpu), check=True, capture_output=True)
                c = compare(ref, np.fromfile(out, dtype="<f4"))
                row.append(f"{cpu} {c['max_abs']:.4f}/{c['kl']:.1e}/r{c['top1_regret']:.2f}")
            c = compare(ref, m.logits(model, seq, act_quant=False))
            row.append(f"exact {c['max_abs']:.4f}/{c['kl']:.1e}")
            floor = [compare(ref, p.logits(ids)) for p in copies]
            row.append(f"floor {max(f['max_abs'] for f in floor):.4f}/{max(f['kl'] for f in floor):.1e}")
            if seq in GREEDY_SEQUENCES:
                want, _, steps = base.greedy(ids, GREEDY_STEPS, keep_logits=True)
                worst = 0.0
                for p in copies[:4]:
                    cache = llama_ref.KVCache(base.cfg.n_layer)
                    out_p = p.forward(ids, cache)
                    for step in range(GREEDY_STEPS):
                        a = steps[step]
                        order = np.argsort(-a)[:2]
                        worst = max(worst, abs(float((a[order[0]] - a[order[1]]) - (out_p[order[0]] - out_p[order[1]]))))
                        out_p = p.forward([want[step]], cache)
                row.append(f"greedy top-2 gap change max {worst:.3f}")
            print("  " + " | ".join(row), flush=True)


if __name__ == "__main__":
    import argparse
    import tempfile

    ap = argparse.ArgumentParser()
    ap.add_argument("--calibrate", action="store_true", required=True)
    ap.add_argument("--tokenizer-from", default=os.environ.get("SPLASH_TEST_MODEL"), required=False)
    ap.add_argument("--bin", default=os.environ.get("SPLASH_BIN", str(REPO / "build" / "splash")))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        calibrate(args.tokenizer_from, args.bin, Path(tmp))
