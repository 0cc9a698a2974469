#!/usr/bin/env bash
# Installs what building and serving splash needs on a Debian/Ubuntu machine: the C++
# toolchain and -dev libraries from apt (the chat page's scripts too); with --python also
# what only the tests use: clang for the sanitizer and fuzz builds, Chromium and its driver
# for the chat page's browser tests, and a venv with the test tools.
# Safe to re-run: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(g++ cmake ninja-build pkg-config make git ca-certificates
  libgtest-dev libgmock-dev nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev
  libcurl4-openssl-dev libssl-dev libzip-dev zlib1g-dev libboost1.81-dev libpoppler-cpp-dev libpng-dev libturbojpeg0-dev libwebp-dev
  libjs-marked libjs-highlight.js node-dompurify)
TEST_APT_PACKAGES=(clang libclang-rt-14-dev chromium chromium-driver)
[ "${1:-}" = "--python" ] && APT_PACKAGES+=("${TEST_APT_PACKAGES[@]}")

missing=()
for package in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

if [ "${1:-}" = "--python" ]; then
  if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    python3 -m venv .venv
  fi
  if ! .venv/bin/python -c "import pytest, numpy, gguf, transformers, tokenizers, jinja2, openai, anthropic, requests, selenium, claude_agent_sdk" 2>/dev/null || [ ! -x .venv/bin/codex ] ||
     [ requirements-test.txt -nt .venv/.installed ]; then
    .venv/bin/pip install -q -r requirements-test.txt
    touch .venv/.installed
  fi
fi
