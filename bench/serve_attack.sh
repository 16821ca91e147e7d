#!/usr/bin/env bash
# How `weft serve` keeps answering GET /health while attacked on loopback
# (bench/serve_attack.py: baseline, pipelined requests never read, slow-to-
# tokenize 100 KB prompts), p50/p99/max of /health in ms per phase and the
# server's RSS. Needs build/weft (WEFT_BIN=path picks another, e.g. an older
# build) and the default model; other options go to serve_attack.py.
#   bench/serve_attack.sh [--seconds 8] [--runs R] [--phases LIST] [--json OUT] ...
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
exec python3 bench/serve_attack.py --bin "$weft" --model "$default" "$@"
