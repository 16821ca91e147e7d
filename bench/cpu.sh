#!/usr/bin/env bash
# CPU throughput of weft on the default model and on random-weight SmolLM2-shape
# models in Q4_0, Q8_0, Q4_K and F16 (made by `weft gen`, cached), with the
# machine's measured read bandwidth. Needs build/weft (cmake build; WEFT_BIN=path
# picks another binary, e.g. build-perf/weft) and the default model
# (scripts/fetch-model.sh). WEFT_CPU_NOPACK=1 in the environment measures the
# plain weight layout (no repacking at load) for comparison.
#   bench/cpu.sh [-t THREADS] [-r REPS] [-p PP] [-n TG] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=5 pp=512 tg=64 json=()
while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -p) pp=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        --json) json=(--json); shift ;;
        *) echo "usage: bench/cpu.sh [-t THREADS] [-r REPS] [-p PP] [-n TG] [--json]" >&2; exit 2 ;;
    esac
done
. bench/common.sh
mkdir -p "$cache/bench"
models=("$default")
for t in Q4_0 Q8_0 Q4_K F16; do
    f=$cache/bench/smollm2-shape-$t.gguf
    [ -f "$f" ] || $weft gen -o "$f" --preset smollm2-135m --type $t --vocab-from "$default" >/dev/null
    models+=("$f")
done
$weft bench --membw -t "$threads" "${json[@]}"
for m in "${models[@]}"; do
    echo
    echo "== $(basename "$m")"
    $weft bench -m "$m" -p "$pp" -n "$tg" -r "$reps" -t "$threads" "${json[@]}"
done
