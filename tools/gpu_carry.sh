#!/usr/bin/env bash
# Lays out .gpu/ (git-ignored) with what a GPU session carries to the GPU machine, whose
# image has glibc, libstdc++, CUDA and Python but not splash's Debian libraries:
#   .gpu/bin.tar.xz  stripped splash and splash_gpu_tests from $BUILD, compressed (together
#                over 40 MB: with the rest they would pass the carry limit)
#   .gpu/lib.tar.xz  splash's shared libraries (less glibc, libstdc++, libgcc and cuBLAS)
#   .gpu/whl/    gguf-py, for tools/make_random_llama.py there
#   .gpu/tokenizer-*.gguf   tokenizer metadata of SmolLM2 and Qwen2.5 (tools/tokenizer_gguf.py)
#   .gpu/parts/  the default model cut in parts under the per-call carry limit, + its sha256
# Then tools/gpu_session.sh runs there. Each carry path must stay under 64 MiB a call.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
rm -rf .gpu/bin .gpu/bin.tar.xz .gpu/lib .gpu/lib.tar.xz .gpu/whl .gpu/parts
mkdir -p .gpu/bin .gpu/lib .gpu/whl .gpu/parts
strip -o .gpu/bin/splash "$BUILD/splash"
strip -o .gpu/bin/splash_gpu_tests "$BUILD/tests/gpu/splash_gpu_tests"
ldd "$BUILD/splash" | awk '/=>/ {print $3}' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|libcublas|libcublasLt)\.so' |
  xargs -I{} cp -L {} .gpu/lib/
# Compressed: the tree, the binaries and the libraries together must fit one call's carry.
tar -C .gpu -cJf .gpu/lib.tar.xz lib && rm -rf .gpu/lib
tar -C .gpu -cJf .gpu/bin.tar.xz bin && rm -rf .gpu/bin
.venv/bin/pip download -q --no-deps gguf=="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("gguf"))')" -d .gpu/whl
model=$("$BUILD/splash" pull smollm2-135m)
[ -f .gpu/tokenizer-smollm2.gguf ] || .venv/bin/python tools/tokenizer_gguf.py "$model" .gpu/tokenizer-smollm2.gguf
split -n 2 -d -a 1 "$model" .gpu/parts/smollm2.part
sha256sum "$model" | cut -d' ' -f1 > .gpu/parts/sha256
du -sh .gpu/*
