#!/usr/bin/env bash
# Fuzz the KV block reader (base/kv_block.c, format v2) and the import into an
# engine behind it (stories260K from ../shared): build
# tests/fuzz/fuzz_kvblock.c with clang + libFuzzer + ASan/UBSan in build-fuzz/
# (shared with the other fuzz scripts), seed a corpus, run for a bounded time.
#   usage: scripts/fuzz-kvblock.sh [seconds]   (default 60)
# Exits non-zero when the build fails or the fuzzer finds a crash, leak, UB
# or a broken invariant; the input is left in build-fuzz/fuzz-kvblock-artifacts/.
set -euo pipefail

T=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${WEFT_FUZZ_BUILD:-$root/build-fuzz}
corpus=$build/fuzz-kvblock-corpus
artifacts=$build/fuzz-kvblock-artifacts

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DWEFT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_kvblock -j"$(nproc)"

mkdir -p "$corpus" "$artifacts"
# seeds: the edit mode with no edits (a valid signed stream), the header-field
# mode with no pokes, and the one-layer stream an attack sent: n_layers 1 (offset
# 44), its layout run 1 layer (76) and one stories260K layer's payload (52: 2048)
printf '\x01' > "$corpus/seed-valid"
printf '\x02' > "$corpus/seed-fields"
printf '\x02\x00\x09\x01\x00\x00\x00\x13\x01\x00\x00\x00\x0b\x00\x08\x00\x00' > "$corpus/seed-one-layer"
"$build/fuzz_kvblock" "$corpus" -max_total_time="$T" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 2>&1 | tail -n 15
