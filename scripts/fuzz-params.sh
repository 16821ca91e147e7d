#!/usr/bin/env bash
# Fuzz the server's request validation (server/params.c): build
# tests/fuzz/fuzz_params.c with clang + libFuzzer + ASan/UBSan in build-fuzz/
# (shared with the other fuzz scripts), seed a corpus with request bodies,
# run for a bounded time.
#   usage: scripts/fuzz-params.sh [seconds]   (default 60)
# Exits non-zero when the build fails or the fuzzer finds a crash, leak, UB
# or a broken invariant; the input is left in build-fuzz/fuzz-params-artifacts/.
set -euo pipefail

T=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${WEFT_FUZZ_BUILD:-$root/build-fuzz}
corpus=$build/fuzz-params-corpus
artifacts=$build/fuzz-params-artifacts

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DWEFT_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_params -j"$(nproc)"

mkdir -p "$corpus" "$artifacts"
python3 - "$corpus" <<'PY'
import json, os, sys
out = sys.argv[1]
bodies = [
    {"prompt": "hi", "max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 4, "min_p": 0.1, "stop": ["a", "b"],
     "logprobs": 2, "seed": 7, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True,
     "priority": 3, "presence_penalty": 1, "frequency_penalty": -1, "n": 1, "model": "m", "user": "u"},
    {"prompt": [1, 2, 3]}, {"prompt": [[1, 2]]}, {"prompt": ["text"]},
    {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": [{"type": "text", "text": "t"}]}],
     "logprobs": True, "top_logprobs": 3, "max_completion_tokens": 5},
    {"messages": [{"role": "developer", "content": "d"}, {"role": "assistant", "content": "a"}]},
]
for i, b in enumerate(bodies):
    with open(os.path.join(out, f"seed{i}.json"), "w") as f:
        json.dump(b, f)
PY
"$build/fuzz_params" "$corpus" -max_total_time="$T" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 2>&1 | tail -n 15
