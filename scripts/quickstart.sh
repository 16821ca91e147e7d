#!/usr/bin/env bash
# From a fresh checkout to generated text: install build deps if missing,
# fetch the default model (SmolLM2-135M-Instruct Q4_1), build weft (Release)
# and run it once on the default model.
#   usage: scripts/quickstart.sh [PROMPT]
set -euo pipefail

cd "$(dirname "$0")/.."
prompt=${1:-"The three primary colors are"}

bash scripts/install-deps.sh
bash scripts/fetch-model.sh
cmake -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc 2>/dev/null || echo 2)"
echo
echo "==> build/weft run -p \"$prompt\" -n 64"
build/weft run -p "$prompt" -n 64
