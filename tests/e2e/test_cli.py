"""The splash command line, end to end: the real binary on the real default model.

Environment: SPLASH_BIN (default <repo>/build/splash), SPLASH_TEST_MODEL (the GGUF; tests
that need it are skipped when it is unset and fail when it names a missing file).
Each model-loading call takes about a second; the whole file runs in well under a minute.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SPLASH_BIN", str(REPO / "build" / "splash"))
GOLDEN_TOKENIZER = REPO / "tests" / "golden" / "tokenizer_smollm2.json"
TIMEOUT_S = 120


def splash(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    if not os.access(BIN, os.X_OK):
        pytest.fail(f"splash binary not found at {BIN} (set SPLASH_BIN)")
    result = subprocess.run(
        [BIN, *args], capture_output=True, text=True, errors="replace", timeout=TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if check:
        assert result.returncode == 0, f"splash {' '.join(args)} failed:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def model(model_path: str) -> str:
    """The model file (conftest's model_path), under the short name these tests use."""
    return model_path


def answer(result: subprocess.CompletedProcess) -> str:
    """The answer printed by `run` (which ends it with one newline)."""
    assert result.stdout.endswith("\n"), repr(result.stdout)
    return result.stdout[:-1]




# --- version and help -----------------------------------------------------------------

def test_version():
    for flag in ("--version", "-V"):
        result = splash(flag, check=True)
        assert re.fullmatch(r"splash \d+\.\d+\.\d+\n", result.stdout), result.stdout


def test_top_level_help_lists_subcommands():
    result = splash("--help", check=True)
    for sub in ("run", "tokenize", "bench", "eval", "pull", "models"):
        assert re.search(rf"^\s+{sub}\b", result.stdout, re.M), f"{sub} missing from:\n{result.stdout}"


HELP_FLAGS = {
    "run": ["-m,--model", "--temperature", "--top-k", "--top-p", "--min-p", "--repeat-penalty",
            "--penalty-window", "--presence-penalty", "--frequency-penalty", "--logit-bias", "--seed",
            "-s,--system", "-n,--max-tokens", "--stop", "--ignore-eos", "-q,--quiet", "-t,--threads",
            "-c,--max-context", "prompt"],
    "tokenize": ["-m,--model", "--json", "--no-special", "text"],
    "bench": ["-m,--model", "--prompt-sizes", "--decode-tokens", "--repetitions", "--json", "-t,--threads"],
    "eval": ["-m,--model", "--tokens", "--logits-out", "--greedy"],
    "pull": ["-h,--help", "name"],  # pull takes no options of its own, only a model's name
}


@pytest.mark.parametrize("sub", sorted(HELP_FLAGS))
def test_subcommand_help(sub):
    result = splash(sub, "--help", check=True)
    usage = [line for line in result.stdout.splitlines() if line.startswith("Usage:")]
    assert usage and f" {sub}" in usage[0], result.stdout
    for flag in HELP_FLAGS[sub]:
        assert flag in result.stdout, f"`splash {sub} --help` does not mention {flag}:\n{result.stdout}"


# --- run --------------------------------------------------------------------------------

def test_greedy_answer(model):
    result = splash("run", "-m", model, "--temperature", "0", "-n", "32", "What is 2+2?", check=True)
    text = answer(result)
    assert text.strip(), "empty answer"
    assert "4" in text, text
    # Without -q the summary and the final statistics go to stderr, never into the answer.
    assert "architecture llama" in result.stderr
    assert re.search(r"finish: (stop|length)", result.stderr), result.stderr
    assert "architecture" not in result.stdout


POEM = "Write a short poem about the sea."


def sampled(model: str, seed: int, n: int = 24) -> str:
    result = splash("run", "-m", model, "-q", "--temperature", "0.8", "--seed", str(seed), "-n", str(n), POEM,
                    check=True)
    assert result.stderr == "", "-q must print only the answer"
    return answer(result)


def test_same_seed_same_output_different_seeds_differ(model):
    first = sampled(model, 1)
    assert first.strip()
    assert sampled(model, 1) == first
    assert sampled(model, 2) != first


def test_reported_random_seed_reproduces_the_output(model):
    result = splash("run", "-m", model, "--temperature", "0.8", "-n", "16", POEM, check=True)
    match = re.search(r"seed (\d+)", result.stderr)
    assert match, result.stderr
    assert sampled(model, int(match.group(1)), n=16) == answer(result)


def test_stop_string_cuts_the_answer(model):
    prompt = "Name three colors of the rainbow."
    full = answer(splash("run", "-m", model, "-q", "--temperature", "0", "-n", "48", prompt, check=True))
    words = full.split()
    assert len(words) >= 4, f"greedy answer too short to pick a stop word from: {full!r}"
    stop = words[len(words) // 2]
    result = splash("run", "-m", model, "--temperature", "0", "-n", "48", "--stop", stop, prompt, check=True)
    cut = answer(result)
    assert stop not in cut
    assert cut == full[: full.index(stop)], (full, stop, cut)
    assert "finish: stop" in result.stderr
    # Several stops: the earliest in the text wins; one that never appears changes nothing.
    first, later = words[1], words[-1]
    result = splash("run", "-m", model, "-q", "--temperature", "0", "-n", "48", "--stop", later, "--stop",
                    "no such text ###", "--stop", first, prompt, check=True)
    expected_at = min(full.index(first), full.index(later))
    assert answer(result) == full[:expected_at]


def test_max_tokens_finishes_with_length(model):
    result = splash("run", "-m", model, "--temperature", "0", "-n", "5", POEM, check=True)
    assert "finish: length" in result.stderr, result.stderr
    assert re.search(r"generated 5 tokens", result.stderr), result.stderr
    assert answer(result).strip()


# --- tokenize ---------------------------------------------------------------------------

TOKENIZE_CASES = ["hello_world", "sentence", "python", "chinese", "emoji", "chat_turns", "special_in_word"]


@pytest.fixture(scope="module")
def golden_cases():
    data = json.loads(GOLDEN_TOKENIZER.read_text(encoding="utf-8"))
    return {case["name"]: case for case in data["cases"]}


@pytest.mark.parametrize("name", TOKENIZE_CASES)
def test_tokenize_json_matches_golden(model, golden_cases, name):
    case = golden_cases[name]
    assert not case["text"].startswith("-") and "\0" not in case["text"]
    result = splash("tokenize", "-m", model, "--json", case["text"], check=True)
    assert json.loads(result.stdout) == case["ids"]
    if "ids_no_parse_special" in case:
        result = splash("tokenize", "-m", model, "--json", "--no-special", case["text"], check=True)
        assert json.loads(result.stdout) == case["ids_no_parse_special"]


# --- errors: one line on stderr, "splash: error: ...", non-zero exit --------------------

def expect_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode != 0, f"exit 0; stdout={result.stdout!r}"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got:\n{result.stderr}"
    line = lines[0]
    assert line.startswith("splash: error:"), line
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    assert result.stdout == ""
    return line


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("splash_cli")


def test_error_unknown_flag(model):
    expect_error(splash("run", "-m", model, "--bogus-flag", "hi"), "--bogus-flag")


def test_error_missing_prompt(model):
    expect_error(splash("run", "-m", model), "prompt")
    expect_error(splash("tokenize", "-m", model), "text")


def test_error_missing_model_file(workdir):
    missing = workdir / "no-such-model.gguf"
    expect_error(splash("run", "-m", str(missing), "hi"), str(missing))


def test_models_lists_the_catalogue_and_unknown_names_list_it_too():
    listing = splash("models", check=True).stdout
    for name in ("smollm2-135m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        assert re.search(rf"^{re.escape(name)}\s+\d+ MB\s+(cached|-)\s", listing, re.M), listing
    names = "smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b"
    expect_error(splash("pull", "qwen-9000"), "no model named 'qwen-9000'", names)
    expect_error(splash("run", "-m", "qwen-9000", "hi"), "unknown model 'qwen-9000'", names)


def test_error_not_a_gguf_file(workdir):
    path = workdir / "notes.txt"
    path.write_text("this is not a model\n" * 10)
    expect_error(splash("run", "-q", "-m", str(path), "hi"), str(path), "not a GGUF file")
    empty = workdir / "empty.gguf"
    empty.write_bytes(b"")
    expect_error(splash("run", "-q", "-m", str(empty), "hi"), str(empty))
    expect_error(splash("run", "-q", "-m", str(workdir), "hi"))  # a directory


def test_error_truncated_model(model, workdir):
    path = workdir / "truncated.gguf"
    with open(model, "rb") as src:
        path.write_bytes(src.read(1 << 20))
    expect_error(splash("run", "-q", "-m", str(path), "hi"), str(path), "truncated")
    expect_error(splash("tokenize", "-m", str(path), "hi"), "truncated")


def write_mamba_gguf(path: Path, model: str, with_template: bool = True) -> None:
    """A GGUF that is complete except for its architecture: a valid byte-level BPE tokenizer
    and (with_template) the default model's chat template."""
    import numpy as np
    from gguf import GGUFReader, GGUFWriter

    template = GGUFReader(model).fields["tokenizer.chat_template"].contents() if with_template else None
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = [], 0
    for b in range(256):  # GPT-2 byte-to-unicode table, in byte order
        if b in printable:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    writer = GGUFWriter(str(path), "mamba")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(16)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(chars + ["<|im_start|>", "<|im_end|>"])
    writer.add_token_types([1] * 256 + [3, 3])
    writer.add_token_merges(["Ġ t"])
    writer.add_eos_token_id(257)
    if template is not None:
        writer.add_chat_template(template)
    writer.add_tensor("token_embd.weight", np.zeros((258, 16), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_error_unsupported_architecture(model, workdir):
    path = workdir / "mamba.gguf"
    write_mamba_gguf(path, model)
    line = expect_error(splash("run", "-q", "-m", str(path), "hi"), "mamba", "not supported")
    assert re.search(r"supported: .*\bllama\b", line), line


@pytest.mark.parametrize("bias", ["abc", "5", "5=", "=1", "5=x", "5=1x", "x=1", "5=1=2"])
def test_error_bad_logit_bias(model, bias):
    expect_error(splash("run", "-m", model, "--logit-bias", bias, "hi"), "--logit-bias", bias)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--temperature", "-1"], "temperature"),
        (["--temperature", "nan"], "temperature"),
        (["--top-p", "0"], "top_p"),
        (["--min-p", "2"], "min_p"),
        (["--logit-bias", "99999999=1"], "outside the vocabulary"),
        (["--logit-bias", "5=1000"], "logit_bias"),
        (["-n", "0"], "--max-tokens"),
        (["--temperature", "warm"], "--temperature"),
    ],
)
def test_error_bad_sampling_values(model, args, needle):
    expect_error(splash("run", "-q", "-m", model, *args, "hi"), needle)


def test_error_bad_sampling_value_is_the_only_stderr_line(model):
    expect_error(splash("run", "-m", model, "--temperature", "-1", "hi"), "temperature")


def test_error_unsupported_architecture_is_reported_first(model, workdir):
    path = workdir / "mamba-no-template.gguf"
    write_mamba_gguf(path, model, with_template=False)
    line = expect_error(splash("run", "-q", "-m", str(path), "hi"), "mamba")
    assert re.search(r"supported: .*\bllama\b", line), line


# --- memory plan ------------------------------------------------------------------------------

def test_memory_plan_is_printed(model):
    result = splash("run", "-m", model, "--temperature", "0", "-n", "4", "--max-memory", "2G", "Hi", check=True)
    assert "memory plan  budget 2.00 GiB (--max-memory)" in result.stderr
    for row in ("weights (packed)", "activations", "runtime", "KV cache", "total"):
        assert row in result.stderr, row
    assert "context      8192 tokens" in result.stderr


def test_small_budget_shrinks_the_context(model):
    # ~410 MiB of fixed needs (the runtime's 256 MiB with the compiled-grammar cache's budget)
    # + ~70 MiB left for 8-bit keys and values (12 KB a token): ~6000 tokens, not 8192.
    result = splash("run", "-m", model, "--temperature", "0", "-n", "4", "--max-memory", "480M", "Hi", check=True)
    context = int(re.search(r"context\s+(\d+) tokens", result.stderr).group(1))
    assert 2048 <= context < 8192, result.stderr


def test_model_that_does_not_fit_is_refused_with_the_breakdown(model):
    result = splash("run", "-m", model, "--max-memory", "200M", "Hi")
    assert result.returncode != 0
    assert "DOES NOT FIT" in result.stderr and "KV cache" in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("splash: error:") and "does not fit in the memory budget" in last, last
    assert result.stdout == ""


@pytest.mark.parametrize("size", ["lots", "-1G", "0", "8X"])
def test_bad_max_memory_is_one_error_line(model, size):
    expect_error(splash("run", "-m", model, "--max-memory", size, "Hi"), "--max-memory")
