"""Model packages (`splash pack`, `--model DIR`) with the real binary on the test model: the
manifest describes the model (family, exact shapes, quantization, tokenizer, chat template,
license) and pins each file (size, sha256); the package runs like the GGUF; a damaged file,
another format version, a missing file, a manifest naming a file outside the package or a
second pack into the same directory are refused with a message that says so.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("SPLASH_BIN", str(REPO / "build" / "splash"))


def splash(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, errors="replace", timeout=300,
                          stdin=subprocess.DEVNULL)


def run_hi(model):
    return splash("run", "-q", "-m", str(model), "-n", "6", "--temperature", "0", "Say hi")


@pytest.fixture(scope="module")
def package(model_path, tmp_path_factory):
    work = tmp_path_factory.mktemp("packages")
    out, draft = work / "smol", work / "draft.gguf"
    draft.symlink_to(model_path)  # (the test model stands in for a draft model)
    result = splash("pack", model_path, "--draft", str(draft), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(out)
    assert "packing" in result.stderr and "100%" in result.stderr  # progress shown
    return out


def test_the_manifest_describes_and_pins_the_model(package, model_path):
    manifest = json.loads((package / "manifest.json").read_text())
    assert manifest["format"] == "splash-model-package" and manifest["format_version"] == 1
    model = manifest["model"]
    assert model["family"] == "llama"
    assert model["shapes"] == {"layers": 30, "d_model": 576, "heads": 9, "kv_heads": 3, "head_dim": 64, "ffn": 1536,
                               "vocab": 49152, "native_context": 8192}
    assert "Q4_1" in model["quantization"]
    assert model["chat_template"]["recognized"] is True and len(model["chat_template"]["sha256"]) == 64
    assert model["tokenizer"]["vocab"] == 49152 and model["license"] == "apache-2.0"
    assert manifest["baseline"]["decode_tok_s"] > 0 and manifest["baseline"]["prefill_128_tok_s"] > 0
    data = Path(model_path).read_bytes()
    roles = {f["role"]: f for f in manifest["files"]}
    assert set(roles) == {"model", "draft"}
    for f in manifest["files"]:
        assert f["size"] == len(data) and f["sha256"] == hashlib.sha256(data).hexdigest()


def test_a_package_runs_like_its_gguf(package, model_path):
    direct, packed = run_hi(model_path), run_hi(package)
    assert packed.returncode == 0, packed.stderr
    assert packed.stdout == direct.stdout and packed.stdout.strip()


def copy_package(package, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(package, copy)
    for stamp in copy.glob("*.verified"):  # a copy is another file: verified afresh
        stamp.unlink()
    return copy


def test_a_damaged_file_is_refused(package, tmp_path):
    copy = copy_package(package, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    name = manifest["files"][0]["name"]
    with open(copy / name, "r+b") as f:  # the same size, one byte changed
        f.seek(4096)
        byte = f.read(1)
        f.seek(4096)
        f.write(bytes([byte[0] ^ 0xFF]))
    result = run_hi(copy)
    assert result.returncode != 0 and "does not hash to the manifest's sha256" in result.stderr
    with open(copy / name, "ab") as f:
        f.write(b"x")
    result = run_hi(copy)
    assert result.returncode != 0 and "the manifest says" in result.stderr


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(format_version=2), "format version 2; this splash reads version 1"),
    (lambda m: m.update(format="something-else"), "not a splash model package manifest"),
    (lambda m: m["files"][0].update(name="../outside.gguf"), "a file outside the package"),
    (lambda m: m["files"][0].update(name="absent.gguf"), "absent.gguf is missing"),
    (lambda m: m.update(files=[f for f in m["files"] if f["role"] != "model"]), "no model file"),
    (lambda m: m["files"][0].pop("sha256"), "lacks role, name, size or sha256"),
])
def test_a_bad_manifest_is_refused(package, tmp_path, edit, message):
    copy = copy_package(package, tmp_path)
    manifest = json.loads((copy / "manifest.json").read_text())
    edit(manifest)
    (copy / "manifest.json").write_text(json.dumps(manifest))
    result = run_hi(copy)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_packing_twice_into_one_directory_is_refused(package, model_path):
    result = splash("pack", model_path, "--out", str(package), "--no-baseline")
    assert result.returncode != 0 and "already holds a model package" in result.stderr


def test_pack_without_baseline_and_a_missing_source(model_path, tmp_path):
    out = tmp_path / "nb"
    result = splash("pack", model_path, "--out", str(out), "--no-baseline")
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "manifest.json").read_text())["baseline"] == {}
    missing = splash("pack", str(tmp_path / "nope.gguf"), "--out", str(tmp_path / "x"))
    assert missing.returncode != 0 and not (tmp_path / "x").exists()
    # A draft of the model's own file name cannot sit beside it: refused, nothing left.
    same = splash("pack", model_path, "--draft", model_path, "--out", str(tmp_path / "same"), "--no-baseline")
    assert same.returncode != 0 and "already exists" in same.stderr
    assert not (tmp_path / "same").exists()
