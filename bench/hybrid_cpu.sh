#!/usr/bin/env bash
# A hybrid linear-attention model against a dense one of its size, on the CPU: decode
# tokens/s (batch 1) after a context of each depth, and the cache one sequence holds there
# (K/V of the attention layers, plus the hybrid's recurrent state, the same at any length).
# Models from `weft gen` (cached): the Qwen3.5-0.8B shape (--preset qwen35-0.8b: 24 layers,
# 6 with attention, 18 Gated DeltaNet) and dense Qwen3-0.6B (--preset qwen3-0.6b: 28
# attention layers), both Q4_K_M by default; weft runs them round by round, interleaved.
#   bench/hybrid_cpu.sh [-t THREADS] [-r REPS] [-n TG] [-d DEPTHS] [--type T] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 tg=32 depths=2048,16384 type=Q4_K_M rounds=2
while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        -d) depths=$2; shift 2 ;;
        --type) type=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        *) echo "usage: bench/hybrid_cpu.sh [-t THREADS] [-r REPS] [-n TG] [-d DEPTHS] [--type T] [--rounds N]" >&2
           exit 2 ;;
    esac
done
. bench/common.sh
mkdir -p "$cache/bench"
for preset in qwen35-0.8b qwen3-0.6b; do
    m=$cache/bench/$preset-$type.gguf
    [ -f "$m" ] || $weft gen -o "$m" --preset "$preset" --type "$type" >/dev/null
    $weft info "$m" | sed -n '3,5p'
done
$weft bench --membw -t "$threads"
for round in $(seq 1 "$rounds"); do
    for preset in qwen35-0.8b qwen3-0.6b; do
        echo
        echo "== round $round: $preset"
        $weft bench -m "$cache/bench/$preset-$type.gguf" -p 0 -n "$tg" -d "$depths" -r "$reps" -t "$threads"
    done
done
