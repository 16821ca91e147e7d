#!/usr/bin/env bash
# A mixture of experts on the CPU: tg (batch 1), pp and concurrent generation of a
# Qwen3-30B-A3B-shape model with 8 of its 48 layers (`weft gen --preset
# qwen3-30b-a3b-l8`, 128 experts of which 8 per token, Q4_K_M by default; cached),
# with the weight bytes a decoded token reads (only its 8 experts: weft bench's
# "read/token") and the machine's measured read bandwidth. With LLAMA_BENCH set to a
# llama.cpp llama-bench binary (built from its public source outside this repository),
# its pp and tg on the same file run interleaved with weft's, round by round; with
# LLAMA_BATCHED_BENCH set to its llama-batched-bench, its parallel generation at the same
# levels (128-token prompts) runs after weft's (S_TG: decode tokens/s of all sequences,
# S: prompt and generated tokens/s; weft's table gives generated tokens/s end to end and
# decode tokens/s).
#   bench/moe_cpu.sh [-t THREADS] [-r REPS] [-p PP] [-n TG] [-c LEVELS] [--type T] [--rounds N]
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 pp=512 tg=64 levels=1,8 type=Q4_K_M rounds=2
while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -p) pp=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        -c) levels=$2; shift 2 ;;
        --type) type=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        *) echo "usage: bench/moe_cpu.sh [-t THREADS] [-r REPS] [-p PP] [-n TG] [-c LEVELS] [--type T] [--rounds N]" >&2
           exit 2 ;;
    esac
done
. bench/common.sh
mkdir -p "$cache/bench"
m=$cache/bench/qwen3-30b-a3b-l8-$type.gguf
[ -f "$m" ] || $weft gen -o "$m" --preset qwen3-30b-a3b-l8 --type "$type" >/dev/null
$weft info "$m" | sed -n '1,4p'
$weft bench --membw -t "$threads"
for round in $(seq 1 "$rounds"); do
    echo
    echo "== round $round: weft"
    $weft bench -m "$m" -p "$pp" -n "$tg" -r "$reps" -t "$threads"
    if [ -n "${LLAMA_BENCH:-}" ]; then
        echo "== round $round: llama.cpp ($LLAMA_BENCH)"
        "$LLAMA_BENCH" -m "$m" -p "$pp" -n "$tg" -r "$reps" -t "$threads" 2>/dev/null
    fi
done
echo
echo "== weft, concurrent generation (levels $levels)"
$weft bench --concurrency "$levels" -m "$m" -p 128 -n "$tg" -r 1 -t "$threads"
if [ -n "${LLAMA_BATCHED_BENCH:-}" ]; then
    echo "== llama.cpp, parallel generation ($LLAMA_BATCHED_BENCH)"
    "$LLAMA_BATCHED_BENCH" -m "$m" -c 8192 -b 2048 -ub 512 -npp 128 -ntg "$tg" -npl "$levels" -t "$threads" 2>/dev/null |
        grep '^|'
fi
