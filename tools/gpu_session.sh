#!/usr/bin/env bash
# The whole GPU test and benchmark set, run on the GPU machine in one call per phase, over
# what tools/gpu_carry.sh laid out in .gpu/ (nothing is built there). Writes a table
# (summary.md) and JSON (summary.json) plus logs under $OUT.
#
#   tools/gpu_session.sh tests     GPU unit tests (kernels vs float64, random models vs the CPU
#                                  path and vs HF transformers), compute-sanitizer memcheck + racecheck, serving
#                                  through HTTP on the GPU, the Qwen3-8B-shape benchmark
#   tools/gpu_session.sh quick     the same less serving and with a short memcheck (a lease
#                                  nearly spent)
#   tools/gpu_session.sh profile   where a decode step's time goes, step by step (8B shape)
#   tools/gpu_session.sh ncu-decode  each kernel of a decode step alone under ncu: us, MB, GB/s
#   SWEEP="default VAR=V ..." tools/gpu_session.sh env-sweep  decode under each environment
#   SWEEP="..." tools/gpu_session.sh depth-sweep  decode at 8K and 32K under each environment
#   SWEEP="..." tools/gpu_session.sh sweep-tests F  the GPU tests F names under each environment
#   tools/gpu_session.sh ab        decode, the previous build (.gpu/old/splash.xz) against this one
#   tools/gpu_session.sh moe-ab    the same on the 30B-A3B-shape MoE: prefill, decode, 1-64 sequences
#   tools/gpu_session.sh hybrid-moe-bench  the bench at Qwen3.5-35B-A3B's layer shapes (4 layers)
#   tools/gpu_session.sh router    the MoE tests, sanitizers over the routing, and the router
#                                  A/B against .gpu/old on the 35B-A3B layer shapes
#   tools/gpu_session.sh hybrid-side [S]  both hybrid shapes under splash and llama.cpp (built
#                                  here in at most S seconds), one lease; hybrid-peer: the peer's half
#   tools/gpu_session.sh router-ab [REGEX]  that A/B alone, ncu over the kernels REGEX names
#   tools/gpu_session.sh hybrid-benches  both hybrid benches, then each decode step's profile
#   tools/gpu_session.sh hybrid-profile  that profile alone, on the models a bench made this lease
#   tools/gpu_session.sh hybrid-pairs  the hybrid model tests with the MoE pairs grouped, 64
#                                  taken one by one, and as built (which path a mismatch follows)
#   tools/gpu_session.sh tests-only [F]  the GPU tests (those F names) and nothing else
#   tools/gpu_session.sh drafts [F]  the GPU tests, then decode with and without drafts (bench
#                                  --draft lookup) on the real test model and the 8B shape
#   tools/gpu_session.sh repeat    whether batch-1 decode repeats its bits (REPEAT_SETTINGS: the
#                switches tried, e.g. SPLASH_CUDA_PDL=fused)
#   tools/gpu_session.sh serve-drafts  the real test model served with and without drafts,
#                                  four requests at once to each, the replies compared
#   tools/gpu_session.sh gtests    GPU unit tests and serving through HTTP
#   tools/gpu_session.sh peer-build-tests S   the same beside a peer build of at most S seconds
#   tools/gpu_session.sh work      GPU tests, kernel timings, the 8B benchmark and the profile
#   tools/gpu_session.sh confirm   GPU tests and the 8B benchmark (after a change)
#   tools/gpu_session.sh changed F the same plus memcheck and racecheck over the tests F names
#                                  and the step-by-step profile
#   tools/gpu_session.sh part N    keeps .gpu/parts/<model>.partN (carried in this call) for later
#   tools/gpu_session.sh real      joins the parts, checks the sha256, greedy identity on the
#                                  real model against the CPU path
#   tools/gpu_session.sh peer-build S  builds llama.cpp for the GPU here, at most S seconds a call
#                                  (in the background of other phases: `... peer-build 540 &`)
#   tools/gpu_session.sh peer      llama.cpp's CUDA build on the Qwen3-8B-shape file; then, in the
#   tools/gpu_session.sh bench8b   next call on the warm machine, splash on the same file
#
# Phases that need files a cold machine lost (parts, binaries) say so and skip.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/splash-gpu-out}
mkdir -p "$OUT"
KEEP=/tmp/splash-gpu      # survives between calls while the machine stays warm
mkdir -p "$KEEP/parts" "$KEEP/fixtures"
# The carried libraries are for splash's binaries only (the machine's own curl, python
# and friends keep theirs).
if [ -f .gpu/lib.tar.xz ]; then  # carried compressed (tools/gpu_carry.sh)
  tar -C "$KEEP" -xJf .gpu/lib.tar.xz
fi
if [ -f .gpu/bin.tar.xz ]; then  # the binaries too, unpacked where the phases look for them
  tar -C .gpu -xJf .gpu/bin.tar.xz
fi
SPLASH_LIBS="$KEEP/lib:/usr/local/cuda/lib64"
# cuBLAS: the toolkit's, else the one PyTorch's wheels bring.
if ! ldconfig -p | grep -q libcublas.so.13 && [ ! -e /usr/local/cuda/lib64/libcublas.so.13 ]; then
  torch_libs=$(python3 -c 'import nvidia.cu13, os; print(os.path.join(nvidia.cu13.__path__[0], "lib"))' 2>/dev/null ||
               python3 -c 'import nvidia.cublas, os; print(os.path.join(nvidia.cublas.__path__[0], "lib"))' 2>/dev/null)
  SPLASH_LIBS="$SPLASH_LIBS:$torch_libs"
fi
splash() { LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash "$@"; }
gpu_tests() { LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash_gpu_tests "$@"; }
SUMMARY="$OUT/summary.md"
JSON="$OUT/summary.json"
[ -f "$JSON" ] || echo '{}' > "$JSON"
record() {  # record KEY VALUE-JSON
  python3 - "$JSON" "$1" "$2" <<'PY'
import json, sys
path, key, value = sys.argv[1:]
data = json.load(open(path))
data[key] = json.loads(value)
json.dump(data, open(path, "w"), indent=1)
PY
}
row() { echo "| $1 | $2 |" >> "$SUMMARY"; }
[ -f "$SUMMARY" ] || printf '| check | result |\n|---|---|\n' > "$SUMMARY"

gtest() {  # gtest NAME FILTER [env...]: runs the GPU tests, records pass/fail counts
  local name=$1 filter=$2
  shift 2
  env "$@" LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash_gpu_tests --gtest_filter="$filter" \
    --gtest_output="json:$OUT/$name.json" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 30 "$OUT/$name.log"
  local counts
  counts=$(python3 -c "import json; d=json.load(open('$OUT/$name.json')); print(d['tests'], d['failures'], d.get('disabled',0))" 2>/dev/null || echo "0 1 0")
  row "$name" "rc=$rc; tests/failures/disabled: $counts"
  record "$name" "{\"rc\": $rc, \"counts\": \"$counts\"}"
}

# Random-weight models of every family and weight type, made here (small, seconds).
phase_fixtures() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
  local tok=.gpu/tokenizer-smollm2.gguf
  python3 tools/make_random_llama.py --tokenizer-from $tok --out "$KEEP/fixtures/random-llama-a.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --mix b --out "$KEEP/fixtures/random-llama-b.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen2 --mix qwen --out "$KEEP/fixtures/random-qwen2.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3 --mix qwen --out "$KEEP/fixtures/random-qwen3.gguf" 2>/dev/null
  # Every matrix an integer type, gate and up alike (the fused decode layer serves these):
  # a Q4_K_M-like qwen3 and a llama of the 32-weight block types.
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3 --all Q4_K --set blk.0.attn_v=Q6_K \
    --set blk.1.ffn_down=Q6_K \
    --out "$KEEP/fixtures/random-qwen3-q4km.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --all Q4_0 --set blk.0.attn_q=Q4_1 --set blk.0.attn_v=Q5_0 \
    --set blk.0.attn_output=Q5_1 --set blk.1.ffn_gate=Q8_0 --set blk.1.ffn_up=Q8_0 --set blk.2.ffn_down=Q5_1 \
    --out "$KEEP/fixtures/random-llama-legacy.gguf" 2>/dev/null
  # Mixtures of experts (qwen3moe: 8 experts of 256, 2 a token): the qwen mix, and all Q4_K.
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3moe --mix qwen \
    --out "$KEEP/fixtures/random-qwen3moe.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3moe --all Q4_K \
    --out "$KEEP/fixtures/random-qwen3moe-q4k.gguf" 2>/dev/null
  # ... and mix a with float experts in layer 1 (F16 gate beside Q8_0 up, F32 down: the
  # float ones take expert_matmul row by row)
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3moe --mix a --set blk.1.ffn_gate=F16 --set blk.1.ffn_down=F32 \
    --out "$KEEP/fixtures/random-qwen3moe-mix-a.gguf" 2>/dev/null
  # Qwen3.5's hybrid (Gated DeltaNet + gated attention with partial RoPE; CudaModelTest.Hybrid*):
  # the qwen mix, and all Q4_K.
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen35 --mix qwen \
    --out "$KEEP/fixtures/hybrid-qwen35.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen35 --all Q4_K \
    --out "$KEEP/fixtures/hybrid-qwen35-q4k.gguf" 2>/dev/null
  # ... with experts and a shared expert (qwen35moe), and Qwen3-Next's grouped DeltaNet heads.
  # Each token takes all 4 experts: with a choice, the two backends' rounding (int8 activations
  # against f16 ones, about 1% of the hidden state) tips routers' near ties to other experts,
  # and one token routed elsewhere is 25% off (measured: seeds 1, 3, 4 of 8 experts choosing 2
  # fail so, seed 2 and every all-experts seed pass). The choosing is checked where it cannot
  # tip: CudaExpertsTest, and the qwen3moe fixtures above.
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen35moe --mix qwen --experts 4 --experts-used 4 \
    --out "$KEEP/fixtures/hybrid-qwen35moe.gguf" 2>/dev/null
  python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3next --mix qwen --experts 4 --experts-used 4 \
    --out "$KEEP/fixtures/hybrid-qwen3next.gguf" 2>/dev/null
  ls -la "$KEEP/fixtures"
}

# Whole models against Hugging Face transformers (the machine's torch and transformers):
# random float weights at Qwen3-8B's layer shapes and at Qwen2.5-1.5B's (two layers each),
# reference logits by tools/hf_oracle.py, compared by CudaModelTest.MatchesTransformers.
phase_oracle() {
  local dir=$KEEP/oracle tok=.gpu/tokenizer-qwen2.gguf
  mkdir -p "$dir"
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl 2>/dev/null
  export PYTHONPATH=/tmp/site
  [ -f "$dir/qwen3-8b-shape.gguf" ] || python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen3 \
    --d-model 4096 --heads 32 --kv-heads 8 --head-dim 128 --ffn 12288 --layers 2 --rope-base 1000000 --eps 1e-6 \
    --context 4096 --all F16 --out "$dir/qwen3-8b-shape.gguf" 2>> "$OUT/oracle.log"
  [ -f "$dir/qwen2.5-1.5b-shape.gguf" ] || python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen2 \
    --d-model 1536 --heads 12 --kv-heads 2 --ffn 8960 --layers 2 --rope-base 1000000 --eps 1e-6 --context 4096 \
    --all F16 --out "$dir/qwen2.5-1.5b-shape.gguf" 2>> "$OUT/oracle.log"
  # RoPE stretched (YaRN x4 over an original 1024 tokens, stated in the file): transformers' yarn.
  [ -f "$dir/qwen2.5-1.5b-shape-yarn.gguf" ] || python3 tools/make_random_llama.py --tokenizer-from $tok --arch qwen2 \
    --d-model 1536 --heads 12 --kv-heads 2 --ffn 8960 --layers 2 --rope-base 1000000 --eps 1e-6 --context 4096 \
    --rope-scaling yarn --rope-scale 4 --rope-original-context 1024 --seed 7 \
    --all F16 --out "$dir/qwen2.5-1.5b-shape-yarn.gguf" 2>> "$OUT/oracle.log"
  for model in "$dir"/*.gguf; do
    python3 tools/hf_oracle.py --gguf "$model" --prompt-tokens 24 --steps 4 >> "$OUT/oracle.log" 2>&1
  done
  tail -n 6 "$OUT/oracle.log"
  gtest hf_oracle 'CudaModelTest.MatchesTransformers' SPLASH_HF_ORACLE="$dir"
  grep 'against transformers' "$OUT/hf_oracle.log" | tee -a "$SUMMARY"
}

phase_tests() {
  phase_fixtures
  gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
  phase_oracle
  phase_serve
  phase_kernels
  phase_bench
  phase_sanitizers
}

# compute-sanitizer over every kernel at small shapes (it runs each launch ~100x slower).
phase_sanitizers() {
  # The memory checker over every kernel (small shapes: it runs each launch ~100x slower).
  LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
    .gpu/bin/splash_gpu_tests \
    --gtest_filter='CudaMatmulTest.DequantizeToF16*:KvTypes/CudaAttentionTest.PrefillAndDecodeAgainstFloat64/3:CudaModelTest.*' \
    > "$OUT/memcheck.log" 2>&1
  local rc=$?
  tail -n 5 "$OUT/memcheck.log"
  row memcheck "rc=$rc ($(grep -c 'Invalid\|uninitialized' "$OUT/memcheck.log") error lines)"
  record memcheck "{\"rc\": $rc}"
  LD_LIBRARY_PATH="$SPLASH_LIBS" SPLASH_GPU_FIXTURES="$KEEP/fixtures" timeout 90 compute-sanitizer --tool racecheck \
    --error-exitcode 9 .gpu/bin/splash_gpu_tests \
    --gtest_filter='CudaModelTest.BatchOfTwo*:KvTypes/CudaAttentionTest.PrefillAndDecodeAgainstFloat64/1' \
    > "$OUT/racecheck.log" 2>&1
  rc=$?
  tail -n 5 "$OUT/racecheck.log"
  row racecheck "rc=$rc"
  record racecheck "{\"rc\": $rc}"
}

# memcheck and racecheck over the GPU tests a filter names (the kernels a session changed).
phase_sanitize() {  # phase_sanitize FILTER
  local tool
  for tool in memcheck racecheck; do
    LD_LIBRARY_PATH="$SPLASH_LIBS" SPLASH_GPU_FIXTURES="$KEEP/fixtures" timeout 200 compute-sanitizer --tool $tool \
      --error-exitcode 9 .gpu/bin/splash_gpu_tests --gtest_filter="$1" > "$OUT/sanitize_$tool.log" 2>&1
    local rc=$?
    tail -n 4 "$OUT/sanitize_$tool.log"
    row "$tool ($1)" "rc=$rc ($(grep -v 'SUMMARY' "$OUT/sanitize_$tool.log" | grep -c 'Invalid\|uninitialized\|Race reported\|hazard') error lines)"
    record "sanitize_$tool" "{\"rc\": $rc}"
  done
}

# splash run and splash serve --device cuda on a random qwen2 model: a CLI generation, then
# chat completions through HTTP (plain and streamed), and /status naming the GPU. Every step
# has a deadline; a server that stops answering gets its threads' stacks dumped (cuda-gdb).
phase_serve() {
  [ -x .gpu/bin/splash ] || { row serve "skipped: no splash binary carried"; return; }
  local model=$KEEP/fixtures/random-qwen2.gguf
  timeout 60 env LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash run --device cuda -m "$model" -n 16 --temperature 0 \
    "Say hi" > "$OUT/run.log" 2>&1
  row "splash run --device cuda" "rc=$? $(tail -n 1 "$OUT/run.log" | cut -c1-120)"
  LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve --device cuda -m "$model" --port 8123 > "$OUT/serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 60); do curl -sf --max-time 2 http://127.0.0.1:8123/health > /dev/null && break; sleep 0.5; done
  curl -s --max-time 30 http://127.0.0.1:8123/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Say hi"}],"max_tokens":16,"temperature":0}' > "$OUT/serve_reply.json"
  local chat_rc=$?
  curl -s --max-time 30 -N http://127.0.0.1:8123/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Count to five"}],"max_tokens":24,"stream":true}' > "$OUT/serve_stream.txt"
  local stream_rc=$?
  curl -s --max-time 10 http://127.0.0.1:8123/status > "$OUT/serve_status.json"
  if [ $chat_rc -ne 0 ] || [ $stream_rc -ne 0 ]; then  # stuck: where?
    timeout 60 cuda-gdb -batch -p $pid -ex 'info threads' -ex 'thread apply all bt 12' > "$OUT/serve_stacks.txt" 2>&1
  fi
  kill -INT $pid
  for _ in $(seq 1 20); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -0 $pid 2>/dev/null && { echo "serve did not exit on SIGINT"; kill -9 $pid; }
  local ok
  ok=$(python3 -c "
import json, sys
r = json.load(open('$OUT/serve_reply.json'))
s = json.load(open('$OUT/serve_status.json'))
chunks = [l for l in open('$OUT/serve_stream.txt') if l.startswith('data: ')]
print(r['usage']['completion_tokens'] > 0 and '$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)' in json.dumps(s)
      and chunks[-1].strip() == 'data: [DONE]')" 2>&1 | tail -n 1)
  row serve "chat rc=$chat_rc, stream rc=$stream_rc: $ok (completions on the GPU through HTTP; /status names the device)"
  record serve "\"$ok\""
}

# Kernel timings at the 8B shapes (printed by the disabled benchmark tests).
phase_kernels() {  # phase_kernels [FILTER]
  gpu_tests --gtest_also_run_disabled_tests --gtest_filter="CudaKernelBench.${1:-*}" > "$OUT/kernels.log" 2>&1
  grep '\[ bench \]' "$OUT/kernels.log"
  row kernels "$(grep -c '\[ bench \]' "$OUT/kernels.log") timings in kernels.log"
}

# The issue's benchmark shape: Qwen3-8B (36 layers, d_model 4096, 32/8 heads of 128, ffn 12288,
# vocab 151936, untied head) with random weights in a Q4_K_M-like mix (Q4_K; Q6_K for the
# output head and for attn_v/ffn_down of every other layer).
phase_bench() {
  [ -x .gpu/bin/splash ] || { row bench "skipped: no splash binary carried"; return; }
  local model=$KEEP/qwen3-8b-q4km.gguf
  make_8b "$model" || { row bench "failed to make the model"; return; }
  splash bench --device cuda -m "$model" --prompt-sizes 512,4096 --decode-tokens 128 --repetitions 3 \
    --decode-depths 8192,32768 --parallel 1,2,4,8,16,32,64 --json \
    > "$OUT/bench_8b.txt" 2> "$OUT/bench_8b.err"
  local rc=$?
  cat "$OUT/bench_8b.txt"
  tail -n 3 "$OUT/bench_8b.err"
  row "bench Qwen3-8B shape Q4_K_M-like" "rc=$rc; $(grep -E 'prefill|decode|ceiling' "$OUT/bench_8b.txt" | tr '\n' ';')"
  record bench_8b "$(tail -n 1 "$OUT/bench_8b.txt" | grep '^{' || echo '{}')"
  # The same decode kernel by kernel (no recorded CUDA graphs), for the graphs' share.
  SPLASH_CUDA_GRAPHS=0 splash bench --device cuda -m "$model" --prompt-sizes 512 --decode-tokens 128 \
    --repetitions 3 --json > "$OUT/bench_8b_no_graphs.txt" 2> /dev/null
  row "bench, no CUDA graphs" "$(grep -E '^decode' "$OUT/bench_8b_no_graphs.txt" | tr '\n' ';')"
  record bench_8b_no_graphs "$(tail -n 1 "$OUT/bench_8b_no_graphs.txt" | grep '^{' || echo '{}')"
  # Decode-sized passes with the kernel-per-step layer (before the fused GEMVs).
  SPLASH_CUDA_FUSED=0 splash bench --device cuda -m "$model" --prompt-sizes 512 --decode-tokens 128 \
    --repetitions 3 --parallel 1,2,4 --json > "$OUT/bench_8b_unfused.txt" 2> /dev/null
  row "bench, layers kernel per step (SPLASH_CUDA_FUSED=0)" "$(grep -E '^decode' "$OUT/bench_8b_unfused.txt" | tr '\n' ';')"
  record bench_8b_unfused "$(tail -n 1 "$OUT/bench_8b_unfused.txt" | grep '^{' || echo '{}')"
  # Decode with whole logits rows copied back and scanned on the host (before best tokens).
  SPLASH_CUDA_BEST_TOKENS=0 splash bench --device cuda -m "$model" --prompt-sizes 512 --decode-tokens 128 \
    --repetitions 3 --parallel 1,16,64 --json > "$OUT/bench_8b_whole_rows.txt" 2> /dev/null
  row "bench, whole rows back" "$(grep -E '^decode' "$OUT/bench_8b_whole_rows.txt" | tr '\n' ';')"
  record bench_8b_whole_rows "$(tail -n 1 "$OUT/bench_8b_whole_rows.txt" | grep '^{' || echo '{}')"
}

# The builds a comparing phase runs: the previous one (.gpu/old/splash.xz, unpacked), where
# carried, and this one.
compared_builds() {
  [ -f .gpu/old/splash.xz ] && xz -dkf .gpu/old/splash.xz && chmod +x .gpu/old/splash
  local b
  for b in old bin; do [ -x .gpu/$b/splash ] && echo $b; done
}

# Where the MoE's decode step goes, step by step, at 1, 4 and 16 sequences, the previous
# build (.gpu/old, where carried) and this one (moe_profile_*.txt).
phase_moe_profile() {
  local model=$KEEP/qwen3-30b-a3b-shape-8-layers.gguf b n
  make_moe "$model" || { row moe-profile "failed to make the model"; return; }
  for b in $(compared_builds); do
    for n in 1 4 16; do
      SPLASH_CUDA_PROFILE=1 LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/$b/splash bench --device cuda -m "$model" --prompt-sizes 1 \
        --decode-tokens 64 --repetitions 1 $([ $n -gt 1 ] && echo "--parallel $n --parallel-prompt 16") \
        > "$OUT/moe_profile_${b}_$n.txt" 2>&1
      echo "== $b, $n sequences"; grep -A12 "GPU time by step" "$OUT/moe_profile_${b}_$n.txt" | head -13
    done
  done
  row moe-profile "MoE decode step by step at 1, 4 and 16 sequences: moe_profile_*.txt"
}

# Where a decode step's GPU time goes, step by step (SPLASH_CUDA_PROFILE=1: an event after
# each step, kernel by kernel), at one sequence and at 16 and 64 together.
phase_profile() {
  [ -x .gpu/bin/splash ] || { row profile "skipped: no splash binary carried"; return; }
  local model=$KEEP/qwen3-8b-q4km.gguf
  make_8b "$model" || { row profile "failed to make the model"; return; }
  for n in 1 16 64; do
    SPLASH_CUDA_PROFILE=1 splash bench --device cuda -m "$model" --prompt-sizes 1 --decode-tokens 64 --repetitions 1 \
      $([ $n -gt 1 ] && echo "--parallel $n --parallel-prompt 16") > "$OUT/profile_$n.txt" 2>&1
    echo "== $n sequences"; grep -A14 "GPU time by step" "$OUT/profile_$n.txt"
  done
  # A 4096-token prompt in one pass (kernel by kernel), for prefill's shares.
  SPLASH_CUDA_PROFILE=1 splash bench --device cuda -m "$model" --prompt-sizes 4096 --decode-tokens 1 --repetitions 1 \
    > "$OUT/profile_prefill.txt" 2>&1
  grep -A16 "passes of 4096" "$OUT/profile_prefill.txt"
  row profile "decode step by step at 1, 16, 64 sequences, a 4096-token prefill: profile_*.txt"
}

# ncu's full report on the small GEMM (gate_up Q4_K at 8 and 64 rows).
phase_ncu() {
  LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 240 ncu --set full -k regex:small_gemm_ -c 6 \
    .gpu/bin/splash_gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*SmallGemmForProfiler*' \
    > "$OUT/ncu_small_gemm.txt" 2>&1
  row ncu "rc=$? ncu_small_gemm.txt"
  grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Stall|Warp Cycles Per Issued|Issue Slots Busy|L2 Hit|Block Limit" "$OUT/ncu_small_gemm.txt" | head -80
}

# Each kernel of a batch-1 decode step alone (ncu serializes them and flushes the caches
# between): its duration and the bytes it reads from DRAM, so its share of the bandwidth
# says which kernels are latency-bound and which stream. Skips prefill and the first steps.
# The decode attention kernels alone under ncu at one depth (default 32768): time and DRAM
# bytes of each layer's launch for one decode token, against the K/V bytes it must read.
phase_ncu_depth() {
  local model=$KEEP/qwen3-8b-q4km.gguf depth=${1:-32768}
  make_8b "$model" || { row ncu-depth "failed to make the model"; return; }
  # Every attention launch of the run (the bench's short warm-up passes too), grouped by grid:
  # the depth-D decode launches are the ones with the most blocks.
  LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 300 ncu --csv --page raw --print-units base -k regex:"attention_decode|merge_splits" \
    --launch-count 400 --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size \
    .gpu/bin/splash bench --device cuda -m "$model" --prompt-sizes 16 --decode-depths "$depth" --decode-tokens 3 --repetitions 1 \
    > "$OUT/ncu_depth_$depth.csv" 2> "$OUT/ncu_depth_$depth.err"
  row "ncu-depth $depth" "rc=$? $(python3 - "$OUT/ncu_depth_$depth.csv" <<'PY'
import collections, csv, sys
lines = open(sys.argv[1]).read().splitlines()
lines = lines[next(i for i, l in enumerate(lines) if l.startswith('"ID"')):]
number = lambda r, k: float(r[k].replace(",", ""))
rows = [r for r in csv.DictReader(lines) if r.get("gpu__time_duration.sum", "").replace(",", "").replace(".", "").isdigit()]
groups = collections.defaultdict(list)
for r in rows:
    groups[(r["Kernel Name"].split("(")[0].split("<")[0].split()[-1], r["launch__grid_size"])].append(r)
out = []
for (kernel, grid), rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
    t = sum(number(r, "gpu__time_duration.sum") for r in rs) / 1e3
    b = sum(number(r, "dram__bytes_read.sum") for r in rs) / 1e6
    out.append(f"{kernel} grid {grid} x{len(rs)}: {t/len(rs):.2f} us, {b/len(rs):.1f} MB a launch, {b/max(t,1e-9)*1e3:.0f} GB/s")
print("; ".join(out))
PY
)"
}

# ncu's CSV (--page raw, the metrics below) as a table, a row per kernel and launch shape.
ncu_table() {
  python3 - "$1" <<'PY'
import csv, sys, collections
lines = open(sys.argv[1]).read().splitlines()
lines = lines[next(i for i, l in enumerate(lines) if l.startswith('"ID"')):]
rows = []
for r in csv.DictReader(lines):
    r = {k: (v.replace(",", "") if k != "Kernel Name" else v) for k, v in r.items()}
    if r.get("Kernel Name") and r.get("gpu__time_duration.sum", "").replace(".", "").isdigit():
        rows.append(r)
by = collections.defaultdict(list)
for r in rows:
    by[(r["Kernel Name"][:90], r["launch__grid_size"], r["launch__block_size"], r["launch__registers_per_thread"])].append(r)
print("| kernel | grid | block | regs | calls | us | MB read | GB/s |\n|---|---|---|---|---|---|---|---|")
for key, rs in sorted(by.items(), key=lambda kv: -sum(float(r["gpu__time_duration.sum"]) for r in kv[1])):
    t = sum(float(r["gpu__time_duration.sum"]) for r in rs) / len(rs) / 1e3   # ns -> us
    b = sum(float(r["dram__bytes_read.sum"]) for r in rs) / len(rs)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {len(rs)} | {t:.2f} | {b/1e6:.2f} | {b/t/1e3:.0f} |")
PY
}

# The MoE's decode kernels alone under ncu, the previous build (.gpu/old) and this one, at
# 1 and 4 sequences: each kernel's time, registers, DRAM bytes (ncu_moe_*.md).
phase_moe_ncu() {
  local model=$KEEP/qwen3-30b-a3b-shape-8-layers.gguf b n
  make_moe "$model" || { row moe-ncu "failed to make the model"; return; }
  for b in $(compared_builds); do
    for n in 1 4; do
      LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 120 ncu --csv --page raw --print-units base --launch-skip 600 --launch-count 200 \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread \
        .gpu/$b/splash bench --device cuda -m "$model" --prompt-sizes 1 --decode-tokens 64 --repetitions 1 \
        $([ $n -gt 1 ] && echo "--parallel $n --parallel-prompt 16") > "$OUT/ncu_moe.csv" 2> /dev/null
      echo "== $b, $n sequences"; ncu_table "$OUT/ncu_moe.csv" | tee "$OUT/ncu_moe_${b}_$n.md"
    done
  done
  rm -f "$OUT/ncu_moe.csv"
  row moe-ncu "ncu_moe_*.md"
}

phase_ncu_decode() {
  local model=$KEEP/qwen3-8b-q4km.gguf
  make_8b "$model" || { row ncu-decode "failed to make the model"; return; }
  splash bench --device cuda -m "$model" --prompt-sizes 16 --decode-tokens 8 --repetitions 1 > /dev/null 2>&1  # tunes
  LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 300 ncu --csv --page raw --print-units base --launch-skip 1200 --launch-count 480 \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread \
    .gpu/bin/splash bench --device cuda -m "$model" --prompt-sizes 16 --decode-tokens 64 --repetitions 1 \
    > "$OUT/ncu_decode.csv" 2> "$OUT/ncu_decode.err"
  row ncu-decode "rc=$? ncu_decode.csv"
  ncu_table "$OUT/ncu_decode.csv" | tee "$OUT/ncu_decode.md"
}

# `splash bench` on the 8B-shape model under each environment SWEEP names (space-separated;
# one entry is VAR=V or VAR=V+VAR2=V2, `default` nothing set), for launch-shape and switch
# experiments: sweep NAME BENCH-FLAGS... (logs NAME_<entry>.txt, a row of decode figures each).
sweep() {
  local name=$1 model=$KEEP/qwen3-8b-q4km.gguf entry log
  shift
  make_8b "$model" || { row "$name" "failed to make the model"; return 1; }
  splash bench --device cuda -m "$model" --prompt-sizes 16 --decode-tokens 8 --repetitions 1 > /dev/null 2>&1  # tunes
  for entry in ${SWEEP:-default}; do
    log="$OUT/${name}_${entry//[=+]/_}.txt"
    env $([ "$entry" != default ] && echo "${entry//+/ }") LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash bench \
      --device cuda -m "$model" "$@" > "$log" 2>&1
    row "$name under $entry" "$(grep -E '^decode' "$log" | tr -s ' ' | tr '\n' ';')"
  done
}

# Decode at one sequence (256 tokens after 512), e.g. SWEEP="default SPLASH_CUDA_FUSED=0"
# tools/gpu_session.sh env-sweep.
phase_env_sweep() { sweep sweep --prompt-sizes 512 --decode-tokens 256 --repetitions 3; }

# Decode after 512 tokens and at depth 8K and 32K, then the decode attention alone under ncu
# at 32K (phase_ncu_depth). (`splash bench --prompt-sizes N` decodes after a short prompt,
# not at N: a step-by-step profile at depth needs --decode-depths.)
phase_depth_sweep() {
  sweep depth --prompt-sizes 512 --decode-tokens 128 --repetitions 2 --decode-depths 8192,32768 || return
  phase_ncu_depth 32768
}

# A change against the build before it, in one lease: .gpu/old/splash.xz (a stripped splash
# of the previous commit, xz-compressed, carried beside .gpu/bin.tar.xz) and this tree's,
# alternating three times: decode at one sequence after 512 tokens and at depth 8K.
phase_ab() {
  [ -f .gpu/old/splash.xz ] || { row ab "skipped: no .gpu/old/splash.xz carried"; return; }
  local model=$KEEP/qwen3-8b-q4km.gguf i b
  make_8b "$model" || { row ab "failed to make the model"; return; }
  compared_builds > /dev/null
  splash bench --device cuda -m "$model" --prompt-sizes 16 --decode-tokens 8 --repetitions 1 > /dev/null 2>&1  # tunes
  for i in 1 2 3; do
    for b in old bin; do
      # (AB_ARGS: other bench arguments, e.g. "--prompt-sizes 512 --decode-tokens 128 --parallel 16,32,64")
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/$b/splash bench --device cuda -m "$model" \
        ${AB_ARGS:---prompt-sizes 512 --decode-tokens 256 --repetitions 3 --decode-depths 8192} > "$OUT/ab_${b}_$i.txt" 2>&1
      row "ab $b $i" "$(grep -E '^decode' "$OUT/ab_${b}_$i.txt" | tr -s ' ' | tr '\n' ';')"
    done
  done
}

make_8b() {  # make_8b PATH: the Qwen3-8B-shape random GGUF, unless this warm machine has it
  local model=$1
  [ -f "$model" ] && return 0
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
  local sets=(--set output=Q6_K)
  for l in $(seq 0 2 35); do sets+=(--set "blk.$l.attn_v=Q6_K" --set "blk.$l.ffn_down=Q6_K"); done
  python3 tools/make_random_llama.py --tokenizer-from .gpu/tokenizer-qwen2.gguf --arch qwen3 --d-model 4096 \
    --heads 32 --kv-heads 8 --head-dim 128 --ffn 12288 --layers 36 --context 40960 --all Q4_K "${sets[@]}" \
    --out "$model" 2> "$OUT/make_8b.log"
  ls -la "$model"
}

# A mixture of experts at Qwen3-30B-A3B's layer shapes (d_model 2048, 32/4 heads of 128, 128
# experts of 768, 8 a token, vocab 151936) with 8 of its 48 layers, every matrix Q4_K but the
# Q6_K head, unless this warm machine has it.
make_moe() {
  local model=$1
  [ -f "$model" ] && return 0
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
  python3 tools/make_random_llama.py --tokenizer-from .gpu/tokenizer-qwen2.gguf --arch qwen3moe --d-model 2048 \
    --heads 32 --kv-heads 4 --head-dim 128 --ffn 768 --experts 128 --experts-used 8 --layers 8 --context 40960 \
    --all Q4_K --set output=Q6_K --out "$model" 2> "$OUT/make_moe.log"
  ls -la "$model"
}

# That mixture of experts, the previous build (.gpu/old/splash.xz) against this one, taking
# turns: prefill 512/4096, decode, aggregate decode of 1/4/16/64 sequences.
phase_moe_ab() {
  [ -f .gpu/old/splash.xz ] || { row moe-ab "skipped: no .gpu/old/splash.xz carried"; return; }
  local model=$KEEP/qwen3-30b-a3b-shape-8-layers.gguf i b
  make_moe "$model" || { row moe-ab "failed to make the model"; return; }
  compared_builds > /dev/null
  for i in 1 2; do
    for b in old bin; do
      LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/$b/splash bench --device cuda -m "$model" --prompt-sizes 512,4096 \
        --decode-tokens 128 --repetitions 2 --parallel 1,4,16,64 > "$OUT/moe_ab_${b}_$i.txt" 2>&1
      row "moe-ab $b $i" "rc=$?; $(grep -E 'prefill|decode' "$OUT/moe_ab_${b}_$i.txt" | tr -s ' ' | tr '\n' ';')"
    done
  done
}

# That mixture of experts, splash and llama.cpp on the same file, one lease: the peer builds
# beside the model's making and splash's benchmark, then runs alone.
phase_moe_side() {
  local model=$KEEP/qwen3-30b-a3b-shape-8-layers.gguf bin=$KEEP/llama
  phase_peer_build "${1:-330}" & local build=$!
  # The model tests with every pass of experts grouped on the device (decode graphs too).
  phase_fixtures > /dev/null
  gtest gpu_tests_moe_grouped 'CudaModelTest.*:CudaExpertsTest.*' SPLASH_GPU_FIXTURES="$KEEP/fixtures" SPLASH_CUDA_MOE_PAIRS=0
  make_moe "$model" || { row moe "failed to make the model"; return; }
  splash bench --device cuda -m "$model" --prompt-sizes 512,4096 --decode-tokens 128 --repetitions 3 \
    --parallel 1,4,16,64 --json > "$OUT/bench_moe.txt" 2> "$OUT/bench_moe.err"
  row "bench MoE (30B-A3B shape, 8 layers)" "rc=$?; $(grep -E 'prefill|decode|ceiling' "$OUT/bench_moe.txt" | tr '\n' ';')"
  record bench_moe "$(tail -n 1 "$OUT/bench_moe.txt" | grep '^{' || echo '{}')"
  wait "$build"
  [ -x "$bin/llama-bench" ] || { row moe-peer "no peer build"; return; }
  LD_LIBRARY_PATH="$bin" timeout 200 "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -o json \
    > "$OUT/peer_moe.json" 2> "$OUT/peer_moe.err"
  row "MoE llama-bench pp512/pp4096/tg128" "rc=$? $(python3 -c "
import json; print('; '.join(f\"{'pp'+str(r['n_prompt']) if r['n_prompt'] else 'tg'+str(r['n_gen'])}: {r['avg_ts']:.1f} tok/s\" for r in json.load(open('$OUT/peer_moe.json'))))" 2>&1)"
  LD_LIBRARY_PATH="$bin" timeout 200 "$bin/llama-batched-bench" -m "$model" -ngl 99 -fa on -c 45056 -b 2048 -ub 512 \
    -npp 512 -ntg 128 -npl 1,4,16,64 > "$OUT/peer_moe_batched.txt" 2> "$OUT/peer_moe_batched.err"
  row "MoE llama-batched-bench 512+128 x 1/4/16/64" "rc=$? $(grep -E '^\|\s+512' "$OUT/peer_moe_batched.txt" | awk -F'|' '{printf "B=%s S_TG=%s; ", $4, $9}')"
}

# The peer built here, where 16 cores take minutes and this project's two take hours: its
# source (.gpu/llama-src.tar.xz, `tools/llamacpp_cuda.sh --source`: the sdist's llama.cpp less
# its models and docs; the machine's image has CMake and ninja). At low priority beside the
# call's other phases (start it with & and go on), for at most SECONDS: ninja stops there and
# the next call on the warm machine resumes it.
phase_peer_build() {  # phase_peer_build SECONDS
  local seconds=${1:-540} src=$KEEP/llama.cpp
  [ -x "$KEEP/llama/llama-bench" ] && { echo "peer already built"; return 0; }
  if [ ! -d "$src" ]; then
    [ -f .gpu/llama-src.tar.xz ] || { row peer-build "skipped: no .gpu/llama-src.tar.xz carried"; return 1; }
    tar -C "$KEEP" -xJf .gpu/llama-src.tar.xz
  fi
  local started=$SECONDS
  {
    [ -f "$src/build/build.ninja" ] || cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=ON
    timeout -s INT "$seconds" nice -n 10 ninja -C "$src/build" -j "$(( $(nproc) - 2 ))" llama-bench llama-batched-bench llama-server
  } > "$OUT/peer_build.log" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then
    mkdir -p "$KEEP/llama" && cp -P "$src/build/bin"/* "$KEEP/llama/"
    row peer-build "built in $((SECONDS - started)) s"
  else
    row peer-build "rc=$rc after $((SECONDS - started)) s: $(grep -o '^\[[0-9]*/[0-9]*\]' "$OUT/peer_build.log" | tail -n 1) (resumes in the next call)"
  fi
  tail -n 3 "$OUT/peer_build.log"
}

# The peer, llama.cpp's CUDA build (.gpu/llama-cuda.tar.xz from tools/llamacpp_cuda.sh, or
# built here by phase_peer_build), on the same file: llama-bench (prefill 512/4096, decode 128, decode at depth 8K/32K) and
# llama-batched-bench (aggregate decode of 1/4/16/64 sequences after 512-token prompts), flash
# attention on, every layer on the GPU. The splash side runs in the next call (phase bench8b)
# on this warm machine, so both numbers come from one lease.
phase_peer() {
  if [ ! -x "$KEEP/llama/llama-bench" ]; then
    [ -f .gpu/llama-cuda.tar.xz ] || { row peer "skipped: neither built here nor .gpu/llama-cuda.tar.xz carried"; return; }
    tar -C "$KEEP" -xJf .gpu/llama-cuda.tar.xz
  fi
  local model=$KEEP/qwen3-8b-q4km.gguf bin=$KEEP/llama
  make_8b "$model" || { row peer "failed to make the model"; return; }
  LD_LIBRARY_PATH="$bin" timeout 300 "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3 -o json \
    > "$OUT/peer_bench.json" 2> "$OUT/peer_bench.err"
  row "llama-bench pp512/pp4096/tg128" "rc=$? $(python3 -c "
import json; print('; '.join(f\"{'pp'+str(r['n_prompt']) if r['n_prompt'] else 'tg'+str(r['n_gen'])}: {r['avg_ts']:.1f} tok/s\" for r in json.load(open('$OUT/peer_bench.json'))))" 2>&1)"
  if [ "${PEER_DEPTH:-1}" = 1 ]; then
    LD_LIBRARY_PATH="$bin" timeout 300 "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 0 -n 128 -d 8192,32768 -r 2 -o json \
      > "$OUT/peer_depth.json" 2> "$OUT/peer_depth.err"
    row "llama-bench tg128 at depth 8K/32K" "rc=$? $(python3 -c "
import json; print('; '.join(f\"d{r['n_depth']}: {r['avg_ts']:.1f} tok/s\" for r in json.load(open('$OUT/peer_depth.json'))))" 2>&1)"
  fi
  LD_LIBRARY_PATH="$bin" timeout 300 "$bin/llama-batched-bench" -m "$model" -ngl 99 -fa on -c 45056 -b 2048 -ub 512 \
    -npp 512 -ntg 128 -npl 1,4,16,64 > "$OUT/peer_batched.txt" 2> "$OUT/peer_batched.err"
  row "llama-batched-bench 512+128 x 1/4/16/64" "rc=$? $(grep -E '^\|\s+512' "$OUT/peer_batched.txt" | awk -F'|' '{printf "B=%s S_TG=%s; ", $4, $9}')"
}

# Aggregate decode through HTTP (bench/four_phase.py phase d: 1, 16 and 64 concurrent
# streaming chats of 128-token prompts, 128 tokens each) on the Qwen3-8B-shape file: splash
# with best tokens, splash with whole rows back (SPLASH_CUDA_BEST_TOKENS=0), llama-server
# (-np 64), the same prompts for all three.
phase_http() {
  local model=$KEEP/qwen3-8b-q4km.gguf bin=$KEEP/llama
  make_8b "$model" || { row http "failed to make the model"; return; }
  local args=(--phases d --concurrency 1,16,64 --long-requests 0 --repetitions 1 --decode-tokens 128 --wait 120)
  for mode in best whole; do
    env $([ $mode = whole ] && echo SPLASH_CUDA_BEST_TOKENS=0) LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve \
      --device cuda -m "$model" --max-context 16384 --port 8124 > "$OUT/http_serve_$mode.log" 2>&1 &
    local pid=$!
    local prompts=(--prompts-out "$OUT/http_prompts.json")
    [ -f "$OUT/http_prompts.json" ] && prompts=(--prompts-in "$OUT/http_prompts.json")
    timeout 200 python3 bench/four_phase.py --url http://127.0.0.1:8124 --label "splash-$mode" "${args[@]}" \
      "${prompts[@]}" --out "$OUT/http_$mode.json" > "$OUT/http_$mode.txt" 2>&1
    row "four_phase d, splash ($mode)" "rc=$? $(grep -iE 'aggregate|concurren' "$OUT/http_$mode.txt" | tr '\n' ';' | cut -c1-400)"
    kill -INT $pid; wait $pid
  done
  [ -x "$bin/llama-server" ] || { row http-peer "skipped: peer not built"; return; }
  LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$model" -ngl 99 -fa on -np 64 -c 65536 --port 8125 \
    > "$OUT/http_peer_server.log" 2>&1 &
  local pid=$!
  timeout 200 python3 bench/four_phase.py --url http://127.0.0.1:8125 --label llama-server "${args[@]}" \
    --prompts-in "$OUT/http_prompts.json" --status-path "" --out "$OUT/http_peer.json" > "$OUT/http_peer.txt" 2>&1
  row "four_phase d, llama-server" "rc=$? $(grep -iE 'aggregate|concurren' "$OUT/http_peer.txt" | tr '\n' ';' | cut -c1-400)"
  kill $pid; wait $pid
}

# Cached replay and long-context decode through HTTP (four_phase.py phases a and c at 32K)
# on the Qwen3-8B-shape file: splash, then llama-server (one slot, 40960 context).
phase_http_replay() {
  local model=$KEEP/qwen3-8b-q4km.gguf bin=$KEEP/llama
  make_8b "$model" || { row http-replay "failed to make the model"; return; }
  local args=(--phases ac --decode-contexts short,32768 --replay-size 32768 --repetitions 2 --decode-tokens 128 --wait 120)
  LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve --device cuda -m "$model" --max-context 40960 --port 8124 \
    > "$OUT/replay_serve.log" 2>&1 &
  local pid=$!
  timeout 240 python3 bench/four_phase.py --url http://127.0.0.1:8124 --label splash "${args[@]}" \
    --prompts-out "$OUT/replay_prompts.json" --out "$OUT/replay_splash.json" > "$OUT/replay_splash.txt" 2>&1
  row "four_phase a+c at 32K, splash" "rc=$? $(grep -iE '^\s*\(a\)|^\s*\(c\)|time to first|decode' "$OUT/replay_splash.txt" | tail -n 8 | tr '\n' ';' | cut -c1-500)"
  kill -INT $pid; wait $pid
  [ -x "$bin/llama-server" ] || { row http-replay-peer "skipped: peer not built"; return; }
  LD_LIBRARY_PATH="$bin" "$bin/llama-server" -m "$model" -ngl 99 -fa on -np 1 -c 40960 --port 8125 \
    > "$OUT/replay_peer_server.log" 2>&1 &
  pid=$!
  timeout 240 python3 bench/four_phase.py --url http://127.0.0.1:8125 --label llama-server "${args[@]}" \
    --prompts-in "$OUT/replay_prompts.json" --status-path "" --out "$OUT/replay_peer.json" > "$OUT/replay_peer.txt" 2>&1
  row "four_phase a+c at 32K, llama-server" "rc=$? $(grep -iE '^\s*\(a\)|^\s*\(c\)|time to first|decode' "$OUT/replay_peer.txt" | tail -n 8 | tr '\n' ';' | cut -c1-500)"
  kill $pid; wait $pid
}

# splash on the Qwen3-8B-shape file alone (the second call of a side-by-side after phase peer).
# Qwen3.5 on the GPU (issue 13): its tests (the DeltaNet kernels against float64, the hybrid
# models against the CPU path), compute-sanitizer over them, then the bench at Qwen3.5-27B's
# layer shapes (phase_hybrid_dense_bench).
phase_hybrid() {
  phase_fixtures > /dev/null
  gtest hybrid_tests '*Hybrid*:*DeltaNet*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
  phase_hybrid_serve
  phase_hybrid_dense_bench
  phase_sanitize '*Hybrid*:*DeltaNet*'
}

# The bench at Qwen3.5-27B's layer shapes (d_model 5120, 24/4 attention heads of 256 with 64
# rotated, DeltaNet 16/48 heads of 128, ffn 17408): 8 of its 64 layers (6 DeltaNet, 2
# attention), all Q4_K.
phase_hybrid_dense_bench() {
  bench_hybrid_shape bench_hybrid "Qwen3.5-27B shape, 8 layers, Q4_K" "$KEEP/qwen35-27b-shape-8-layers.gguf" \
    --arch qwen35 --d-model 5120 --heads 24 --kv-heads 4 --ffn 17408 --layers 8 --delta-heads 16,48
}

# The bench at Qwen3.5-35B-A3B's layer shapes (d_model 2048, attention 16/2 heads of 256 with
# 64 rotated, DeltaNet 16/32 heads of 128, 256 experts of 512 choosing 8, a shared expert of
# 512): 4 of its 40 layers (3 DeltaNet, 1 attention), all Q4_K.
phase_hybrid_moe_bench() {
  phase_fixtures > /dev/null
  bench_hybrid_shape bench_hybrid_moe "Qwen3.5-35B-A3B shape, 4 layers, Q4_K" \
    "$KEEP/qwen35moe-35b-a3b-shape-4-layers.gguf" --arch qwen35moe --d-model 2048 --heads 16 --kv-heads 2 --ffn 512 \
    --experts 256 --experts-used 8 --shared-ffn 512 --layers 4 --delta-heads 16,32
}

# The previous build (.gpu/old/splash.xz) against this one on the Qwen3.5-35B-A3B layer
# shapes (4 layers, 256 experts choosing 8): decode of 1, 4 and 16 sequences taking turns,
# two rounds, then each build's kernels whose names match REGEX (default: route, the MoE
# router) alone under ncu.
phase_router_ab() {  # phase_router_ab [REGEX]
  [ -f .gpu/old/splash.xz ] || { row router-ab "skipped: no .gpu/old/splash.xz carried"; return; }
  local model=$KEEP/qwen35moe-35b-a3b-shape-4-layers.gguf i b
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
  [ -f "$model" ] || python3 tools/make_random_llama.py --tokenizer-from .gpu/tokenizer-qwen2.gguf --arch qwen35moe \
    --d-model 2048 --heads 16 --kv-heads 2 --ffn 512 --experts 256 --experts-used 8 --shared-ffn 512 --layers 4 \
    --delta-heads 16,32 --head-dim 256 --delta-head-dim 128 --attention-every 4 --context 40960 --eps 1e-6 --all Q4_K \
    --out "$model" 2> "$OUT/make_router_model.log"
  compared_builds > /dev/null
  for i in 1 2; do
    for b in old bin; do
      LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 120 .gpu/$b/splash bench --device cuda -m "$model" --prompt-sizes 512 \
        --decode-tokens 128 --repetitions 2 --parallel 1,4,16 > "$OUT/router_ab_${b}_$i.txt" 2>&1
      row "router-ab $b $i" "rc=$?; $(grep -E '^decode' "$OUT/router_ab_${b}_$i.txt" | tr -s ' ' | tr '\n' ';')"
    done
  done
  for b in old bin; do
    LD_LIBRARY_PATH="$SPLASH_LIBS" timeout 120 ncu --csv --page raw --print-units base --kernel-name "regex:${1:-route}" \
      --launch-skip 40 --launch-count 40 \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size,launch__block_size,launch__registers_per_thread \
      .gpu/$b/splash bench --device cuda -m "$model" --prompt-sizes 1 --decode-tokens 32 --repetitions 1 \
      > "$OUT/ncu_router.csv" 2> /dev/null
    echo "== $b"; ncu_table "$OUT/ncu_router.csv" | tee "$OUT/ncu_router_$b.md"
    row "ncu ${1:-route} $b" "$(grep -E "${1:-route}" "$OUT/ncu_router_$b.md" | tr '\n' ' ')"
  done
}

# The hybrids beside llama.cpp on the same files, one lease (issue 13's measure): the peer
# builds (at most S seconds) while both hybrid shapes are made and benched by splash, then
# the peer runs alone on each (hybrid-peer: that part only, on a warm machine whose build or
# models an earlier call left).
phase_hybrid_side() {  # phase_hybrid_side [S]
  phase_peer_build "${1:-420}" & local build=$!
  python3 -m pip install -q --no-index --no-deps --target /tmp/site .gpu/whl/*.whl && export PYTHONPATH=/tmp/site
  phase_hybrid_dense_bench
  phase_hybrid_moe_bench
  wait $build
  phase_hybrid_peer
}

phase_hybrid_peer() {
  local bin=$KEEP/llama model name
  [ -x "$bin/llama-bench" ] || { row hybrid-peer "skipped: the peer is not built on this machine"; return; }
  for model in "$KEEP/qwen35-27b-shape-8-layers.gguf" "$KEEP/qwen35moe-35b-a3b-shape-4-layers.gguf"; do
    [ -f "$model" ] || { row "peer $(basename "$model")" "skipped: not made in this lease"; continue; }
    name=$(basename "$model" .gguf)
    LD_LIBRARY_PATH="$bin" timeout 200 "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 2 -o json \
      > "$OUT/peer_$name.json" 2> "$OUT/peer_$name.err"
    row "llama-bench $name pp512/pp4096/tg128" "rc=$? $(python3 -c "
import json; print('; '.join(f\"{'pp'+str(r['n_prompt']) if r['n_prompt'] else 'tg'+str(r['n_gen'])}: {r['avg_ts']:.1f} tok/s\" for r in json.load(open('$OUT/peer_$name.json'))))" 2>&1)"
    LD_LIBRARY_PATH="$bin" timeout 200 "$bin/llama-batched-bench" -m "$model" -ngl 99 -fa on -c 12288 -b 2048 -ub 512 \
      -npp 512 -ntg 128 -npl 1,4,16 > "$OUT/peer_batched_$name.txt" 2> "$OUT/peer_batched_$name.err"
    row "llama-batched-bench $name 512+128 x 1/4/16" "rc=$? $(grep -E '^\|\s+512' "$OUT/peer_batched_$name.txt" | awk -F'|' '{printf "B=%s S_TG=%s; ", $4, $9}')"
    tail -n 3 "$OUT/peer_$name.err" "$OUT/peer_batched_$name.err"
  done
}

# Where a hybrid's batch-1 decode step goes, step by step (SPLASH_CUDA_PROFILE), at both
# hybrid bench shapes (made by the benches above in this lease, else skipped).
phase_hybrid_profile() {
  for model in "$KEEP/qwen35-27b-shape-8-layers.gguf" "$KEEP/qwen35moe-35b-a3b-shape-4-layers.gguf"; do
    [ -f "$model" ] || { row "profile $(basename "$model")" "skipped: not made in this lease"; continue; }
    local name
    name=$(basename "$model" .gguf)
    SPLASH_CUDA_PROFILE=1 splash bench --device cuda -m "$model" --prompt-sizes 1 --decode-tokens 64 --repetitions 1 \
      > "$OUT/profile_$name.txt" 2>&1
    echo "== $name"; grep -A24 "GPU time by step" "$OUT/profile_$name.txt"
    row "profile $name" "profile_$name.txt"
  done
}

# bench_hybrid_shape KEY LABEL MODEL SHAPE-ARGS...: a random hybrid of those shapes (heads of
# 256, DeltaNet heads of 128, every 4th layer attention, all Q4_K), made once a lease, under
# splash bench --device cuda: prefill 512 and 4096, decode, 1/4/16 sequences.
bench_hybrid_shape() {
  local key=$1 label=$2 model=$3
  shift 3
  [ -f "$model" ] || python3 tools/make_random_llama.py --tokenizer-from .gpu/tokenizer-qwen2.gguf "$@" \
    --head-dim 256 --delta-head-dim 128 --attention-every 4 --context 40960 --eps 1e-6 --all Q4_K --out "$model" \
    2> "$OUT/make_$key.log"
  ls -la "$model"
  timeout 240 env LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash bench --device cuda -m "$model" \
    --prompt-sizes 512,4096 --decode-tokens 128 --repetitions 2 --parallel 1,4,16 --json \
    > "$OUT/$key.txt" 2> "$OUT/$key.err"
  local rc=$?
  cat "$OUT/$key.txt"
  tail -n 5 "$OUT/$key.err"
  row "bench $label" "rc=$rc; $(grep -E 'prefill|decode|ceiling' "$OUT/$key.txt" | tr '\n' ';')"
  record "$key" "$(tail -n 1 "$OUT/$key.txt" | grep '^{' || echo '{}')"
}

# splash serve --device cuda on the random Qwen3.5: a conversation of two turns (the second
# resumes from the first's recurrent-state snapshot), both answered, snapshots saved and hit.
phase_hybrid_serve() {
  local model=$KEEP/fixtures/hybrid-qwen35.gguf
  LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve --device cuda -m "$model" --port 8124 > "$OUT/hybrid_serve.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 60); do curl -sf --max-time 2 http://127.0.0.1:8124/health > /dev/null && break; sleep 0.5; done
  local system='You are a careful assistant. Answer in one short line. '
  system="$system$system$system$system$system$system$system$system"
  curl -s --max-time 30 http://127.0.0.1:8124/v1/chat/completions -H 'Content-Type: application/json' \
    -d "{\"messages\":[{\"role\":\"system\",\"content\":\"$system\"},{\"role\":\"user\",\"content\":\"Say hi\"}],\"max_tokens\":16,\"temperature\":0}" \
    > "$OUT/hybrid_reply1.json"
  local first=$(python3 -c "import json; print(json.load(open('$OUT/hybrid_reply1.json'))['choices'][0]['message']['content'])" 2>/dev/null)
  python3 - "$system" "$first" > "$OUT/hybrid_turn2.json" <<'PY'
import json, sys
print(json.dumps({"messages": [{"role": "system", "content": sys.argv[1]}, {"role": "user", "content": "Say hi"},
                               {"role": "assistant", "content": sys.argv[2]}, {"role": "user", "content": "Again"}],
                  "max_tokens": 16, "temperature": 0}))
PY
  curl -s --max-time 30 http://127.0.0.1:8124/v1/chat/completions -H 'Content-Type: application/json' \
    -d @"$OUT/hybrid_turn2.json" > "$OUT/hybrid_reply2.json"
  curl -s --max-time 10 http://127.0.0.1:8124/status > "$OUT/hybrid_status.json"
  kill -INT $pid
  for _ in $(seq 1 20); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  kill -0 $pid 2>/dev/null && { echo "serve did not exit on SIGINT"; kill -9 $pid; }
  local ok
  ok=$(python3 -c "
import json
r1, r2 = (json.load(open('$OUT/hybrid_reply%d.json' % i)) for i in (1, 2))
s = json.load(open('$OUT/hybrid_status.json'))
snap = s.get('state_snapshots', {})
print(r1['usage']['completion_tokens'] > 0, r2['usage']['completion_tokens'] > 0, 'snapshots', snap)" 2>&1 | tail -n 1)
  tail -n 3 "$OUT/hybrid_serve.log"
  row "hybrid serve (two turns)" "$ok"
  record hybrid_serve "\"$ok\""
}

phase_bench8b() {
  phase_bench
}

phase_part() {
  local n=$1
  for f in .gpu/parts/*.part"$n"; do [ -f "$f" ] && cp "$f" "$KEEP/parts/" && echo "kept $f"; done
  ls -la "$KEEP/parts"
}

phase_real() {
  for f in .gpu/parts/*.part*; do [ -f "$f" ] && cp "$f" "$KEEP/parts/"; done
  local model=$KEEP/real.gguf
  cat "$KEEP"/parts/*.part* > "$model" 2>/dev/null
  local sum
  sum=$(sha256sum "$model" | cut -d' ' -f1)
  if [ "$sum" != "$(cat .gpu/parts/sha256 2>/dev/null)" ]; then
    row real-model "skipped: parts missing (machine went cold?) - sha256 $sum"
    return
  fi
  gtest real_model 'CudaModelTest.RealModel*' SPLASH_TEST_MODEL="$model"
  grep "greedy tokens" "$OUT/real_model.log" | tee -a "$SUMMARY"
}

# Speculative decoding on the GPU: the GPU tests, then `splash bench --draft lookup` (the same
# greedy reply with and without drafts, its tokens checked identical, and the two rates) on the
# real test model (its parts) and on the Qwen3-8B shape. DRAFT_ARGS: other bench arguments.
phase_drafts() {
  phase_fixtures > /dev/null
  gtest gpu_tests "${1:-*}" SPLASH_GPU_FIXTURES="$KEEP/fixtures"
  for f in .gpu/parts/*.part*; do [ -f "$f" ] && cp "$f" "$KEEP/parts/"; done
  local real=$KEEP/real.gguf big=$KEEP/qwen3-8b-q4km.gguf m
  cat "$KEEP"/parts/*.part* > "$real" 2>/dev/null
  [ "$(sha256sum "$real" | cut -d' ' -f1)" = "$(cat .gpu/parts/sha256 2>/dev/null)" ] || rm -f "$real"
  make_8b "$big" > /dev/null || row drafts "failed to make the 8B model"
  # What a verify pass of 1-8 rows costs against a decode step (sets draft_pass_tokens).
  SPLASH_BENCH_MODEL=$big gpu_tests --gtest_also_run_disabled_tests --gtest_filter='*VerifyPassCost*' \
    > "$OUT/verify_cost.log" 2>&1
  row "verify pass cost (8B shape)" "$(grep -E '\[ info \]' "$OUT/verify_cost.log" | sed 's/\[ info \] //' | tr '\n' ';')"
  for m in "$real" "$big"; do
    [ -f "$m" ] || continue
    # shellcheck disable=SC2086
    splash bench --device cuda -m "$m" --draft lookup ${DRAFT_ARGS:---prompt-sizes 64 --decode-tokens 256 --repetitions 3} \
      > "$OUT/drafts_$(basename "$m" .gguf).txt" 2>&1
    local rc=$?
    row "drafts $(basename "$m" .gguf) (rc $rc)" "$(grep -E '^decode|^drafts' "$OUT/drafts_$(basename "$m" .gguf).txt" | tr -s ' ' | tr '\n' ';')"
  done
}

# Drafts through the server on the GPU: the real test model served with drafts (the default)
# and with --draft none, four greedy requests one at a time to each (the replies must be the
# same) and then at once to the drafting one (all answered; plain batched decoding is not
# batch-invariant on the GPU, so these are compared but may differ at a near tie); /status's
# kept guesses reported.
phase_serve_drafts() {
  for f in .gpu/parts/*.part*; do [ -f "$f" ] && cp "$f" "$KEEP/parts/"; done
  local real=$KEEP/real.gguf
  [ -f "$real" ] || cat "$KEEP"/parts/*.part* > "$real" 2>/dev/null
  if [ "$(sha256sum "$real" | cut -d' ' -f1)" != "$(cat .gpu/parts/sha256 2>/dev/null)" ]; then
    rm -f "$real"; row serve-drafts "skipped: the real model's parts are not here"; return
  fi
  LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve --device cuda -m "$real" --port 8124 > "$OUT/serve_drafts.log" 2>&1 &
  local with=$!
  LD_LIBRARY_PATH="$SPLASH_LIBS" .gpu/bin/splash serve --device cuda -m "$real" --port 8125 --draft none \
    > "$OUT/serve_plain.log" 2>&1 &
  local without=$!
  for port in 8124 8125; do
    for _ in $(seq 1 120); do curl -sf --max-time 2 "http://127.0.0.1:$port/health" > /dev/null && break; sleep 0.5; done
  done
  python3 - > "$OUT/serve_drafts.txt" 2>&1 <<'PY'
import json, threading, urllib.request
code = "def word_counts(lines):\n    counts = {}\n    for line in lines:\n        for word in line.split():\n" \
       "            word = word.strip('.,;:!?').lower()\n            if word:\n" \
       "                counts[word] = counts.get(word, 0) + 1\n    return counts\n"
prompts = ["Repeat this code exactly:\n" + code, "Rename counts to tally and show all of it:\n" + code,
           "Add a docstring to this function and show all of it:\n" + code, "Name three colors."]
def ask(port, prompt, out, i):
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "max_tokens": 160, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body, {"Content-Type": "application/json"})
    out[i] = json.load(urllib.request.urlopen(req, timeout=120))["choices"][0]["message"]["content"]
replies = {}
for port in (8124, 8125):  # one at a time: each reply is the sequence decoding alone on both
    out = [None] * len(prompts)
    for i, p in enumerate(prompts):
        ask(port, p, out, i)
    replies[port] = out
same = sum(a == b for a, b in zip(replies[8124], replies[8125]))
out = [None] * len(prompts)  # and all at once (verify blocks beside other sequences' tokens)
threads = [threading.Thread(target=ask, args=(8124, p, out, i)) for i, p in enumerate(prompts)]
[t.start() for t in threads]; [t.join() for t in threads]
together = sum(a == b for a, b in zip(out, replies[8125]))
status = json.load(urllib.request.urlopen("http://127.0.0.1:8124/status", timeout=10))
print(f"{same} of {len(prompts)} replies identical with and without drafts (one at a time; {together} of "
      f"{len(prompts)} sent at once, where batches differ);",
      "speculative_decoding:", json.dumps(status.get("speculative_decoding")))
PY
  kill -INT $with $without
  for _ in $(seq 1 20); do kill -0 $with 2>/dev/null || kill -0 $without 2>/dev/null || break; sleep 0.5; done
  row serve-drafts "$(tail -n 1 "$OUT/serve_drafts.txt")"
}

case "${1:-tests}" in
  tests) phase_tests ;;
  quick) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_kernels; phase_bench
         timeout 45 env LD_LIBRARY_PATH="$SPLASH_LIBS" compute-sanitizer --tool memcheck --error-exitcode 9 \
           .gpu/bin/splash_gpu_tests --gtest_filter='CudaModelTest.BatchOfTwo*' > "$OUT/memcheck.log" 2>&1
         row "memcheck (model batch test)" "rc=$?" ;;
  serve) phase_fixtures; phase_serve ;;
  oracle) phase_oracle ;;
  final) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_oracle; phase_bench
         phase_sanitizers; phase_serve; phase_kernels ;;  # after peer: the order a short lease keeps
  part) phase_part "$2" ;;
  real) phase_real ;;
  bench) phase_kernels; phase_bench ;;
  profile) phase_profile ;;
  kernels) phase_kernels "${2:-*}" ;;
  sanitize) phase_fixtures > /dev/null; phase_sanitize "${2:-*}" ;;
  ncu) phase_ncu ;;
  ncu-decode) phase_ncu_decode ;;
  ncu-depth) phase_ncu_depth "${2:-32768}" ;;
  env-sweep) phase_env_sweep ;;
  depth-sweep) phase_depth_sweep ;;
  sweep-tests) phase_fixtures > /dev/null
    for entry in ${SWEEP:-default}; do
      gtest "tests_${entry//[=+]/_}" "${2:-*}" SPLASH_GPU_FIXTURES="$KEEP/fixtures" \
        $([ "$entry" != default ] && echo "${entry//+/ }")
    done ;;
  ab) phase_ab ;;
  confirm) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_bench ;;
  gtests) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_serve ;;
  # The first call of a side by side: the peer builds in the background while the GPU tests
  # run, and the call ends when both have (waited on by PID: a pattern search for the phase's
  # name would also find the command that started this script). The next call, on the warm
  # machine: peer, then bench8b.
  peer-build-tests) phase_peer_build "${2:-520}" & build=$!
                    phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_serve
                    wait "$build" ;;
  work) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_kernels "${2:-*}"; phase_bench; phase_profile ;;
  check) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
         gtest tuned_repeat 'CudaModelTest.Tuned*' SPLASH_GPU_FIXTURES="$KEEP/fixtures" GTEST_REPEAT=6
         phase_ncu; phase_bench; phase_profile; phase_sanitizers ;;
  # After a kernel change: the GPU tests, both sanitizers over the tests a filter names, the
  # 8B benchmark and the step-by-step profile.
  changed) phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"; phase_sanitize "${2:-*}"
           phase_bench; phase_profile ;;
  peer) phase_peer ;;
  http) phase_http ;;
  http-replay) phase_http_replay ;;
  # One call for a side by side when warm machines do not last between calls: the peer
  # builds (low priority) while splash's benchmarks run on the GPU, then the peer runs alone
  # (without its depth runs: PEER_DEPTH=0).
  side) phase_peer_build "${2:-330}" & build=$!
        phase_bench; wait "$build"; PEER_DEPTH=0 phase_peer ;;
  # The same after a kernel change: the GPU tests first.
  side-tests) phase_peer_build "${2:-360}" & build=$!
              phase_fixtures; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
              phase_bench; wait "$build"; PEER_DEPTH=0 phase_peer ;;
  peer-build) phase_peer_build "${2:-540}" ;;
  moe-side) phase_moe_side "${2:-330}" ;;
  moe-ab) phase_moe_ab ;;
  moe-profile) phase_moe_profile ;;
  moe-ncu) phase_moe_ncu ;;
  tests-only) phase_fixtures > /dev/null; gtest gpu_tests "${2:-*}" SPLASH_GPU_FIXTURES="$KEEP/fixtures" ;;
  hybrid) phase_hybrid ;;
  hybrid-moe-bench) phase_hybrid_moe_bench ;;
  # The router's change: its tests and the MoE model tests, both sanitizers over the routing
  # tests, then the A/B above.
  router) phase_fixtures > /dev/null
          gtest router_tests 'CudaExpertsTest.*:CudaModelTest.*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
          phase_sanitize 'CudaExpertsTest.Route*'
          phase_router_ab ;;
  router-ab) phase_router_ab "${2:-route}" ;;
  hybrid-side) phase_hybrid_side "${2:-420}" ;;
  hybrid-peer) phase_hybrid_peer ;;
  hybrid-profile) phase_hybrid_profile ;;  # (the bench models made earlier in this lease)
  hybrid-benches) phase_fixtures > /dev/null  # both hybrid benches, then where their decode steps go
    phase_hybrid_dense_bench
    phase_hybrid_moe_bench
    phase_hybrid_profile ;;
  hybrid-pairs) phase_fixtures > /dev/null  # the hybrid models with every MoE pair grouped, 64 pair by pair, the default
    for pairs in 0 64 default; do
      gtest "hybrid_pairs_$pairs" '*Hybrid*' SPLASH_GPU_FIXTURES="$KEEP/fixtures" \
        $([ $pairs = default ] || echo SPLASH_CUDA_MOE_PAIRS=$pairs)
    done ;;
  hybrid-tests) phase_fixtures > /dev/null; gtest hybrid_tests '*Hybrid*:*DeltaNet*' SPLASH_GPU_FIXTURES="$KEEP/fixtures"
    gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures" ;;
  hybrid-all) phase_hybrid; gtest gpu_tests '*' SPLASH_GPU_FIXTURES="$KEEP/fixtures" ;;
  drafts) phase_drafts "${2:-*}" ;;
  # Whether batch-1 decode repeats its bits (the fixtures and the Qwen3-8B shape), as shipped
  # and with each suspect switched off
  # (SPLASH_CUDA_PDL: kernels of a family launched without overlapping the one before).
  repeat) phase_fixtures > /dev/null; make_8b "$KEEP/qwen3-8b-q4km.gguf" > /dev/null
          for setting in ${REPEAT_SETTINGS:-SPLASH_CUDA_PDL=1 SPLASH_CUDA_PDL=0 SPLASH_CUDA_FUSED=0 SPLASH_CUDA_PDL=fused \
              SPLASH_CUDA_PDL=attention SPLASH_CUDA_PDL=gemv SPLASH_CUDA_PDL=other SPLASH_CUDA_FOLD_MERGE=0 \
              SPLASH_CUDA_FOLD_QKV=0}; do
            [ "$SECONDS" -gt "${REPEAT_UNTIL_S:-480}" ] && { row "repeat $setting" "not run (time)"; continue; }
            gtest "repeat_${setting//=/_}" 'CudaModelTest.BatchOneDecodeIsRepeatable' \
              SPLASH_GPU_FIXTURES="$KEEP/fixtures" SPLASH_BENCH_MODEL="$KEEP/qwen3-8b-q4km.gguf" "$setting"
          done ;;
  serve-drafts) phase_serve_drafts ;;
  bench8b) phase_bench8b ;;
  *) echo "usage: $0 hybrid|hybrid-tests|hybrid-all|tests|quick|serve|bench|profile|kernels [FILTER]|sanitize FILTER|work|final|peer-build S|peer|bench8b|part N|real" >&2; exit 2 ;;
esac
echo
cat "$SUMMARY"
