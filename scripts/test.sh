#!/usr/bin/env bash
# weft's whole test run, as CI does it (.ci/run), from any fresh Debian 12 box:
#   1. install build deps if missing (scripts/install-deps.sh)
#   2. fetch the default model (scripts/fetch-model.sh); if that fails the
#      tests that need it print SKIP
#   3. Release build in build/, ctest
#   4. ASan+UBSan build in build-asan/ (CPU and Vulkan on lavapipe), ctest
#   5. scripts/fuzz-{gguf,http,params,kvblock}.sh, ${WEFT_FUZZ_SECONDS:-60} each
#   6. the AArch64 cross build in build-arm64/ and its CPU kernel tests and
#      goldens under qemu-user (scripts/install-arm-deps.sh, scripts/test-arm.sh;
#      about a minute and a half)
# Every phase runs even if an earlier one failed; the exit code is non-zero if
# any failed. Idempotent: re-running reuses the build folders.
# Env: WEFT_FUZZ_SECONDS (0 skips fuzzing), WEFT_SKIP_ASAN=1, WEFT_SKIP_DEPS=1, WEFT_SKIP_ARM=1, JOBS.
set -euo pipefail

cd "$(dirname "$0")/.."
root=$(pwd)
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
logdir=$(mktemp -d "${TMPDIR:-/tmp}/weft-test.XXXXXX")
trap 'rm -rf "$logdir"' EXIT
failed_phases=()

say() { printf '\n==> %s\n' "$*"; }
fail_phase() { failed_phases+=("$1"); echo "weft-test: FAILED: $1" >&2; }

if [ "${WEFT_SKIP_DEPS:-0}" != 1 ]; then
    say "dependencies"
    bash scripts/install-deps.sh
fi

say "default model"
if ! bash scripts/fetch-model.sh; then
    echo "weft-test: warning: default model not available; tests that need it will SKIP" >&2
fi

# build_and_test NAME DIR CMAKE_ARGS...
build_and_test() {
    local name=$1 dir=$2
    shift 2
    say "$name: configure + build ($dir)"
    if ! cmake -S "$root" -B "$dir" "$@"; then fail_phase "$name configure"; return; fi
    if ! cmake --build "$dir" -j "$jobs"; then fail_phase "$name build"; return; fi
    say "$name: ctest"
    if ! ctest --test-dir "$dir" --output-on-failure --no-tests=error -j2 2>&1 | tee "$logdir/$name.log"; then
        fail_phase "$name tests"
    fi
}

build_and_test release build -DCMAKE_BUILD_TYPE=Release

if [ "${WEFT_SKIP_ASAN:-0}" != 1 ]; then
    export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
    export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
    # leaks inside PoCL and its LLVM (the OpenCL tests) are theirs: scripts/lsan.supp
    export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp:print_suppressions=0}
    # The CUDA and HIP modules (no GPU here: their tests check the driverless
    # path, which the Release run covers) stay out of the sanitizer build.
    build_and_test asan build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_SANITIZE=ON -DWEFT_CUDA=OFF -DWEFT_HIP=OFF
fi

# The fuzzers (GGUF reader, HTTP parser, request validation, KV blocks), each for WEFT_FUZZ_SECONDS: 4 min by default.
fuzz_seconds=${WEFT_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" != 0 ]; then
    for f in scripts/fuzz-gguf.sh scripts/fuzz-http.sh scripts/fuzz-params.sh scripts/fuzz-kvblock.sh; do
        [ -f "$f" ] || continue
        say "fuzz: $f $fuzz_seconds"
        if ! bash "$f" "$fuzz_seconds"; then fail_phase "fuzz $(basename "$f" .sh)"; fi
    done
fi

if [ "${WEFT_SKIP_ARM:-0}" != 1 ]; then
    say "arm64: cross build + kernel tests and goldens under qemu (build-arm64)"
    if [ "${WEFT_SKIP_DEPS:-0}" != 1 ] && ! bash scripts/install-arm-deps.sh; then
        fail_phase "arm64 deps"
    elif ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
        # WEFT_SKIP_DEPS=1 on a box without them: said, not hidden
        echo "weft-test: warning: no AArch64 cross toolchain or qemu (scripts/install-arm-deps.sh): arm64 phase skipped" >&2
    elif ! bash scripts/test-arm.sh 2>&1 | tee "$logdir/arm64.log"; then
        fail_phase "arm64 tests"
    fi
fi

# One closing line over the ctest runs. ctest lines look like
#   " 3/12 Test  #3: test_gguf ..........   Passed    0.05 sec" / "***Failed" / "***Skipped"
passed=0 failed=0 skipped=0
for log in "$logdir"/*.log; do
    [ -f "$log" ] || continue
    p=$(grep -cE 'Test +#[0-9]+: .* +Passed' "$log" || true)
    s=$(grep -cE 'Test +#[0-9]+: .*\*\*\*Skipped' "$log" || true)
    t=$(grep -cE 'Test +#[0-9]+: ' "$log" || true)
    passed=$((passed + p)) skipped=$((skipped + s)) failed=$((failed + t - p - s))
done
# What failed, last, where the tail of a CI log shows it: each failed ctest
# line, then the failing checks (check.h's "FAIL"/"... failed:" lines) and
# pytest's failure lines ("FAILED ...", "E   ...") from its output.
for log in "$logdir"/*.log; do
    [ -f "$log" ] || continue
    ph=$(basename "$log" .log)
    { grep -E 'Test +#[0-9]+: ' "$log" | grep -vE ' Passed |\*\*\*Skipped' || true; } | sed "s/^/weft-test: $ph: /"
    { grep -E '^FAIL |: .* failed: |^(FAILED|ERROR) |^E +' "$log" || true; } | head -60 | sed "s/^/weft-test: $ph: | /"
done
if [ ${#failed_phases[@]} -gt 0 ]; then
    echo "weft-test: failed phases: ${failed_phases[*]}" >&2
fi
echo "$passed passed, $failed failed, $skipped skipped"
[ ${#failed_phases[@]} -eq 0 ]
