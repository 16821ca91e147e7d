#!/usr/bin/env bash
# Smooth streams under load: the serve workload (32 requests, 8 in flight,
# ~110-token prompts, 64 new tokens, SmolLM2-135M Q4_1, 2 threads, CPU) with
# bench/loadgen.py against one or more weft binaries, runs interleaved
# (A B A B ...: this machine is shared and noisy), and the medians over runs of
# throughput, TTFT (mean, p50, p99) and ITL (p50, p90, p99, max).
#   bench/itl.sh [-r RUNS] [-t THREADS] [-n REQUESTS] [-c CONCURRENCY]
#                [-p PROMPT_TOKENS] [-g NEW_TOKENS] [--serve-args "ARGS"] BIN [BIN ...]
# Each BIN may carry its own serve flags after a comma: build/weft,--itl-target-ms=off
# (flags separated by commas). Default BIN: build/weft.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=3 threads=2 requests=32 conc=8 prompt=110 gen=64 extra=""
bins=()
while [ $# -gt 0 ]; do
    case $1 in
        -r) runs=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        -n) requests=$2; shift 2 ;;
        -c) conc=$2; shift 2 ;;
        -p) prompt=$2; shift 2 ;;
        -g) gen=$2; shift 2 ;;
        --serve-args) extra=$2; shift 2 ;;
        -*) echo "usage: bench/itl.sh [-r RUNS] [-t THREADS] [-n REQUESTS] [-c CONCURRENCY] [-p PROMPT_TOKENS] [-g NEW_TOKENS] [--serve-args ARGS] BIN[,FLAG...] ..." >&2; exit 2 ;;
        *) bins+=("$1"); shift ;;
    esac
done
[ ${#bins[@]} -gt 0 ] || bins=(build/weft)
WEFT_BIN=${bins[0]%%,*}
source bench/common.sh
out=$(mktemp -d)
trap 'rm -rf "$out"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT
port=$((20000 + RANDOM % 20000))

for ((r = 1; r <= runs; r++)); do
    for ((b = 0; b < ${#bins[@]}; b++)); do
        spec=${bins[$b]}
        bin=${spec%%,*}
        flags=()
        [ "$spec" != "$bin" ] && IFS=',' read -r -a flags <<< "${spec#*,}"
        # shellcheck disable=SC2086
        "$bin" serve -m "$default" --port "$port" -t "$threads" "${flags[@]}" $extra > "$out/serve.log" 2>&1 &
        pid=$!
        for _ in $(seq 200); do
            curl -sf "http://127.0.0.1:$port/ready" > /dev/null 2>&1 && break
            sleep 0.1
        done
        python3 bench/loadgen.py --url "http://127.0.0.1:$port" -n "$requests" -c "$conc" --prompt-tokens "$prompt" \
            --max-tokens "$gen" --ignore-eos --seed "$r" --json "$out/$b.$r.json" > "$out/$b.$r.txt"
        kill "$pid"
        wait "$pid" 2>/dev/null || true
        pid=
        echo "run $r, $spec: $(grep -m1 aggregate "$out/$b.$r.txt")" >&2
    done
done

echo "$requests requests, $conc in flight, $prompt-token prompts, $gen new tokens, -t $threads"
python3 - "$out" "$runs" "${bins[@]}" <<'EOF'
import json, statistics, sys
out, runs, bins = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"serve workload, medians of {runs} interleaved runs")
print("| binary | tokens/s | TTFT mean ms | TTFT p50 | TTFT p99 | ITL p50 ms | ITL p90 | ITL p99 | ITL max |")
print("|---|---|---|---|---|---|---|---|---|")
for b, spec in enumerate(bins):
    rs = [json.load(open(f"{out}/{b}.{r}.json")) for r in range(1, runs + 1)]
    med = lambda f: statistics.median(f(x) for x in rs)
    print(f"| {spec} | {med(lambda x: x['gen_tokens_per_s']):.1f} | {med(lambda x: x['ttft_ms']['mean']):.0f} | "
          f"{med(lambda x: x['ttft_ms']['p50']):.0f} | {med(lambda x: x['ttft_ms']['p99']):.0f} | "
          f"{med(lambda x: x['itl_ms']['p50']):.1f} | {med(lambda x: x['itl_ms']['p90']):.1f} | "
          f"{med(lambda x: x['itl_ms']['p99']):.1f} | {med(lambda x: x['itl_ms']['max']):.1f} |")
EOF
