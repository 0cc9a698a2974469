"""Helpers shared by the tests that compare the engine with the numpy reference
(test_reference.py, test_random_model.py, test_random_qwen.py)."""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest


def kl_divergence(ref: np.ndarray, other: np.ndarray) -> float:
    """KL(softmax(ref) || softmax(other)) in nats, computed in float64."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max()
        return x - np.log(np.exp(x).sum())
    lp, lq = log_softmax(ref), log_softmax(other)
    return float((np.exp(lp) * (lp - lq)).sum())


def require_cpu(cpu: str) -> None:
    """Skips a test of a kernel path (SPLASH_CPU=avx2|avx512) this CPU cannot run."""
    flags = Path("/proc/cpuinfo").read_text().split()
    needed = {"avx2": ["avx2", "fma"], "avx512": ["avx512f", "avx512bw", "avx512_vnni"]}[cpu]
    missing = [f for f in needed if f not in flags]
    if missing:
        pytest.skip(f"this CPU lacks {', '.join(missing)}: the {cpu} path cannot run here")


def run_engine(splash_binary: str, args: list[str], cpu: str | None = None) -> subprocess.CompletedProcess:
    """Runs the engine (on the given kernel path), failing the test with its stderr on error."""
    env = dict(os.environ, SPLASH_CPU=cpu) if cpu else dict(os.environ)
    proc = subprocess.run([splash_binary, *args], env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        pytest.fail(f"splash {' '.join(args[:3])}... exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return proc


def check_greedy(engine_tokens: list[int], prompt: list[int], continuation, near_tie: float, label: str) -> int:
    """Walks the engine's greedy tokens against the reference. A divergence is acceptable only
    as a near tie: the engine's token must be one the reference rates within `near_tie` of its
    own choice. After an accepted tie the contexts differ, so the reference restarts from the
    engine's context and the comparison goes on. `continuation(context, n)` returns the
    reference's (tokens, top-2 margins, per-step logits). Returns the number of ties."""
    steps = len(engine_tokens)
    done, ties = 0, 0
    while done < steps:
        want, margins, step_logits = continuation(prompt + engine_tokens[:done], steps - done)
        pos = next((i for i, (a, b) in enumerate(zip(want, engine_tokens[done:])) if a != b), None)
        if pos is None:
            break
        at = done + pos
        regret = float(step_logits[pos][want[pos]] - step_logits[pos][engine_tokens[at]])
        msg = (f"{label}: diverges at generated position {at}: reference {want[pos]}, engine "
               f"{engine_tokens[at]}; reference top-2 margin {margins[pos]:.3g}, engine token "
               f"{regret:.3g} below the reference's choice")
        print(msg)
        assert regret < near_tie, f"{msg}: not a near tie (threshold {near_tie})"
        print(f"  accepted: a near tie (< {near_tie}), within int8 activation rounding; "
              "continuing from the engine's token")
        ties += 1
        done = at + 1
    print(f"{label}: {steps} tokens checked, {ties} near-tie divergence(s)")
    return ties
