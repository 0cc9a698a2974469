"""What the model-draft tests (test_block_draft.py, test_mtp_draft.py) share: running the CLI,
and one greedy reply in every --draft mode, which must all be the same tokens."""
from __future__ import annotations

import json
import subprocess

import numpy as np

DRAFT_MODES = ("none", "lookup", "model", "auto")


def run(splash_binary, *args, check=True):
    proc = subprocess.run([splash_binary, *args], capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def greedy_reply_in_every_draft_mode(splash_binary, model: str, steps: int, *extra: str) -> dict[str, dict]:
    """`splash eval --greedy STEPS` after 40 random prompt tokens, once per draft mode (the same
    reply every time; none drafts nothing): each mode's JSON report."""
    ids = ",".join(str(i) for i in np.random.default_rng(3).integers(2, 49152, 40).tolist())
    replies = {}
    for mode in DRAFT_MODES:
        out = run(splash_binary, "eval", "--device", "cpu", "--model", model, "--tokens", ids, "--greedy", str(steps),
                  "--draft", mode, *extra).stdout
        replies[mode] = json.loads(out.strip().splitlines()[-1])
    generated = {mode: reply["generated"] for mode, reply in replies.items()}
    assert all(g == generated["none"] for g in generated.values()), generated
    assert replies["none"]["drafted"] == 0
    return replies
