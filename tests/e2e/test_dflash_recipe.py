"""The block draft's recipe (tools/dflash, issue 14): the prompts it builds from Python sources
are chats `splash draft-data` reads, one per task kind, the same for a seed; and, where
PyTorch is installed (it is not in CI: the recipe runs by hand or on the device), a short
training run on `splash draft-data` samples writes a GGUF in llama.cpp's dflash layout."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools" / "dflash"

SOURCE = '''
def clamp(value, low, high):
    """Limit value to the range [low, high]."""
    if value < low:
        return low
    if value > high:
        return high
    return value


def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = 0
    for v in values:
        total = total + v
    return total / len(values)
'''


def make_prompts(tmp_path: Path, count: int, seed: int = 0) -> list[dict]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "maths.py").write_text(SOURCE)
    out = tmp_path / f"prompts-{seed}.jsonl"
    subprocess.run([sys.executable, str(TOOLS / "make_prompts.py"), "--count", str(count), "--out", str(out),
                    "--source", str(src), "--seed", str(seed)], check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_prompts_are_chats_of_every_task(tmp_path):
    rows = make_prompts(tmp_path, 12)
    assert len(rows) == 11  # (2 functions x 6 tasks, less mean()'s bug: it has no operator to change)
    assert {r["task"] for r in rows} == {"implement", "types", "refactor", "tests", "bug", "explain"}
    for r in rows:
        system, user = r["messages"]
        assert system["role"] == "system" and user["role"] == "user"
        assert "```python" in user["content"]
        if r["task"] == "implement":
            assert user["content"].rstrip("`\n").endswith("...") and "return" not in user["content"]
        if r["task"] == "bug":  # one operator changed: clamp's code, but not as written
            code = user["content"].split("```python\n")[1].split("\n```")[0]
            original = SOURCE.strip().split("\n\n\n")[0]
            assert code != original and code.count("\n") == original.count("\n")
            assert sum(a != b for a, b in zip(code.splitlines(), original.splitlines())) == 1
    assert make_prompts(tmp_path, 12) == rows, "the same seed gives the same prompts"
    assert len(make_prompts(tmp_path, 5, seed=1)) == 5


def test_no_functions_is_an_error(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, str(TOOLS / "make_prompts.py"), "--out", str(tmp_path / "p.jsonl"),
                           "--source", str(empty)], capture_output=True, text=True)
    assert proc.returncode != 0 and "no documented functions" in proc.stderr


def test_training_writes_a_dflash_gguf(splash_binary, model_path, tmp_path):
    pytest.importorskip("torch")
    gguf = pytest.importorskip("gguf")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(json.dumps(r) for r in make_prompts(tmp_path, 6)) + "\n")
    data = tmp_path / "data"
    subprocess.run([splash_binary, "draft-data", "--model", model_path, "--prompts", str(prompts),
                    "--hidden-layers", "1,10,18,27", "-n", "48", "--out", str(data)],
                   check=True, capture_output=True, text=True, timeout=300)
    draft = tmp_path / "draft.gguf"
    proc = subprocess.run([sys.executable, str(TOOLS / "train.py"), "--target", model_path, "--data", str(data),
                           "--out", str(draft), "--epochs", "1", "--layers", "1", "--block", "4", "--anchors", "4",
                           "--held-out", "0.2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "held-out acceptance" in proc.stderr
    reader = gguf.GGUFReader(str(draft))
    fields = {k: f.contents() for k, f in reader.fields.items()}
    assert fields["general.architecture"] == "dflash"
    assert fields["dflash.block_size"] == 4 and fields["dflash.block_count"] == 1
    assert fields["dflash.target_layers"] == [2, 11, 19, 28]  # (llama.cpp reads each tap's next layer's input)
    names = {t.name for t in reader.tensors}
    assert {"fc.weight", "enc.output_norm.weight", "output_norm.weight", "token_embd.weight", "output.weight",
            "blk.0.attn_q.weight", "blk.0.ffn_down.weight"} <= names
    assert fields["tokenizer.ggml.mask_token_id"] == fields["dflash.vocab_size"] - 1  # (the table's last row)
    # splash runs it: the same greedy tokens as plain decoding.
    ids = ",".join(str(i) for i in np.load(data / f"{json.loads((data / 'manifest.jsonl').read_text().splitlines()[0])['name']}.tokens.npy")[:40])
    replies = [json.loads(subprocess.run([splash_binary, "eval", "--device", "cpu", "--model", model_path, "--tokens", ids,
                                          "--greedy", "24", "--draft", mode, "--draft-model", str(draft)],
                                         check=True, capture_output=True, text=True, timeout=300).stdout)
               for mode in ("none", "model")]
    assert replies[0]["generated"] == replies[1]["generated"] and replies[1]["drafted"] > 0
