#!/usr/bin/env python3
"""Compares two bench/four_phase.py result files (splash first, the peer second) as a markdown
table of every metric with the ratio splash/peer, then checks the targets:

  - cached-replay time to first token at least 5x faster than the peer's;
  - aggregate decode with 4 concurrent requests at least 2x the peer's;
  - splash's decode at 8K context within 20% of its decode at short context.

  python bench/compare_four_phase.py splash.json peer.json [--strict]

Prints only; with --strict it exits 1 when a target fails or cannot be checked.
"""
import argparse
import json
import sys

# metric prefix -> (description, unit, higher is better)
KINDS = {
    "decode_tok_s": ("decode", "tok/s", True),
    "prefill_tok_s": ("prefill", "tok/s", True),
    "cold_ttft_s": ("cold TTFT (uncached prompt)", "s", False),
    "replay_ttft_s": ("cached exact-replay TTFT", "s", False),
    "next_turn_ttft_s": ("next-turn TTFT (+~200 tokens)", "s", False),
    "aggregate_tok_s": ("aggregate decode, concurrent", "tok/s", True),
    "long_served_concurrently": ("long requests decoding at once", "reqs", True),
    "long_status_max_running": ("long requests running (/status)", "reqs", True),
}


def describe(key, results):
    base, _, at = key.partition("@")
    name, unit, higher = KINDS.get(base, (base, "", True))
    if at:
        if base == "aggregate_tok_s":
            name += f" x{at}"
        else:
            name += f" @ {at}"
            size = prompt_size(results, base, at)
            if size:
                name += f" ({size} prompt tokens)"
    elif base in ("cold_ttft_s", "replay_ttft_s"):
        size = (results.get("phases", {}).get("c") or {}).get("prompt_tokens")
        if size:
            name += f" ({size} tokens)"
    return name, unit, higher


def prompt_size(results, base, at):
    phase = {"decode_tok_s": "a", "prefill_tok_s": "b"}.get(base)
    entry = (results.get("phases", {}).get(phase) or {}).get(at) if phase else None
    value = entry.get("prompt_tokens") if entry else None
    return int(value) if isinstance(value, (int, float)) else None


def fmt(value, unit=""):
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value:.3f}"
    if unit == "reqs":
        return f"{value:g}"
    return f"{value:.1f}"


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def order(key):
    base, _, at = key.partition("@")
    bases = list(KINDS)
    size = -1 if at == "short" else (int(at) if at.isdigit() else 10**9)
    return (bases.index(base) if base in bases else len(bases), size, key)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("splash")
    p.add_argument("peer")
    p.add_argument("--replay-speedup", type=float, default=5.0, help="target: peer TTFT / splash TTFT on replay")
    p.add_argument("--concurrency", default="4", help="which concurrency level the aggregate target uses")
    p.add_argument("--aggregate-ratio", type=float, default=2.0, help="target: splash / peer aggregate decode")
    p.add_argument("--long-context", default="8192", help="decode context compared with 'short' (splash alone)")
    p.add_argument("--decode-tolerance", type=float, default=0.20, help="allowed decode drop at --long-context")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target fails or is missing")
    args = p.parse_args()
    with open(args.splash, encoding="utf-8") as f:
        ours = json.load(f)
    with open(args.peer, encoding="utf-8") as f:
        peer = json.load(f)
    a, b = ours.get("metrics", {}), peer.get("metrics", {})
    la, lb = ours.get("label", "splash"), peer.get("label", "peer")

    print(f"{la}: {ours.get('url')} model {ours.get('server', {}).get('model')} ({ours.get('started')})  ")
    print(f"{lb}: {peer.get('url')} model {peer.get('server', {}).get('model')} ({peer.get('started')})\n")
    print(f"| metric | unit | {la} | {lb} | {la}/{lb} | {la} better by |")
    print("|---|---|---:|---:|---:|---:|")
    for key in sorted(set(a) | set(b), key=order):
        name, unit, higher = describe(key, ours)
        r = ratio(a.get(key), b.get(key))
        better = (r if higher else (1 / r if r else None)) if r else None
        print(f"| {name} | {unit} | {fmt(a.get(key), unit)} | {fmt(b.get(key), unit)} | "
              f"{'n/a' if r is None else f'{r:.2f}'} | {'n/a' if better is None else f'{better:.2f}x'} |")

    checks = []
    speedup = ratio(b.get("replay_ttft_s"), a.get("replay_ttft_s"))
    checks.append((f"cached-replay TTFT >= {args.replay_speedup:g}x faster than {lb}", speedup,
                   speedup is not None and speedup >= args.replay_speedup,
                   f"{fmt(b.get('replay_ttft_s'), 's')} s / {fmt(a.get('replay_ttft_s'), 's')} s"))
    key = f"aggregate_tok_s@{args.concurrency}"
    agg = ratio(a.get(key), b.get(key))
    checks.append((f"{args.concurrency}-concurrent aggregate decode >= {args.aggregate_ratio:g}x {lb}", agg,
                   agg is not None and agg >= args.aggregate_ratio,
                   f"{fmt(a.get(key))} / {fmt(b.get(key))} tok/s"))
    long_key = f"decode_tok_s@{args.long_context}"
    if long_key not in a:  # fall back to the largest context measured
        sizes = [int(k.split("@")[1]) for k in a if k.startswith("decode_tok_s@") and k.split("@")[1].isdigit()]
        if sizes:
            long_key = f"decode_tok_s@{max(sizes)}"
    keep = ratio(a.get(long_key), a.get("decode_tok_s@short"))
    checks.append((f"{la} decode @ {long_key.split('@')[1]} within {args.decode_tolerance:.0%} of decode @ short", keep,
                   keep is not None and keep >= 1 - args.decode_tolerance,
                   f"{fmt(a.get(long_key))} / {fmt(a.get('decode_tok_s@short'))} tok/s"))
    print("\n| target | measured | result |\n|---|---:|---|")
    for name, value, ok, detail in checks:
        print(f"| {name} | {'n/a' if value is None else f'{value:.2f}x'} ({detail}) | "
              f"{'PASS' if ok else ('FAIL' if value is not None else 'NOT MEASURED')} |")
    for label, res in ((la, ours), (lb, peer)):
        for note in res.get("notes", []):
            print(f"\nnote ({label}): {note}")
    if args.strict and not all(ok for _, _, ok, _ in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
