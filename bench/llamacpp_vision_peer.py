#!/usr/bin/env python3
"""The peer side of `splash bench --mmproj`: llama.cpp's image encoding (libmtmd, through
llama-cpp-python's ctypes bindings) on the same text + mmproj GGUF pair and the same
512 x 512 synthetic image splash's bench encodes (bench_image() in src/app/cli_bench.cpp).

Times mtmd_encode_chunk of the image chunk (llama.cpp's preprocessing happens in
mtmd_tokenize, timed apart), median of --repetitions after one warm-up, with the same
thread count. Prints one JSON line.

    /tmp/venv-bench/bin/python bench/llamacpp_vision_peer.py --model text.gguf --mmproj mmproj.gguf --threads 2

The peer venv: `python -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install llama-cpp-python`
(built from source by pip; 0.3.36 was measured).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import time

import llama_cpp
import llama_cpp.mtmd_cpp as mtmd


def bench_image(width: int = 512, height: int = 512) -> bytes:
    """The pixels of splash's bench_image(), row-major RGB."""
    out = bytearray(width * height * 3)
    for y in range(height):
        for x in range(width):
            i = (y * width + x) * 3
            line = x % 64 == 0 or y % 40 == 0
            out[i] = 0 if line else x * 255 // width
            out[i + 1] = 0 if line else y * 255 // height
            out[i + 2] = 0 if line else (x + y) % 256
    return bytes(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--mmproj", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=3)
    args = ap.parse_args()

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_threads=args.threads, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.n_threads = args.threads
    params.print_timings = False
    ctx = mtmd.mtmd_init_from_file(args.mmproj.encode(), llm.model, params)
    if not ctx:
        raise SystemExit(f"llama.cpp could not load {args.mmproj}")

    pixels = bench_image()
    buffer = (ctypes.c_uint8 * len(pixels)).from_buffer_copy(pixels)

    def tokenize():
        bitmap = mtmd.mtmd_bitmap_init(512, 512, buffer)
        chunks = mtmd.mtmd_input_chunks_init()
        marker = mtmd.mtmd_default_marker()
        text = mtmd.mtmd_input_text(marker + b" What is this?", len(marker) + 14, True, True)
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        if mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
            raise SystemExit("mtmd_tokenize failed")
        image_chunk = None
        for i in range(mtmd.mtmd_input_chunks_size(chunks)):
            chunk = mtmd.mtmd_input_chunks_get(chunks, i)
            if mtmd.mtmd_input_chunk_get_type(chunk) == 1:  # MTMD_INPUT_CHUNK_TYPE_IMAGE
                image_chunk = chunk
        return bitmap, chunks, image_chunk

    encode_runs, tokenize_runs, tokens = [], [], 0
    for r in range(args.repetitions + 1):
        start = time.perf_counter()
        bitmap, chunks, chunk = tokenize()
        tokenized = time.perf_counter()
        if mtmd.mtmd_encode_chunk(ctx, chunk) != 0:
            raise SystemExit("mtmd_encode_chunk failed")
        done = time.perf_counter()
        tokens = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        if r > 0:  # the first run is the warm-up
            tokenize_runs.append(tokenized - start)
            encode_runs.append(done - tokenized)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
    print(json.dumps({"engine": f"llama.cpp (llama-cpp-python {llama_cpp.__version__})", "threads": args.threads,
                      "image_tokens": tokens, "image_encode_ms": statistics.median(encode_runs) * 1e3,
                      "image_preprocess_ms": statistics.median(tokenize_runs) * 1e3}))
    mtmd.mtmd_free(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
