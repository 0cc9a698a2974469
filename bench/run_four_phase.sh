#!/usr/bin/env bash
# Four-phase serving benchmark (bench/four_phase.py): splash's server, then the llama.cpp peer
# (llama-cpp-python's OpenAI-compatible server) on the same GGUF, prompts, thread count and
# machine, ONE AFTER THE OTHER (only one server is loaded while measuring), then the comparison
# table with the targets (bench/compare_four_phase.py). Record the output in docs/PERF.md.
#
#   bench/run_four_phase.sh [MODEL.gguf] [-- extra four_phase.py flags for both runs]
#   e.g. bench/run_four_phase.sh -- --repetitions 1 --long-requests 0
#
# Env: THREADS (default nproc), SPLASH_PORT / PEER_PORT (8090 / 8091), PEER_CTX (16384),
#      OUT_DIR (default /tmp/four_phase-DATE), PEER_PYTHON (/tmp/venv-bench/bin/python), PYTHON (python3).
# The peer venv (once): python3 -m venv /tmp/venv-bench && /tmp/venv-bench/bin/pip install llama-cpp-python
# (builds llama.cpp from source for this CPU); this script adds the server's extras if missing.
# On a machine shared with builds, run it under `flock /tmp/splash-build.lock`.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=""
if [[ $# -gt 0 && "$1" != "--" ]]; then MODEL=$1; shift; fi
if [[ $# -gt 0 && "$1" == "--" ]]; then shift; fi
EXTRA=("$@")
DEFAULT_MODEL=/root/.cache/splash/models/SmolLM2-135M-Instruct.Q4_1.gguf
if [[ -z "$MODEL" ]]; then
  if [[ -f "$DEFAULT_MODEL" ]]; then MODEL=$DEFAULT_MODEL; else MODEL=$(build/splash pull smollm2-135m); fi
fi
THREADS=${THREADS:-$(nproc)}
SPLASH_PORT=${SPLASH_PORT:-8090}
PEER_PORT=${PEER_PORT:-8091}
PEER_CTX=${PEER_CTX:-16384}
PEER_PYTHON=${PEER_PYTHON:-/tmp/venv-bench/bin/python}
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-/tmp/four_phase-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT_DIR"
[[ -x build/splash ]] || { echo "build/splash is missing: run make build" >&2; exit 1; }

# The peer server's extras (prebuilt wheels only).
if ! "$PEER_PYTHON" -c "import llama_cpp" 2>/dev/null; then
  echo "llama-cpp-python is not importable by $PEER_PYTHON (see the header of this script)" >&2; exit 1
fi
if ! "$PEER_PYTHON" -c "import fastapi, uvicorn, sse_starlette, starlette_context, pydantic_settings" 2>/dev/null; then
  "$PEER_PYTHON" -m pip install -q --only-binary :all: fastapi uvicorn sse-starlette starlette-context pydantic-settings
fi

SERVER_PID=""
stop_server() {
  if [[ -n "$SERVER_PID" ]]; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
}
trap stop_server EXIT
trap "exit 130" INT
trap "exit 143" TERM

answers() {  # whether something serves GET /v1/models on port $1
  "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/v1/models', timeout=2)" \
    2>/dev/null
}

wait_ready() {  # port, log file: until GET /v1/models answers (splash also prints "Ready")
  local port=$1 log=$2
  for _ in $(seq 1 600); do
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "server exited; log: $log" >&2; tail -n 20 "$log" >&2; exit 1; fi
    answers "$port" && return 0
    sleep 0.5
  done
  echo "server on port $port not ready after 300 s; log: $log" >&2; exit 1
}

for port in "$SPLASH_PORT" "$PEER_PORT"; do
  if answers "$port"; then echo "something already serves port $port; set SPLASH_PORT / PEER_PORT" >&2; exit 1; fi
done

echo "== splash: $MODEL, $THREADS threads, port $SPLASH_PORT (results in $OUT_DIR)" >&2
build/splash serve --model "$MODEL" --port "$SPLASH_PORT" --threads "$THREADS" --no-webui > "$OUT_DIR/splash.log" 2>&1 &
SERVER_PID=$!
wait_ready "$SPLASH_PORT" "$OUT_DIR/splash.log"
"$PYTHON" bench/four_phase.py --url "http://127.0.0.1:$SPLASH_PORT" --label splash --out "$OUT_DIR/splash.json" \
  --prompts-out "$OUT_DIR/prompts.json" "${EXTRA[@]}"
stop_server

# llama-cpp-python's server serves one request at a time (a lock around the model); with its
# default interrupt_requests=True a new request cuts a running stream short, so it is turned
# off: concurrent requests queue, which is the peer's real behaviour under load. Its settings
# also come from environment variables (PORT, HOST, MODEL, N_CTX, ...: pydantic-settings, and
# they win over the flags), so it starts in a clean environment.
echo "== llama.cpp peer: llama-cpp-python $("$PEER_PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)'), n_ctx $PEER_CTX, $THREADS threads, port $PEER_PORT" >&2
env -i PATH="$PATH" HOME="$HOME" LANG=C.UTF-8 "$PEER_PYTHON" -m llama_cpp.server --model "$MODEL" --n_ctx "$PEER_CTX" --n_threads "$THREADS" \
  --n_threads_batch "$THREADS" --interrupt_requests False --port "$PEER_PORT" > "$OUT_DIR/peer.log" 2>&1 &
SERVER_PID=$!
wait_ready "$PEER_PORT" "$OUT_DIR/peer.log"
"$PYTHON" bench/four_phase.py --url "http://127.0.0.1:$PEER_PORT" --label llama.cpp --out "$OUT_DIR/peer.json" \
  --prompts-in "$OUT_DIR/prompts.json" "${EXTRA[@]}"
stop_server

echo >&2
"$PYTHON" bench/compare_four_phase.py "$OUT_DIR/splash.json" "$OUT_DIR/peer.json" | tee "$OUT_DIR/compare.md"
echo "files: $OUT_DIR/{splash,peer}.json, compare.md, prompts.json, splash.log, peer.log" >&2
