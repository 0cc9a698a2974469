"""Images in requests: a SmolVLM (Idefics3) model served with its vision encoder (--mmproj).

No real vision model can be fetched here, so tools/make_random_vlm.py writes a random one in
llama.cpp's file layout: a llama text GGUF with SmolVLM's tokenizer and chat template, and an
"idefics3" mmproj GGUF (64x64 views, 16-pixel patches, width 128, 2 layers, pixel shuffle 2,
so 4 tokens per view; an image is up to 4 x 4 tiles plus the whole image). tools/check_vision_oracle.py held that layout to transformers'
Idefics3 on the device (docs/PERF.md); here the engine is held to the independent numpy
reference (tests/reference/vision_ref.py, float64, HF semantics) and PIL's preprocessing:

  * the encoder's features from preprocessed pixels, for F16, F32 and Q8_0 matrices and the
    pre-#13290 ffn names (tolerances in ENCODER_TOLERANCE, measured below);
  * the text model's logits with the features spliced in at the <image> positions;
  * decoding + preprocessing: `eval --image` on PNG/JPEG files against transformers' own
    Idefics3 image processor (tiles and the whole image) fed to the reference;
  * the three protocols through the official SDKs, streaming and not, with usage counting the
    image's tokens, prefix reuse keyed by the image's content, and every bad image (too many
    pixels, corrupt, GIF, remote URL) a 400 in the protocol's shape while the server serves on.

Environment: SPLASH_TEST_MODEL (a SmolLM2 GGUF whose tokenizer is copied; skipped when
unset), SPLASH_BIN.
"""
from __future__ import annotations

import base64
import io
import json
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import anthropic
import numpy as np
import openai
import pytest
import requests
from PIL import Image

from conftest import run_serve_expecting_failure, splash_bin, start_server

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "reference"))
sys.path.insert(0, str(REPO / "tools"))
import llama_ref  # noqa: E402
import make_random_vlm  # noqa: E402
import vision_ref  # noqa: E402

TIMEOUT = 120
# Max |engine - reference| over the features (whose standard deviation is ~1). Float weights
# run float kernels: the difference is float32 rounding (measured 2.6e-6). Q8_0 matrices
# multiply int8-rounded activations (measured 0.032).
ENCODER_TOLERANCE = {"F16": 1e-4, "F32": 1e-4, "Q8_0": 0.1}
# Last-position logits (std ~2) with the image spliced in, F16 text weights, f32 KV cache:
# float32 rounding through 3 layers (measured 7.6e-6; the image itself moves them by ~5).
LOGITS_TOLERANCE = 1e-4


def png_bytes(array: np.ndarray, fmt: str = "PNG", **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format=fmt, **save)
    return buf.getvalue()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_header_bomb(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", ihdr) + png_chunk(b"IDAT", zlib.compress(b"\0" * 64))


def random_rgb(seed: int, height: int, width: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def data_url(data: bytes, media: str = "image/png") -> str:
    return f"data:{media};base64," + base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def vlm(tmp_path_factory, model_path):
    """Paths of the random SmolVLM: text GGUF, its tokenizer-free twin, and mmproj variants."""
    d = tmp_path_factory.mktemp("vlm")
    paths = {"text": d / "text.gguf", "twin": d / "text_ref.gguf"}
    common = ["--tokenizer-from", model_path]
    assert make_random_vlm.main(common + ["--out-text", str(paths["text"]), "--out-mmproj", str(d / "F16.gguf"),
                                          "--text-reference-twin", str(paths["twin"])]) == 0
    for variant, flags in {"F32": ["--mmproj-type", "F32"], "Q8_0": ["--mmproj-type", "Q8_0"],
                           "legacy": ["--legacy-ffn-names"]}.items():
        assert make_random_vlm.main(common + ["--out-text", str(d / "unused.gguf"), "--out-mmproj",
                                              str(d / f"{variant}.gguf")] + flags) == 0
    for variant in ["F16", "F32", "Q8_0", "legacy"]:
        paths[variant] = d / f"{variant}.gguf"
    return {k: str(v) for k, v in paths.items()}


def run_eval(vlm, mmproj: str, tokens: list[int], tmp_path: Path, *, pixels=None, image: bytes | None = None,
             extra: tuple[str, ...] = ()) -> tuple[np.ndarray, np.ndarray]:
    """`splash eval` with an image: (features [tokens][dim], last logits)."""
    cmd = [splash_bin(), "eval", "--model", vlm["text"], "--mmproj", mmproj, "--kv-cache-type", "f32",
           "--tokens", ",".join(map(str, tokens)), "--features-out", str(tmp_path / "f.bin"),
           "--logits-out", str(tmp_path / "l.bin"), *extra]
    if pixels is not None:
        np.asarray(pixels, dtype=np.float32).tofile(tmp_path / "px.f32")
        cmd += ["--pixels", str(tmp_path / "px.f32")]
    else:
        (tmp_path / "image").write_bytes(image)
        cmd += ["--image", str(tmp_path / "image")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return np.fromfile(tmp_path / "f.bin", dtype=np.float32), np.fromfile(tmp_path / "l.bin", dtype=np.float32)


@pytest.mark.parametrize("variant", ["F16", "F32", "Q8_0", "legacy"])
def test_encoder_matches_reference(vlm, variant, tmp_path):
    m = vision_ref.load(vlm[variant])
    pixels = np.random.default_rng(7).uniform(-1, 1, (3, m.image_size, m.image_size))
    want = vision_ref.image_embeddings(m, pixels.astype(np.float32))
    got, _ = run_eval(vlm, vlm[variant], [1], tmp_path, pixels=pixels)
    got = got.reshape(want.shape)
    tol = ENCODER_TOLERANCE["F16" if variant == "legacy" else variant]
    err = np.abs(got - want).max()
    assert err < tol, f"{variant}: max |engine - reference| {err:.3g} (tolerance {tol}, feature std {want.std():.3g})"
    assert want.std() > 0.5  # the check is not vacuous: features are of order 1


def test_text_logits_with_the_image_spliced_in(vlm, tmp_path):
    m = vision_ref.load(vlm["F16"])
    pixels = np.random.default_rng(3).uniform(-1, 1, (3, m.image_size, m.image_size)).astype(np.float32)
    feats = vision_ref.image_embeddings(m, pixels)
    # A few text tokens, the image as the processor expands it, more text tokens.
    prompt = [1, 4093, 42] + vision_ref.expand_image_tokens(len(feats)) + [10823, 49279, 198, 9519, 42]
    _, got = run_eval(vlm, vlm["F16"], prompt, tmp_path, pixels=pixels)
    text = llama_ref.load(vlm["twin"])
    want = vision_ref.vlm_logits(text, prompt, feats)
    plain = text.logits(prompt)  # the same prompt reading the <image> token's own embedding
    err = np.abs(got - want).max()
    assert err < LOGITS_TOLERANCE, f"max |logit difference| {err:.3g}"
    assert np.abs(plain - want).max() > 100 * LOGITS_TOLERANCE  # the image changed the logits


def hf_views(rgb: np.ndarray, size: int) -> tuple[int, int, np.ndarray]:
    """transformers' own Idefics3 image processor (PIL backend, SmolVLM's default image
    splitting): (rows, cols, views [rows*cols + 1][3][size][size]), tiles first."""
    from transformers.models.idefics3.image_processing_pil_idefics3 import Idefics3ImageProcessorPil
    processor = Idefics3ImageProcessorPil(do_image_splitting=True, size={"longest_edge": 4 * size},
                                          max_image_size={"longest_edge": size})
    out = processor(images=[Image.fromarray(rgb)], return_tensors="np", return_row_col_info=True)
    return int(out["rows"][0][0]), int(out["cols"][0][0]), np.asarray(out["pixel_values"])[0]


def image_token_count(rows: int, cols: int, per_view: int) -> int:
    """Idefics3Processor's string for a split image, in tokens: per tile <fake> <row_r_col_c>
    + the view's rows, "\n" between tile rows, "\n\n" (two tokens in SmolLM2's vocabulary)
    before <fake> <global-img> + the whole image's rows + <fake>."""
    return rows * cols * (2 + per_view) + (rows - 1) + 2 + 3 + per_view


@pytest.mark.parametrize("fmt, size", [("PNG", (23, 37)), ("PNG", (300, 120)), ("JPEG", (50, 50))])
def test_decoding_and_preprocessing_match_transformers(vlm, tmp_path, fmt, size):
    """The file path: decode, then every view the model's processor makes (the image resized
    to a longest edge of 4 x 64, cut into 64 x 64 tiles, and the whole image as one more view),
    each encoded; against transformers' Idefics3 image processor on Pillow's decoding, its
    views fed to the reference. The engine reproduces Pillow's fixed-point resampling, so the
    pixels are the same and only the encoder's float32 rounding remains (measured 3.7e-6)."""
    m = vision_ref.load(vlm["F16"])
    rgb = random_rgb(11, *size)
    data = png_bytes(rgb, fmt, **({"quality": 95} if fmt == "JPEG" else {}))
    decoded = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    rows, cols, views = hf_views(decoded, m.image_size)
    assert rows * cols + 1 == len(views) and rows * cols > 1  # the image was split
    want = np.concatenate([vision_ref.image_embeddings(m, view) for view in views])
    got, _ = run_eval(vlm, vlm["F16"], [1], tmp_path, image=data)
    err = np.abs(got.reshape(want.shape) - want).max()
    assert err < ENCODER_TOLERANCE["F16"], f"{fmt} {size}: max |engine - reference| {err:.3g}"


# === serving ======================================================================================

@pytest.fixture(scope="module")
def server(vlm):
    s = start_server("--mmproj", vlm["F16"], "--max-image-pixels", "250000", model=vlm["text"])
    yield s
    assert s.stop() == 0, s.output()


def chat_body(image_url: str, text: str = "What is this?", **extra) -> dict:
    return {"model": "splash-model", "max_tokens": 4, "temperature": 0, **extra, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_url}}, {"type": "text", "text": text}]}]}


def test_three_protocols_take_images(server):
    image = png_bytes(random_rgb(1, 40, 60))
    b64 = base64.b64encode(image).decode()
    rows, cols, _ = hf_views(random_rgb(1, 40, 60), 64)
    tokens_per_image = image_token_count(rows, cols, 4)  # 4 feature rows per view
    text_only = requests.post(f"{server.url}/v1/chat/completions", json={
        "model": "splash-model", "max_tokens": 1, "messages": [{"role": "user", "content": "What is this?"}]}, timeout=TIMEOUT)
    text_prompt = text_only.json()["usage"]["prompt_tokens"]

    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=TIMEOUT)
    reply = oai.chat.completions.create(**chat_body(data_url(image)))
    # "User:" + image instead of "User: " + text: the image adds its tokens, the ": " split differs by one at most.
    assert abs(reply.usage.prompt_tokens - (text_prompt + tokens_per_image)) <= 1, reply.usage
    assert reply.choices[0].message.content is not None
    chunks = list(oai.chat.completions.create(**chat_body(data_url(image)), stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == reply.choices[0].message.content

    claude = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0, timeout=TIMEOUT)
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}},
               {"type": "text", "text": "What is this?"}]
    message = claude.messages.create(model="m", max_tokens=4, messages=[{"role": "user", "content": content}])
    assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) == reply.usage.prompt_tokens
    counted = claude.messages.count_tokens(model="m", messages=[{"role": "user", "content": content}])
    assert counted.input_tokens == reply.usage.prompt_tokens  # counted by the tokenizer, image included
    with claude.messages.stream(model="m", max_tokens=4, messages=[{"role": "user", "content": content}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("max_tokens", "end_turn")

    # A screenshot a tool returned (how Claude Code sends one) is read with the tool result.
    tool_turns = [{"role": "user", "content": "Take a screenshot"},
                  {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "shot", "input": {}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}]}]}]
    counted_tool = claude.messages.count_tokens(model="m", messages=tool_turns)
    assert claude.messages.create(model="m", max_tokens=2, messages=tool_turns).usage.input_tokens > 0
    assert counted_tool.input_tokens > tokens_per_image

    response = oai.responses.create(model="splash-model", max_output_tokens=4, input=[{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": data_url(image)}, {"type": "input_text", "text": "What is this?"}]}])
    assert response.usage.input_tokens == reply.usage.prompt_tokens
    events = list(oai.responses.create(model="splash-model", max_output_tokens=4, stream=True, input=[
        {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": data_url(image)}]}]))
    assert events[-1].type in ("response.completed", "response.incomplete")


def test_prefix_reuse_follows_the_image_content(server):
    def prompt_and_cached(image: bytes, text: str) -> tuple[int, int]:
        usage = requests.post(f"{server.url}/v1/chat/completions", json=chat_body(data_url(image), text),
                              timeout=TIMEOUT).json()["usage"]
        return usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]

    a, b = png_bytes(random_rgb(21, 32, 32)), png_bytes(random_rgb(22, 32, 32))
    size, _ = prompt_and_cached(a, "First question about the picture")
    _, cached_same = prompt_and_cached(a, "First question about the picture")
    assert cached_same == size - 1  # an exact replay: everything but the last token
    _, cached_other = prompt_and_cached(b, "First question about the picture")
    # "<|im_start|>User:" <fake> <global-img> are shared; the other image's rows are not.
    assert cached_other <= 5, cached_other
    # Replies depend on the image: with the image's rows swapped the first token's logprobs move.
    lp = [requests.post(f"{server.url}/v1/chat/completions", json=chat_body(data_url(img), "Q", logprobs=True,
                                                                                 top_logprobs=3),
                        timeout=TIMEOUT).json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"] for img in (a, b)]
    assert lp[0] != lp[1]


BAD_IMAGES = [
    ("too_many_pixels", data_url(png_bytes(random_rgb(5, 600, 600))), "max-image-pixels"),
    # A valid PNG claiming 100000 x 100000 pixels with the start of its data: refused by its
    # size before any decoding (a decoder bomb is never allocated).
    ("header_bomb", data_url(png_header_bomb(100_000, 100_000)), "max-image-pixels"),
    ("truncated_png", data_url(png_bytes(random_rgb(6, 30, 30))[:60]), "PNG"),
    ("not_an_image", data_url(b"hello, this is text"), "PNG, JPEG"),
    ("gif", data_url(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "image/gif"), "GIF"),
    ("remote_url", "https://example.com/cat.png", "data URL"),
    ("not_base64", "data:image/png;base64,@@@@", "base64"),
]


@pytest.mark.parametrize("name, url, needle", BAD_IMAGES, ids=[b[0] for b in BAD_IMAGES])
def test_bad_images_are_400s(server, name, url, needle):
    r = requests.post(f"{server.url}/v1/chat/completions", json=chat_body(url), timeout=TIMEOUT)
    assert r.status_code == 400, (name, r.text)
    assert needle.lower() in r.json()["error"]["message"].lower(), r.text
    if url.startswith("data:"):  # the same in Anthropic's shape
        b64 = url.split(",", 1)[1]
        r = requests.post(f"{server.url}/v1/messages", json={"model": "m", "max_tokens": 4, "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": b64}}]}]}, timeout=TIMEOUT)
        assert r.status_code == 400 and r.json()["type"] == "error", r.text
        # Counting reads the image's header: a bad one is a 400 there too, never a 500.
        r = requests.post(f"{server.url}/v1/messages/count_tokens", json={"model": "m", "messages": [
            {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": b64}}]}]}, timeout=TIMEOUT)
        if name != "truncated_png":  # a truncated body still has a readable header: counted
            assert r.status_code == 400 and r.json()["type"] == "error", r.text
        r = requests.post(f"{server.url}/apply-template", json={"messages": chat_body(url)["messages"]}, timeout=TIMEOUT)
        assert r.status_code in ((200,) if name == "truncated_png" else (400,)), r.text
    ok = requests.post(f"{server.url}/v1/chat/completions", json=chat_body(data_url(png_bytes(random_rgb(9, 8, 8)))),
                       timeout=TIMEOUT)
    assert ok.status_code == 200, ok.text


def test_status_reports_the_vision_encoder(server, vlm):
    vision = requests.get(f"{server.url}/status", timeout=10).json()["vision"]
    assert vision["projector"] == "idefics3" and vision["tokens_per_view"] == 4
    assert vision["max_image_pixels"] == 250000 and vision["mmproj_path"] == vlm["F16"]
    # Images resent by earlier tests (as agents resend whole conversations) were not encoded again.
    cache = vision["feature_cache"]
    assert cache["hits"] >= 3 and cache["images"] >= 3 and cache["bytes"] > 0, cache
    assert "vision       idefics3 encoder" in server.output()


def test_a_model_without_a_place_for_images_refuses_mmproj(vlm, model_path):
    r = run_serve_expecting_failure("--model", model_path, "--mmproj", vlm["F16"], "--port", "0")
    assert r.returncode != 0 and "no place for images" in r.stderr, r.stderr


def test_a_text_model_answers_images_with_a_400_naming_vision(vlm):
    s = start_server(model=vlm["text"])  # the VLM's text model without --mmproj
    try:
        r = requests.post(f"{s.url}/v1/chat/completions", json=chat_body(data_url(png_bytes(random_rgb(1, 8, 8)))),
                          timeout=TIMEOUT)
        assert r.status_code == 400 and "vision encoder" in r.json()["error"]["message"], r.text
    finally:
        assert s.stop() == 0


def test_a_client_that_leaves_stops_its_image_encoding(model_path, tmp_path):
    """Encoding an image takes seconds and encoders take turns: a client that leaves while its
    image is encoded (its reply committed and probed after a second) stops the encoding at the
    next view, so no one waits behind work nobody wants. An encoder of SmolVLM's view size and
    width (2 blocks) makes every image 17 views, a few seconds here; the abandoned image's
    features are never stored, which a finished encoding's always are."""
    text, mmproj = tmp_path / "text.gguf", tmp_path / "mmproj.gguf"
    assert make_random_vlm.main(["--tokenizer-from", model_path, "--out-text", str(text), "--out-mmproj", str(mmproj),
                                 "--text-context", "4096", "--vision-image-size", "512", "--vision-patch-size", "16",
                                 "--vision-d", "768", "--vision-heads", "12", "--vision-ffn", "3072",
                                 "--vision-layers", "2", "--vision-scale", "4"]) == 0
    s = start_server("--mmproj", str(mmproj), "--max-image-pixels", "5000000", model=str(text))
    try:
        ramp = np.linspace(0, 255, 2048, dtype=np.uint8)

        def image(flip: bool) -> bytes:
            rows = ramp[::-1] if flip else ramp
            return png_bytes(np.stack([np.add.outer(rows, ramp // 2).astype(np.uint8)] * 3, axis=-1))

        def cache() -> dict:
            return requests.get(f"{s.url}/status", timeout=TIMEOUT).json()["vision"]["feature_cache"]

        start = time.monotonic()
        r = requests.post(f"{s.url}/v1/chat/completions", json=chat_body(data_url(image(False))), timeout=TIMEOUT)
        assert r.status_code == 200, r.text[:300]
        whole = time.monotonic() - start
        assert whole > 2.5, f"an image took {whole:.1f} s: too fast to leave in the middle of it"
        assert cache()["images"] == 1

        body = json.dumps(chat_body(data_url(image(True)))).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=10)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(1.5)  # committed to 200 and probed while its image is encoded
        assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        sock.close()
        time.sleep(whole + 1)  # long enough for the encoding to have finished, had it gone on
        after = cache()
        assert after["images"] == 1 and after["misses"] == 2, f"the abandoned image was encoded to the end: {after}"
        r = requests.post(f"{s.url}/v1/chat/completions", json=chat_body(data_url(image(False))), timeout=TIMEOUT)
        assert r.status_code == 200 and cache()["hits"] == 1  # the encoder serves on
    finally:
        assert s.stop() == 0, s.output()
