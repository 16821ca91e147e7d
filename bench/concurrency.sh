#!/usr/bin/env bash
# What continuous batching buys on this machine: `weft bench --concurrency` on
# the default model (SmolLM2-135M Q4_1, which sits in a large L3, so one stream
# is already bound by the CPU's arithmetic) and on random-weight
# SmolLM2-1.7B-shape models in Q4_1, Q4_0 and Q8_0 (made by `weft gen`,
# cached; 1-1.8 GB, read from DRAM for every token, so one stream is bound by
# memory bandwidth and a batch shares each read). The machine's read bandwidth
# first. Needs build/weft (WEFT_BIN=path picks another) and the default model.
#   bench/concurrency.sh [-t THREADS] [-r REPS] [-c LEVELS] [-p PP] [-n TG]
#                        [--big-p PP] [--big-n TG] [--no-big] [--json]
# The defaults are the engine issue's: -c 1,8,32 -p 128 -n 64 on the default
# model; the 1.7B-shape models take -c 1,8 with 16-token prompts and 32 new
# tokens (their prefill costs ~10x as much per token).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=2 reps=3 levels=1,8,32 pp=128 tg=64 big_pp=16 big_tg=32 big=1 json=()
while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -r) reps=$2; shift 2 ;;
        -c) levels=$2; shift 2 ;;
        -p) pp=$2; shift 2 ;;
        -n) tg=$2; shift 2 ;;
        --big-p) big_pp=$2; shift 2 ;;
        --big-n) big_tg=$2; shift 2 ;;
        --no-big) big=0; shift ;;
        --json) json=(--json); shift ;;
        *) echo "usage: bench/concurrency.sh [-t THREADS] [-r REPS] [-c LEVELS] [-p PP] [-n TG] [--big-p PP] [--big-n TG] [--no-big] [--json]" >&2; exit 2 ;;
    esac
done
. bench/common.sh
$weft bench --membw -t "$threads" "${json[@]}"
echo
echo "== $(basename "$default")"
$weft bench -m "$default" --concurrency "$levels" -p "$pp" -n "$tg" -r "$reps" -t "$threads" "${json[@]}"
[ $big = 1 ] || exit 0
mkdir -p "$cache/bench"
for t in Q4_1 Q4_0 Q8_0; do
    f=$cache/bench/smollm2-1.7b-shape-$t.gguf
    [ -f "$f" ] || $weft gen -o "$f" --type $t --embd 2048 --layers 24 --heads 32 --kv-heads 32 --ff 8192 \
        --rope-base 130000 --tied --name smollm2-1.7b-shape --vocab-from "$default" >/dev/null
    echo
    echo "== $(basename "$f")"
    $weft bench -m "$f" --concurrency 1,8 -p "$big_pp" -n "$big_tg" -r "$reps" -t "$threads" "${json[@]}"
done
