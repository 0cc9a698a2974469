#!/usr/bin/env bash
# splash bench and the llama.cpp peer, back to back on the same GGUF, token ids and thread
# count; prints both tables and the ratios. Record the output in docs/PERF.md.
#   bench/compare_llamacpp.sh [MODEL.gguf]     (default: the default model)
# Needs the peer venv: python3 -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install llama-cpp-python
set -euo pipefail
cd "$(dirname "$0")/.."
PEER_PYTHON=${PEER_PYTHON:-/tmp/venv-bench/bin/python}
MODEL=${1:-$(build/splash pull smollm2-135m)}
THREADS=${THREADS:-$(nproc)}
SIZES=${SIZES:-512,2048}
splash_json=$(build/splash bench -m "$MODEL" --threads "$THREADS" --prompt-sizes "$SIZES" --json 2>/dev/null | tee /dev/stderr | tail -n 1)
peer_json=$("$PEER_PYTHON" bench/llamacpp_peer.py "$MODEL" --threads "$THREADS" --prompt-sizes "$SIZES" | tee /dev/stderr | tail -n 1)
python3 - "$splash_json" "$peer_json" <<'PY'
import json, sys
ours, peer = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"\n{'test':<24}{'splash':>10}{'llama.cpp':>12}{'ratio':>8}")
for size, rate in ours["prefill"].items():
    print(f"{'prefill ' + size:<24}{rate:>10.1f}{peer['prefill'][size]:>12.1f}{rate / peer['prefill'][size]:>7.2f}x")
print(f"{'decode':<24}{ours['decode']:>10.1f}{peer['decode']:>12.1f}{ours['decode'] / peer['decode']:>7.2f}x")
print(f"decode ceiling (bandwidth / bytes per token): {ours['decode_ceiling']:.1f} tok/s; "
      f"splash at {100 * ours['decode'] / ours['decode_ceiling']:.0f}%, llama.cpp at {100 * peer['decode'] / ours['decode_ceiling']:.0f}%")
PY
