#!/usr/bin/env bash
# Builds the peer engine for GPU benchmarks — llama.cpp from the llama-cpp-python==0.3.36 sdist,
# CUDA for sm_90 — on this (GPU-less) machine, and packs its binaries and libraries into
# .gpu/llama-cuda.tar.xz for tools/gpu_session.sh peer. Benchmarks only: nothing of it is
# linked into splash. Well over an hour on two cores (the CUDA template instances: 34 of 366 steps in
# the first 12 minutes, 2026-12-02), at low priority: start it first thing in a session, or
# (--source) pack the source for the GPU machine to build it (tools/gpu_session.sh peer-build).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/llama-cuda}
mkdir -p "$WORK" .gpu
if [ ! -d "$WORK/llama_cpp_python-0.3.36" ]; then
  .venv/bin/pip download -q --no-deps --no-binary :all: llama-cpp-python==0.3.36 -d "$WORK"
  tar -C "$WORK" -xzf "$WORK/llama_cpp_python-0.3.36.tar.gz"
fi
SRC="$WORK/llama_cpp_python-0.3.36/vendor/llama.cpp"
if [ "${1:-}" = --source ]; then
  # What the GPU machine builds it from instead (tools/gpu_session.sh peer-build): the source
  # less its models and docs (~9 MB compressed).
  tar -C "$SRC/.." --exclude=llama.cpp/models --exclude=llama.cpp/docs --exclude='llama.cpp/build*' \
    -cJf .gpu/llama-src.tar.xz llama.cpp
  du -sh .gpu/llama-src.tar.xz
  exit 0
fi
# The driver (libcuda.so.1) is only on the GPU machine: executables link with it unresolved.
cmake -S "$SRC" -B "$SRC/build-cuda" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_EXE_LINKER_FLAGS="-Wl,--allow-shlib-undefined" > "$WORK/configure.log"
nice -n 19 cmake --build "$SRC/build-cuda" -j "$(nproc)" --target llama-bench llama-batched-bench llama-server
rm -rf "$WORK/pack" && mkdir -p "$WORK/pack/llama"
for f in "$SRC/build-cuda/bin"/*; do
  if [ -L "$f" ]; then cp -P "$f" "$WORK/pack/llama/"; else strip -o "$WORK/pack/llama/$(basename "$f")" "$f"; fi
done
tar -C "$WORK/pack" -cJf .gpu/llama-cuda.tar.xz llama
ls -la .gpu/llama-cuda.tar.xz
