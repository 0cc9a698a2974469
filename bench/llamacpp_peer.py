#!/usr/bin/env python3
"""The peer side of `splash bench`: the same measurements on llama.cpp (through the
llama-cpp-python package, which builds llama.cpp from source for this CPU), on the same GGUF
with the same token ids and thread count. A benchmark peer only; never part of the product.

Setup (once):  python3 -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install llama-cpp-python
Run:           /tmp/venv-bench/bin/python bench/llamacpp_peer.py MODEL.gguf [--threads 2]
"""
import argparse
import json
import statistics
import time

import llama_cpp


def bench_tokens(count, vocab):
    # Identical to bench_tokens() in src/app/cli_bench.cpp.
    return [100 + (i * 2654435761) % (vocab - 100) for i in range(count)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-sizes", default="512,2048")
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    sizes = [int(s) for s in args.prompt_sizes.split(",")]
    n_ctx = max(max(sizes), 16 + args.decode_tokens) + 16
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False)
    tokens = bench_tokens(max(sizes), llm.n_vocab())
    report = {"engine": "llama.cpp via llama-cpp-python " + llama_cpp.__version__, "threads": args.threads,
              "prefill": {}}
    print(f"{'test':<28} {'tok/s':>12}")
    llm.reset()
    llm.eval(tokens[:32])  # warm-up
    for size in sizes:
        runs = []
        for _ in range(args.repetitions):
            llm.reset()
            llm._ctx.memory_clear(True) if hasattr(llm._ctx, "memory_clear") else None
            start = time.perf_counter()
            llm.eval(tokens[:size])
            runs.append(time.perf_counter() - start)
        rate = size / statistics.median(runs)
        report["prefill"][str(size)] = rate
        print(f"{'prefill %d tokens' % size:<28} {rate:>12.1f}")
    runs = []
    for _ in range(args.repetitions):
        llm.reset()
        llm._ctx.memory_clear(True) if hasattr(llm._ctx, "memory_clear") else None
        llm.eval(tokens[:16])
        start = time.perf_counter()
        for i in range(args.decode_tokens):
            llm.eval([tokens[16 + i]])
        runs.append(time.perf_counter() - start)
    rate = args.decode_tokens / statistics.median(runs)
    report["decode"] = rate
    print(f"{'decode %d tokens' % args.decode_tokens:<28} {rate:>12.1f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
