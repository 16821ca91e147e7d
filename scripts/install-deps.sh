#!/usr/bin/env bash
# Install what weft needs to build and test, on Debian/Ubuntu, if it is missing:
# cmake, make, gcc, g++, clang (+ its compiler-rt for the fuzzer), pkg-config,
# jansson, libuv and http-parser headers, OpenSSL's libcrypto (HMAC over KV
# blocks: libssl-dev), python3 with pip (scripts/fetch-model.sh
# uses it), and the Python packages the server's end-to-end tests use (pytest,
# openai, from PyPI).
# The fleet's tests: redis-server, Debian's prometheus (the autoscaling test
# starts its own), chromium (the dashboard test, headless), and through
# scripts/install-deploy-deps.sh kubernetes-validate and PyYAML from PyPI.
# GPU backends: the Vulkan loader + headers, glslc, Mesa's lavapipe (a CPU
# Vulkan device, so every Vulkan test runs without a GPU) and the Khronos
# validation layer; the OpenCL ICD loader + headers and PoCL (OpenCL on the
# CPU, so the OpenCL tests run without a GPU; clinfo to look at it);
# Debian's HIP compiler and runtime headers (hipcc). The CUDA
# toolkit is not in Debian main: the CUDA module is built when nvcc is found.
# Runs apt-get (as root, or through sudo) only when something is missing.
set -euo pipefail

missing=()
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing+=("$2"); }
need_cmd cmake cmake
need_cmd make make
need_cmd gcc gcc
need_cmd g++ g++
need_cmd clang clang
need_cmd pkg-config pkg-config
need_cmd python3 python3
if command -v pkg-config >/dev/null 2>&1; then
    pkg-config --exists jansson || missing+=(libjansson-dev)
    pkg-config --exists libuv || missing+=(libuv1-dev)
else
    missing+=(libjansson-dev libuv1-dev)
fi
[ -f /usr/include/http_parser.h ] || missing+=(libhttp-parser-dev)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
need_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed" || missing+=("$1"); }
if command -v dpkg-query >/dev/null 2>&1; then
    for p in glslc libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers ocl-icd-opencl-dev opencl-headers \
        pocl-opencl-icd clinfo hipcc libamdhip64-dev \
        libhiredis-dev libssl-dev redis-server chromium prometheus; do need_pkg "$p"; done
fi

# libFuzzer and the sanitizer runtimes for clang live in libclang-rt-<major>-dev
clang_rt_pkg() {
    command -v clang >/dev/null 2>&1 || return 0
    local major
    major=$(clang -dumpversion 2>/dev/null | cut -d. -f1)
    [ -n "$major" ] || return 0
    local rtdir
    rtdir=$(clang -print-resource-dir 2>/dev/null)/lib/linux
    if ! ls "$rtdir"/libclang_rt.fuzzer*.a >/dev/null 2>&1; then echo "libclang-rt-$major-dev"; fi
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else echo "install-deps: need root (or sudo) to run: $*" >&2; return 1
    fi
}

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "install-deps: missing ${missing[*]}; install them with your package manager" >&2
        exit 1
    fi
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update
    as_root apt-get install -y --no-install-recommends "${missing[@]}"
fi

# after clang is there: its runtime package (optional; only the fuzzer needs it)
rt=$(clang_rt_pkg)
if [ -n "$rt" ] && command -v apt-get >/dev/null 2>&1; then
    echo "install-deps: installing $rt"
    export DEBIAN_FRONTEND=noninteractive
    if ! as_root apt-get install -y --no-install-recommends "$rt"; then
        as_root apt-get update && as_root apt-get install -y --no-install-recommends "$rt" ||
            echo "install-deps: warning: could not install $rt; the fuzz targets will not build" >&2
    fi
fi
# Python packages for the server's end-to-end tests (tests/e2e: the SDKs and
# client libraries users point at weft) and the chat templates' oracle
# (jinja2: tests/templates/render_ref.py)
PY_PKGS=(pytest openai anthropic jinja2 'pydantic[email]' langchain-openai instructor llama-index-llms-openai-like)
if ! python3 -c 'import pytest, openai, anthropic, jinja2, email_validator, langchain_openai, instructor
import llama_index.llms.openai_like' >/dev/null 2>&1; then
    echo "install-deps: pip install ${PY_PKGS[*]}"
    python3 -m pip install -q "${PY_PKGS[@]}" 2>/dev/null ||
        python3 -m pip install -q --break-system-packages "${PY_PKGS[@]}"
fi
# the deployment tests' Python packages (kubernetes-validate, PyYAML) and the
# prometheus service the package may have started (the tests run their own)
bash "$(dirname "$0")/install-deploy-deps.sh"
echo "install-deps: ok"
