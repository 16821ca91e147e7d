#!/usr/bin/env bash
# weft cross-built for 64-bit ARM (AArch64) and its CPU kernel tests run under qemu-user,
# each table (scalar, neon, neon_dotprod, neon_i8mm) checked bit for bit against the reference as on
# x86, and the stories260K / synth256 goldens on the best table and on each lower one.
# Not in the default list: test_quantizers (over 5 minutes under qemu).
#   scripts/test-arm.sh [ctest -R regex]     (after scripts/install-arm-deps.sh)
# Build folder: build-arm64/ (CMAKE_CROSSCOMPILING_EMULATOR runs each test under qemu).
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${1:-'^(test_cpu_q32|test_cpu_q32_dot4|test_cpu_kquant|test_cpu_float|test_cpu_swiglu|test_cpu_recurrent|test_cpu_tables|test_cpu_attn|test_cpu_gemm|test_cpu_determinism|test_quant|test_golden|test_golden_scalar|test_golden_neon|test_golden_neon_dotprod)$'}
for t in aarch64-linux-gnu-gcc qemu-aarch64-static; do
    command -v $t >/dev/null || { echo "test-arm: no $t (scripts/install-arm-deps.sh)" >&2; exit 1; }
done
# the arm64 loader and libraries for qemu: the multiarch ones, which belong together
# (cmake/aarch64-linux-gnu.cmake says why not /usr/aarch64-linux-gnu)
export QEMU_LD_PREFIX=/
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build-arm64 -j"$(nproc)" >/dev/null
file build-arm64/weft | grep -q "ARM aarch64" || { echo "test-arm: build-arm64/weft is not an AArch64 binary" >&2; exit 1; }
cd build-arm64 && ctest -R "$tests" --output-on-failure --timeout 900
