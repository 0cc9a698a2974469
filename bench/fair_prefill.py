#!/usr/bin/env python3
"""Fairness under load: what a long prompt does to the requests beside it (issue 12).

Against any OpenAI-compatible chat completions server (splash, llama-server -np 4):
  1. a streaming greedy request starts decoding ("the running stream", many tokens);
  2. once it streams, a long prompt (--long-tokens, unique so no cache helps) is sent;
  3. --delay seconds later a short streaming request (a fresh prompt) is sent.
Reported: the short request's time to first token, the running stream's largest gap between
two tokens while the long prompt is read, and the long prompt's own time to first token
(how long it was read). A benchmark, never a test: nothing is asserted.

  python bench/fair_prefill.py --url http://127.0.0.1:8000 --label splash --out r.json
"""
import argparse
import http.client
import json
import os
import random
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))


def stream_chat(url, messages, max_tokens, times, first_token, extra=None):
    """POSTs a streaming chat completion; appends each content chunk's arrival time to
    `times` and sets first_token[0] at the first one."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    body.update(extra or {})
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    for raw in resp:
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        delta = chunk.get("choices", [{}])[0].get("delta", {})
        if delta.get("content"):
            now = time.monotonic()
            times.append(now)
            if first_token[0] is None:
                first_token[0] = now
    conn.close()


def long_prompt(tokens: int, seed: int) -> str:
    """Real source text (bench/corpus) of about `tokens` tokens (4 characters a token), with
    a nonce first so that no prefix cache can serve it."""
    corpus = []
    for name in sorted(os.listdir(os.path.join(HERE, "corpus"))):
        if name.endswith(".py"):
            with open(os.path.join(HERE, "corpus", name), encoding="utf-8") as f:
                corpus.append(f.read())
    text = "\n".join(corpus)
    start = random.Random(seed).randrange(0, max(1, len(text) - tokens * 4))
    return f"nonce {seed}\n" + text[start:start + tokens * 4] + "\nWhat does this code do? One sentence."


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--label", default="server")
    ap.add_argument("--long-tokens", type=int, default=7900)
    ap.add_argument("--delay", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--ban-token", type=int, action="append", default=[],
                    help="token id the running stream may not sample (its end-of-turn), so it keeps streaming")
    ap.add_argument("--out")
    args = ap.parse_args()

    running_times, running_first = [], [None]
    running = threading.Thread(target=stream_chat, args=(args.url, [{"role": "user", "content": "Count from 1 to 500, one number a line."}], 600, running_times, running_first,
                                     {"logit_bias": {str(t): -100 for t in args.ban_token}}))
    running.start()
    while running_first[0] is None:
        time.sleep(0.01)
    time.sleep(0.3)

    long_times, long_first = [], [None]
    sent_long = time.monotonic()
    long = threading.Thread(target=stream_chat, args=(args.url, [{"role": "user", "content": long_prompt(args.long_tokens, args.seed)}], 4, long_times, long_first))
    long.start()
    time.sleep(args.delay)
    short_times, short_first = [], [None]
    sent_short = time.monotonic()
    stream_chat(args.url, [{"role": "user", "content": f"Say hello ({args.seed})."}], 8, short_times, short_first)
    long.join()
    running.join()

    read_until = long_first[0] or time.monotonic()
    gaps = [b - a for a, b in zip(running_times, running_times[1:]) if a >= sent_long and b <= read_until]
    result = {
        "label": args.label,
        "long_prompt_ttft_s": (long_first[0] - sent_long) if long_first[0] else None,
        "short_ttft_s": (short_first[0] - sent_short) if short_first[0] else None,
        "running_stream_max_gap_s": max(gaps) if gaps else None,
        "running_stream_tokens_while_reading": len(gaps) + 1 if gaps else 0,
    }
    print(json.dumps(result, indent=1))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
