# Sourced by the bench/ scripts (from the repository root): the weft binary
# (WEFT_BIN, default build/weft), the model cache and the default model,
# fetched when missing.
weft=${WEFT_BIN:-build/weft}
[ -x "$weft" ] || { echo "bench: build weft first (cmake -B build -DCMAKE_BUILD_TYPE=Release && cmake --build build -j)" >&2; exit 1; }
cache=${WEFT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}
default=$cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$default" ] || bash scripts/fetch-model.sh
